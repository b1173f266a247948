"""Figures of merit from the ranks' interval reports (issue 5):

  attainment   = delivered / min(guarantee, demand) per window; tenants are backlogged in the
                 contended scenarios, so demand is unbounded and this is delivered / guarantee
  conformance  = delivered / limit, and sent / limit, per window (<= 1.01 is the target)
  utilisation  = bytes the emulated link carried / (link rate x time), from the switch port's
                 counters (wire bytes: headers included)

"Delivered" is the payload a tenant received per window at one receiving node (one NIC),
counted by that node's kernel; "sent" the payload a node's NIC put on the wire for it, counted
as it entered the switch (meter.py). A tenant's figures pool the windows of all its receiving
nodes; its cap conformance is the worst of both ends."""
import math


def percentile(values, p):
    """Nearest-rank percentile (p in [0, 100]) of a non-empty list."""
    if not values:
        return float("nan")
    v = sorted(values)
    k = max(0, min(len(v) - 1, int(math.ceil(p / 100.0 * len(v))) - 1))
    return v[k]


def rate_series(records, field="rx_bytes"):
    """[(window end wall time s, window length s, bits/s)] from a rank's interval records."""
    out = []
    for rec in records:
        if rec.get("type") != "interval":
            continue
        dt = rec.get("interval_s", 0)
        if dt <= 0.001:
            continue
        out.append((rec["wall_ns"] / 1e9, dt, rec[field] * 8 / dt))
    return out


def windows_between(series, t0, t1):
    """Rates of windows lying entirely inside [t0, t1]."""
    return [r for (end, dt, r) in series if end - dt >= t0 - 1e-3 and end <= t1 + 1e-3]


def tenant_figures(series_list, guarantee_bps, limit_bps, t0, t1, width_s=None):
    """Per-tenant figures over [t0, t1] from one series per direction (rank).

    width_s: re-bin each series into fixed windows of this length first (rebin). Samples are
    never exactly one tick apart: a meter that was late for one tick sees 175 ms and then 25 ms,
    and the bytes of the 25 ms window are mostly the previous window's (up to 3x its rate in
    the figures when taken as they come). Re-binning spreads each interval's bytes over the
    time it covers. None: the series' own windows, as they come."""
    rates = []
    for s in series_list:
        if width_s:
            rates += rebin(s, width_s, t0, t1)
        else:
            rates += windows_between(s, t0, t1)
    fig = {"windows": len(rates),
           "mean_bps": sum(rates) / len(rates) if rates else 0.0}
    if guarantee_bps > 0 and rates:
        att = [r / guarantee_bps for r in rates]
        fig["attainment_p50"] = percentile(att, 50)
        fig["attainment_p1"] = percentile(att, 1)
    else:
        fig["attainment_p50"] = None
        fig["attainment_p1"] = None
    fig["cap_conformance_max"] = (max(rates) / limit_bps) if (rates and limit_bps > 0) else None
    return fig


def rebin(series, width_s, t0, t1):
    """Re-bins a (possibly finer) series into fixed windows [t0 + k*width, ...): bits/s each.
    Each input window's bytes are spread uniformly over its span."""
    # Not (t1 - t0) // width_s: in floating point 1.0 // 0.1 is 9.0, which drops a window.
    n = int(math.floor((t1 - t0) / width_s + 1e-9))
    bins = [0.0] * n
    for end, dt, r in series:
        start = end - dt
        bits = r * dt
        for k in range(max(0, int((start - t0) // width_s)), min(n, int((end - t0) // width_s) + 1)):
            lo, hi = t0 + k * width_s, t0 + (k + 1) * width_s
            overlap = min(hi, end) - max(lo, start)
            if overlap > 0:
                bins[k] += bits * overlap / dt
    return [b / width_s for b in bins]


def transitions(series, active_threshold_bps):
    """Times (window ends) at which a tenant went idle and woke, from its own send series."""
    offs, ons = [], []
    active = None
    for end, dt, r in series:
        now_active = r > active_threshold_bps
        if active is not None and now_active != active:
            (ons if now_active else offs).append(end - dt)
        active = now_active
    return offs, ons


def first_time(series, t_from, predicate, horizon_s, min_window_s=0.0, at_start=False):
    """End (at_start: start) time of the first window starting at/after t_from (within
    horizon), at least min_window_s long, whose rate satisfies predicate; None if none."""
    for end, dt, r in series:
        if end - dt < t_from - 1e-3 or end > t_from + horizon_s or dt < min_window_s:
            continue
        if predicate(r):
            return end - dt if at_start else end
    return None


def busy_mask(series_at, width_s, t0, t1, link_bps, threshold=0.9):
    """Per receiving end (a key of series_at: {end: [every tenant's series received there]}),
    per fixed window: True when all tenants together received at least threshold x link_bps
    there. A window below it is one in which the link itself went partly idle — every tenant
    short at once, which no allocation causes (on this 2-core host: ranks not scheduled) — as
    opposed to a tenant being starved by the others."""
    out = {}
    for end, series_list in series_at.items():
        total = None
        for s in series_list:
            b = rebin(s, width_s, t0, t1)
            total = b if total is None else [x + y for x, y in zip(total, b)]
        out[end] = [v >= threshold * link_bps for v in (total or [])]
    return out


def attainment_masked(series_list, guarantee_bps, width_s, t0, t1, mask):
    """(p50, p1) of attainment over the windows `mask` marks (one list per series, see
    busy_mask); (None, None) without a guarantee or without such windows."""
    if guarantee_bps <= 0:
        return None, None
    att = []
    for s, m in zip(series_list, mask):
        att += [r / guarantee_bps for r, on in zip(rebin(s, width_s, t0, t1), m) if on]
    return (percentile(att, 50), percentile(att, 1)) if att else (None, None)


def align_up(t, width_s):
    """The first multiple of width_s at or after t (windows on the wall clock's grid, so an
    on/off schedule's edges fall on window edges)."""
    return math.ceil(t / width_s - 1e-9) * width_s


def parse_on_off(text):
    """"ON_MS:OFF_MS[:PHASE_MS]" -> (on_s, cycle_s, phase_s or None)."""
    parts = [int(x) for x in text.split(":")]
    on, off = parts[0], parts[1]
    return on / 1000.0, (on + off) / 1000.0, (parts[2] / 1000.0 if len(parts) > 2 else None)


def on_windows(on_off, width_s, t0, t1):
    """Per fixed window [t0 + k*width, ...): True when a tenant on the wall-clock schedule
    `on_off` ("ON:OFF:PHASE", tenantqos-perf's --on-off) is in its on phase throughout (it starts
    allreduces then: it has demand). None: always on. A schedule without a phase runs from each
    rank's own start, which the testbed does not know: no window counts."""
    n = int(math.floor((t1 - t0) / width_s + 1e-9))
    if on_off is None:
        return [True] * n
    on, cycle, phase = parse_on_off(on_off)
    if phase is None:
        return [False] * n
    out = []
    for k in range(n):
        lo = (t0 + k * width_s - phase) % cycle
        out.append(lo + width_s <= on + 1e-6)
    return out


def iteration_times(ends_per_rank, t0, t1):
    """Training iteration times (s): the gaps between a rank's consecutive iteration ends
    (compute + allreduce, what the job feels), for gaps lying inside [t0, t1], every rank."""
    out = []
    for ends in ends_per_rank:
        e = sorted(x for x in ends if t0 <= x <= t1)
        out += [b - a for a, b in zip(e, e[1:])]
    return out


def utilization_over_demand(per_end, link_bps, width_s, t0, t1, wire):
    """Utilisation of the links into the receiving ends over the windows in which demand
    exceeded them.

    per_end: {receiving end: [(series, active_mask, demand_bps)]}: one entry per tenant that
    receives there, with what it received there, the windows it had demand in (on_windows),
    and what it may take there (min(limit, link): a limit holds per node and direction). A
    window counts at an end when its active tenants' demands sum above link_bps; its
    utilisation is the payload received there, as wire bits (wire(payload_bps)), over link_bps.
    Mean over those windows of every end; None if there were none (demand never exceeded a
    link)."""
    n = int(math.floor((t1 - t0) / width_s + 1e-9))
    vals = []
    for entries in per_end.values():
        demand = [sum(d for _, m, d in entries if m[k]) for k in range(n)]
        total = [0.0] * n
        for series, _, _ in entries:
            for k, r in enumerate(rebin(series, width_s, t0, t1)):
                total[k] += r
        vals += [wire(total[k]) / link_bps for k in range(n) if demand[k] > link_bps * 1.0001]
    return sum(vals) / len(vals) if vals else None


ATTAINMENT_P50, ATTAINMENT_P1, CAP_MAX, UTILIZATION_MIN, ITERATION_RATIO = (
    0.99, 0.95, 1.01, 0.95, 1.05)
# The busy-window filter excuses windows in which a receiving link went idle (the host not
# scheduling the ranks). It is trusted while most of a tenant's contended windows with demand
# (where the tenants with demand at that receiver could use more than its link) are busy; below
# that the link was left idle for another reason (an allocation that does not hand out the
# spare) and the tenant is judged over all its windows with demand.
MIN_BUSY_FRACTION = 0.5


def target_attainment(t):
    """(p50, p1, suffix) of the attainment a guaranteed tenant's targets judge: over the busy
    windows (suffix "_link_busy") when they are at least MIN_BUSY_FRACTION of its contended
    windows with demand (or the counts are unknown: results from before issue 20), else over
    all its windows with demand (suffix "")."""
    busy = t.get("busy_windows_with_demand")
    demand = t.get("contended_windows_with_demand", t.get("windows_with_demand"))
    if t.get("attainment_p50_link_busy") is not None and (
            not demand or busy is None or busy >= MIN_BUSY_FRACTION * demand):
        return t["attainment_p50_link_busy"], t["attainment_p1_link_busy"], "_link_busy"
    return t.get("attainment_p50"), t.get("attainment_p1"), ""


def violations(scenario):
    """What a scenario's figures violate, as [{"property", "tenant", "figure", "measure",
    "target"}]: "guarantee" (a guaranteed tenant's attainment p50 < 0.99 or p1 < 0.95,
    target_attainment's; training: iteration p99 > 1.05 x alone), "limit" (cap
    conformance > 1.01), "utilization" (< 0.95 while demand exceeded the link). The targets of
    issue 16, applied to every mode alike."""
    out = []

    def add(prop, tenant, figure, measure, target):
        out.append({"property": prop, "tenant": tenant, "figure": round(figure, 4),
                    "measure": measure, "target": target})

    for t in scenario.get("tenants", []):
        if t["guarantee_bps"] > 0:
            p99, alone = t.get("iteration_p99_s"), t.get("iteration_alone_p99_s")
            if p99 is not None and alone:
                if p99 > ITERATION_RATIO * alone:
                    add("guarantee", t["name"], p99 / alone, "iteration_p99 / alone",
                        f"<= {ITERATION_RATIO}")
            else:
                p50, p1, suffix = target_attainment(t)
                if p50 is not None and p50 < ATTAINMENT_P50:
                    add("guarantee", t["name"], p50, "attainment_p50" + suffix,
                        f">= {ATTAINMENT_P50}")
                elif p1 is not None and p1 < ATTAINMENT_P1:
                    add("guarantee", t["name"], p1, "attainment_p1" + suffix, f">= {ATTAINMENT_P1}")
        cap = t.get("cap_conformance_max")
        if cap is not None and cap > CAP_MAX and t["limit_bps"] < scenario.get("link_bps", 0):
            add("limit", t["name"], cap, "cap_conformance_max", f"<= {CAP_MAX}")
    u = scenario.get("utilization_over_demand")
    if u is not None and u < UTILIZATION_MIN:
        add("utilization", None, u, "utilization_over_demand", f">= {UTILIZATION_MIN}")
    return out
