"""Figures of merit from the ranks' interval reports (issue 5):

  attainment   = delivered / min(guarantee, demand) per window; tenants are backlogged in the
                 contended scenarios, so demand is unbounded and this is delivered / guarantee
  conformance  = delivered / limit per window (<= 1.01 is the target)
  utilisation  = bytes the emulated link carried / (link rate x time), from the switch port's
                 counters (wire bytes: headers included)

"Delivered" is the payload a rank received per window: on a two-node ring, what the
predecessor's node sent that tenant over its uplink. Each rank gives one direction."""
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


def tenant_figures(series_list, guarantee_bps, limit_bps, t0, t1):
    """Per-tenant figures over [t0, t1] from one series per direction (rank)."""
    rates = []
    for s in series_list:
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
    n = int((t1 - t0) // width_s)
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


def first_time(series, t_from, predicate, horizon_s):
    """End time of the first window starting at/after t_from (within horizon) whose rate
    satisfies predicate; None if none."""
    for end, dt, r in series:
        if end - dt < t_from - 1e-3 or end > t_from + horizon_s:
            continue
        if predicate(r):
            return end
    return None
