#!/usr/bin/env python3
"""PyTorch through the tenantqos plugin: torch.distributed (NCCL backend) all-reduces.

  torch_allreduce.py path/to/libnccl-net-tenantqos.so

A client no one in this project wrote: PyTorch's ProcessGroupNCCL drives NCCL, NCCL drives the
plugin (NCCL_NET_PLUGIN=tenantqos NCCL_NET=tenantqos, NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 and
a distinct NCCL_HOSTID per process, so every byte between ranks goes through the plugin even when
both ranks share one GPU). Three phases, each a fresh set of rank processes (the plugin reads
TENANTQOS_RATE once per process):

  unpaced     pair a, no TENANTQOS_RATE: all-reduces of 1 Mi + 1001 and 1001 floats checked
              element by element, then the bus bandwidth of 32 MiB all-reduces;
  paced       pair a at TENANTQOS_RATE as tenant-a: the same, bus bandwidth / rate in
              [0.90, 1.05];
  concurrent  pair a at TENANTQOS_RATE (tenant-a) and pair b at TQ_TORCH_RATE_B (tenant-b) at
              the same time (both start measuring together; at least 80% of the shorter
              measurement must overlap the other): each pair within [0.90, 1.05] of its own
              rate.

Every rank's NCCL log must say "Using network tenantqos" and carry the plugin's NET/tenantqos
line for its tenant and pacing ("tenant tenant-a: no agent ... UNPACED" / "... pacing sends at
TENANTQOS_RATE": no agent runs here, each process paces at its own TENANTQOS_RATE).
The unpaced bus bandwidth must be at least twice the rate, or pacing could not be told apart.

Output: progress lines on stderr, then ONE JSON line of figures on stdout.
Exit: 0 passed; 1 failed (the reasons are in the JSON's "failures" and on stderr); 2 bad
arguments; 77 skipped, with the reason, where torch, its NCCL backend or a GPU is missing.

Env: TENANTQOS_RATE (default 2Gbps), TQ_TORCH_RATE_B (default half of TENANTQOS_RATE),
TQ_TORCH_SECONDS (timed seconds per measurement, default 3), TQ_TORCH_PHASE_TIMEOUT_S (default
120: a phase's processes are killed after it), TQ_TORCH_LOG_DIR (default a new /tmp directory:
NCCL's logs and each rank's result), TENANTQOS_TRANSPORT (default socket),
TENANTQOS_SOCKET_IFNAME (default lo).
"""

import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

RATIO_LOW = 0.90
RATIO_HIGH = 1.05
MIN_HEADROOM = 2.0  # unpaced bus bandwidth / rate needed to tell pacing apart
MIN_OVERLAP = 0.8  # of the shorter measurement, both pairs measuring at once
CHECK_COUNTS = ((1 << 20) + 1001, 1001)
BENCH_BYTES = 32 << 20
UNITS = {"bps": 1 / 8, "kbps": 1e3 / 8, "mbps": 1e6 / 8, "gbps": 1e9 / 8,
         "b/s": 1, "kb/s": 1e3, "mb/s": 1e6, "gb/s": 1e9}


def log(msg):
    print(f"torch_allreduce: {msg}", file=sys.stderr, flush=True)


def parse_rate(text):
    """'2Gbps', '500Mbps', '1.25GB/s' -> bytes per second; None when not understood.

    The plugin parses TENANTQOS_RATE itself (common/units.h); this only needs the same number
    for the units written here.
    """
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z/]+)\s*", text or "")
    if not m or m.group(2).lower() not in UNITS:
        return None
    value = float(m.group(1)) * UNITS[m.group(2).lower()]
    return value if value > 0 else None


def probe_torch():
    """(torch module, None) or (None, why the test cannot run here)."""
    try:
        import torch
        import torch.distributed as dist
    except Exception as e:  # any import failure is a reason to skip, with its text
        return None, f"torch is not importable with {sys.executable}: {e}"
    if not dist.is_available() or not dist.is_nccl_available():
        return None, f"torch {torch.__version__} has no NCCL backend (torch.distributed)"
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        return None, (f"no GPU visible to torch {torch.__version__} (CUDA "
                      f"{torch.version.cuda}): torch.cuda.is_available() is False")
    return torch, None


# ---- a rank -------------------------------------------------------------------------------


def rank_main(args):
    """argv: --rank R --device D --store FILE --result FILE --go FILE --seconds S."""
    opts = dict(zip(args[0::2], args[1::2]))
    rank, device = int(opts["--rank"]), int(opts["--device"])
    import datetime

    import torch
    import torch.distributed as dist

    dev = torch.device("cuda", device)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", init_method="file://" + opts["--store"], rank=rank,
                            world_size=2, device_id=dev,
                            timeout=datetime.timedelta(seconds=90))
    nccl = torch.cuda.nccl.version()
    out = {"rank": rank, "device": device, "torch": torch.__version__,
           "nccl": ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl),
           "gpu": torch.cuda.get_device_name(dev), "errors": []}
    for count in CHECK_COUNTS:
        # Element i of rank r is (r + 1) * (i % 7 + 1): exact in float32, so the sum over both
        # ranks is exactly 3 * (i % 7 + 1) in every element.
        pattern = (torch.arange(count, device=dev, dtype=torch.int64) % 7 + 1).float()
        x = pattern * (rank + 1)
        dist.all_reduce(x)
        bad = (x != pattern * 3).nonzero()
        if bad.numel() > 0:
            i = int(bad[0].item())
            out["errors"].append(f"all-reduce of {count} floats: {bad.numel()} wrong elements, "
                                 f"first {i} is {x[i].item()}, want {3 * pattern[i].item()}")
    buf = torch.zeros(BENCH_BYTES // 4, dtype=torch.float32, device=dev)
    for _ in range(3):
        dist.all_reduce(buf)
    torch.cuda.synchronize(dev)
    t0 = time.perf_counter()
    dist.all_reduce(buf)
    torch.cuda.synchronize(dev)
    one = max(time.perf_counter() - t0, 1e-6)
    # Both ranks must run the same number of all-reduces: the larger of their estimates.
    iters = torch.tensor([max(5, math.ceil(float(opts["--seconds"]) / one))], device=dev)
    dist.all_reduce(iters, op=dist.ReduceOp.MAX)
    iters = int(iters.item())
    # Every pair of the phase starts measuring together: the launcher makes the go file once
    # every rank has made its ready file (a poll with a deadline).
    open(opts["--result"] + ".ready", "w").close()
    deadline = time.monotonic() + 90
    while not os.path.exists(opts["--go"]):
        if time.monotonic() > deadline:
            raise SystemExit(f"rank {rank}: no {opts['--go']} from the launcher within 90 s")
        time.sleep(0.005)
    dist.barrier()
    out["start"] = time.time()
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(buf)
    torch.cuda.synchronize(dev)
    out["end"] = time.time()
    elapsed = torch.tensor([time.perf_counter() - t0], dtype=torch.float64, device=dev)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    # Ring all-reduce over n ranks: bus bandwidth = bytes * 2 (n - 1) / n / time, which for two
    # ranks is what each rank sends per second, i.e. what its tenant's rate bounds.
    out.update(iters=iters, bytes=BENCH_BYTES, seconds=float(elapsed.item()),
               busbw=BENCH_BYTES * iters / float(elapsed.item()))
    dist.destroy_process_group()
    with open(opts["--result"], "w") as f:
        json.dump(out, f)
    return 0


# ---- the launcher -------------------------------------------------------------------------


class Runner:
    def __init__(self, plugin, log_dir, gpus, seconds, timeout):
        self.plugin, self.log_dir, self.gpus = plugin, log_dir, gpus
        self.seconds, self.timeout = seconds, timeout
        self.procs = []

    def kill_all(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            p.wait()
        self.procs = []

    def start_rank(self, phase, pair, rank, tenant, rate):
        base = os.path.join(self.log_dir, f"{phase}.{pair}.rank{rank}")
        env = dict(os.environ)
        env.pop("TENANTQOS_RATE", None)
        lib_dir = os.path.dirname(os.path.abspath(self.plugin))
        env.update({
            "LD_LIBRARY_PATH": ":".join(filter(None, [lib_dir, env.get("LD_LIBRARY_PATH")])),
            "NCCL_NET_PLUGIN": "tenantqos", "NCCL_NET": "tenantqos",
            "NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1",
            "NCCL_HOSTID": f"tq-torch-{phase}-{pair}-{rank}",
            "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET,ENV",
            "NCCL_DEBUG_FILE": base + ".nccl.log",
            "TENANTQOS_RUN_DIR": os.path.join(self.log_dir, "no-agent"),
            "TENANTQOS_TENANT": tenant, "PYTHONUNBUFFERED": "1"})
        for key, value in (("NCCL_SOCKET_IFNAME", "lo"), ("TENANTQOS_TRANSPORT", "socket"),
                           ("TENANTQOS_SOCKET_IFNAME", "lo")):
            env.setdefault(key, value)
        if rate is not None:
            env["TENANTQOS_RATE"] = rate
            env["NCCL_ALGO"] = "Ring"
        device = 0 if self.gpus == 1 else (2 * (pair == "b") + rank) % self.gpus
        store = os.path.join(self.log_dir, f"{phase}.{pair}.store")
        cmd = [sys.executable, os.path.abspath(__file__), "--rank", str(rank), "--device",
               str(device), "--store", store, "--result", base + ".json",
               "--go", os.path.join(self.log_dir, f"{phase}.go"), "--seconds", str(self.seconds)]
        with open(base + ".out", "w") as out:
            self.procs.append(subprocess.Popen(cmd, env=env, stdout=out,
                                               stderr=subprocess.STDOUT))
        return base

    def run_phase(self, phase, pairs):
        """pairs: [(pair, tenant, rate text or None)] -> ({pair: [rank results]}, failures)."""
        log(f"phase {phase}: " + ", ".join(
            f"pair {p} as {t} {'at ' + r if r else 'unpaced'}" for p, t, r in pairs))
        go = os.path.join(self.log_dir, f"{phase}.go")
        for f in os.listdir(self.log_dir):  # an earlier run's logs and results must not count
            if f.startswith(phase + "."):
                os.unlink(os.path.join(self.log_dir, f))
        bases = {(p, r): self.start_rank(phase, p, r, t, rate)
                 for p, t, rate in pairs for r in (0, 1)}
        deadline = time.monotonic() + self.timeout
        while any(pr.poll() is None for pr in self.procs) and time.monotonic() < deadline:
            if any(pr.poll() not in (None, 0) for pr in self.procs):
                break  # a rank failed: its peers would only wait for it until NCCL times out
            if not os.path.exists(go) and all(os.path.exists(b + ".json.ready")
                                              for b in bases.values()):
                open(go, "w").close()
            time.sleep(0.005)
        timed_out = time.monotonic() >= deadline
        codes = [pr.poll() for pr in self.procs]
        self.kill_all()
        failures = []
        results = {p: [] for p, _, _ in pairs}
        for ((p, r), base), code in zip(bases.items(), codes):
            tenant, rate = next((t, rt) for pp, t, rt in pairs if pp == p)
            where = f"{phase}: pair {p} rank {r}"
            if code is None:  # killed: for itself when time ran out, else for a failed peer
                if timed_out:
                    failures.append(f"{where} still running after {self.timeout:g} s, killed "
                                    f"(output: {base}.out)")
                continue
            if code != 0:
                failures.append(f"{where} exited {code} (output: {base}.out)")
                continue
            nccl_log = read(base + ".nccl.log")
            if "Using network tenantqos" not in nccl_log:
                failures.append(f'{where}: NCCL\'s log {base}.nccl.log does not say "Using '
                                f'network tenantqos"')
            if not plugin_line(nccl_log, tenant, rate is not None):
                want = plugin_line_regex(tenant, rate is not None)
                failures.append(f"{where}: no line /{want}/ in {base}.nccl.log")
            try:
                with open(base + ".json") as f:
                    res = json.load(f)
            except (OSError, ValueError) as e:
                failures.append(f"{where}: exited 0 without a result ({e})")
                continue
            failures += [f"{where}: {e}" for e in res["errors"]]
            results[p].append(res)
        return results, failures


def plugin_line_regex(tenant, paced):
    """The plugin's account of a tenant in NCCL's log (nccl-plugin/tenant.cc describeLocked(),
    no agent): paced at TENANTQOS_RATE, or UNPACED. rehearse.sh holds it to the real plugin's
    output (--check-plugin-log), so a changed wording fails in CI, not on the GPU."""
    mode = "pacing sends at TENANTQOS_RATE " if paced else "and no TENANTQOS_RATE: UNPACED"
    return rf"NET/tenantqos.* tenant {re.escape(tenant)}: no agent .*{mode}"


def plugin_line(log_text, tenant, paced):
    return re.search(plugin_line_regex(tenant, paced), log_text) is not None


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def pair_figures(results, rate_bps):
    """Bus bandwidth of a pair (its ranks agree on the time: the slower one's)."""
    if len(results) != 2:
        return None
    busbw = min(r["busbw"] for r in results)
    fig = {"busbw_MBps": round(busbw / 1e6, 1), "iters": results[0]["iters"],
           "seconds": round(max(r["seconds"] for r in results), 3)}
    if rate_bps:
        fig.update(rate_MBps=round(rate_bps / 1e6, 1), ratio=round(busbw / rate_bps, 3))
    return fig


def launcher_main(argv):
    if len(argv) != 1 or argv[0].startswith("-"):
        print("usage: torch_allreduce.py path/to/libnccl-net-tenantqos.so", file=sys.stderr)
        return 2
    plugin = argv[0]
    if not os.path.isfile(plugin):
        log(f"FAIL: the plugin {plugin} is not a file (build it: ninja tq_nccl_plugin)")
        return 2
    rate_a = os.environ.get("TENANTQOS_RATE", "2Gbps")
    bps_a = parse_rate(rate_a)
    if bps_a is None:
        log(f"FAIL: TENANTQOS_RATE={rate_a}: use e.g. 2Gbps, 500Mbps or 1.25GB/s")
        return 2
    half = bps_a * 8 / 2
    rate_b = os.environ.get("TQ_TORCH_RATE_B", f"{half / 1e9:g}Gbps" if half >= 1e9 else
                            f"{half / 1e6:g}Mbps")
    bps_b = parse_rate(rate_b)
    if bps_b is None:
        log(f"FAIL: TQ_TORCH_RATE_B={rate_b}: use e.g. 1Gbps, 500Mbps or 125MB/s")
        return 2
    try:
        seconds = float(os.environ.get("TQ_TORCH_SECONDS", "3"))
        timeout = float(os.environ.get("TQ_TORCH_PHASE_TIMEOUT_S", "120"))
    except ValueError as e:
        log(f"FAIL: TQ_TORCH_SECONDS / TQ_TORCH_PHASE_TIMEOUT_S: {e}")
        return 2

    torch, why = probe_torch()
    if torch is None:
        print(f"SKIP: {why}", flush=True)
        return 77
    gpus = torch.cuda.device_count()
    log_dir = os.environ.get("TQ_TORCH_LOG_DIR") or tempfile.mkdtemp(prefix="tq-torch.")
    os.makedirs(log_dir, exist_ok=True)
    placement = ("both ranks of a pair on GPU 0 as two hosts" if gpus == 1
                 else "one GPU per rank, each rank its own host")
    log(f"torch {torch.__version__}, {gpus} GPU(s): {placement}; logs in {log_dir}")

    runner = Runner(plugin, log_dir, gpus, seconds, timeout)

    def on_signal(signum, _frame):
        runner.kill_all()
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    report = {"test": "torch_allreduce", "torch": torch.__version__, "gpus": gpus,
              "placement": placement, "transport": os.environ.get("TENANTQOS_TRANSPORT",
                                                                  "socket"),
              "bytes": BENCH_BYTES, "target": [RATIO_LOW, RATIO_HIGH], "logs": log_dir}
    failures = []

    res, fail = runner.run_phase("unpaced", [("a", "tenant-a", None)])
    failures += fail
    if res["a"]:
        report.update(nccl=res["a"][0]["nccl"], gpu=res["a"][0]["gpu"])
    report["unpaced"] = pair_figures(res["a"], None)

    res, fail = runner.run_phase("paced", [("a", "tenant-a", rate_a)])
    failures += fail
    report["paced"] = pair_figures(res["a"], bps_a)

    res, fail = runner.run_phase("concurrent", [("a", "tenant-a", rate_a),
                                                ("b", "tenant-b", rate_b)])
    failures += fail
    report["concurrent"] = {"tenant-a": pair_figures(res["a"], bps_a),
                            "tenant-b": pair_figures(res["b"], bps_b)}
    if len(res["a"]) == 2 and len(res["b"]) == 2:
        # How much of the shorter measurement ran while the other pair measured too.
        win = [(min(r["start"] for r in res[p]), max(r["end"] for r in res[p])) for p in "ab"]
        both = min(win[0][1], win[1][1]) - max(win[0][0], win[1][0])
        shorter = min(e - s for s, e in win)
        report["concurrent"]["overlap"] = round(max(0.0, both) / shorter, 3)
        if both < MIN_OVERLAP * shorter:
            failures.append(f"concurrent: the pairs measured together for {max(0.0, both):.2f} "
                            f"s of {shorter:.2f} s (want {MIN_OVERLAP:.0%})")

    unpaced = report["unpaced"]
    if unpaced and unpaced["busbw_MBps"] * 1e6 < MIN_HEADROOM * max(bps_a, bps_b):
        failures.append(f"unpaced bus bandwidth {unpaced['busbw_MBps']} MB/s is less than "
                        f"{MIN_HEADROOM}x the rate {max(bps_a, bps_b) / 1e6:.1f} MB/s: pacing "
                        "cannot be told apart; set a lower TENANTQOS_RATE")
    for name, fig in (("paced", report["paced"]),
                      ("concurrent tenant-a", report["concurrent"]["tenant-a"]),
                      ("concurrent tenant-b", report["concurrent"]["tenant-b"])):
        if fig is None:
            failures.append(f"{name}: no bus bandwidth measured")
        elif not RATIO_LOW <= fig["ratio"] <= RATIO_HIGH:
            failures.append(f"{name}: bus bandwidth {fig['busbw_MBps']} MB/s is {fig['ratio']} "
                            f"of the rate {fig['rate_MBps']} MB/s, outside "
                            f"[{RATIO_LOW}, {RATIO_HIGH}]")
    report["failures"] = failures
    report["result"] = "fail" if failures else "pass"
    for f in failures:
        log(f"FAIL: {f}")
    print(json.dumps(report), flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--rank":
        sys.exit(rank_main(sys.argv[1:]))
    if len(sys.argv) == 5 and sys.argv[1] == "--check-plugin-log":  # FILE TENANT paced|unpaced
        sys.exit(0 if plugin_line(read(sys.argv[2]), sys.argv[3], sys.argv[4] == "paced") else 1)
    sys.exit(launcher_main(sys.argv[1:]))
