"""The control plane of a testbed run: tenantqos-policyd in the switch namespace and one
tenantqos-agent per node namespace, each with its own run and state directory. Every gRPC
connection is mutual TLS, with a throwaway CA and certificates made in the run directory by
scripts/tq-certs.sh (openssl).

One policyd with the file store (it is also the cluster allocator), or, for the allocator
failover figure, two replicas on an etcd the testbed starts in the switch namespace (on that
namespace's loopback): exactly one of them is the active allocator (an etcd lease,
docs/fabric.md), and the agents know both."""
import os
import shutil
import signal
import subprocess
import time

from .procs import run
from .topology import SWITCH_ADDR

POLICYD_PORT_BASE = 7400  # replicas listen on SWITCH_ADDR:7400, :7401 (the switch namespace's)
ETCD_CLIENT = "127.0.0.1:23790"  # the switch namespace's loopback: only policyd reaches it
ETCD_PEER = "127.0.0.1:23800"

CERT_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                           "tq-certs.sh")


class Binaries:
    """Paths of the built programs (a CMake build directory)."""

    def __init__(self, build_dir):
        b = os.path.abspath(build_dir)
        self.build_dir = b
        self.policyd = os.path.join(b, "policy", "tenantqos-policyd")
        self.ctl = os.path.join(b, "policy", "tenantqosctl")
        self.agent = os.path.join(b, "agent", "tenantqos-agent")
        self.perf = os.path.join(b, "bin", "tenantqos-perf")
        self.plugin = os.path.join(b, "lib", "libnccl-net-tenantqos.so")

    def check(self):
        missing = [p for p in (self.policyd, self.ctl, self.agent, self.perf, self.plugin)
                   if not os.access(p, os.X_OK if not p.endswith(".so") else os.R_OK)]
        if missing:
            raise RuntimeError("not built: " + ", ".join(missing) +
                               f" (build with: cmake -S . -B {self.build_dir} -G Ninja && "
                               f"ninja -C {self.build_dir})")


class ControlPlane:
    def __init__(self, topo, bins, procs, workdir, link_name="fabric", period_ms=10):
        self.topo = topo
        self.bins = bins
        self.procs = procs
        self.workdir = workdir
        self.link_name = link_name
        self.period_ms = period_ms
        self.policyd = None       # the first replica's Proc
        self.policyd_addr = None  # the address tenantqosctl uses (a live replica's)
        self.replicas = []        # [(Proc or None when killed, address)], with etcd
        self.etcd = None
        self.agents = {}
        self.agent_mode = None
        self.pki = os.path.join(workdir, "pki")

    def tls_flags(self, name):
        """--tls-* flags for the process presenting certificate `name` (pki/NAME.crt)."""
        return ["--tls-ca", os.path.join(self.pki, "ca.crt"),
                "--tls-cert", os.path.join(self.pki, name + ".crt"),
                "--tls-key", os.path.join(self.pki, name + ".key")]

    # policyd ---------------------------------------------------------------------------
    def start_policyd(self, replicas=1):
        if replicas > 1:
            return self._start_replicas(replicas)
        data = os.path.join(self.workdir, "policyd")
        os.makedirs(data, exist_ok=True)
        port_file = os.path.join(self.workdir, "policyd.port")
        nodes = [f"node{i}" for i in range(1, self.topo.nodes + 1)]
        subprocess.run([CERT_SCRIPT, "cluster", self.pki, SWITCH_ADDR] + nodes, check=True)
        self.policyd = self.procs.start(
            "policyd",
            [self.bins.policyd, "--listen", f"{SWITCH_ADDR}:0", "--data-dir", data,
             "--port-file", port_file] + self.tls_flags("policyd"),
            os.path.join(self.workdir, "policyd.log"), netns=self.topo.switch)
        self.policyd.wait_for_log("listening on", 15, "its listening address")
        deadline = time.monotonic() + 5  # the port file follows the log line
        while not os.path.exists(port_file):
            if time.monotonic() > deadline:
                raise RuntimeError(f"tenantqos-policyd wrote no {port_file}")
            time.sleep(0.02)
        with open(port_file) as f:
            self.policyd_addr = f"{SWITCH_ADDR}:{f.read().strip()}"
        return self.policyd_addr

    # Replicas on etcd (the allocator failover figure) --------------------------------------
    def _start_replicas(self, n):
        etcd = shutil.which("etcd")
        if etcd is None:
            raise RuntimeError("two policyd replicas need etcd (Debian's etcd-server, installed "
                               "by scripts/install-deps.sh)")
        nodes = [f"node{i}" for i in range(1, self.topo.nodes + 1)]
        subprocess.run([CERT_SCRIPT, "cluster", self.pki, SWITCH_ADDR] + nodes, check=True)
        edir = os.path.join(self.workdir, "etcd")
        self.etcd = self.procs.start(
            "etcd", [etcd, "--name", "tqbed", "--data-dir", edir,
                     "--listen-client-urls", f"http://{ETCD_CLIENT}",
                     "--advertise-client-urls", f"http://{ETCD_CLIENT}",
                     "--listen-peer-urls", f"http://{ETCD_PEER}",
                     "--initial-advertise-peer-urls", f"http://{ETCD_PEER}",
                     "--initial-cluster", f"tqbed=http://{ETCD_PEER}",
                     "--initial-cluster-state", "new"],
            os.path.join(self.workdir, "etcd.log"), netns=self.topo.switch)
        self.replicas = []
        for k in range(n):
            self.replicas.append((None, f"{SWITCH_ADDR}:{POLICYD_PORT_BASE + k}"))
            self.restart_replica(k)
        self.policyd = self.replicas[0][0]
        self.policyd_addr = self.replicas[0][1]
        self.wait_active_allocator(20)
        return ",".join(a for _, a in self.replicas)

    def _replica_log(self, k):
        return os.path.join(self.workdir, f"policyd-{k + 1}.log")

    def restart_replica(self, k):
        """(Re)starts replica k (after kill_active_allocator); it campaigns as a standby."""
        addr = self.replicas[k][1]
        proc = self.procs.start(
            f"policyd-{k + 1}",
            [self.bins.policyd, "--listen", addr, "--store", "etcd", "--etcd-endpoints",
             ETCD_CLIENT, "--etcd-prefix", "/tenantqos-testbed/", "--etcd-wait", "20"] +
            self.tls_flags("policyd"), self._replica_log(k), netns=self.topo.switch)
        proc.wait_for_log("listening on", 30, "its listening address")
        self.replicas[k] = (proc, addr)

    def active_allocator(self):
        """The index of the replica whose log last said it is the active allocator, or None."""
        best = None
        for k, (proc, _) in enumerate(self.replicas):
            if proc is None or not proc.alive():
                continue
            lines = [l for l in proc.log_text().splitlines() if "allocator: " in l]
            if lines and "allocator: active" in lines[-1]:
                best = k
        return best

    def wait_active_allocator(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            k = self.active_allocator()
            if k is not None:
                return k
            time.sleep(0.05)
        raise TimeoutError(f"no policyd replica became the active allocator within {timeout} s "
                           f"(logs: {self.workdir}/policyd-*.log)")

    def kill_active_allocator(self):
        """kill -9 of the active allocator's replica; (index, wall time of the kill)."""
        k = self.active_allocator()
        if k is None:
            raise RuntimeError("no active allocator to kill")
        proc, addr = self.replicas[k]
        t = time.time()
        proc.stop(timeout=2, sig=signal.SIGKILL)
        self.replicas[k] = (None, addr)
        live = [a for p, a in self.replicas if p is not None]
        self.policyd_addr = live[0] if live else None
        return k, t

    def ctl(self, *args, check=True):
        return run([self.bins.ctl, "--server", self.policyd_addr] + self.tls_flags("admin") +
                   list(args),
                   netns=self.topo.switch, check=check)

    def apply_policy(self, yaml_text, name):
        path = os.path.join(self.workdir, f"policy-{name}.yaml")
        with open(path, "w") as f:
            f.write(yaml_text)
        r = self.ctl("apply", "-f", path, check=False)
        if r.returncode != 0:
            raise RuntimeError(f"policy {name} rejected by tenantqos-policyd:\n"
                               f"{r.stderr.strip() or r.stdout.strip()}")
        for line in r.stdout.splitlines():
            if "version" in line and ("applied" in line or "no change" in line):
                digits = "".join(c for c in line.split("version")[-1] if c.isdigit())
                if digits:
                    return int(digits)
        raise RuntimeError(f"unexpected tenantqosctl output: {r.stdout}")

    # agents ----------------------------------------------------------------------------
    def node_run_dir(self, i):
        return os.path.join(self.workdir, f"node{i}", "run")

    def node_state_dir(self, i):
        return os.path.join(self.workdir, f"node{i}", "state")

    def metrics_url(self, i):
        return f"http://{self.topo.node_addr(i)}:9464/metrics"

    def agent_args(self, i, mode):
        # Every NIC of the node carries the policy's link (rails: one device per rail).
        devices = [a for dev in self.topo.node_devs()
                   for a in ("--device", f"{dev}={self.link_name}")]
        servers = ",".join(a for _, a in self.replicas) or self.policyd_addr
        return ["--policyd", servers, "--node", f"node{i}"] + \
            self.tls_flags(f"agent-node{i}") + devices + [
                "--run-dir", self.node_run_dir(i), "--state-dir", self.node_state_dir(i)]

    def start_agents(self, mode, expect_version):
        """Starts one agent per node in `mode` (htb|none); waits until each enforces the
        policy version `expect_version`."""
        self.agent_mode = mode
        for i in range(1, self.topo.nodes + 1):
            os.makedirs(self.node_run_dir(i), exist_ok=True)
            os.makedirs(self.node_state_dir(i), exist_ok=True)
            argv = [self.bins.agent] + self.agent_args(i, mode) + [
                "--metrics", f"{self.topo.node_addr(i)}:9464", "--tc-mode", mode,
                "--period-ms", str(self.period_ms)]
            self.agents[i] = self.procs.start(
                f"agent-node{i}", argv, os.path.join(self.workdir, f"agent-node{i}-{mode}.log"),
                netns=self.topo.node_ns(i))
        for i, a in self.agents.items():
            a.wait_for_log(f"enforcing policy v{expect_version}", 20,
                           f"policy v{expect_version} enforced on node{i}")

    def stop_agents(self):
        """SIGTERM (enforcement stays, by design), then --cleanup removes tc trees and files."""
        for i, a in list(self.agents.items()):
            a.stop()
            run([self.bins.agent, "--cleanup"] + self.agent_args(i, self.agent_mode),
                netns=self.topo.node_ns(i), check=False, timeout=30)
        self.agents = {}

    def agents_alive(self):
        return all(a.alive() for a in self.agents.values())
