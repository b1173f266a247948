"""The cluster allocator's caps as the agents enforce them, sampled from the agents' /metrics
(`tenantqos_fabric_link_cap_bytes_per_second`, docs/agent.md) while a fabric on/off scenario
runs: how long a tenant's demand change takes to reach its caps (issue 21: <= 200 ms p50).

One thread scrapes every node's agent over HTTP from the host (the testbed's host port) every
`interval_s`; each sample carries the wall time of its answer. The figures come from the
scenario's known wall-clock on/off schedule (the demand edges), not from the traffic."""
import re
import threading
import time
import urllib.request

from . import analysis

METRIC = "tenantqos_fabric_link_cap_bytes_per_second"
_LINE = re.compile(METRIC + r"\{([^}]*)\}\s+(\S+)")
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def parse_caps(text):
    """{(tenant, link, direction): bytes/s} from a Prometheus text exposition."""
    out = {}
    for m in _LINE.finditer(text):
        labels = dict(_LABEL.findall(m.group(1)))
        try:
            out[(labels.get("tenant"), labels.get("link"), labels.get("direction"))] = \
                float(m.group(2))
        except ValueError:
            continue
    return out


class CapsProbe:
    def __init__(self, urls, interval_s=0.05, timeout_s=0.5):
        self.urls = dict(urls)  # node -> metrics URL
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.samples = []  # (wall time, node, {(tenant, link, direction): bytes/s})
        self.errors = 0
        self._stop = threading.Event()
        self._thread = None

    def start(self):
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        next_t = time.monotonic()
        while not self._stop.is_set():
            for node, url in self.urls.items():
                try:
                    with urllib.request.urlopen(url, timeout=self.timeout_s) as r:
                        text = r.read().decode("utf-8", "replace")
                    self.samples.append((time.time(), node, parse_caps(text)))
                except OSError:
                    self.errors += 1
            next_t += self.interval_s
            delay = next_t - time.monotonic()
            if delay > 0:
                self._stop.wait(delay)
            else:
                next_t = time.monotonic()

    def stop(self):
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)


def tenant_caps(samples, tenant):
    """[(wall time, the tenant's caps summed over its nodes' links and directions)], one point
    per scrape round (each node's latest sample so far)."""
    latest = {}
    out = []
    for t, node, caps in sorted(samples, key=lambda s: s[0]):
        latest[node] = sum(v for (ten, _, _), v in caps.items() if ten == tenant)
        out.append((t, sum(latest.values())))
    return out


def reaction_ms(series, edges, min_change=0.05):
    """Per demand edge (wall times): ms from the edge until the tenant's summed caps have moved
    at least half-way from their value at the edge to their value just before the next edge;
    edges after which the caps moved less than min_change (relative) are left out (no change to
    reach). Returns the list of delays."""
    out = []
    edges = sorted(edges)
    for k, e in enumerate(edges):
        nxt = edges[k + 1] if k + 1 < len(edges) else None
        before = [v for t, v in series if t <= e]
        window = [(t, v) for t, v in series if t > e and (nxt is None or t < nxt)]
        if not before or len(window) < 2:
            continue
        v0, v1 = before[-1], window[-1][1]
        if abs(v1 - v0) <= min_change * max(abs(v0), abs(v1), 1.0):
            continue
        half = v0 + (v1 - v0) / 2
        for t, v in window:
            if (v1 > v0 and v >= half) or (v1 < v0 and v <= half):
                out.append((t - e) * 1000)
                break
    return out


def schedule_edges(on_off, t0, t1):
    """The wall-clock times in [t0, t1] at which a tenant on "ON:OFF:PHASE" wakes or sleeps."""
    on, cycle, phase = analysis.parse_on_off(on_off)
    if phase is None:
        return []
    out = []
    k = int((t0 - phase) // cycle) - 1
    while True:
        start = phase + k * cycle
        if start > t1:
            break
        for e in (start, start + on):
            if t0 <= e <= t1:
                out.append(e)
        k += 1
    return out
