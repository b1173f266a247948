"""Scenarios of the isolation testbed and the runner that measures them.

A scenario = a workload (which tenants run, and how: backlogged, on/off, many tenants,
training-shaped) under one enforcement mode:
  none            no agents: the plugin runs unpaced (no shm files), the link is a plain FIFO at
                  line rate: whoever pushes hardest wins
  caps, priority, static, weights
                  what users deploy instead (peers.py): no agents, tc only
  tenantqos-rdma  agents in --tc-mode none: no tc at all (tc never sees RDMA); isolation comes
                  only from the plugin's pacing and the agents' allocator ("RDMA-like")
  tenantqos-tcp   agents in --tc-mode htb: the HTB tree per node as well (the TCP/IPoIB/rxe path)
"""
import json
import os
import shutil
import time

from . import analysis, capsprobe, peers
from .meter import DscpMeter
from .procs import run as run_cmd
from .workload import Placement, TenantJob

WARMUP_S = 2.0   # after the last rank's first report: slow start, the allocator settling on all tenants
TAIL_S = 0.3     # before the first rank stops (--duration after its start) or its last full report
WINDOW_S = 0.1   # the figures' windows (attainment, conformance), whatever the meter's tick
ALLOCATOR_HOLD_MS = 3000  # policyd --allocator-hold's default: how long agents keep caps

MODES = ("none",) + peers.PEER_MODES + ("tenantqos-rdma", "tenantqos-tcp")
# The first four run every tenant's ring over the same nodes (--nodes, default 2); the others
# place each tenant on its own nodes (report.py, PLACED) and need 4.
WORKLOADS = ("backlogged", "onoff", "many", "training", "incast", "alltoall", "asymmetric",
             "fabric", "fabric-onoff", "fabric-failover", "rails")
# What the bench runs without --workloads: `rails` (two NICs per node) is asked for by name.
BENCH_WORKLOADS = WORKLOADS[:-1]
# The workloads on the leaf/spine fabric (issue 21): tenants on different node pairs meeting on
# the spine link; their figures are taken on the spine.
FABRIC_WORKLOADS = ("fabric", "fabric-onoff", "fabric-failover")
# fabric-failover: `fabric` under tenantqos with two policyd replicas on etcd, the active
# allocator killed (-9) this long after the ranks start.
FAILOVER_KILL_S = 6.0
SHARED_LINK = "leaf-uplink"  # the policy's shared link class of the fabric's leaves
MODE_TEXT = {
    "none": "no tenantqos (plugin unpaced, FIFO link)",
    "caps": "per-tenant egress caps at the limit (CNI bandwidth / Cilium model)",
    "priority": "strict priority by tenant order at the switch (NCCL_IB_SL model)",
    "static": "dedicated shares at the guarantee (NIC per tenant / ETS, no borrowing)",
    "weights": "weighted sharing by weight at the switch (ETS model)",
    "tenantqos-rdma": "tenantqos, RDMA-like (pacing + allocator, no tc)",
    "tenantqos-tcp": "tenantqos, TCP (pacing + allocator + HTB)",
}
# In the fabric workloads tenantqos runs with the cluster allocator (policyd) as well.
FABRIC_MODE_TEXT = {
    "tenantqos-rdma": "tenantqos, RDMA-like, with the cluster allocator (pacing + caps, no tc)",
    "tenantqos-tcp": "tenantqos, TCP, with the cluster allocator (pacing + caps + HTB)",
}


class FabricUnavailable(RuntimeError):
    """tenantqos with the cluster allocator cannot run with this build (the reason says why)."""


def agent_fabric_support(bins):
    """None when the built tenantqos-agent has the cluster allocator's client (it streams its
    demand per shared link to policyd and enforces the caps it gets back, docs/fabric.md), else
    why not. Checked on the program itself (its --help), never assumed."""
    import subprocess
    try:
        r = subprocess.run([bins.agent, "--help"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"cannot run {bins.agent} --help: {e}"
    if "--fabric-report-interval-ms" not in (r.stdout + r.stderr):
        return (f"{bins.agent} has no cluster-allocator client (no --fabric-report-interval-ms): "
                "the agent's side of issue 21 (demand streamed to policyd's allocator, caps "
                "enforced in the plugin's link buckets) is not in this build, and tenantqos "
                "without it does not know the spine is shared; not run rather than shown "
                "without the allocator")
    return None


class TenantSpec:
    def __init__(self, name, guarantee_bps, limit_bps, weight, sl, dscp, nsocks=4):
        self.name = name
        self.guarantee_bps = guarantee_bps
        self.limit_bps = limit_bps
        self.weight = weight
        self.sl = sl
        self.dscp = dscp
        self.nsocks = nsocks


def demo_tenants(link_bps):
    """The source articles' two tenants (40 %/60 % weight 2, 20 %/40 % weight 1) plus an
    unguaranteed noisy tenant that opens four times as many TCP streams."""
    return [
        TenantSpec("tenant-a", 0.40 * link_bps, 0.60 * link_bps, 2, 1, 26),
        TenantSpec("tenant-b", 0.20 * link_bps, 0.40 * link_bps, 1, 2, 18),
        TenantSpec("noisy", 0, link_bps, 1, 3, 10, nsocks=16),
    ]


def many_tenants(link_bps):
    """Eight tenants with mixed guarantees, limits and weights (80 % guaranteed): one with
    limit = guarantee (the 300/300 Mbit/s shape that showed HTB's wire/payload gap) and one
    without a guarantee that opens 16 streams per connection."""
    shapes = [("m-flat", 0.30, 0.30, 1), ("m-a", 0.15, 0.40, 2), ("m-b", 0.10, 0.30, 1),
              ("m-c", 0.10, 0.20, 1), ("m-d", 0.05, 0.15, 3), ("m-e", 0.05, 1.00, 1),
              ("m-f", 0.05, 0.10, 1), ("m-bulk", 0.0, 1.00, 1)]
    dscps = [12, 14, 20, 22, 28, 30, 34, 36]
    return [TenantSpec(n, g * link_bps, l * link_bps, w, i + 1, dscps[i],
                       nsocks=16 if g == 0 else 4)
            for i, (n, g, l, w) in enumerate(shapes)]


def policy_yaml(link_bps, tenants, headroom=5, capped=None, shared=None):
    """The policy file for a run; `capped` names a tenant whose limit is its guarantee;
    `shared` = (capacity bits/s, [(group, [node names])]): the leaf/spine fabric's topology, one
    shared link class (SHARED_LINK, the leaves' uplinks) whose groups are the leaves."""
    lines = ["apiVersion: tenantqos/v1", "kind: TenantPolicy", "links:",
             "  - name: fabric", f"    capacity: {int(link_bps)}", f"    headroom: {headroom}%"]
    if shared:
        capacity, groups = shared
        lines += ["sharedLinks:", f"  - name: {SHARED_LINK}", f"    capacity: {int(capacity)}",
                  f"    headroom: {headroom}%", "    groups:"]
        for g, nodes in groups:
            lines += [f"      - name: {g}", f"        nodes: [{', '.join(nodes)}]"]
    lines += ["tenants:"]
    for i, t in enumerate(tenants):
        limit = t.guarantee_bps if capped == t.name else t.limit_bps
        lines += [f"  - name: {t.name}", "    link: fabric", f"    guarantee: {int(t.guarantee_bps)}",
                  f"    limit: {int(limit)}", f"    weight: {t.weight}",
                  f"    serviceLevel: {t.sl}", f"    dscp: {t.dscp}",
                  f"    trafficClasses: [{i + 1}]"]
    return "\n".join(lines) + "\n"


def tenants_from_json(doc):
    """TenantSpecs from `tenantqosctl validate FILE -o json` (a user's own policy)."""
    if len(doc.get("links", [])) != 1:
        raise RuntimeError("the testbed emulates one link class: the policy must define exactly "
                           "one link")
    out = []
    for t in doc["tenants"]:
        out.append(TenantSpec(t["name"], t["guaranteeBytesPerSecond"] * 8,
                              t["limitBytesPerSecond"] * 8, t["weight"], t["serviceLevel"],
                              t["dscp"]))
    return doc["links"][0]["capacityBytesPerSecond"] * 8, doc["links"][0]["headroomPercent"], out


class Scenario:
    def __init__(self, name, mode, tenants, duration, report_ms=100, capped=None, on_off=None,
                 workload="backlogged", policy=None, compute_ms=None, size="32M",
                 placement=None):
        self.name = name
        self.mode = mode          # one of MODES
        self.tenants = tenants    # names of the tenants that run
        self.duration = duration
        self.report_ms = report_ms
        self.capped = capped      # tenant whose limit is set to its guarantee
        self.on_off = on_off or {}  # {tenant: "ON_MS:OFF_MS[:PHASE_MS]"} (tenantqos-perf)
        self.workload = workload  # one of WORKLOADS, or "standalone" / "idle-wake"
        self.policy = policy      # names of the policy's tenants (None: the runner's default)
        self.compute_ms = compute_ms or {}  # {tenant: compute phase per training iteration}
        self.size = size          # size per iteration (tenantqos-perf --size)
        # {tenant: Placement}; a tenant not named runs a ring over the runner's nodes.
        self.placement = placement or {}
        # On the leaf/spine fabric, figures on the spine, the policy with its topology.
        self.fabric = workload in FABRIC_WORKLOADS
        self.kill_allocator_at = FAILOVER_KILL_S if workload == "fabric-failover" else None

    def nodes_used(self, default_nodes):
        return max([default_nodes] + [max(p.nodes) for p in self.placement.values()])

    def mode_text(self):
        return (FABRIC_MODE_TEXT.get(self.mode) if self.fabric else None) or MODE_TEXT[self.mode]

    def rails_used(self):
        return 1 + max([p.rail for p in self.placement.values()] + [0])


def say(msg):
    print(msg, flush=True)


class Runner:
    """Runs scenarios on a created topology with a started policyd."""

    def __init__(self, topo, bins, procs, control, workdir, link_bps, headroom, tenants,
                 extra_tenants=(), ring_nodes=2):
        self.topo = topo
        self.bins = bins
        self.procs = procs
        self.cp = control
        self.workdir = workdir
        self.link_bps = link_bps
        self.headroom = headroom
        self.tenants = {t.name: t for t in list(tenants) + list(extra_tenants)}
        self.order = [t.name for t in tenants]  # the default policy
        self.applied = None      # (policy text) last applied
        self.version = 0
        self.ring_nodes = ring_nodes  # nodes of a tenant without a placement (its ring)
        self.samples = {}        # scenario -> {plot label: (tenant, series)}
        self.received = {}       # scenario -> {tenant: [series per receiving node]}
        self.peer_built = False  # a peer mode's tc is on the links
        self.iteration_alone = {}  # tenant -> training iteration p99 (s) alone, capped

    # Enforcement setup -------------------------------------------------------------------
    def _empty_run_dir(self, node):
        # A run dir that does not exist: the plugin's "no agent on this node" (unpaced). An
        # existing one without an agent would mean a governed node whose agent is away, and
        # the plugin would pace at its conservative default rate (docs/plugin.md).
        d = os.path.join(self.workdir, f"node{node}", "no-agent-run")
        shutil.rmtree(d, ignore_errors=True)
        return d

    def _enforce(self, sc):
        """Brings the cluster into the scenario's mode with the scenario's policy."""
        self.cp.stop_agents()
        if self.peer_built:
            self.topo.restore_links()
            self.peer_built = False
        specs = [self.tenants[n] for n in (sc.policy or self.order)]
        if sc.mode == "none":
            return self._empty_run_dir
        if sc.mode in peers.PEER_MODES:
            self.peer_built = True  # restored on the next scenario even if this fails half-way
            where = peers.install(self.topo, sc.mode, specs, run_cmd)
            at = ([f"{l.node_ns} {l.dev} (and its ingress {l.ingress_ifb})"
                   for l in self.topo.links.values()] if where == "node" else
                  [f"{p.dev}: {p.label}, {p.rate_bits / 1e6:g} Mbit/s" for p in self.topo.ports()])
            with open(os.path.join(self.workdir, f"peer-{sc.name}.txt"), "w") as f:
                f.write(peers.describe(sc.mode, specs, self.link_bps) + "\non:\n  " +
                        "\n  ".join(at) + "\n")
            return self._empty_run_dir
        shared = None
        if sc.fabric:
            why = agent_fabric_support(self.bins)
            if why:
                raise FabricUnavailable(why)
            shared = (self.topo.spine.rate_bits, self.topo.leaf_groups())
        text = policy_yaml(self.link_bps, specs, self.headroom, capped=sc.capped, shared=shared)
        if text != self.applied:
            self.version = self.cp.apply_policy(text, sc.name)
            self.applied = text
        self.cp.start_agents("none" if sc.mode == "tenantqos-rdma" else "htb", self.version)
        return self.cp.node_run_dir

    # One scenario ------------------------------------------------------------------------
    def placement(self, sc, tenant):
        return sc.placement.get(tenant) or Placement("allreduce",
                                                     range(1, self.ring_nodes + 1))

    def run(self, sc, index, total):
        placed = "".join(f" [{n}: {sc.placement[n].describe()}]" for n in sc.tenants
                         if n in sc.placement)
        say(f"[{index}/{total}] {sc.name}: {', '.join(sc.tenants)}{placed} | "
            f"{sc.mode_text()} | {sc.duration:.0f} s")
        try:
            run_dir_of = self._enforce(sc)
        except FabricUnavailable as e:
            say(f"    not run: {e}")
            return {"name": sc.name, "workload": sc.workload, "mode": sc.mode,
                    "skipped": str(e), "tenants": [], "violations": []}
        except peers.PeerUnavailable as e:
            say(f"    skipped: {e}")
            self.topo.restore_links()
            self.peer_built = False
            return {"name": sc.name, "workload": sc.workload, "mode": sc.mode,
                    "skipped": str(e), "tenants": [], "violations": []}
        meter = DscpMeter(self.topo, {n: self.tenants[n].dscp for n in sc.tenants},
                          sc.report_ms / 1000.0)
        meter.start()
        # fabric-onoff under tenantqos: the caps the agents enforce, for the demand-to-caps
        # figure (issue 21's 200 ms target).
        probe = None
        if sc.workload == "fabric-onoff" and sc.mode.startswith("tenantqos"):
            probe = capsprobe.CapsProbe({i: self.cp.metrics_url(i)
                                         for i in range(1, self.topo.nodes + 1)})
            probe.start()
        try:
            res = self._run_jobs(sc, index, run_dir_of, meter)
        finally:
            meter.stop()
            if probe:
                probe.stop()
        if probe:
            res["caps_reaction_ms"] = self._caps_reaction(sc, probe)
        if sc.workload in ("onoff", "incast-wake", "fabric-onoff"):
            res["reaction_ms"] = {s: self.reaction(sc.name, s, [n for n in sc.tenants if n != s])
                                  for s in sc.on_off}
        return res

    def _run_jobs(self, sc, index, run_dir_of, meter):
        jobs = []
        for k, name in enumerate(sc.tenants):
            t = self.tenants[name]
            job = TenantJob(name, index * 10 + k, self.placement(sc, name), nsocks=t.nsocks,
                            size=sc.size, on_off=sc.on_off.get(name), dscp=t.dscp,
                            compute_ms=sc.compute_ms.get(name))
            job.start(self.topo, self.bins, self.procs, self.workdir, sc.name, sc.duration,
                      sc.report_ms, run_dir_of)
            jobs.append(job)
        # The links into the receiving nodes: where the tenants contend; on the fabric, the
        # spine's directions ("spine", d).
        if sc.fabric:
            ends = sorted({("spine", d) for j in jobs for d in self.spine_directions(j.placement)})
        else:
            ends = sorted({(n, j.placement.rail) for j in jobs for n in j.placement.receivers()})
        t_start = time.time()
        # Link counters: from when every rank is past setup (~1 s) plus the warm-up.
        t0 = t_start + 1.0 + WARMUP_S
        t1 = t_start + sc.duration - TAIL_S
        port0 = port1 = None
        next_progress = t_start + 2
        deadline = t_start + sc.duration + 40
        failover = None  # {"killed": replica, "t_kill": wall s, "t_takeover": wall s or None}
        while True:
            now = time.time()
            if sc.kill_allocator_at is not None and failover is None and \
                    now >= t_start + sc.kill_allocator_at:
                k, t_kill = self.cp.kill_active_allocator()
                failover = {"killed": k, "t_kill": t_kill, "t_takeover": None}
                say(f"    t={t_kill - t_start:4.1f}s  killed (-9) the active allocator, policyd "
                    f"replica {k + 1}")
            if failover and failover["t_takeover"] is None and \
                    self.cp.active_allocator() is not None:
                failover["t_takeover"] = time.time()
                say(f"    t={failover['t_takeover'] - t_start:4.1f}s  replica "
                    f"{self.cp.active_allocator() + 1} is the active allocator (seen in its log)")
            failed = [(job, job.failed()) for job in jobs]
            failed = [(job, f) for job, f in failed if f]
            if failed:
                # A crash (a signal) is the cause; the ranks it was connected to only follow.
                job, f = min(failed, key=lambda jf: "killed" not in jf[1][1])
                raise RuntimeError(f"scenario {sc.name}: {job.tenant} rank {f[0]} {f[1]}:\n{f[2]}")
            if meter.error:
                raise RuntimeError(f"scenario {sc.name}: the traffic meter failed: {meter.error}")
            if sc.mode.startswith("tenantqos") and not self.cp.agents_alive():
                raise RuntimeError(f"scenario {sc.name}: an agent exited; see "
                                   f"{self.workdir}/agent-node*.log")
            if port0 is None and now >= t0:
                port0 = (time.time(), {e: self.topo.port_stats(*e) for e in ends})
            if port1 is None and now >= t1:
                port1 = (time.time(), {e: self.topo.port_stats(*e) for e in ends})
            if all(job.done() for job in jobs):
                break
            if now > deadline:
                raise RuntimeError(f"scenario {sc.name}: ranks still running {deadline - t_start:.0f}"
                                   " s after start (hung?)")
            if now >= next_progress and now < t_start + sc.duration:
                next_progress += 2
                say(f"    t={now - t_start:4.1f}s  " + "  ".join(
                    f"{j.tenant} {self._live_rate(j):6.3f}" for j in jobs) + "  Gbit/s")
            time.sleep(0.1)
        # The measured span comes from the ranks' own reports: every tenant running.
        firsts, lasts = [], []
        for job in jobs:
            for r in range(len(job.ranks)):
                s = analysis.rate_series(job.records(r))
                full = [w for w in s if w[1] >= 0.8 * sc.report_ms / 1000]
                if full:
                    firsts.append(full[0][0] - full[0][1])
                    lasts.append(full[-1][0])
        if firsts:
            # Ends: a rank stops starting iterations --duration after its start, then drains
            # (reports go on, with less and less traffic) — so the span ends at the first
            # tenant's stop, not at the last report.
            t0 = max(firsts) + WARMUP_S
            t1 = min(min(lasts), min(firsts) + sc.duration) - TAIL_S
        res = self._measure(sc, jobs, ends, t0, t1, port0, port1, meter)
        if failover:
            res["failover"] = self._failover_figures(sc, failover, t0, t1)
            # The next scenario has both replicas again (the restarted one a standby).
            self.cp.restart_replica(failover["killed"])
        return res

    def _caps_reaction(self, sc, probe):
        """Per on/off tenant: how long after each of its demand edges (its wall-clock schedule)
        its caps, summed over its nodes, moved half-way to where they settled (p50, ms, and the
        edges counted); {"error": why} when the agents exported no caps."""
        if not any(caps for _, _, caps in probe.samples):
            return {"error": f"no {capsprobe.METRIC} in the agents' /metrics "
                             f"({len(probe.samples)} scrapes, {probe.errors} failed)"}
        t_lo = min(t for t, _, _ in probe.samples) + 1.0
        t_hi = max(t for t, _, _ in probe.samples)
        out = {}
        for tenant, on_off in sc.on_off.items():
            delays = capsprobe.reaction_ms(capsprobe.tenant_caps(probe.samples, tenant),
                                           capsprobe.schedule_edges(on_off, t_lo, t_hi))
            out[tenant] = {"p50": analysis.percentile(delays, 50) if delays else None,
                           "edges": len(delays), "scrape_ms": probe.interval_s * 1000}
        return out

    def _failover_figures(self, sc, failover, t0, t1):
        """After the kill: how long until a standby said it is active (from its log, polled
        every 100 ms: an upper bound), and per guaranteed tenant the longest run of 100 ms
        windows on the spine (per direction) in which it got < 0.95 x its guarantee, against
        the agents' fallback window (policyd --allocator-hold, default 3 s)."""
        width = WINDOW_S
        t0 = analysis.align_up(t0, width)
        out = {"killed_replica": failover["killed"] + 1,
               "kill_after_s": sc.kill_allocator_at,
               "takeover_ms": ((failover["t_takeover"] - failover["t_kill"]) * 1000
                               if failover["t_takeover"] else None),
               "fallback_ms": ALLOCATOR_HOLD_MS, "longest_below_guarantee_ms": {}}
        for tenant, series_list in self.received.get(sc.name, {}).items():
            g = self.tenants[tenant].guarantee_bps
            if g <= 0:
                continue
            longest = 0
            for s in series_list:
                run_len = 0
                for k, r in enumerate(analysis.rebin(s, width, t0, t1)):
                    if t0 + (k + 1) * width <= failover["t_kill"]:
                        continue
                    run_len = run_len + 1 if r < analysis.ATTAINMENT_P1 * g else 0
                    longest = max(longest, run_len)
            out["longest_below_guarantee_ms"][tenant] = longest * width * 1000
        return out

    def spine_directions(self, placement):
        """The directions in which a placement's traffic crosses the spine (a ring's hops, an
        all-to-all's pairs, an incast's senders to its first node)."""
        n = placement.nodes
        if placement.pattern == "allreduce":
            hops = [(n[k], n[(k + 1) % len(n)]) for k in range(len(n))]
            hops += [(b, a) for a, b in hops] if len(n) == 2 else []
        elif placement.pattern == "alltoall":
            hops = [(a, b) for a in n for b in n if a != b]
        else:
            hops = [(a, n[0]) for a in n[1:]]
        leaf = self.topo.leaf_of
        return sorted({leaf(a) for a, b in hops if leaf(a) != leaf(b)})

    def _live_rate(self, job):
        """What the job's receiving ranks receive, mean per rank (Gbit/s)."""
        pl = job.placement
        ranks = [r for r, n in enumerate(pl.nodes) if n in pl.receivers()]
        total = 0.0
        for r in ranks:
            s = analysis.rate_series(job.records(r))
            if s:
                total += s[-1][2]
        return total / max(1, len(ranks)) / 1e9

    def _measure(self, sc, jobs, ends, t0, t1, port0, port1, meter):
        # The contended link's rate: the node links', or on the fabric the spine's.
        rate_bps = self.topo.spine.rate_bits if sc.fabric else self.link_bps
        res = {"name": sc.name, "workload": sc.workload, "mode": sc.mode, "skipped": None,
               "link_bps": rate_bps, "tenants": []}
        if sc.fabric:
            res["spine_bps"] = rate_bps
        if port0 and port1 and port1[0] > port0[0]:
            span = port1[0] - port0[0]
            utils = [(port1[1][e][0] - port0[1][e][0]) * 8 / (rate_bps * span) for e in ends]
            res["link_utilization"] = sum(utils) / len(utils)
            res["link_drops"] = sum(port1[1][e][2] - port0[1][e][2] for e in ends)
        else:
            res["link_utilization"] = None
        self.samples[sc.name] = {}
        self.received[sc.name] = {}
        width = WINDOW_S
        # Windows on the wall clock's 100 ms grid: an on/off schedule's edges are window edges.
        t0 = analysis.align_up(t0, width)
        # What each tenant received at each of its receiving nodes (fabric: what crossed the
        # spine in each direction it uses), and sent from each sender.
        if sc.fabric:
            rx = {j.tenant: {("spine", d): meter.spine_series(j.tenant, d)
                             for d in self.spine_directions(j.placement)} for j in jobs}
        else:
            rx = {j.tenant: {(n, j.placement.rail): meter.series(j.tenant, n, j.placement.rail)
                             for n in j.placement.receivers()} for j in jobs}
        tx = {j.tenant: {(n, j.placement.rail): meter.sent_series(j.tenant, n, j.placement.rail)
                         for n in j.placement.senders()} for j in jobs}
        # Windows in which a receiving node's link carried >= 90 % of its rate in payload.
        mask = analysis.busy_mask({e: [rx[t][e] for t in rx if e in rx[t]] for e in ends},
                                  width, t0, t1, rate_bps)
        res["busy_windows"] = sum(sum(m) for m in mask.values())
        res["windows_per_node"] = len(next(iter(mask.values()))) if mask else 0
        per_end = {e: [] for e in ends}
        # A panel line per receiving node (placed workloads); the fabric's: one per tenant (the
        # spine's first direction; both are in the JSON).
        several = not sc.fabric and any(len(j.placement.receivers()) > 1 for j in jobs
                                        if j.tenant in sc.placement)
        # Each tenant's limit and windows with demand: always (backlogged), the on phases
        # (on/off), none known (training: compute phases come and go with the iteration times).
        limits, actives = {}, {}
        for job in jobs:
            spec = self.tenants[job.tenant]
            limits[job.tenant] = spec.guarantee_bps if sc.capped == job.tenant else spec.limit_bps
            actives[job.tenant] = (
                [False] * res["windows_per_node"] if job.tenant in sc.compute_ms else
                analysis.on_windows(sc.on_off.get(job.tenant), width, t0, t1))
        # Per receiving end and window: the tenants with demand there could use more than the
        # link (where a guarantee is contended, and the busy-window filter means something).
        contended = {e: [sum(min(limits[t], rate_bps) for t in rx
                             if e in rx[t] and actives[t][k]) > rate_bps * 1.0001
                         for k in range(res["windows_per_node"])] for e in ends}
        for job in jobs:
            spec = self.tenants[job.tenant]
            limit = limits[job.tenant]
            rx_ends, tx_ends = list(rx[job.tenant]), list(tx[job.tenant])
            series = [rx[job.tenant][e] for e in rx_ends]
            sent = [tx[job.tenant][e] for e in tx_ends]
            self.received[sc.name][job.tenant] = series
            for e, s in zip(rx_ends, series):
                label = f"{job.tenant}@node{e[0]}" if several else job.tenant
                if several or e == rx_ends[0]:
                    self.samples[sc.name][label] = (job.tenant, s)
            with open(os.path.join(self.workdir, f"series-{sc.name}-{job.tenant}.json"), "w") as f:
                json.dump({"t0": t0, "t1": t1,
                           "received": {self._end_name(e): s for e, s in rx[job.tenant].items()},
                           "sent": {f"node{n}/eth{r}": s for (n, r), s in tx[job.tenant].items()}},
                          f)
            training = job.tenant in sc.compute_ms
            active = actives[job.tenant]
            for e, s in zip(rx_ends, series):
                per_end[e].append((s, active, min(limit, rate_bps)))
            fig = analysis.tenant_figures(series, spec.guarantee_bps, limit, t0, t1,
                                          width_s=width)
            fig_tx = analysis.tenant_figures(sent, spec.guarantee_bps, limit, t0, t1,
                                             width_s=width)
            p50, p1 = analysis.attainment_masked(series, spec.guarantee_bps, width, t0, t1,
                                                 [active] * len(series))
            busy_masks = [[a and b for a, b in zip(active, mask[e])] for e in rx_ends]
            p50_busy, p1_busy = analysis.attainment_masked(series, spec.guarantee_bps, width,
                                                           t0, t1, busy_masks)
            summ = job.summary(0) or {}
            if summ.get("wrong", 0):
                raise RuntimeError(f"{sc.name}: {job.tenant}'s {job.placement.pattern} results "
                                   "were wrong")
            caps = [c for c in (fig["cap_conformance_max"], fig_tx["cap_conformance_max"])
                    if c is not None]
            nodes = []
            for e, s, m in zip(rx_ends, series, busy_masks):
                f1 = analysis.tenant_figures([s], spec.guarantee_bps, limit, t0, t1, width_s=width)
                b50, b1 = analysis.attainment_masked([s], spec.guarantee_bps, width, t0, t1, [m])
                where = ({"link": self._end_name(e), "direction": "spine"} if e[0] == "spine" else
                         {"node": e[0], "rail": e[1], "direction": "rx"})
                nodes.append({**where, "mean_bps": f1["mean_bps"], "attainment_p50_link_busy": b50,
                              "attainment_p1_link_busy": b1,
                              "cap_conformance_max": f1["cap_conformance_max"]})
            for e, s in zip(tx_ends, sent):
                f1 = analysis.tenant_figures([s], spec.guarantee_bps, limit, t0, t1, width_s=width)
                nodes.append({"node": e[0], "rail": e[1], "direction": "tx",
                              "mean_bps": f1["mean_bps"],
                              "cap_conformance_max": f1["cap_conformance_max"]})
            entry = {"name": job.tenant, "placement": job.placement.describe(),
                     "busbw_bps": summ.get("busbw_GBps", 0) * 8e9,
                     "guarantee_bps": spec.guarantee_bps, "limit_bps": limit,
                     "mean_bps": fig["mean_bps"], "windows": fig["windows"],
                     # Over the windows with demand (all of them when backlogged), at every
                     # receiving node.
                     "attainment_p50": p50, "attainment_p1": p1,
                     # ... of which the receiving node's link as a whole was busy (the targets'
                     # figure).
                     "attainment_p50_link_busy": p50_busy,
                     "attainment_p1_link_busy": p1_busy,
                     "windows_with_demand": sum(sum(active) for _ in rx_ends),
                     "contended_windows_with_demand": sum(
                         sum(a and c for a, c in zip(active, contended[e])) for e in rx_ends),
                     "busy_windows_with_demand": sum(sum(m) for m in busy_masks),
                     # The worst window at either end (received at a node, sent from one).
                     "cap_conformance_max": max(caps) if caps else None,
                     "cap_conformance_rx_max": fig["cap_conformance_max"],
                     "cap_conformance_tx_max": fig_tx["cap_conformance_max"],
                     "nodes": nodes}
            if training:
                its = analysis.iteration_times(
                    [job.iteration_ends(r) for r in range(len(job.ranks))], t0, t1)
                entry["iterations"] = len(its)
                entry["iteration_p50_s"] = analysis.percentile(its, 50) if its else None
                entry["iteration_p99_s"] = analysis.percentile(its, 99) if its else None
                if sc.workload == "training-alone":
                    self.iteration_alone[job.tenant] = entry["iteration_p99_s"]
                entry["iteration_alone_p99_s"] = self.iteration_alone.get(job.tenant)
            res["tenants"].append(entry)
        # The data frames that carried the payload (ACKs, which use the port too, left out:
        # receivers coalesce them, a lower bound).
        res["utilization_over_demand"] = analysis.utilization_over_demand(
            per_end, rate_bps, width, t0, t1,
            lambda p: peers.wire_rate(p, segments_per_ack=0))
        res["violations"] = analysis.violations(res)
        for e in res["tenants"]:
            say(f"    {e['name']:<10} busbw {e['busbw_bps'] / 1e9:6.3f} Gbit/s  "
                f"mean {e['mean_bps'] / 1e9:6.3f} Gbit/s" +
                (f"  attainment p50 {e['attainment_p50']:.3f} p1 {e['attainment_p1']:.3f}"
                 if e["attainment_p50"] is not None else "") +
                (f"  iteration p50 {e['iteration_p50_s']:.3f} s p99 {e['iteration_p99_s']:.3f} s"
                 if e.get("iteration_p99_s") is not None else ""))
        if res["link_utilization"] is not None:
            u = res["utilization_over_demand"]
            say(f"    link utilisation {res['link_utilization']:.3f}" +
                (f" ({u:.3f} while demand exceeded the link)" if u is not None else "") +
                f"  drops {res['link_drops']}"
                f"  busy windows {res['busy_windows']}/{res['windows_per_node'] * len(mask)}")
        return res

    def _end_name(self, e):
        """A receiving end's name: node1/eth0, or spine/leaf1->leaf2."""
        if e[0] == "spine":
            return "spine/" + self.topo.spine.DIRECTIONS[e[1]]
        return f"node{e[0]}/eth{e[1]}"

    # Reaction times (idle-wake) ------------------------------------------------------------
    def reaction(self, sc_name, sleeper, others):
        """idle_to_others: from the sleeper's last sending window until the others' combined
        rate reaches 90 % of what they get while it sleeps (until the next tenant goes idle or
        wakes); wake_to_guarantee: from its first sending window after a pause until it
        receives >= 95 % of its guarantee (guaranteed sleepers only)."""
        samples = self.received.get(sc_name, {})
        if sleeper not in samples:
            return {}
        spec = self.tenants[sleeper]
        g = spec.guarantee_bps
        # What the sleeper receives at its first receiving node (two-node ring: node 1, from
        # node 2; incast: the node it converges on), and the others there.
        sleeper_rx = samples[sleeper][0]
        others_rx = [samples[o][0] for o in others if o in samples]
        active = 0.05 * g if g > 0 else 1e6
        offs, ons = analysis.transitions(sleeper_rx, active)
        idle_ms, wake_ms = [], []
        if not others_rx:
            return {}
        width = 0.01
        t_lo = min(s[0][0] - s[0][1] for s in others_rx if s)
        t_hi = max(s[-1][0] for s in others_rx if s)
        combined = [sum(v) for v in zip(*[analysis.rebin(s, width, t_lo, t_hi) for s in others_rx])]

        def combined_at(t):
            k = int((t - t_lo) // width)
            return combined[k] if 0 <= k < len(combined) else None

        # Others going idle or waking change what they get: the steady rate after a sleeper
        # stops is taken before the next such edge (or the sleeper's own wake-up).
        edges = []
        for o in others:
            if o in samples:
                og = self.tenants[o].guarantee_bps
                edges += sum(analysis.transitions(samples[o][0], 0.05 * og if og > 0 else 1e6),
                             [])
        for t_off in offs:
            nxt = [t for t in ons + edges if t > t_off + width]
            t_end = min(nxt) if nxt else t_hi
            if t_end - t_off < 0.1:
                continue
            # Others' steady rate while the sleeper sleeps: median of the second half.
            half = [combined_at(t_off + (t_end - t_off) * f) for f in (0.5, 0.6, 0.7, 0.8, 0.9)]
            half = [h for h in half if h is not None]
            if not half:
                continue
            target = 0.9 * analysis.percentile(half, 50)
            k = int((t_off - t_lo) // width)
            while k < len(combined) and combined[k] < target:
                k += 1
            # Upper bounds with one window's resolution: the sleeper stopped inside its last busy
            # window (from t_off - width), and the others held the target from the START of the
            # first window that is at it throughout. (Taking that window's end would add a
            # whole window to every figure; starting from t_off would be a lower bound.)
            if k < len(combined):
                idle_ms.append(max(0.0, t_lo + k * width - (t_off - width)) * 1000)
        for t_on in (ons if g > 0 else []):
            t = analysis.first_time(sleeper_rx, t_on, lambda r: r >= 0.95 * g, 1.0,
                                    min_window_s=0.5 * width, at_start=True)
            if t is not None:
                wake_ms.append(max(0.0, t - t_on) * 1000)
        out = {}
        if idle_ms:
            out["idle_to_others_p50"] = analysis.percentile(idle_ms, 50)
        if wake_ms:
            out["wake_to_guarantee_p50"] = analysis.percentile(wake_ms, 50)
        out["cycles"] = min(len(idle_ms), len(wake_ms))
        return out


def write_plot(runner, grid, png_path, workdir):
    """Per-tenant throughput over time (100 ms windows) with guarantee and limit lines, drawn by
    gnuplot: one panel per scenario, `grid` = rows (modes) of columns (workloads) of scenario
    names (None: an empty panel)."""
    import shutil
    import subprocess
    if shutil.which("gnuplot") is None:
        say("    (gnuplot not installed: no plot)")
        return None
    rows = [r for r in grid if any(n in runner.samples for n in r if n)]
    if not rows:
        return None
    cols = max(len(r) for r in rows)
    script = [f"set terminal pngcairo size {700 * cols},{260 * len(rows) + 60} font 'sans,9'",
              f"set output '{png_path}'", f"set multiplot layout {len(rows)},{cols}",
              "set grid", "set key outside right", "set ylabel 'Gbit/s'",
              f"set yrange [0:{runner.link_bps / 1e9 * 1.1:.3f}]"]
    for row in rows:
        for name in list(row) + [None] * (cols - len(row)):
            if not name or name not in runner.samples:
                script.append("set multiplot next")
                continue
            script += _plot_panel(runner, name, workdir)
    script.append("unset multiplot")
    gp = os.path.join(workdir, "plot.gp")
    with open(gp, "w") as f:
        f.write("\n".join(script) + "\n")
    r = subprocess.run(["gnuplot", gp], capture_output=True, text=True)
    if r.returncode != 0:
        say(f"    gnuplot failed: {r.stderr.strip()}")
        return None
    return png_path


def _plot_panel(runner, name, workdir):
    files = []
    for label, (tenant, series) in runner.samples[name].items():
        if not series:
            continue
        t0 = series[0][0] - series[0][1]
        path = os.path.join(workdir, f"plot-{name}-{label.replace('@', '-')}.dat")
        with open(path, "w") as f:
            # 100 ms windows whatever the meter's tick (10 ms ticks are unreadable at this size).
            for k, r in enumerate(analysis.rebin(series, WINDOW_S, t0, series[-1][0])):
                f.write(f"{(k + 1) * WINDOW_S:.3f} {r / 1e9:.4f}\n")
        files.append((label, tenant, path))
    plots = []
    # Eight tenants: no guarantee/limit lines, they would hide the data.
    many = len({tenant for _, tenant, _ in files}) > 4
    lines_drawn = set()
    for i, (label, tenant, path) in enumerate(files):
        spec = runner.tenants[tenant]
        plots.append(f"'{path}' using 1:2 with lines lw 2 lc {i + 1} title '{label}'")
        if tenant in lines_drawn or many:
            continue
        lines_drawn.add(tenant)
        if spec.guarantee_bps > 0:
            plots.append(f"{spec.guarantee_bps / 1e9:.4f} with lines dt 2 lc {i + 1} "
                         f"title '{tenant} guarantee'")
        if spec.limit_bps < runner.link_bps:
            plots.append(f"{spec.limit_bps / 1e9:.4f} with lines dt 3 lc {i + 1} "
                         f"title '{tenant} limit'")
    where = " (on the spine, leaf1->leaf2)" if name.startswith("fabric") else ""
    return [f"set title '{name}{where}'", "set xlabel 's'", "plot " + ", ".join(plots)]
