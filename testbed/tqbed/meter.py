"""Delivered traffic per tenant, measured by the receiving kernel, independent of the programs.

Each node namespace gets an nftables table with one counting rule per tenant DSCP on the input
hook (packets delivered to local sockets, i.e. after the link). A persistent `nft -j -i` per node
answers "list table" every tick, so a sample costs a pipe round trip, not a fork. Payload is
estimated as IP bytes - 52 x packets (IPv4 20 B + TCP 32 B with timestamps), which matches what
the plugin paces. The tenants' ranks carry their DSCP in every mode (in the no-tenantqos mode
through TENANTQOS_DSCP, which marks without pacing).

Timing: each node's counters carry their own timestamp, the midpoint of that node's request and
answer (the kernel reads the counters in between), so a late answer from one node or a meter
thread that was not scheduled does not move the other node's window edges. Sample intervals are
only approximately the tick; analysis.tenant_figures re-bins them into fixed windows.
"""
import json
import subprocess
import threading
import time

TABLE = "tqbedmeter"
HEADER_BYTES = 52


class DscpMeter:
    def __init__(self, topo, dscp_by_tenant, interval_s):
        self.topo = topo
        self.dscp = dict(dscp_by_tenant)
        self.interval_s = interval_s
        self.samples = []  # {node: (wall time s, {tenant: (bytes, packets)})} per tick
        self._procs = {}
        self._stop = threading.Event()
        self._thread = None
        self.error = None

    def _nft(self, node, *args):
        subprocess.run(["ip", "netns", "exec", self.topo.node_ns(node), "nft"] + list(args),
                       check=True, capture_output=True, text=True, timeout=10)

    def start(self):
        for i in range(1, self.topo.nodes + 1):
            self._nft(i, "add", "table", "inet", TABLE)
            self._nft(i, "add", "chain", "inet", TABLE, "in",
                      "{ type filter hook input priority 0; policy accept; }")
            for tenant, dscp in self.dscp.items():
                self._nft(i, "add", "rule", "inet", TABLE, "in", "ip", "dscp", str(dscp),
                          "counter", "comment", f'"{tenant}"')
            self._procs[i] = subprocess.Popen(
                ["ip", "netns", "exec", self.topo.node_ns(i), "nft", "-j", "-i"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                text=True, bufsize=1)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _read(self, node):
        """(wall time of the counters, {tenant: (bytes, packets)})."""
        p = self._procs[node]
        t_ask = time.time()
        p.stdin.write(f"list table inet {TABLE}\n")
        p.stdin.flush()
        line = p.stdout.readline()
        t_got = time.time()
        out = {}
        for obj in json.loads(line).get("nftables", []):
            rule = obj.get("rule")
            if not rule or "comment" not in rule:
                continue
            for e in rule.get("expr", []):
                if "counter" in e:
                    out[rule["comment"]] = (e["counter"]["bytes"], e["counter"]["packets"])
        return ((t_ask + t_got) / 2, out)

    def _run(self):
        next_t = time.monotonic()
        try:
            while not self._stop.is_set():
                self.samples.append({i: self._read(i) for i in self._procs})
                next_t += self.interval_s
                delay = next_t - time.monotonic()
                if delay > 0:
                    self._stop.wait(delay)
                else:
                    next_t = time.monotonic()
        except Exception as e:  # reported by the runner; never leaves the meter half-running
            self.error = e

    def stop(self):
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)
        for p in self._procs.values():
            try:
                p.stdin.close()
                p.wait(timeout=5)
            except Exception:
                p.kill()
        self._procs = {}
        for i in range(1, self.topo.nodes + 1):
            subprocess.run(["ip", "netns", "exec", self.topo.node_ns(i), "nft", "delete", "table",
                            "inet", TABLE], capture_output=True, timeout=10)

    def series(self, tenant, node):
        """[(window end, window length, payload bits/s)] the tenant received on `node`."""
        out = []
        prev = None
        for sample in self.samples:
            if node not in sample:
                continue
            t, counters = sample[node]
            cur = counters.get(tenant)
            if cur is None:
                continue
            if prev is not None and t > prev[0]:
                db = cur[0] - prev[1][0]
                dp = cur[1] - prev[1][1]
                out.append((t, t - prev[0], max(0, db - HEADER_BYTES * dp) * 8 / (t - prev[0])))
            prev = (t, cur)
        return out
