"""Peer enforcement modes: what a platform team would deploy instead of tenantqos, emulated with
tc on the same link (docs/testbed.md, "Peer modes"). In every peer mode no agent runs and the
plugin is unpaced (as in `none`); only tc separates tenants. The switch modes configure every
switch port alike, in a leaf/spine fabric the leaves' uplink ports (the spine) included:

  caps      per-tenant cap at its limit on each node's NIC, both ways (the Kubernetes CNI
            bandwidth plugin's egress and ingress rates; Cilium Bandwidth Manager has the egress
            half): egress on the NIC, ingress on an ifb the NIC's received traffic is redirected
            to (as the CNI plugin does), i.e. after the switch port: rate = ceil = limit, no
            guarantee, no sharing logic
  priority  the NCCL_IB_SL recipe: strict priority by the tenants' order at the switch egress,
            no pacing. This kernel has no prio/ets qdisc: HTB classes keyed on DSCP, each with a
            minimal rate, ceil = link, HTB prio in the tenants' order (strict in borrowing)
  static    dedicated shares (a NIC per tenant, ETS without borrowing) at the switch egress:
            rate = ceil = guarantee; tenants without a guarantee share what is left
  weights   ETS-style weighted sharing at the switch egress: rates in proportion to the
            weights (summing to the link), ceil = link, no guarantees or limits

Rates are the wire rates that carry the payload rates (wire_rate, the rule tenantqos's own HTB
uses: tc/plan.h wireRateForPayload), so a share means the same payload rate in every mode and
what separates the modes is their mechanism, not header accounting.
"""
PEER_MODES = ("caps", "priority", "static", "weights")
MIN_RATE_FRACTION = 0.01   # priority: each class's floor, and the default class's rate
DEFAULT_MINOR = 0x2        # unmatched traffic (rendezvous, ARP): small rate, ceil = link, last
FIRST_MINOR = 0x10
QUANTUM_PER_WEIGHT = 80_000  # bytes, as tc/plan.h (>= one 64 KiB GSO packet)
HTB_LOWEST_PRIO = 7


def wire_rate(payload_bps, mtu=1500, link_header=14, net_header=52, segments_per_ack=2):
    """The wire rate (bits/s) that carries payload_bps of TCP payload: tc/plan.h's
    wireRateForPayload (full IPv4 TCP segments with timestamps, one ACK per two segments)."""
    k = segments_per_ack or 1
    wire = k * (mtu + link_header) + (link_header + net_header if segments_per_ack else 0)
    return payload_bps * wire / (k * (mtu - net_header))


class PeerClass:
    """One HTB class of a peer mode: rates in bits/s (wire), dscp None for the default class."""

    def __init__(self, minor, label, rate, ceil, prio=0, weight=1, dscp=None):
        self.minor = minor
        self.label = label
        self.rate = int(max(rate, 10_000))  # HTB needs a rate > 0 (tc/plan.h kMinClassRate)
        self.ceil = int(max(ceil, self.rate))
        self.prio = prio
        self.quantum = QUANTUM_PER_WEIGHT * max(1, min(weight, 50))
        self.dscp = dscp


def priority_order(tenants):
    """The tenants from highest to lowest priority: by weight, then guarantee, then name."""
    return sorted(tenants, key=lambda t: (-t.weight, -t.guarantee_bps, t.name))


def plan(mode, tenants, link_bps):
    """(where, [PeerClass]) for a peer mode: where is "node" (each node's NIC, both ways: its
    egress, and its ingress after the switch port) or "switch" (every switch port towards a
    node, the shared link's egress queue). The link class 1:1 (rate = ceil = link) is the parent
    of every class listed."""
    floor = MIN_RATE_FRACTION * link_bps
    if mode == "caps":
        # Unmatched traffic is not capped (the uplink is faster than the fabric link's share).
        out = [PeerClass(DEFAULT_MINOR, "default", link_bps, link_bps, prio=HTB_LOWEST_PRIO)]
        for i, t in enumerate(tenants):
            cap = wire_rate(min(t.limit_bps, link_bps))
            out.append(PeerClass(FIRST_MINOR + i, t.name, min(cap, link_bps), min(cap, link_bps),
                                 dscp=t.dscp))
        return "node", out
    if mode == "priority":
        out = [PeerClass(DEFAULT_MINOR, "default", floor, link_bps, prio=HTB_LOWEST_PRIO)]
        for rank, t in enumerate(priority_order(tenants)):
            out.append(PeerClass(FIRST_MINOR + tenants.index(t), t.name, floor, link_bps,
                                 prio=min(rank, HTB_LOWEST_PRIO), dscp=t.dscp))
        return "switch", out
    if mode == "static":
        guaranteed = sum(wire_rate(t.guarantee_bps) for t in tenants if t.guarantee_bps > 0)
        # Tenants without a guarantee share one class with what the dedicated shares leave.
        rest = max(link_bps - guaranteed - floor, floor)
        out = [PeerClass(DEFAULT_MINOR, "default", floor, floor, prio=HTB_LOWEST_PRIO)]
        shared = [t for t in tenants if t.guarantee_bps <= 0]
        if shared:
            out.append(PeerClass(FIRST_MINOR + len(tenants), "unguaranteed", rest, rest))
        for i, t in enumerate(tenants):
            if t.guarantee_bps > 0:
                r = wire_rate(t.guarantee_bps)
                out.append(PeerClass(FIRST_MINOR + i, t.name, r, r, dscp=t.dscp))
        # The unguaranteed tenants' DSCPs point at the shared class (see filters()).
        for t in shared:
            out.append(PeerClass(FIRST_MINOR + len(tenants), t.name, rest, rest, dscp=t.dscp))
        return "switch", out
    if mode == "weights":
        total = sum(max(1, t.weight) for t in tenants)
        share = link_bps - floor
        out = [PeerClass(DEFAULT_MINOR, "default", floor, link_bps, prio=HTB_LOWEST_PRIO)]
        for i, t in enumerate(tenants):
            out.append(PeerClass(FIRST_MINOR + i, t.name, share * max(1, t.weight) / total,
                                 link_bps, weight=t.weight, dscp=t.dscp))
        return "switch", out
    raise ValueError(f"unknown peer mode {mode!r} (known: {', '.join(PEER_MODES)})")


def classes(peer_classes):
    """The distinct classes to create (a shared class appears once), by minor."""
    seen = {}
    for c in peer_classes:
        seen.setdefault(c.minor, c)
    return [seen[m] for m in sorted(seen)]


def filters(peer_classes):
    """[(dscp, minor)]: one u32 rule per tenant DSCP."""
    return [(c.dscp, c.minor) for c in peer_classes if c.dscp is not None]


class PeerUnavailable(RuntimeError):
    """A peer mode cannot be built on this kernel (a qdisc, class or filter refused)."""


WHERE_TEXT = {"node": "node NIC egress and ingress", "switch": "switch port egress"}
HOST_QUEUE_PACKETS = 1000  # a node NIC's class queue: a host qdisc's default txqueuelen


def host_fifo(dev):
    """The FIFO of a class on a node's NIC or its ingress ifb (caps): a host's packet queue,
    as a host qdisc has (it is not a switch buffer)."""
    return lambda parent, handle: ["tc", "qdisc", "add", "dev", dev, "parent", parent, "handle",
                                   handle, "pfifo", "limit", str(HOST_QUEUE_PACKETS)]


def tc_commands(dev, link_bps, peer_classes, fifo):
    """The tc command lines (argv lists, without `ip netns exec`) that build a mode's tree;
    fifo(parent, handle) gives each class's queue (a switch port's byte-bounded FIFO,
    topology.Port.fifo, or host_fifo)."""
    burst = str(max(int(link_bps) // 8 // 1000, 3028))  # 1 ms at line rate, as the link
    cmds = [["tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default",
             f"{DEFAULT_MINOR:x}"],
            ["tc", "class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb", "rate",
             f"{int(link_bps)}bit", "ceil", f"{int(link_bps)}bit", "burst", burst, "cburst",
             burst]]
    for c in classes(peer_classes):
        cb = str(max(int(c.ceil) // 8 // 1000, 3028))
        rb = str(max(int(c.rate) // 8 // 1000, 3028))
        cmds.append(["tc", "class", "add", "dev", dev, "parent", "1:1", "classid",
                     f"1:{c.minor:x}", "htb", "rate", f"{c.rate}bit", "ceil", f"{c.ceil}bit",
                     "burst", rb, "cburst", cb, "prio", str(c.prio), "quantum", str(c.quantum)])
        cmds.append(fifo(f"1:{c.minor:x}", f"{c.minor:x}:"))
    for dscp, minor in filters(peer_classes):
        cmds.append(["tc", "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio",
                     "1", "u32", "match", "ip", "dsfield", f"{dscp << 2:#x}", "0xfc", "flowid",
                     f"1:{minor:x}"])
    return cmds


def install(topo, mode, tenants, run):
    """Builds `mode`'s tree on the devices its model puts it on (every node NIC, every switch
    port of the topology, or both); raises PeerUnavailable with tc's reason if the kernel
    refuses a part of it (what was built is removed again by the caller, with
    Topology.restore_links()). `run(argv, netns=..., check=...)` runs one command and raises
    RuntimeError when it fails and check is true."""
    where, _ = plan(mode, tenants, topo.link_bits)
    targets = []  # (netns, dev, fifo, the link's rate)
    if where == "node":
        for l in topo.links.values():
            ifb = l.ingress_ifb
            targets += [(l.node_ns, l.dev, host_fifo(l.dev), topo.link_bits),
                        (l.node_ns, ifb, host_fifo(ifb), topo.link_bits)]
            # Received traffic goes through the ifb's tree before the node's stack.
            for argv in (["ip", "link", "add", ifb, "type", "ifb"],
                         ["ip", "link", "set", ifb, "up"],
                         ["tc", "qdisc", "add", "dev", l.dev, "handle", "ffff:", "ingress"],
                         ["tc", "filter", "add", "dev", l.dev, "parent", "ffff:", "protocol", "all",
                          "u32", "match", "u32", "0", "0", "action", "mirred", "egress",
                          "redirect", "dev", ifb]):
                try:
                    run(argv, netns=l.node_ns)
                except RuntimeError as e:
                    raise PeerUnavailable(f"{mode}: {' '.join(argv)} refused in {l.node_ns}: "
                                          f"{str(e).splitlines()[-1]}") from None
    else:
        # Every switch port: towards the nodes and, in a leaf/spine fabric, the leaves' uplink
        # ports (both directions of the spine), each with the classes planned for its own rate,
        # as a network team configures the same classes on every port.
        targets += [(p.netns, p.dev, p.fifo, p.rate_bits) for p in topo.ports()]
    for netns, dev, fifo, rate in targets:
        _, pcs = plan(mode, tenants, rate)
        run(["tc", "qdisc", "del", "dev", dev, "root"], netns=netns, check=False)
        for argv in tc_commands(dev, rate, pcs, fifo):
            try:
                run(argv, netns=netns)
            except RuntimeError as e:
                raise PeerUnavailable(f"{mode}: {' '.join(argv)} refused in {netns}: "
                                      f"{str(e).splitlines()[-1]}") from None
    return where


def describe(mode, tenants, link_bps):
    """One line per class, for the run's log."""
    where, pcs = plan(mode, tenants, link_bps)
    lines = [f"{mode} ({WHERE_TEXT[where]} egress):"]
    for c in classes(pcs):
        names = [p.label for p in pcs if p.minor == c.minor]
        lines.append(f"  1:{c.minor:x} {'/'.join(names)}: rate {c.rate / 1e6:.1f} ceil "
                     f"{c.ceil / 1e6:.1f} Mbit/s prio {c.prio} quantum {c.quantum}")
    return "\n".join(lines)
