"""The emulated cluster: namespaces, veths, bridge, and the switch-side link-rate emulation."""
import os
import re

from .procs import run

SUBNET = "10.213.0"        # only ever used inside the namespaces this module creates
SWITCH_ADDR = f"{SUBNET}.254"
HOST_ADDR = f"{SUBNET}.253"  # root-namespace port, so the host can reach the agents' /metrics


def rate_to_bits(text):
    """'1gbit', '1Gbps', '500mbit', '100M' -> bits per second."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*([kmgt]?)(bit|bps|b)?\s*", text.lower())
    if not m:
        raise ValueError(f"invalid rate {text!r} (examples: 1gbit, 500mbit)")
    mult = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}[m.group(2)]
    return int(float(m.group(1)) * mult)


class Topology:
    """`nodes` namespaces joined through one switch namespace; link rate emulated per port."""

    def __init__(self, prefix="tqbed", nodes=2, link_bits=1_000_000_000, queue_packets=1000):
        if not re.fullmatch(r"[a-z][a-z0-9]{0,7}", prefix):
            raise ValueError("prefix: 1-8 lowercase letters/digits, starting with a letter")
        self.prefix = prefix
        self.nodes = nodes
        self.link_bits = link_bits
        self.queue_packets = queue_packets
        self.switch = f"{prefix}-switch"
        self.created = False

    # Names -------------------------------------------------------------------------------
    def node_ns(self, i):
        return f"{self.prefix}-node{i}"

    def node_addr(self, i):
        return f"{SUBNET}.{i}"

    def switch_port(self, i):
        return f"{self.prefix}p{i}"  # <= 15 chars

    node_dev = "eth0"  # the node's uplink inside its namespace

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
        run(["ip", "-n", sw, "link", "add", "br0", "type", "bridge"])
        run(["ip", "-n", sw, "link", "set", "br0", "up"])
        run(["ip", "-n", sw, "addr", "add", f"{SWITCH_ADDR}/24", "dev", "br0"])
        for i in range(1, self.nodes + 1):
            ns, port = self.node_ns(i), self.switch_port(i)
            run(["ip", "netns", "add", ns])
            run(["ip", "-n", ns, "link", "set", "lo", "up"])
            # A rank that pauses between allreduces keeps its congestion window, as training
            # clusters tune it and as RDMA does (no slow start at all): with the default (1),
            # every wake-up restarts from 10 segments behind a full FIFO (~12 ms RTT), which
            # the reaction figures would charge to the allocator.
            run(["ip", "netns", "exec", ns, "sysctl", "-q", "-w",
                 "net.ipv4.tcp_slow_start_after_idle=0"])
            run(["ip", "link", "add", port, "netns", sw, "type", "veth", "peer", "name",
                 self.node_dev, "netns", ns])
            run(["ip", "-n", sw, "link", "set", port, "master", "br0"])
            run(["ip", "-n", sw, "link", "set", port, "up"])
            run(["ip", "-n", ns, "addr", "add", f"{self.node_addr(i)}/24", "dev", self.node_dev])
            run(["ip", "-n", ns, "link", "set", self.node_dev, "up"])
            self._emulate_link(port)
        # A port from the root namespace so people can curl the agents' /metrics.
        run(["ip", "link", "add", self.host_port, "type", "veth", "peer", "name", "hostp",
             "netns", sw])
        run(["ip", "-n", sw, "link", "set", "hostp", "master", "br0"])
        run(["ip", "-n", sw, "link", "set", "hostp", "up"])
        run(["ip", "addr", "add", f"{HOST_ADDR}/24", "dev", self.host_port])
        run(["ip", "link", "set", self.host_port, "up"])

    def _emulate_link(self, port):
        """Switch port towards a node: HTB class at the link rate feeding a bounded FIFO.

        Every frame to the node passes one FIFO at line rate, like a switch egress queue, so
        without tenantqos tenants share it by whoever pushes hardest."""
        sw, rate = self.switch, f"{self.link_bits}bit"
        # Burst: 1 ms at line rate (>= 2 frames), so the shaper holds its rate at high speeds.
        burst = max(self.link_bits // 8 // 1000, 3028)
        run(["tc", "qdisc", "add", "dev", port, "root", "handle", "1:", "htb", "default", "1"],
            netns=sw)
        run(["tc", "class", "add", "dev", port, "parent", "1:", "classid", "1:1", "htb",
             "rate", rate, "ceil", rate, "burst", str(burst), "cburst", str(burst)], netns=sw)
        run(["tc", "qdisc", "add", "dev", port, "parent", "1:1", "handle", "10:", "pfifo",
             "limit", str(self.queue_packets)], netns=sw)

    def restore_links(self):
        """Back to the plain emulated link after a peer mode (peers.py): the switch ports' trees
        rebuilt, the nodes' uplinks without a root qdisc of ours."""
        for i in range(1, self.nodes + 1):
            run(["tc", "qdisc", "del", "dev", self.switch_port(i), "root"], netns=self.switch,
                check=False)
            self._emulate_link(self.switch_port(i))
            run(["tc", "qdisc", "del", "dev", self.node_dev, "root"], netns=self.node_ns(i),
                check=False)

    def port_stats(self, i):
        """(bytes, packets, drops) sent by the switch towards node i (the emulated link): bytes
        and packets of the link class 1:1, drops of every class (a peer mode's leaves).

        Parses `tc -s class show` text: iproute2 6.1 prints classes as text even with -j."""
        r = run(["tc", "-s", "class", "show", "dev", self.switch_port(i)], netns=self.switch)
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
            raise RuntimeError(f"no class 1:1 on {self.switch_port(i)} in {self.switch}")
        return link[0], link[1], drops
