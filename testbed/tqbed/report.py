"""The testbed's scenario lists, table and targets (README's main job, bench/isolation).

Scenario names: `standalone-<tenant>` (alone, no tenantqos: the "% of alone" baseline),
`standalone-capped-<tenant>` (alone, tenantqos RDMA-like, limit = guarantee), `contended-<mode>`
(the backlogged workload, today's names), `<workload>-<mode>` for the others (`onoff-caps`,
`many-tenantqos-tcp`, `training-weights`, ...), `training-alone-<tenant>` (the training shape
alone, capped at its guarantee) and `idle-wake-tenantqos-rdma`.
"""
from . import analysis
from .scenarios import Scenario, many_tenants, say

ONOFF = "300:700"  # ms on : ms off, the on/off workload's cycle
TRAINING_SIZE = "8M"  # allreduce per training iteration
TRAINING_COMPUTE_MS = (150, 250, 200)  # per guaranteed tenant, in order (desynchronised)


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
    raise ValueError(f"unknown workload {workload!r}")


def standalone(tenants, seconds):
    return [Scenario(f"standalone-{t.name}", "none", [t.name], seconds, workload="standalone")
            for t in tenants]


def demo_scenarios(tenants, link_bps, seconds, modes, workloads):
    alone = max(4.0, seconds * 0.6)
    out = standalone(tenants, alone)
    for w in workloads:
        out += [workload_scenario(w, m, tenants, link_bps, seconds) for m in modes]
    return out


def bench_scenarios(tenants, link_bps, quick, modes, workloads):
    alone, contended, idle = (6, 10, 10) if quick else (10, 20, 20)
    guaranteed = [t for t in tenants if t.guarantee_bps > 0]
    out = standalone(tenants, alone)
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
        out += [workload_scenario(w, m, tenants, link_bps,
                                  contended * (1.5 if w == "training" else 1)) for m in modes]
    if guaranteed and "tenantqos-rdma" in modes:
        out.append(Scenario("idle-wake-tenantqos-rdma", "tenantqos-rdma",
                            [t.name for t in tenants], idle, report_ms=10, workload="idle-wake",
                            on_off={guaranteed[0].name: "1500:1000:0"}))
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
    att = (f"{_fmt(e.get('attainment_p50_link_busy'))}/{_fmt(e.get('attainment_p1_link_busy'))}"
           if e["guarantee_bps"] > 0 else "    -    ")
    conf = _fmt(e.get("cap_conformance_max")) if e["limit_bps"] < link_bps else "-"
    return f"{e['busbw_bps'] / 1e9:.3f} {pct} {att} {conf}"


def print_table(results, link_bps, modes, workloads, tenants_of):
    """One block per workload: one row per tenant, a column group per mode."""
    r = {x["name"]: x for x in results}
    width = 27
    say("")
    say(f"Per-tenant results on a shared {link_bps / 1e9:g} Gbit/s link, per mode: allreduce "
        "busbw (Gbit/s), % of alone, attainment p50/p1 over busy 100 ms windows with demand "
        "(delivered / guarantee), cap conformance (max delivered / limit); training: iteration "
        "time p50/p99 and p99 / alone at its guarantee. Last row: link utilisation (and while "
        "demand exceeded the link).")
    for w in workloads:
        shown = [m for m in modes if scenario_name(w, m) in r]
        if not shown:
            continue
        say(f"\n[{w}]" + ("  (on/off tenants send 30 % of the time: % of alone is of a "
                           "tenant running throughout)" if w == "onoff" else ""))
        head = f"{'tenant':<9} {'g/l Gbit/s':>11} |" + "".join(f" {m:^{width}} |" for m in shown)
        say(head)
        say("-" * len(head))
        for t in tenants_of(w):
            alone = r.get(f"standalone-{t.name}")
            alone_bps = alone["tenants"][0]["busbw_bps"] if alone and alone["tenants"] else None
            row = f"{t.name:<9} {t.guarantee_bps / 1e9:5.3f}/{t.limit_bps / 1e9:5.3f} |"
            for m in shown:
                sc = r[scenario_name(w, m)]
                if sc.get("skipped"):
                    row += f" {'skipped':^{width}} |"
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
        say(f"skipped: {x['name']}: {x['skipped']}")


# Targets ------------------------------------------------------------------------------------

def check_targets(results, reaction):
    """Prints issue 16's targets for tenantqos (both modes) in every workload as PASS/MISS lines
    and, for every other mode, the properties it violated (or that it violated none); returns
    the number of tenantqos targets missed."""
    missed = 0

    def line(ok, text):
        nonlocal missed
        missed += 0 if ok else 1
        say(f"  [{'PASS' if ok else 'MISS'}] {text}")

    say("")
    say("Targets (issue 16), with tenantqos (attainment over busy windows):")
    r = {x["name"]: x for x in results}
    for sc in results:
        mode = sc.get("mode", "")
        if not mode.startswith("tenantqos") or sc.get("workload") not in (
                "backlogged", "onoff", "many", "training") or sc.get("skipped"):
            continue
        tag = f"{sc['workload']}/{mode}"
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
            p50, p1 = e.get("attainment_p50_link_busy"), e.get("attainment_p1_link_busy")
            if p50 is None:
                continue
            line(p50 >= analysis.ATTAINMENT_P50 and p1 >= analysis.ATTAINMENT_P1,
                 f"{tag}: {e['name']} attainment p50 {p50:.3f} (>= {analysis.ATTAINMENT_P50}), "
                 f"p1 {p1:.3f} (>= {analysis.ATTAINMENT_P1}) over {sc.get('busy_windows', 0)} "
                 f"busy windows; over all windows with demand "
                 f"{_fmt(e.get('attainment_p50'), '{:.3f}')}/"
                 f"{_fmt(e.get('attainment_p1'), '{:.3f}')}")
        caps = [e for e in sc["tenants"] if e["cap_conformance_max"] is not None
                and e["limit_bps"] < sc.get("link_bps", 0)]
        worst = max(caps, key=lambda e: e["cap_conformance_max"]) if caps else None
        if worst:
            line(worst["cap_conformance_max"] <= analysis.CAP_MAX,
                 f"{tag}: cap conformance max {worst['cap_conformance_max']:.3f} "
                 f"({worst['name']}, <= {analysis.CAP_MAX})")
        if sc.get("utilization_over_demand") is not None:
            line(sc["utilization_over_demand"] >= analysis.UTILIZATION_MIN,
                 f"{tag}: link utilisation while demand exceeded the link "
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
        for tenant, rx in sorted(sc.get("reaction_ms", {}).items()):
            if "idle_to_others_p50" in rx:
                line(rx["idle_to_others_p50"] <= 20,
                     f"{tag}: others use {tenant}'s idle share in "
                     f"{rx['idle_to_others_p50']:.1f} ms p50 (<= 20 ms)")
            if "wake_to_guarantee_p50" in rx:
                line(rx["wake_to_guarantee_p50"] <= 20,
                     f"{tag}: {tenant} waking has its guarantee in "
                     f"{rx['wake_to_guarantee_p50']:.1f} ms p50 (<= 20 ms)")
    for key, label in (("idle_to_others_p50", "others reflect an idle tenant"),
                       ("wake_to_guarantee_p50", "a waking tenant has its guarantee")):
        if key in reaction:
            line(reaction[key] <= 20,
                 f"idle-wake: {label} in {reaction[key]:.1f} ms p50 (<= 20 ms)")

    say("")
    say("What the other modes violate (the same targets):")
    for sc in results:
        if sc.get("mode", "").startswith("tenantqos") or sc.get("workload") not in (
                "backlogged", "onoff", "many", "training"):
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

