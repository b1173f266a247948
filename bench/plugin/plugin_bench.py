#!/usr/bin/env python3
"""Benchmarks of the tenantqos NCCL plugin's socket transport, each a ratio against a baseline
measured in the same run (runs are interleaved and repeated; medians are compared):

  1. throughput: unpaced plugin (tenantqos-perf sendrecv, 4 MiB messages, TENANTQOS_NSOCKS=4)
     vs iperf3 with the same number of TCP streams, loopback; and the same with pacing on in
     both directions at a rate above line rate (TENANTQOS_RATE and TENANTQOS_RX_RATE: every
     write and read takes tokens, none is refused).                        target >= 0.90 (0.95)
  2. pacing cost: CPU seconds per GB with pacing on (both directions, above line rate) vs
     pacing off.                                                           target <= 1.05
  3. small-message latency: tenantqos-perf pingpong vs a plain TCP ping-pong polled the same
     way (tq-tcp-pingpong), 8 B - 64 KiB, half round-trip (p50), unpaced and with pacing on
     in both directions.                                                  target <= +5 us
     Two baselines: one TCP connection (ping and pong share it, ACKs ride on the replies), and
     two connections, one per direction, which is the shape of NCCL's net API (a send comm and
     a receive comm per peer) and so of every net plugin.

usage: plugin_bench.py --perf BIN --plugin SO --pingpong BIN [--repeat N] [--seconds S] [--json]
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time


def json_lines(text, kind):
    out = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if obj.get("type") == kind:
                out.append(obj)
    return out


def run(cmd, env=None, timeout=180):
    full_env = dict(os.environ)
    full_env.update(env or {})
    p = subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        sys.exit("bench: %s failed (%d):\n%s" % (" ".join(cmd), p.returncode, p.stderr[-3000:]))
    return p.stdout


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Bench:
    def __init__(self, args):
        self.a = args
        self.run_dir = tempfile.mkdtemp(prefix="tqplg-bench-")
        # A run dir that does not exist: no agent on this node, so the plugin is unpaced unless a
        # case sets its own bucket (an existing one means "governed, agent away" and the
        # conservative default rate, docs/plugin.md).
        self.env = {"TENANTQOS_SOCKET_IFNAME": "lo",
                    "TENANTQOS_RUN_DIR": os.path.join(self.run_dir, "no-agent"),
                    "TENANTQOS_NSOCKS": "4", "NCCL_DEBUG": "WARN"}
        # Pacing on in both directions, never refusing (1000 Gbit/s): the cost of the checks.
        self.paced = {"TENANTQOS_RATE": "1000Gbps", "TENANTQOS_RX_RATE": "1000Gbps"}

    def perf_stream(self, extra_env=None, size="4M"):
        env = dict(self.env)
        env.update(extra_env or {})
        out = run([self.a.perf, "sendrecv", "--local", "2", "--unidirectional", "--duration",
                   str(self.a.seconds), "--size", size, "--json", "--plugin", self.a.plugin], env)
        s = {o["rank"]: o for o in json_lines(out, "summary")}
        gbps = s[1]["rx_gbps"]
        cpu = sum(s[r]["cpu_user_s"] + s[r]["cpu_sys_s"] for r in s)
        gb = s[1]["rx_bytes"] / 1e9
        return gbps, cpu / gb if gb > 0 else float("inf")

    def iperf3(self, length=None):
        port = free_port()
        server = subprocess.Popen(["iperf3", "-s", "-1", "-p", str(port), "-B", "127.0.0.1"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            cmd = ["iperf3", "-c", "127.0.0.1", "-p", str(port), "-P", "4", "-t",
                   str(self.a.seconds), "-J"]
            if length:
                cmd += ["-l", length]
            time.sleep(0.2)  # the server needs a moment to listen
            for _ in range(50):
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
                try:
                    return json.loads(p.stdout)["end"]["sum_received"]["bits_per_second"] / 1e9
                except (ValueError, KeyError):
                    time.sleep(0.1)
            sys.exit("bench: iperf3 client failed: " + p.stdout[-500:] + p.stderr[-500:])
        finally:
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()

    def throughput(self):
        plugin, paced, iperf, iperf4m = [], [], [], []
        for _ in range(self.a.repeat):
            iperf.append(self.iperf3())
            plugin.append(self.perf_stream()[0])
            # iperf3 writes at most 1 MiB at once: the size of one stripe of a 4 MiB message.
            iperf4m.append(self.iperf3("1M"))
            paced.append(self.perf_stream(self.paced)[0])
        base = max(statistics.median(iperf), statistics.median(iperf4m))
        p = statistics.median(plugin)
        pp = statistics.median(paced)
        return {"plugin_gbps": p, "plugin_paced_gbps": pp, "iperf3_gbps": statistics.median(iperf),
                "iperf3_4m_gbps": statistics.median(iperf4m), "runs_plugin": plugin,
                "runs_plugin_paced": paced, "runs_iperf3": iperf, "runs_iperf3_4m": iperf4m,
                "ratio": p / base, "ratio_paced": pp / base, "target": ">= 0.90 (aim 0.95)"}

    def pacing_cost(self):
        off, on, on_gbps, off_gbps = [], [], [], []
        for _ in range(self.a.repeat):
            g, c = self.perf_stream()
            off.append(c)
            off_gbps.append(g)
            g, c = self.perf_stream(self.paced)
            on.append(c)
            on_gbps.append(g)
        return {"cpu_s_per_gb_off": statistics.median(off), "cpu_s_per_gb_on": statistics.median(on),
                "gbps_off": statistics.median(off_gbps), "gbps_on": statistics.median(on_gbps),
                "runs_off": off, "runs_on": on,
                "ratio": statistics.median(on) / statistics.median(off), "target": "<= 1.05"}

    def latency(self):
        sizes = {}

        def new():
            return {"1": [], "2": [], "plugin": [], "paced": []}
        pp = ["-b", "8", "-e", "65536", "-f", "4", "-n", "2000", "-w", "200"]
        for _ in range(self.a.repeat):
            for conns in ("1", "2"):
                base = run([self.a.pingpong] + pp + ["--connections", conns])
                for b in json_lines(base, "result"):
                    sizes.setdefault(b["size"], new())[conns].append(b["p50_rtt_us"] / 2)
            for key, extra in (("plugin", {}), ("paced", self.paced)):
                env = dict(self.env)
                env.update(extra)
                plug = run([self.a.perf, "pingpong", "--local", "2", "-b", "8", "-e", "64K", "-f",
                            "4", "-n", "2000", "-w", "200", "--json", "--plugin", self.a.plugin], env)
                for r in json_lines(plug, "result"):
                    sizes.setdefault(r["size"], new())[key].append(r["p50_rtt_us"] / 2)
            # 64 KiB, the largest message on the inline path, is not on the x4 grid.
            base64 = [run([self.a.pingpong, "-b", "65536", "-e", "65536", "-n", "2000", "-w", "200",
                           "--connections", c]) for c in ("1", "2")]
            for conns, out in zip(("1", "2"), base64):
                for b in json_lines(out, "result"):
                    sizes.setdefault(65536, new())[conns].append(b["p50_rtt_us"] / 2)
            for key, extra in (("plugin", {}), ("paced", self.paced)):
                env = dict(self.env)
                env.update(extra)
                plug64 = run([self.a.perf, "pingpong", "--local", "2", "-b", "64K", "-e", "64K",
                              "-n", "2000", "-w", "200", "--json", "--plugin", self.a.plugin], env)
                for r in json_lines(plug64, "result"):
                    sizes[65536][key].append(r["p50_rtt_us"] / 2)
        rows = []
        for size in sorted(sizes):
            t1 = statistics.median(sizes[size]["1"])
            t2 = statistics.median(sizes[size]["2"])
            p = statistics.median(sizes[size]["plugin"])
            q = statistics.median(sizes[size]["paced"])
            rows.append({"size": size, "tcp_1conn_us": t1, "tcp_2conn_us": t2, "plugin_us": p,
                         "paced_us": q, "delta_1conn_us": p - t1, "delta_2conn_us": p - t2,
                         "paced_delta_1conn_us": q - t1, "paced_delta_2conn_us": q - t2})
        return {"rows": rows, "max_delta_1conn_us": max(r["delta_1conn_us"] for r in rows),
                "max_delta_2conn_us": max(r["delta_2conn_us"] for r in rows),
                "max_paced_delta_1conn_us": max(r["paced_delta_1conn_us"] for r in rows),
                "target": "<= +5 us (p50 half round-trip)"}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--perf", required=True)
    ap.add_argument("--plugin", required=True)
    ap.add_argument("--pingpong", required=True)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4)
    ap.add_argument("--only", choices=["throughput", "cpu", "latency"])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    b = Bench(args)
    try:
        report(args, b)
    finally:
        shutil.rmtree(b.run_dir, ignore_errors=True)


def report(args, b):
    res = {"load_avg_start": os.getloadavg()[0], "cores": os.cpu_count()}
    if args.only in (None, "throughput"):
        res["throughput"] = b.throughput()
    if args.only in (None, "cpu"):
        res["pacing_cost"] = b.pacing_cost()
    if args.only in (None, "latency"):
        res["latency"] = b.latency()
    res["load_avg_end"] = os.getloadavg()[0]
    if args.json:
        print(json.dumps(res, indent=1))
        return
    print("tenantqos plugin benchmarks (loopback, %d cores, load average %.1f -> %.1f, %d runs each,"
          " medians)" % (res["cores"], res["load_avg_start"], res["load_avg_end"], args.repeat))
    if "throughput" in res:
        t = res["throughput"]
        print("  throughput, 4 streams, 4 MiB messages: plugin %.2f Gbit/s, iperf3 -P 4 %.2f Gbit/s"
              " (-l 1M: %.2f)  ratio %.3f vs the better  [%s]" % (t["plugin_gbps"], t["iperf3_gbps"],
                                                   t["iperf3_4m_gbps"], t["ratio"], t["target"]))
        print("  throughput with pacing on both ways (1000 Gbit/s buckets): plugin %.2f Gbit/s"
              "  ratio %.3f  [%s]" % (t["plugin_paced_gbps"], t["ratio_paced"], t["target"]))
    if "pacing_cost" in res:
        c = res["pacing_cost"]
        print("  pacing cost: %.3f CPU s/GB paced (1000 Gbit/s buckets, both ways, %.2f Gbit/s) vs %.3f unpaced"
              " (%.2f Gbit/s)  ratio %.3f  [%s]" % (c["cpu_s_per_gb_on"], c["gbps_on"],
                                                   c["cpu_s_per_gb_off"], c["gbps_off"], c["ratio"],
                                                   c["target"]))
    if "latency" in res:
        l = res["latency"]
        print("  latency, p50 half round-trip in us [%s]:" % l["target"])
        print("         size   tcp(1 conn)  tcp(2 conns)   plugin   delta(1)  delta(2)    paced"
              "   delta(1)  delta(2)")
        for r in l["rows"]:
            print("  %11d %12.2f %13.2f %8.2f %+9.2f %+9.2f %8.2f %+9.2f %+9.2f" % (
                r["size"], r["tcp_1conn_us"], r["tcp_2conn_us"], r["plugin_us"],
                r["delta_1conn_us"], r["delta_2conn_us"], r["paced_us"], r["paced_delta_1conn_us"],
                r["paced_delta_2conn_us"]))


if __name__ == "__main__":
    main()
