"""The testbed's scenario lists, table and targets (README's main job, bench/isolation).

Scenario names: `standalone-<tenant>` (alone, no tenantqos: the "% of alone" baseline),
`standalone-capped-<tenant>` (alone, tenantqos RDMA-like, limit = guarantee), `contended-<mode>`
(the backlogged workload, today's names), `<workload>-<mode>` for the others (`onoff-caps`,
`many-tenantqos-tcp`, `training-weights`, `incast-none`, ...), `training-alone-<tenant>` (the
training shape alone, capped at its guarantee), `idle-wake-tenantqos-rdma` and
`incast-wake-<tenantqos mode>`.
"""
from . import analysis
from .scenarios import FABRIC_WORKLOADS, Scenario, many_tenants, say
from .workload import Placement

ONOFF = "300:700"  # ms on : ms off, the on/off workload's cycle
TRAINING_SIZE = "8M"  # allreduce per training iteration
TRAINING_COMPUTE_MS = (150, 250, 200)  # per guaranteed tenant, in order (desynchronised)


# The workloads that place each tenant on its own nodes (issue 20): (pattern, nodes) of the
# first guaranteed tenant ("tenant-a") and of the noisy one, so that each receiving node's
# ingress is fed by senders whose agents never see each other's tenants.
PLACED = {
    # tenant-a node1 -> node3; noisy node2 -> node3 and node4 -> node3 (the incast's first node
    # is the receiver).
    "incast": (("incast", (3, 1)), ("incast", (3, 2, 4))),
    # tenant-a all-to-all over nodes 1-3, noisy over nodes 2-4 (MoE dispatch / combine).
    "alltoall": (("alltoall", (1, 2, 3)), ("alltoall", (2, 3, 4))),
    # tenant-a's ring over nodes 1-2, noisy's over 2-3-4: node 2's ingress is fed by tenant-a
    # from node 1 and noisy from node 4, node 3's and node 4's by noisy alone.
    "asymmetric": (("allreduce", (1, 2)), ("allreduce", (2, 3, 4))),
}
INCAST_WAKE = "1500:1000:0"  # tenant-a's on/off in the ingress reaction scenario (as idle-wake)

# The fabric workloads (issue 21, the source article's scenario): four nodes under two leaves
# joined by one spine link; tenant-a's ring on nodes 1 and 3, tenant-b's on 2 and 4, noisy's on
# 1 and 4: every tenant's traffic crosses the spine (both directions), and each node's agent
# sees at most two tenants on its NIC, never all three that meet on the spine.
FABRIC = {"tenant-a": (1, 3), "tenant-b": (2, 4), "noisy": (1, 4)}
# The fabric-onoff workload's on/off tenants: a demand change on the spine must reach the caps
# (issue 21's target: within 200 ms p50, end to end here).
FABRIC_REACTION_MS = 200


def placed_tenants(tenants):
    """(tenant-a, noisy) of the placed workloads: the first guaranteed tenant and the first
    without a guarantee (else the last other tenant)."""
    guaranteed = [t for t in tenants if t.guarantee_bps > 0]
    if not guaranteed or len(tenants) < 2:
        raise ValueError("the incast, alltoall and asymmetric workloads need a guaranteed tenant "
                         "and another one in the policy")
    a = guaranteed[0]
    rest = [t for t in tenants if t is not a]
    noisy = next((t for t in rest if t.guarantee_bps <= 0), rest[-1])
    return a, noisy


def rails_tenants(tenants):
    """(tenant-a, noisy, tenant-b) of the rails workload: tenant-b is the second guaranteed
    tenant."""
    a, noisy = placed_tenants(tenants)
    b = next((t for t in tenants if t.guarantee_bps > 0 and t is not a), None)
    if b is None:
        raise ValueError("the rails workload needs two guaranteed tenants in the policy")
    return a, noisy, b


def fabric_tenants(tenants):
    """(tenant-a, tenant-b, noisy) of the fabric workloads, as rails_tenants picks them."""
    try:
        a, noisy, b = rails_tenants(tenants)
    except ValueError:
        raise ValueError("the fabric workloads need two guaranteed tenants and another one in "
                         "the policy") from None
    return a, b, noisy


def fabric_fits(tenants):
    try:
        fabric_tenants(tenants)
        return True
    except ValueError:
        return False


def fabric_scenario(name, workload, mode, tenants, seconds):
    roles = fabric_tenants(tenants)
    placement = {t.name: Placement("allreduce", nodes)
                 for t, nodes in zip(roles, FABRIC.values())}
    names = [t.name for t in roles]
    if workload == "fabric-onoff":
        # tenant-a throughout; tenant-b and noisy on/off (the onoff workload's schedule).
        return Scenario(name, mode, names, seconds, workload=workload, policy=names,
                        placement=placement, report_ms=10, on_off=onoff_schedule(list(roles)),
                        size="4M")
    return Scenario(name, mode, names, seconds, workload=workload, policy=names,
                    placement=placement)


def placed_tenants_of(workload, tenants):
    if workload in FABRIC_WORKLOADS:
        return list(fabric_tenants(tenants))
    if workload == "rails":
        a, noisy, b = rails_tenants(tenants)
        return [a, b, noisy]
    return list(placed_tenants(tenants)) if workload in PLACED else None


def placement_text(workload, tenants):
    if workload in FABRIC_WORKLOADS:
        roles = fabric_tenants(tenants)
        return (", ".join(f"{t.name} ring {a}-{b}" for t, (a, b) in zip(roles, FABRIC.values())) +
                "; nodes 1-2 under leaf 1, 3-4 under leaf 2, one spine link between them; "
                "figures on the spine (what crossed it, both directions)")
    if workload == "rails":
        a, noisy, b = rails_tenants(tenants)
        return (f"{a.name} and {noisy.name} ring 1-2 rail 0, {b.name} ring 1-2 rail 1; figures "
                "per rail")
    a, noisy = placed_tenants(tenants)
    return ", ".join(f"{t.name} {Placement(p, n).describe()}"
                     for t, (p, n) in zip((a, noisy), PLACED[workload]))


def placed_scenario(name, workload, mode, tenants, seconds, on_off=None, report_ms=100):
    a, noisy = placed_tenants(tenants)
    kind = "incast" if workload == "incast-wake" else workload
    placement = {t.name: Placement(p, n) for t, (p, n) in zip((a, noisy), PLACED[kind])}
    # The policy: the two tenants alone (tenant-b would only hold a static share).
    return Scenario(name, mode, [a.name, noisy.name], seconds, workload=workload,
                    policy=[a.name, noisy.name], placement=placement, on_off=on_off,
                    report_ms=report_ms)


def scenario_name(workload, mode):
    return f"contended-{mode}" if workload == "backlogged" else f"{workload}-{mode}"


def onoff_schedule(tenants):
    """The on/off workload: the first guaranteed tenant runs throughout; every other tenant
    alternates ONOFF on one wall-clock schedule, each starting 200 ms before the previous one's
    on phase (so 100 ms overlap; with two: on 0-300 and 800-1100 ms of each second). So a
    guaranteed tenant wakes into a full link (the others on), and when the others' burst ends
    one of them is still on to take the share."""
    guaranteed = [t.name for t in tenants if t.guarantee_bps > 0]
    keep = guaranteed[0] if guaranteed else tenants[0].name
    sleepers = [t.name for t in tenants if t.name != keep]
    on, off = (int(x) for x in ONOFF.split(":"))
    cycle = on + off
    return {n: f"{ONOFF}:{(-k * (on - 100)) % cycle}" for k, n in enumerate(sleepers)}


def training_compute(tenants):
    """The training workload: guaranteed tenants train (compute, then an allreduce of
    TRAINING_SIZE, per iteration); the others stay backlogged (the noisy neighbours)."""
    g = [t.name for t in tenants if t.guarantee_bps > 0]
    return {n: TRAINING_COMPUTE_MS[k % len(TRAINING_COMPUTE_MS)] for k, n in enumerate(g)}


def workload_scenario(workload, mode, tenants, link_bps, seconds):
    names = [t.name for t in tenants]
    name = scenario_name(workload, mode)
    if workload == "backlogged":
        return Scenario(name, mode, names, seconds)
    if workload == "onoff":
        # 10 ms meter ticks for the reaction figures; short allreduces so that a tenant's
        # traffic follows its schedule (an allreduce started in the on phase runs to its end).
        return Scenario(name, mode, names, seconds, report_ms=10, workload="onoff",
                        on_off=onoff_schedule(tenants), size="4M")
    if workload == "many":
        many = many_tenants(link_bps)
        return Scenario(name, mode, [t.name for t in many], seconds, workload="many",
                        policy=[t.name for t in many])
    if workload == "training":
        return Scenario(name, mode, names, seconds, workload="training",
                        compute_ms=training_compute(tenants), size=TRAINING_SIZE)
    if workload in PLACED:
        return placed_scenario(name, workload, mode, tenants, seconds)
    if workload in FABRIC_WORKLOADS:
        return fabric_scenario(name, workload, mode, tenants, seconds)
    if workload == "rails":
        # Two NICs per node, one switch each: noisy crowds rail 0 next to tenant-a; tenant-b
        # has rail 1 to itself. Per-(tenant, device) allocation keeps tenant-a's guarantee on
        # rail 0 and gives tenant-b rail 1 whatever noisy does.
        a, noisy, b = rails_tenants(tenants)
        placement = {a.name: Placement("allreduce", (1, 2), rail=0),
                     noisy.name: Placement("allreduce", (1, 2), rail=0),
                     b.name: Placement("allreduce", (1, 2), rail=1)}
        return Scenario(name, mode, [a.name, b.name, noisy.name], seconds, workload="rails",
                        placement=placement)
    raise ValueError(f"unknown workload {workload!r}")


def standalone(tenants, seconds):
    return [Scenario(f"standalone-{t.name}", "none", [t.name], seconds, workload="standalone")
            for t in tenants]


RING_WORKLOADS = ("backlogged", "onoff", "many", "training")  # their "% of alone" baselines


def demo_scenarios(tenants, link_bps, seconds, modes, workloads):
    alone = max(4.0, seconds * 0.6)
    out = standalone(tenants, alone) if any(w in RING_WORKLOADS for w in workloads) else []
    for w in workloads:
        out += [workload_scenario(w, m, tenants, link_bps, seconds) for m in modes]
    return out


def bench_scenarios(tenants, link_bps, quick, modes, workloads):
    alone, contended, idle = (6, 10, 10) if quick else (10, 20, 20)
    guaranteed = [t for t in tenants if t.guarantee_bps > 0]
    out = []
    if any(w in RING_WORKLOADS for w in workloads):
        out += standalone(tenants, alone)
        out += [Scenario(f"standalone-capped-{t.name}", "tenantqos-rdma", [t.name], alone,
                         capped=t.name, workload="standalone") for t in guaranteed]
    if "many" in workloads:
        many = many_tenants(link_bps)
        out += standalone(many, alone)
    if "training" in workloads:
        compute = training_compute(tenants)
        out += [Scenario(f"training-alone-{n}", "tenantqos-rdma", [n], contended,
                         capped=n, workload="training-alone", compute_ms={n: ms},
                         size=TRAINING_SIZE) for n, ms in compute.items()]
    for w in workloads:
        # The allocator's failover is tenantqos's alone (the peers have no allocator).
        shown = [m for m in modes if w != "fabric-failover" or m.startswith("tenantqos")]
        out += [workload_scenario(w, m, tenants, link_bps,
                                  contended * (1.5 if w in ("training", "fabric-failover") else 1))
                for m in shown]
    ring = any(w in RING_WORKLOADS for w in workloads)
    if guaranteed and "tenantqos-rdma" in modes and ring:
        out.append(Scenario("idle-wake-tenantqos-rdma", "tenantqos-rdma",
                            [t.name for t in tenants], idle, report_ms=10, workload="idle-wake",
                            on_off={guaranteed[0].name: "1500:1000:0"}))
    if "incast" in workloads:
        # Ingress reaction: tenant-a's incast wakes into noisy's (its receiver's guarantee).
        a, _ = placed_tenants(tenants)
        out += [placed_scenario(f"incast-wake-{m}", "incast-wake", m, tenants, idle,
                                on_off={a.name: INCAST_WAKE}, report_ms=10)
                for m in ("tenantqos-rdma", "tenantqos-tcp") if m in modes]
    return out


# The table ----------------------------------------------------------------------------------

def _fmt(v, spec="{:.2f}"):
    return spec.format(v) if v is not None else "-"


def cell(e, alone_bps, training, link_bps):
    """One tenant under one mode: busbw, % of alone, attainment p50/p1 over busy windows, cap
    conformance; training: iteration p50/p99 and p99 / alone."""
    if e is None:
        return "-"
    if training:
        p99, alone = e.get("iteration_p99_s"), e.get("iteration_alone_p99_s")
        if p99 is None:
            return f"{e['busbw_bps'] / 1e9:.3f} (backlogged)"
        ratio = f" {p99 / alone:.2f}x" if alone else ""
        return f"it {_fmt(e['iteration_p50_s'])}/{_fmt(p99)} s{ratio}"
    pct = f"{100 * e['busbw_bps'] / alone_bps:3.0f}%" if alone_bps else "   -"
    p50, p1, busy = analysis.target_attainment(e)
    att = (f"{_fmt(p50)}/{_fmt(p1)}" + ("" if busy else "*")
           if e["guarantee_bps"] > 0 else "    -    ")
    conf = _fmt(e.get("cap_conformance_max")) if e["limit_bps"] < link_bps else "-"
    return f"{e['busbw_bps'] / 1e9:.3f} {pct} {att} {conf}"


def print_table(results, link_bps, modes, workloads, tenants_of, placement_of=lambda w: None):
    """One block per workload: one row per tenant, a column group per mode. Placed workloads
    (their tenants on their own nodes): figures at the receiving nodes, no "% of alone" (the
    baseline is a two-node ring)."""
    r = {x["name"]: x for x in results}
    width = 27
    say("")
    say(f"Per-tenant results on a shared {link_bps / 1e9:g} Gbit/s link, per mode: busbw "
        "(Gbit/s), % of alone, attainment p50/p1 over busy 100 ms windows with demand "
        "(delivered / guarantee at the receiving nodes; * over all windows with demand, when "
        "fewer than half were busy), cap conformance (max delivered or sent / limit); training: "
        "iteration time p50/p99 and p99 / alone at its guarantee. Last row: link utilisation "
        "(and while demand exceeded the link).")
    for w in workloads:
        shown = [m for m in modes if scenario_name(w, m) in r]
        if not shown:
            continue
        placed = placement_of(w)
        where = "" if w in FABRIC_WORKLOADS else "; figures at the receiving nodes"
        say(f"\n[{w}]" + ("  (on/off tenants send 30 % of the time: % of alone is of a "
                           "tenant running throughout)" if w == "onoff" else "") +
            (f"  ({placed}{where})" if placed else ""))
        head = f"{'tenant':<9} {'g/l Gbit/s':>11} |" + "".join(f" {m:^{width}} |" for m in shown)
        say(head)
        say("-" * len(head))
        for t in tenants_of(w):
            alone = None if placed else r.get(f"standalone-{t.name}")
            alone_bps = alone["tenants"][0]["busbw_bps"] if alone and alone["tenants"] else None
            row = f"{t.name:<9} {t.guarantee_bps / 1e9:5.3f}/{t.limit_bps / 1e9:5.3f} |"
            for m in shown:
                sc = r[scenario_name(w, m)]
                if sc.get("skipped"):
                    row += f" {'not run' if w in FABRIC_WORKLOADS else 'skipped':^{width}} |"
                    continue
                e = next((x for x in sc["tenants"] if x["name"] == t.name), None)
                row += f" {cell(e, alone_bps, w == 'training', link_bps):^{width}} |"
            say(row)
        util = f"{'util. (demand > link)':<21} |"
        for m in shown:
            sc = r[scenario_name(w, m)]
            u, ud = sc.get("link_utilization"), sc.get("utilization_over_demand")
            util += f" {_fmt(u, '{:.3f}') + ' (' + _fmt(ud, '{:.3f}') + ')':^{width}} |"
        say(util)
    skipped = [x for x in results if x.get("skipped")]
    for x in skipped:
        say(f"{'not run' if x['workload'] in FABRIC_WORKLOADS else 'skipped'}: {x['name']}: "
            f"{x['skipped']}")


# Targets ------------------------------------------------------------------------------------

def reaction_targets(line, tag, sc, where=""):
    """The reaction targets of an on/off or wake scenario (<= 20 ms p50); `where`: at the
    sleeper's receiver (the ingress reaction)."""
    for tenant, rx in sorted(sc.get("reaction_ms", {}).items()):
        if "idle_to_others_p50" in rx:
            line(rx["idle_to_others_p50"] <= 20,
                 f"{tag}: others{where} use {tenant}'s idle share in "
                 f"{rx['idle_to_others_p50']:.1f} ms p50 (<= 20 ms)")
        if "wake_to_guarantee_p50" in rx:
            line(rx["wake_to_guarantee_p50"] <= 20,
                 f"{tag}: {tenant} waking has its guarantee{where} in "
                 f"{rx['wake_to_guarantee_p50']:.1f} ms p50 (<= 20 ms, {rx.get('cycles', 0)} "
                 "cycles)")


SPINE_UTIL, LINKS_UTIL = "the spine's", "receiving links'"


def fabric_reaction_targets(line, tag, sc):
    """fabric-onoff: a demand change on the spine reaches the caps within FABRIC_REACTION_MS
    p50, measured end to end on the spine (the agents' report, the allocator's round, the caps'
    stream, the buckets, the traffic): the caps' own latency is at most this."""
    caps = sc.get("caps_reaction_ms")
    if caps and "error" in caps:
        line(False, f"{tag}: a demand change reaching the caps: not measured: {caps['error']}")
    for tenant, c in sorted((caps or {}).items()):
        if tenant == "error":
            continue
        line(c["p50"] is not None and c["p50"] <= FABRIC_REACTION_MS,
             f"{tag}: {tenant}'s demand change reaches its caps in "
             f"{_fmt(c['p50'], '{:.0f}')} ms p50 (<= {FABRIC_REACTION_MS} ms; {c['edges']} "
             f"edges, the agents' caps scraped every {c['scrape_ms']:.0f} ms)")
    for tenant, rx in sorted(sc.get("reaction_ms", {}).items()):
        if "idle_to_others_p50" in rx:
            line(rx["idle_to_others_p50"] <= FABRIC_REACTION_MS,
                 f"{tag}: others use {tenant}'s idle share of the spine in "
                 f"{rx['idle_to_others_p50']:.1f} ms p50 (<= {FABRIC_REACTION_MS} ms, demand "
                 "change to caps, end to end)")
        if "wake_to_guarantee_p50" in rx:
            line(rx["wake_to_guarantee_p50"] <= FABRIC_REACTION_MS,
                 f"{tag}: {tenant} waking has its guarantee on the spine in "
                 f"{rx['wake_to_guarantee_p50']:.1f} ms p50 (<= {FABRIC_REACTION_MS} ms, "
                 f"{rx.get('cycles', 0)} cycles, end to end)")


TARGET_WORKLOADS = RING_WORKLOADS + tuple(PLACED) + FABRIC_WORKLOADS + ("rails",)


def check_targets(results, reaction):
    """Prints issues 16's and 20's targets for tenantqos (both modes) in every workload as
    PASS/MISS lines and, for every other mode, the properties it violated (or that it violated
    none); returns the number of tenantqos targets missed."""
    missed = 0

    def line(ok, text):
        nonlocal missed
        missed += 0 if ok else 1
        say(f"  [{'PASS' if ok else 'MISS'}] {text}")

    say("")
    say("Targets (issues 16, 20, 21), with tenantqos (attainment over busy windows at the "
        "receiving nodes, on the spine for the fabric workloads; cap conformance at either end):")
    r = {x["name"]: x for x in results}
    for sc in results:
        mode = sc.get("mode", "")
        if not mode.startswith("tenantqos") or sc.get("workload") not in (
                TARGET_WORKLOADS + ("incast-wake",)):
            continue
        tag = f"{sc['workload']}/{mode}"
        fabric = sc["workload"] in FABRIC_WORKLOADS
        if sc.get("skipped"):
            if fabric:  # the allocator's targets are not met by a run that could not happen
                line(False, f"{tag}: not run: {sc['skipped']}")
            continue
        on = " on the spine" if fabric else ""
        if sc["workload"] == "incast-wake":  # the ingress reaction alone
            reaction_targets(line, tag, sc, " at its receiver")
            continue
        for e in sc["tenants"]:
            if e["guarantee_bps"] <= 0:
                continue
            if e.get("iteration_p99_s") is not None:
                alone = e.get("iteration_alone_p99_s")
                if alone:
                    ratio = e["iteration_p99_s"] / alone
                    line(ratio <= analysis.ITERATION_RATIO,
                         f"{tag}: {e['name']} iteration p99 {e['iteration_p99_s']:.3f} s = "
                         f"{ratio:.3f} x alone at its guarantee (<= {analysis.ITERATION_RATIO})")
                continue
            p50, p1, busy = analysis.target_attainment(e)
            if p50 is None:
                continue
            busy_n = e.get("busy_windows_with_demand")
            demand_n = e.get("contended_windows_with_demand", e.get("windows_with_demand"))
            counts = (f"{busy_n} busy of {demand_n} contended windows with demand"
                      if demand_n is not None else f"{sc.get('busy_windows', 0)} busy windows")
            other = (f"over all windows with demand {_fmt(e.get('attainment_p50'), '{:.3f}')}/"
                     f"{_fmt(e.get('attainment_p1'), '{:.3f}')}" if busy else
                     f"too few busy windows to excuse the others (the links were left idle); "
                     f"over the busy ones {_fmt(e.get('attainment_p50_link_busy'), '{:.3f}')}/"
                     f"{_fmt(e.get('attainment_p1_link_busy'), '{:.3f}')}")
            line(p50 >= analysis.ATTAINMENT_P50 and p1 >= analysis.ATTAINMENT_P1,
                 f"{tag}: {e['name']} attainment{on} p50 {p50:.3f} (>= {analysis.ATTAINMENT_P50}), "
                 f"p1 {p1:.3f} (>= {analysis.ATTAINMENT_P1}) over "
                 f"{'the busy windows' if busy else 'all windows with demand'} ({counts}); "
                 f"{other}")
        caps = [e for e in sc["tenants"] if e["cap_conformance_max"] is not None
                and e["limit_bps"] < sc.get("link_bps", 0)]
        worst = max(caps, key=lambda e: e["cap_conformance_max"]) if caps else None
        if worst:
            line(worst["cap_conformance_max"] <= analysis.CAP_MAX,
                 f"{tag}: cap conformance max {worst['cap_conformance_max']:.3f} "
                 f"({worst['name']}; {'on the spine' if fabric else 'received'} "
                 f"{_fmt(worst.get('cap_conformance_rx_max'), '{:.3f}')}"
                 f", sent {_fmt(worst.get('cap_conformance_tx_max'), '{:.3f}')}; "
                 f"<= {analysis.CAP_MAX})")
        if sc.get("utilization_over_demand") is not None:
            line(sc["utilization_over_demand"] >= analysis.UTILIZATION_MIN,
                 f"{tag}: {SPINE_UTIL if fabric else LINKS_UTIL} utilisation while "
                 "demand exceeded them "
                 f"{sc['utilization_over_demand']:.3f} (>= {analysis.UTILIZATION_MIN})")
        if sc["workload"] == "backlogged":
            for e in sc["tenants"]:
                capped = r.get(f"standalone-capped-{e['name']}")
                if not capped or e["guarantee_bps"] <= 0 or not capped["tenants"]:
                    continue
                base = capped["tenants"][0]["busbw_bps"]
                if base > 0:
                    ratio = e["busbw_bps"] / base
                    line(ratio >= 0.97, f"{tag}: {e['name']} busbw contended / alone capped at "
                         f"its guarantee = {ratio:.3f} (>= 0.97)")
        fo = sc.get("failover")
        if fo:
            worst = max(fo["longest_below_guarantee_ms"].items(), key=lambda x: x[1],
                        default=(None, 0))
            take = (f"{fo['takeover_ms']:.0f} ms" if fo["takeover_ms"] is not None else
                    "no standby took over")
            line(fo["takeover_ms"] is not None and worst[1] <= fo["fallback_ms"],
                 f"{tag}: active allocator killed (-9): a standby active after {take}; the "
                 f"longest time a tenant had < {analysis.ATTAINMENT_P1} x its guarantee on the "
                 f"spine after it: {worst[1]:.0f} ms ({worst[0]}; <= the fallback window "
                 f"{fo['fallback_ms']} ms)")
        if fabric:
            fabric_reaction_targets(line, tag, sc)
        else:
            reaction_targets(line, tag, sc)
    for key, label in (("idle_to_others_p50", "others reflect an idle tenant"),
                       ("wake_to_guarantee_p50", "a waking tenant has its guarantee")):
        if key in reaction:
            line(reaction[key] <= 20,
                 f"idle-wake: {label} in {reaction[key]:.1f} ms p50 (<= 20 ms)")

    say("")
    say("What the other modes violate (the same targets):")
    for sc in results:
        if sc.get("mode", "").startswith("tenantqos") or sc.get("workload") not in (
                TARGET_WORKLOADS):
            continue
        tag = f"{sc['workload']}/{sc['mode']}"
        if sc.get("skipped"):
            say(f"  {tag}: skipped ({sc['skipped']})")
            continue
        v = sc.get("violations", [])
        if not v:
            say(f"  {tag}: violated none (a finding: this mode met every target here)")
            continue
        by = {}
        for x in v:
            by.setdefault(x["property"], []).append(
                (f"{x['tenant']} " if x["tenant"] else "") + f"{x['measure']} {x['figure']:.3f}")
        say(f"  {tag}: violates " + "; ".join(f"{p} ({', '.join(f)})" for p, f in by.items()))
    return missed


def plot_grid(modes, workloads):
    """Rows = modes, columns = workloads, of scenario names (the throughput PNG's panels)."""
    return [[scenario_name(w, m) for w in workloads] for m in modes]

