"""Tenants' training traffic: `tenantqos-perf` ranks through the plugin, exactly as NCCL would
drive it, streaming for a fixed duration, placed on the nodes a workload chooses."""
import json
import os
import signal

RENDEZVOUS_PORT_BASE = 29500
PATTERNS = ("allreduce", "alltoall", "incast")


class Placement:
    """Where and how a tenant's job runs: `pattern` (a tenantqos-perf mode: a ring allreduce,
    an all-to-all, or an incast into the first node) with rank r on node nodes[r], over NIC
    `rail` of every node."""

    def __init__(self, pattern, nodes, rail=0):
        if pattern not in PATTERNS:
            raise ValueError(f"unknown pattern {pattern!r} (known: {', '.join(PATTERNS)})")
        if len(nodes) < 2 or len(set(nodes)) != len(nodes):
            raise ValueError(f"{pattern} on nodes {nodes}: needs at least 2 distinct nodes")
        self.pattern = pattern
        self.nodes = list(nodes)
        self.rail = rail

    def receivers(self):
        """The nodes at which the tenant receives (its traffic's destinations)."""
        return self.nodes[:1] if self.pattern == "incast" else list(self.nodes)

    def senders(self):
        return self.nodes[1:] if self.pattern == "incast" else list(self.nodes)

    def describe(self):
        arrow = {"allreduce": "ring", "alltoall": "all-to-all", "incast": "incast"}[self.pattern]
        nodes = "-".join(str(n) for n in self.nodes)
        if self.pattern == "incast":
            nodes = ",".join(str(n) for n in self.nodes[1:]) + f"->{self.nodes[0]}"
        return f"{arrow} {nodes}" + (f" rail {self.rail}" if self.rail else "")


class TenantJob:
    """One tenant's job: one rank per node of its placement."""

    def __init__(self, tenant, index, placement, nsocks=4, size="32M", chunk="128K", window=24,
                 on_off=None, dscp=0, compute_ms=None):
        self.tenant = tenant
        self.index = index          # distinct rendezvous port per job
        self.placement = placement
        self.nsocks = nsocks
        self.size = size
        self.chunk = chunk
        self.window = window
        self.on_off = on_off        # "ON_MS:OFF_MS[:PHASE_MS]" or None
        self.compute_ms = compute_ms  # training: compute phase after each iteration, or None
        self.dscp = dscp            # marked even without an agent (TENANTQOS_DSCP), for the meter
        self.ranks = []             # Proc per rank

    def start(self, topo, bins, procs, workdir, scenario, duration, report_ms, run_dir_of):
        pl = self.placement
        n = len(pl.nodes)
        port = RENDEZVOUS_PORT_BASE + self.index
        # The plugin's devices are the node's NICs in order (eth0 = device 0, ...), as a GPU
        # node's NICs; the job uses its rail's.
        ifnames = "=" + ",".join(topo.node_devs())
        for r, node in enumerate(pl.nodes):
            argv = [bins.perf, pl.pattern, "--rank", str(r), "--nranks", str(n),
                    "--rendezvous", f"{topo.node_addr(pl.nodes[0], pl.rail)}:{port}",
                    "--plugin", bins.plugin, "--dev", str(pl.rail),
                    "--duration", str(duration), "--size", self.size, "--chunk", self.chunk,
                    "--window", str(self.window), "--report-interval", str(report_ms),
                    "--json", "--timeout", "20"]
            if self.on_off:
                argv += ["--on-off", self.on_off]
            if self.compute_ms:
                argv += ["--compute-ms", str(self.compute_ms)]
            env = {
                "TENANTQOS_TENANT": self.tenant,
                "TENANTQOS_RUN_DIR": run_dir_of(node),
                "TENANTQOS_SOCKET_IFNAME": ifnames,
                "TENANTQOS_NSOCKS": str(self.nsocks),
                "TENANTQOS_DSCP": str(self.dscp),
            }
            log = os.path.join(workdir, f"{scenario}-{self.tenant}-rank{r}.jsonl")
            self.ranks.append(procs.start(f"{self.tenant}/rank{r}", argv, log, env=env,
                                          netns=topo.node_ns(node)))

    def failed(self):
        """(rank, how it ended, log tail) of a rank that exited non-zero, else None: one killed
        by a signal first (a crash is the cause; its peers then fail with "connection closed"),
        else the first."""
        ended = [(r, p.poll(), p) for r, p in enumerate(self.ranks)]
        ended = [(r, rc, p) for r, rc, p in ended if rc is not None and rc != 0]
        if not ended:
            return None
        r, rc, p = min(ended, key=lambda e: (e[1] > 0, e[0]))
        if rc < 0:
            try:
                how = f"was killed by {signal.Signals(-rc).name}"
            except ValueError:
                how = f"was killed by signal {-rc}"
        else:
            how = f"exited with code {rc}"
        return r, how, p.log_tail(8)

    def done(self):
        return all(p.poll() is not None for p in self.ranks)

    def records(self, rank):
        """The JSON lines a rank printed (intervals, summary, errors)."""
        out = []
        for line in self.ranks[rank].log_text().splitlines():
            line = line.strip()
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
        return out

    def iteration_ends(self, rank):
        """Wall times (s) at which the rank completed its training iterations (--compute-ms)."""
        return [rec["wall_ns"] / 1e9 for rec in self.records(rank)
                if rec.get("type") == "iteration"]

    def summary(self, rank=0):
        for rec in self.records(rank):
            if rec.get("type") == "summary":
                return rec
        return None
