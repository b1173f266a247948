"""The emulated cluster: node namespaces cabled to switches, and the switches' emulated ports.

Objects, so that a switch hierarchy is an extension rather than a rewrite:

  Port      a switch's egress queue towards one cable end: an HTB class at the link rate
            feeding a byte-bounded FIFO (the switch's buffer for that port). Peer modes
            (peers.py) replace the FIFO by their classes, each with a FIFO of the same bound.
  Switch    a Linux bridge in the fabric namespace (`<prefix>-switch`). All switches live in
            that one namespace (with tenantqos-policyd), so cabling two of them is a veth pair
            whose ends are both there.
  NodeLink  a node's NIC (`eth<rail>` in the node's namespace) cabled to a port of a switch;
            the port towards the node is emulated (the node's side is not: see docs/testbed.md,
            "Limits of the emulation").

Two shapes: one switch per rail (rail-optimised: rail r of every node on switch r), nodes 1..N
on each; or, with `fabric=True`, the article's leaf/spine fabric: nodes 1-2 under leaf switch 1
(`br0`), nodes 3-4 under leaf switch 2 (`br1`), the two leaves joined by one spine link (a veth
pair `<prefix>s0` / `<prefix>s1`) with an emulated Port at each end: the leaves' uplink ports,
one per direction, at the spine rate (default the node link rate: 2:1 oversubscribed). Every
node keeps its address in one subnet (the leaves bridge it), so traffic between the leaves
crosses the spine and nothing else changes for the nodes.
"""
import os
import re

from .procs import run

SUBNET = "10.213.0"        # only ever used inside the namespaces this module creates (rail 0)
SWITCH_ADDR = f"{SUBNET}.254"
HOST_ADDR = f"{SUBNET}.253"  # root-namespace port, so the host can reach the agents' /metrics
MAX_NODES = 8
MAX_RAILS = 2
FABRIC_NODES = 4  # the leaf/spine fabric: two leaves of two nodes
# The emulated ports' buffer, as time at the link rate (docs/testbed.md, "Link emulation").
DEFAULT_BUFFER_S = 0.004
RTO_MIN = "5ms"  # the nodes' TCP minimum RTO on the fabric's routes (see _cable)


def rate_to_bits(text):
    """'1gbit', '1Gbps', '500mbit', '100M' -> bits per second."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*([kmgt]?)(bit|bps|b)?\s*", text.lower())
    if not m:
        raise ValueError(f"invalid rate {text!r} (examples: 1gbit, 500mbit)")
    mult = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}[m.group(2)]
    return int(float(m.group(1)) * mult)


def buffer_to_bytes(text, link_bits):
    """A port buffer: a time at the link rate ('2ms', '500us') or a size ('256KiB', '300KB',
    '250000') -> bytes (at least two full-size frames)."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*(ms|us|s|b|kb|kib|mb|mib)?\s*", text.lower())
    if not m or float(m.group(1)) <= 0:
        raise ValueError(f"invalid port buffer {text!r} (examples: 2ms, 500us, 256KiB, 300KB)")
    v, unit = float(m.group(1)), m.group(2) or "b"
    if unit in ("s", "ms", "us"):
        seconds = v * {"s": 1, "ms": 1e-3, "us": 1e-6}[unit]
        out = int(link_bits / 8 * seconds)
    else:
        out = int(v * {"b": 1, "kb": 1e3, "kib": 1024, "mb": 1e6, "mib": 1 << 20}[unit])
    return max(out, 2 * 1514)


class Port:
    """A switch egress port: `dev` in namespace `netns`, an HTB class 1:1 at `rate_bits`
    (rate = ceil, 1 ms burst: the serialisation of the link) feeding a bfifo of `buffer_bytes`.

    bfifo counts bytes, so a veth/bridge GSO segment of 64 KB takes 64 KB of the buffer as it
    would on a switch (a 1000-packet pfifo held up to ~64 MB of them)."""

    def __init__(self, netns, dev, rate_bits, buffer_bytes, label):
        self.netns = netns
        self.dev = dev
        self.rate_bits = int(rate_bits)
        self.buffer_bytes = int(buffer_bytes)
        self.label = label  # for messages: "switch0 port towards node3"

    def burst(self, rate_bits=None):
        """1 ms at the rate (>= 2 frames), so the shaper holds its rate at high speeds."""
        return max(int(rate_bits or self.rate_bits) // 8 // 1000, 3028)

    def fifo(self, parent, handle):
        """The tc command adding this port's FIFO under class `parent`."""
        return ["tc", "qdisc", "add", "dev", self.dev, "parent", parent, "handle", handle,
                "bfifo", "limit", str(self.buffer_bytes)]

    def build(self):
        rate, burst = f"{self.rate_bits}bit", str(self.burst())
        run(["tc", "qdisc", "add", "dev", self.dev, "root", "handle", "1:", "htb", "default",
             "1"], netns=self.netns)
        run(["tc", "class", "add", "dev", self.dev, "parent", "1:", "classid", "1:1", "htb",
             "rate", rate, "ceil", rate, "burst", burst, "cburst", burst], netns=self.netns)
        run(self.fifo("1:1", "10:"), netns=self.netns)

    def reset(self):
        """Back to the plain port (after a peer mode replaced its tree)."""
        run(["tc", "qdisc", "del", "dev", self.dev, "root"], netns=self.netns, check=False)
        self.build()

    def stats(self):
        """(bytes, packets, drops) the port sent: bytes and packets of the link class 1:1, drops
        of every class (a peer mode's leaves).

        Parses `tc -s class show` text: iproute2 6.1 prints classes as text even with -j."""
        r = run(["tc", "-s", "class", "show", "dev", self.dev], netns=self.netns)
        cur = None
        link = None
        drops = 0
        for line in r.stdout.splitlines():
            if line.startswith("class "):
                cur = line.split()[2]
            m = re.match(r"\s*Sent (\d+) bytes (\d+) pkt \(dropped (\d+)", line)
            if m:
                drops += int(m.group(3))
                if cur == "1:1":
                    link = (int(m.group(1)), int(m.group(2)))
        if link is None:
            raise RuntimeError(f"no class 1:1 on {self.dev} in {self.netns} ({self.label})")
        return link[0], link[1], drops


class Switch:
    """A bridge in the fabric namespace, with its emulated ports."""

    def __init__(self, netns, index):
        self.netns = netns
        self.index = index
        self.bridge = f"br{index}"
        self.ports = []

    def create(self):
        run(["ip", "-n", self.netns, "link", "add", self.bridge, "type", "bridge"])
        run(["ip", "-n", self.netns, "link", "set", self.bridge, "up"])

    def attach(self, dev):
        run(["ip", "-n", self.netns, "link", "set", dev, "master", self.bridge])
        run(["ip", "-n", self.netns, "link", "set", dev, "up"])


class NodeLink:
    """Node `node`'s NIC eth<rail> cabled to `switch`; `port` is the switch's port towards it."""

    def __init__(self, node, rail, node_ns, switch, port):
        self.node = node
        self.rail = rail
        self.node_ns = node_ns
        self.dev = f"eth{rail}"
        self.switch = switch
        self.port = port
        self.addr = f"10.213.{rail}.{node}"
        self.ingress_ifb = f"ifb{rail}"  # where a peer mode shapes what the NIC received


class SpineLink:
    """The cable between the two leaves: `ports[d]` is the uplink port that sends direction d
    (0: leaf 1 -> leaf 2, at leaf 1's end of the cable; 1: leaf 2 -> leaf 1). What crossed
    direction d is counted as it enters the far leaf from the cable (`arrive_dev[d]`)."""

    DIRECTIONS = ("leaf1->leaf2", "leaf2->leaf1")

    def __init__(self, prefix, netns, rate_bits, buffer_bytes):
        self.devs = (f"{prefix}s0", f"{prefix}s1")  # leaf 1's end, leaf 2's end
        self.ports = tuple(Port(netns, dev, rate_bits, buffer_bytes,
                                f"leaf{d + 1} uplink port ({self.DIRECTIONS[d]})")
                           for d, dev in enumerate(self.devs))
        self.arrive_dev = (self.devs[1], self.devs[0])
        self.rate_bits = int(rate_bits)


class Topology:
    """`nodes` namespaces with `rails` NICs each; rail r of every node on switch r; or, with
    `fabric`, 4 nodes under two leaves joined by one spine link of `spine_bits` per direction."""

    def __init__(self, prefix="tqbed", nodes=2, link_bits=1_000_000_000, buffer_bytes=None,
                 rails=1, fabric=False, spine_bits=None):
        if not re.fullmatch(r"[a-z][a-z0-9]{0,7}", prefix):
            raise ValueError("prefix: 1-8 lowercase letters/digits, starting with a letter")
        if not 2 <= nodes <= MAX_NODES:
            raise ValueError(f"nodes: 2..{MAX_NODES}")
        if not 1 <= rails <= MAX_RAILS:
            raise ValueError(f"rails: 1..{MAX_RAILS}")
        if fabric and (nodes != FABRIC_NODES or rails != 1):
            raise ValueError(f"the leaf/spine fabric has {FABRIC_NODES} nodes and one rail "
                             f"(asked: {nodes} nodes, {rails} rails)")
        self.prefix = prefix
        self.nodes = nodes
        self.rails = rails
        self.link_bits = link_bits
        self.buffer_bytes = (buffer_bytes if buffer_bytes is not None
                             else buffer_to_bytes(f"{DEFAULT_BUFFER_S}s", link_bits))
        self.switch = f"{prefix}-switch"  # the fabric namespace: every switch, and policyd
        self.fabric = bool(fabric)
        # Rails: a switch per rail. Fabric: a switch per leaf (nodes 1-2, nodes 3-4).
        self.switches = [Switch(self.switch, r) for r in range(2 if fabric else rails)]
        self.spine = None
        if fabric:
            # The spine's buffer: the same time at its rate as the node ports'.
            sb = int(spine_bits or link_bits)
            self.spine = SpineLink(prefix, self.switch, sb,
                                   max(int(self.buffer_bytes * sb / link_bits), 2 * 1514))
            for d in (0, 1):
                self.switches[d].ports.append(self.spine.ports[d])
        self.links = {}  # (node, rail) -> NodeLink
        for i in range(1, nodes + 1):
            for r in range(rails):
                sw = self.switches[self.leaf_of(i) if fabric else r]
                port = Port(self.switch, self.switch_port(i, r), link_bits, self.buffer_bytes,
                            f"switch{sw.index} port towards node{i}")
                sw.ports.append(port)
                self.links[(i, r)] = NodeLink(i, r, self.node_ns(i), sw, port)
        self.created = False

    # Names -------------------------------------------------------------------------------
    def node_ns(self, i):
        return f"{self.prefix}-node{i}"

    def node_addr(self, i, rail=0):
        return f"10.213.{rail}.{i}"

    def switch_port(self, i, rail=0):
        return f"{self.prefix}p{i}" + (f"r{rail}" if rail else "")  # <= 15 chars

    node_dev = "eth0"  # the node's rail-0 NIC inside its namespace

    @staticmethod
    def leaf_of(i):
        """The fabric's leaf (0-based) of node i: nodes 1-2 -> 0, nodes 3-4 -> 1."""
        return (i - 1) // 2

    def leaf_groups(self):
        """[(group name, [node names])] of the fabric's leaves: the policy's `sharedLinks`
        groups of the leaf uplink class (the agents' node names)."""
        groups = {}
        for i in range(1, self.nodes + 1):
            groups.setdefault(self.leaf_of(i), []).append(f"node{i}")
        return [(f"leaf-{k + 1}", v) for k, v in sorted(groups.items())]

    def node_devs(self):
        return [f"eth{r}" for r in range(self.rails)]

    def link(self, node, rail=0):
        return self.links[(node, rail)]

    def ports(self):
        """Every emulated port, of every switch."""
        return [p for sw in self.switches for p in sw.ports]

    @property
    def host_port(self):
        return f"{self.prefix}h"

    def all_namespaces(self):
        return [self.switch] + [self.node_ns(i) for i in range(1, self.nodes + 1)]

    # Leftovers -----------------------------------------------------------------------------
    def leftovers(self):
        """Namespaces and host links of a previous run with this prefix."""
        out = []
        r = run(["ip", "netns", "list"], check=False)
        for line in r.stdout.splitlines():
            name = line.split()[0] if line.strip() else ""
            if name.startswith(self.prefix + "-"):
                out.append(f"netns {name}")
        r = run(["ip", "-o", "link", "show"], check=False)
        for line in r.stdout.splitlines():
            m = re.match(r"\d+: ([^:@]+)", line)
            if m and m.group(1) == self.host_port:
                out.append(f"link {m.group(1)}")
        return out

    def cleanup(self):
        """Removes everything with this prefix: first the processes still running inside our
        namespaces (a crashed run's agents or ranks; found by namespace, killed by PID), then
        the namespaces (which take their veths with them) and the host port."""
        import signal
        import time
        items = self.leftovers()
        pids = set()
        for item in items:
            kind, name = item.split(" ", 1)
            if kind == "netns":
                r = run(["ip", "netns", "pids", name], check=False)
                pids.update(int(p) for p in r.stdout.split() if p.isdigit())
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in list(pids):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pids.discard(pid)
            deadline = time.monotonic() + 5
            while pids and time.monotonic() < deadline:
                for pid in list(pids):
                    if not os.path.exists(f"/proc/{pid}"):
                        pids.discard(pid)
                time.sleep(0.05)
            if not pids:
                break
        for item in items:
            kind, name = item.split(" ", 1)
            if kind == "netns":
                run(["ip", "netns", "del", name], check=False)
            else:
                run(["ip", "link", "del", name], check=False)

    # Creation ------------------------------------------------------------------------------
    def create(self):
        left = self.leftovers()
        if left:
            raise RuntimeError("a previous run left these behind: " + ", ".join(left) +
                               "; remove them with --cleanup")
        self.created = True
        sw = self.switch
        run(["ip", "netns", "add", sw])
        run(["ip", "-n", sw, "link", "set", "lo", "up"])
        for s in self.switches:
            s.create()
        if self.spine:
            # The spine: one cable between the leaves, an emulated uplink port at each end.
            a, b = self.spine.devs
            run(["ip", "-n", sw, "link", "add", a, "type", "veth", "peer", "name", b])
            for d in (0, 1):
                self.switches[d].attach(self.spine.devs[d])
                self.spine.ports[d].build()
        run(["ip", "-n", sw, "addr", "add", f"{SWITCH_ADDR}/24", "dev", self.switches[0].bridge])
        for i in range(1, self.nodes + 1):
            ns = self.node_ns(i)
            run(["ip", "netns", "add", ns])
            run(["ip", "-n", ns, "link", "set", "lo", "up"])
            # A rank that pauses between allreduces keeps its congestion window, as training
            # clusters tune it and as RDMA does (no slow start at all): with the default (1),
            # every wake-up restarts from 10 segments behind a full FIFO, which the reaction
            # figures would charge to the allocator.
            run(["ip", "netns", "exec", ns, "sysctl", "-q", "-w",
                 "net.ipv4.tcp_slow_start_after_idle=0"])
            for r in range(self.rails):  # eth0 first: the plugin numbers devices in that order
                self._cable(self.links[(i, r)])
        # A port from the root namespace so people can curl the agents' /metrics.
        run(["ip", "link", "add", self.host_port, "type", "veth", "peer", "name", "hostp",
             "netns", sw])
        self.switches[0].attach("hostp")
        run(["ip", "addr", "add", f"{HOST_ADDR}/24", "dev", self.host_port])
        run(["ip", "link", "set", self.host_port, "up"])

    def _cable(self, link):
        """A veth pair from the node's NIC to its switch, and the switch's emulated port."""
        run(["ip", "link", "add", link.port.dev, "netns", self.switch, "type", "veth", "peer",
             "name", link.dev, "netns", link.node_ns])
        link.switch.attach(link.port.dev)
        run(["ip", "-n", link.node_ns, "addr", "add", f"{link.addr}/24", "dev", link.dev])
        run(["ip", "-n", link.node_ns, "link", "set", link.dev, "up"])
        # TCP's minimum retransmission timeout on the fabric, as data-centre TCP is tuned
        # (Linux's default 200 ms is meant for the WAN): with a shallow switch buffer a lost
        # tail would otherwise stall a flow for 200 ms, which the figures would charge to the
        # isolation mode rather than to the buffer.
        run(["ip", "-n", link.node_ns, "route", "replace", f"10.213.{link.rail}.0/24", "dev",
             link.dev, "src", link.addr, "rto_min", RTO_MIN])
        link.port.build()

    def restore_links(self):
        """Back to the plain emulated links after a peer mode (peers.py): every switch port's
        tree rebuilt, the nodes' NICs without a root or ingress qdisc (or ifb) of ours."""
        for port in self.ports():
            port.reset()
        for link in self.links.values():
            run(["tc", "qdisc", "del", "dev", link.dev, "root"], netns=link.node_ns, check=False)
            # caps' ingress half: the ingress qdisc and the ifb it redirected to.
            run(["tc", "qdisc", "del", "dev", link.dev, "ingress"], netns=link.node_ns,
                check=False)
            run(["ip", "link", "del", link.ingress_ifb], netns=link.node_ns, check=False)

    def port_stats(self, i, rail=0):
        """(bytes, packets, drops) sent by the switch towards node i on `rail`; i = "spine":
        sent over the spine in direction `rail` (SpineLink.DIRECTIONS)."""
        if i == "spine":
            return self.spine.ports[rail].stats()
        return self.links[(i, rail)].port.stats()
