"""Traffic per tenant at both ends of every link, counted by the kernel, independent of the
programs under test.

  received  each node namespace gets an nftables table with one counting rule per (tenant DSCP,
            NIC) on the input hook: packets delivered to local sockets, i.e. after the link
  sent      the fabric namespace gets a bridge table with one counting rule per (tenant DSCP,
            switch port) on the bridge's prerouting hook: what each node's NIC put on the
            wire, as it enters the switch (after the node's own tc, before any switch queue)
  spine     in a leaf/spine fabric, the same table counts per (tenant DSCP, direction) what
            crossed the spine link, as it enters the far leaf (after the uplink port's queue)

A persistent `nft -j -i` per namespace answers "list table" every tick, so a sample costs a pipe
round trip, not a fork. Payload is estimated as IP bytes - 52 x packets (IPv4 20 B + TCP 32 B
with timestamps; a GSO/GRO packet is counted once with one set of headers), which matches what
the plugin paces. The tenants' ranks carry their DSCP in every mode (in the no-tenantqos mode
through TENANTQOS_DSCP, which marks without pacing).

Timing: each namespace's counters carry their own timestamp, the midpoint of that request and
its answer (the kernel reads the counters in between), so a late answer from one namespace or a
meter thread that was not scheduled does not move the others' window edges. Sample intervals
are only approximately the tick; analysis.rebin re-bins them into fixed windows.
"""
import json
import subprocess
import threading
import time

TABLE = "tqbedmeter"
HEADER_BYTES = 52
SWITCH = "switch"  # the key of the fabric namespace's samples
SPINE = "spine"    # the node field of the spine's counters (rail field: the direction)


def _comment(tenant, node, rail):
    return f"{tenant}|{node}|{rail}"


class DscpMeter:
    def __init__(self, topo, dscp_by_tenant, interval_s):
        self.topo = topo
        self.dscp = dict(dscp_by_tenant)
        self.interval_s = interval_s
        # Per tick: {namespace key: (wall time s, {(tenant, node, rail): (bytes, packets)})}
        self.samples = []
        self._procs = {}
        self._stop = threading.Event()
        self._thread = None
        self.error = None

    def _netns(self, key):
        return self.topo.switch if key == SWITCH else self.topo.node_ns(key)

    def _nft(self, key, *args):
        subprocess.run(["ip", "netns", "exec", self._netns(key), "nft"] + list(args),
                       check=True, capture_output=True, text=True, timeout=10)

    def start(self):
        for i in range(1, self.topo.nodes + 1):
            self._nft(i, "add", "table", "inet", TABLE)
            self._nft(i, "add", "chain", "inet", TABLE, "in",
                      "{ type filter hook input priority 0; policy accept; }")
            for r, dev in enumerate(self.topo.node_devs()):
                for tenant, dscp in self.dscp.items():
                    self._nft(i, "add", "rule", "inet", TABLE, "in", "iifname", dev, "ip", "dscp",
                              str(dscp), "counter", "comment", f'"{_comment(tenant, i, r)}"')
        self._nft(SWITCH, "add", "table", "bridge", TABLE)
        self._nft(SWITCH, "add", "chain", "bridge", TABLE, "pre",
                  "{ type filter hook prerouting priority 0; policy accept; }")
        for link in self.topo.links.values():
            for tenant, dscp in self.dscp.items():
                self._nft(SWITCH, "add", "rule", "bridge", TABLE, "pre", "iifname", link.port.dev,
                          "ip", "dscp", str(dscp), "counter", "comment",
                          f'"{_comment(tenant, link.node, link.rail)}"')
        if self.topo.spine:
            # What crossed the spine in direction d, as it enters the far leaf from the cable
            # (after the near leaf's uplink port: what the spine delivered).
            for d, dev in enumerate(self.topo.spine.arrive_dev):
                for tenant, dscp in self.dscp.items():
                    self._nft(SWITCH, "add", "rule", "bridge", TABLE, "pre", "iifname", dev,
                              "ip", "dscp", str(dscp), "counter", "comment",
                              f'"{_comment(tenant, SPINE, d)}"')
        for key in list(range(1, self.topo.nodes + 1)) + [SWITCH]:
            self._procs[key] = subprocess.Popen(
                ["ip", "netns", "exec", self._netns(key), "nft", "-j", "-i"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                text=True, bufsize=1)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _read(self, key):
        """(wall time of the counters, {(tenant, node, rail): (bytes, packets)})."""
        p = self._procs[key]
        family = "bridge" if key == SWITCH else "inet"
        t_ask = time.time()
        p.stdin.write(f"list table {family} {TABLE}\n")
        p.stdin.flush()
        line = p.stdout.readline()
        t_got = time.time()
        out = {}
        for obj in json.loads(line).get("nftables", []):
            rule = obj.get("rule")
            if not rule or "comment" not in rule:
                continue
            tenant, node, rail = rule["comment"].rsplit("|", 2)
            node = node if node == SPINE else int(node)
            for e in rule.get("expr", []):
                if "counter" in e:
                    out[(tenant, node, int(rail))] = (e["counter"]["bytes"],
                                                           e["counter"]["packets"])
        return ((t_ask + t_got) / 2, out)

    def _run(self):
        next_t = time.monotonic()
        try:
            while not self._stop.is_set():
                self.samples.append({k: self._read(k) for k in self._procs})
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
        subprocess.run(["ip", "netns", "exec", self.topo.switch, "nft", "delete", "table",
                        "bridge", TABLE], capture_output=True, timeout=10)

    def _series(self, key, counter):
        out = []
        prev = None
        for sample in self.samples:
            if key not in sample:
                continue
            t, counters = sample[key]
            cur = counters.get(counter)
            if cur is None:
                continue
            if prev is not None and t > prev[0]:
                db = cur[0] - prev[1][0]
                dp = cur[1] - prev[1][1]
                out.append((t, t - prev[0], max(0, db - HEADER_BYTES * dp) * 8 / (t - prev[0])))
            prev = (t, cur)
        return out

    def series(self, tenant, node, rail=0):
        """[(window end, window length, payload bits/s)] the tenant received on `node`'s NIC
        `rail`."""
        return self._series(node, (tenant, node, rail))

    def sent_series(self, tenant, node, rail=0):
        """... that `node`'s NIC `rail` sent for the tenant (counted as it entered the switch)."""
        return self._series(SWITCH, (tenant, node, rail))

    def spine_series(self, tenant, direction):
        """... that crossed the spine in `direction` (topology.SpineLink.DIRECTIONS)."""
        return self._series(SWITCH, (tenant, SPINE, direction))
