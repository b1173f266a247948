"""Command line of the testbed: demo (README's main job), bench (bench/isolation), up, cleanup."""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from .cluster import Binaries, ControlPlane
from .procs import ProcSet
from . import report
from .scenarios import (BENCH_WORKLOADS, FABRIC_WORKLOADS, MODES, WORKLOADS, Runner,
                        agent_fabric_support, demo_tenants, many_tenants, policy_yaml, say,
                        tenants_from_json, write_plot)
from .topology import HOST_ADDR, MAX_NODES, Topology, buffer_to_bytes, rate_to_bits


# The main job's workloads: the ring workloads on two nodes, and the source article's scenario
# on the leaf/spine fabric (issue 21).
DEMO_WORKLOADS = ("backlogged", "onoff", "fabric")


def load_policy(args, bins, link_bits):
    """(link_bps, headroom, tenants) validated offline by tenantqosctl BEFORE anything starts."""
    if args.policy:
        path = args.policy
    else:
        tenants = demo_tenants(link_bits)
        fd, path = tempfile.mkstemp(prefix="tenantqos-testbed-policy-", suffix=".yaml")
        with os.fdopen(fd, "w") as f:
            f.write(policy_yaml(link_bits, tenants))
    r = subprocess.run([bins.ctl, "validate", path, "-o", "json"], capture_output=True, text=True)
    if not args.policy:
        os.unlink(path)
    if r.returncode != 0:
        raise SystemExit(f"tenantqos-testbed: the policy is invalid; nothing was started:\n"
                         f"{r.stderr.strip()}")
    link_bps, headroom, tenants = tenants_from_json(json.loads(r.stdout))
    if args.link_rate is None:
        link_bits = link_bps  # a user's policy: emulate its link
    guaranteed = sum(t.guarantee_bps for t in tenants)
    if guaranteed > link_bits * (1 - headroom / 100.0) + 1:
        raise SystemExit(
            f"tenantqos-testbed: the guarantees ({guaranteed / 1e9:.3f} Gbit/s) exceed the emulated "
            f"link ({link_bits / 1e9:.3f} Gbit/s minus {headroom:g} % headroom); nothing was started")
    if link_bps != link_bits:
        say(f"note: the policy's link capacity is {link_bps / 1e9:.3f} Gbit/s, the emulated link "
            f"{link_bits / 1e9:.3f} Gbit/s")
    return link_bits, headroom, tenants


def validate_fabric_policy(bins, link_bps, headroom, tenants, topo):
    """The fabric workloads' policy (the tenants plus the leaves' shared link class) validated
    offline, before anything starts: admission on the spine (the guarantees within its
    capacity minus the headroom) is the policy's own rule."""
    fd, path = tempfile.mkstemp(prefix="tenantqos-testbed-fabric-", suffix=".yaml")
    with os.fdopen(fd, "w") as f:
        f.write(policy_yaml(link_bps, tenants, headroom,
                            shared=(topo.spine.rate_bits, topo.leaf_groups())))
    r = subprocess.run([bins.ctl, "validate", path], capture_output=True, text=True)
    os.unlink(path)
    if r.returncode != 0:
        raise SystemExit("tenantqos-testbed: the fabric workloads' policy (the tenants with the "
                         "leaves' uplinks as a shared link) is invalid; nothing was started:\n"
                         f"{r.stderr.strip() or r.stdout.strip()}")


def describe(topo):
    if topo.fabric:
        return (f"{topo.nodes} nodes under two leaf switches joined by one spine link of "
                f"{topo.spine.rate_bits / 1e9:g} Gbit/s per direction (nodes 1-2, 3-4; "
                f"{2 * topo.link_bits / topo.spine.rate_bits:g}:1 oversubscribed), emulated link "
                f"{topo.link_bits / 1e9:g} Gbit/s per node, switch ports of "
                f"{topo.buffer_bytes / 1e3:g} KB "
                f"({topo.buffer_bytes * 8 / topo.link_bits * 1e3:.1f} ms at the link rate)")
    rails = f", {topo.rails} rails (a switch each)" if topo.rails > 1 else ""
    return (f"{topo.nodes} nodes behind a switch{rails}, emulated link {topo.link_bits / 1e9:g} "
            f"Gbit/s per node, switch ports of {topo.buffer_bytes / 1e3:g} KB "
            f"({topo.buffer_bytes * 8 / topo.link_bits * 1e3:.1f} ms at the link rate)")


def pick(text, known, what, default=None):
    """A comma-separated subset of `known` (in known's order); `default` (else all of them) for
    None."""
    if not text:
        return list(default or known)
    wanted = [w.strip() for w in text.split(",") if w.strip()]
    unknown = [w for w in wanted if w not in known]
    if unknown:
        raise SystemExit(f"tenantqos-testbed: --{what}: unknown {', '.join(unknown)}; known: "
                         f"{', '.join(known)}")
    return [k for k in known if k in wanted]


def make_topology(args, link_bps, nodes, rails=1, fabric=False):
    try:
        buf = buffer_to_bytes(args.port_buffer, link_bps) if args.port_buffer else None
        spine = rate_to_bits(args.spine_rate) if getattr(args, "spine_rate", None) else None
        return Topology(prefix=args.prefix, nodes=nodes, link_bits=int(link_bps),
                        buffer_bytes=buf, rails=max(rails, args.rails), fabric=fabric,
                        spine_bits=spine)
    except ValueError as e:
        raise SystemExit(f"tenantqos-testbed: {e}" +
                         (f" (--workloads {','.join(FABRIC_WORKLOADS)} run on the leaf/spine "
                          "fabric)" if fabric else ""))


def run(args, bench):
    bins = Binaries(args.build_dir)
    bins.check()
    link_bits = rate_to_bits(args.link_rate) if args.link_rate else 1_000_000_000
    link_bps, headroom, tenants = load_policy(args, bins, link_bits)
    modes = pick(args.modes, MODES, "modes")
    workloads = pick(args.workloads, WORKLOADS, "workloads",
                     BENCH_WORKLOADS if bench else DEMO_WORKLOADS)
    if not args.workloads and not report.fabric_fits(tenants):
        # A user's policy without the fabric's three roles runs the other workloads.
        say("note: the fabric workloads need two guaranteed tenants and another one in the "
            "policy; not run")
        workloads = [w for w in workloads if w not in FABRIC_WORKLOADS]
    many = many_tenants(link_bps)
    try:
        scenarios = (report.bench_scenarios(tenants, link_bps, args.quick, modes, workloads)
                     if bench else
                     report.demo_scenarios(tenants, link_bps, args.duration, modes, workloads))
    except ValueError as e:
        raise SystemExit(f"tenantqos-testbed: {e}")
    if args.only:
        wanted = [w.strip() for w in args.only.split(",") if w.strip()]
        unknown = [w for w in wanted if w not in {s.name for s in scenarios}]
        if unknown:
            raise SystemExit("tenantqos-testbed: --only: unknown scenario(s) " +
                             ", ".join(unknown) + "; known: " +
                             ", ".join(s.name for s in scenarios))
        scenarios = [s for s in scenarios if s.name in wanted]
    # The ring workloads run over --nodes; the placed ones need their nodes (4).
    fabric = any(s.fabric for s in scenarios)
    topo = make_topology(args, link_bps,
                         max([args.nodes] + [s.nodes_used(args.nodes) for s in scenarios]),
                         max([1] + [s.rails_used() for s in scenarios]), fabric=fabric)
    if fabric:
        validate_fabric_policy(bins, link_bps, headroom, tenants, topo)
    left = topo.leftovers()
    if left:
        raise SystemExit("tenantqos-testbed: a previous run left these behind: " + ", ".join(left) +
                         f"\nremove them with: {sys.argv[0]} cleanup --prefix {args.prefix}")
    out_dir = os.path.abspath(args.out)
    os.makedirs(out_dir, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="run-", dir=out_dir)
    procs = ProcSet()
    cp = ControlPlane(topo, bins, procs, workdir, period_ms=args.period_ms)

    t_begin = time.time()
    results, reaction = [], {}
    try:
        say(f"tenantqos testbed: {describe(topo)}, namespaces {topo.prefix}-*; logs in {workdir}")
        topo.create()
        # Two replicas on etcd only when the failover scenario can run (the agents have the
        # allocator's client); every other run keeps the one policyd with the file store.
        replicas = 2 if (any(s.kill_allocator_at is not None for s in scenarios) and
                         agent_fabric_support(bins) is None) else 1
        say(f"policyd at {cp.start_policyd(replicas)}" +
            (" (two replicas on etcd: the allocator failover)" if replicas > 1 else "") +
            f" (mutual TLS, a throwaway CA and certificates in "
            f"{cp.pki}); agents' metrics (while they run): " +
            ", ".join(cp.metrics_url(i) for i in range(1, topo.nodes + 1)) +
            f" (reachable from this host via {HOST_ADDR})")
        runner = Runner(topo, bins, procs, cp, workdir, link_bps, headroom, tenants,
                        extra_tenants=many if "many" in workloads else (), ring_nodes=args.nodes)
        for i, sc in enumerate(scenarios, 1):
            results.append(runner.run(sc, i, len(scenarios)))
        if bench:
            idle = [s for s in scenarios if s.workload == "idle-wake"]
            if idle:
                sleeper = next(iter(idle[0].on_off))
                reaction = runner.reaction(idle[0].name, sleeper,
                                           [t.name for t in tenants if t.name != sleeper])
        report.print_table(results, link_bps, modes, workloads,
                           lambda w: many if w == "many" else
                           (report.placed_tenants_of(w, tenants) or tenants),
                           lambda w: report.placement_text(w, tenants)
                           if w in report.PLACED or w in FABRIC_WORKLOADS else None)
        png = write_plot(runner, report.plot_grid(modes, workloads),
                         os.path.join(out_dir, "throughput.png"), workdir)
        if png:
            say(f"\nplot: {png} (a panel per mode and workload)")
        missed = report.check_targets(results, reaction) if bench else 0
        doc = {"link_bps": link_bps, "nodes": topo.nodes, "rails": topo.rails,
               "port_buffer_bytes": topo.buffer_bytes, "scenarios": results,
               "reaction_ms": reaction}
        json_path = args.json or os.path.join(out_dir, "results.json")
        with open(json_path, "w") as f:
            json.dump(doc, f, indent=2)
        say(f"results: {json_path}   ({time.time() - t_begin:.0f} s)")
        return 0 if (not bench or missed == 0 or not args.strict) else 1
    except KeyboardInterrupt:
        say("\ninterrupted: cleaning up")
        return 130
    except (RuntimeError, TimeoutError) as e:
        say(f"\ntenantqos-testbed: {e}\n(logs kept in {workdir})")
        return 1
    finally:
        cp.stop_agents()
        procs.stop_all()
        topo.cleanup()
        left = topo.leftovers()
        if left:
            say("warning: could not remove " + ", ".join(left))


def up(args):
    """Creates the cluster (policyd + agents, demo policy) and keeps it until Ctrl-C."""
    bins = Binaries(args.build_dir)
    bins.check()
    link_bits = rate_to_bits(args.link_rate) if args.link_rate else 1_000_000_000
    link_bps, headroom, tenants = load_policy(args, bins, link_bits)
    topo = make_topology(args, link_bps, args.nodes)
    if topo.leftovers():
        raise SystemExit(f"leftovers from a previous run; run: {sys.argv[0]} cleanup")
    os.makedirs(os.path.abspath(args.out), exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="up-", dir=os.path.abspath(args.out))
    procs = ProcSet()
    cp = ControlPlane(topo, bins, procs, workdir, period_ms=args.period_ms)
    try:
        topo.create()
        cp.start_policyd()
        v = cp.apply_policy(policy_yaml(link_bps, tenants, headroom), "up")
        cp.start_agents(args.mode, v)
        say(f"up: {describe(topo)}; policyd {cp.policyd_addr} (run tenantqosctl with `ip netns "
            f"exec {topo.switch}` and TENANTQOS_TLS_CA={cp.pki}/ca.crt TENANTQOS_TLS_CERT="
            f"{cp.pki}/admin.crt TENANTQOS_TLS_KEY={cp.pki}/admin.key),"
            f" agents ({args.mode} mode) metrics " +
            ", ".join(cp.metrics_url(i) for i in range(1, topo.nodes + 1)))
        say(f"run ranks with: ip netns exec {topo.node_ns(1)} env TENANTQOS_RUN_DIR="
            f"{cp.node_run_dir(1)} ...   Ctrl-C to tear down")
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        return 0
    finally:
        cp.stop_agents()
        procs.stop_all()
        topo.cleanup()


def main(argv=None):
    p = argparse.ArgumentParser(prog="tenantqos-testbed",
                                description="An emulated cluster (2 to 8 nodes) in network "
                                            "namespaces: tenants' collectives with and without "
                                            "tenantqos.")
    sub = p.add_subparsers(dest="cmd", required=True)

    def common(sp):
        sp.add_argument("--build-dir", default="build", help="CMake build directory (default build)")
        sp.add_argument("--link-rate", default=None,
                        help="emulated per-node link rate, e.g. 1gbit (default 1gbit, or the "
                             "capacity of --policy's link)")
        sp.add_argument("--policy", help="a policy file with one link (default: the demo's "
                                         "tenant-a 40%%/60%% w2, tenant-b 20%%/40%% w1, noisy)")
        sp.add_argument("--prefix", default="tqbed", help="name prefix of namespaces (default tqbed)")
        sp.add_argument("--out", default="testbed-results", help="results and logs directory")
        sp.add_argument("--period-ms", type=int, default=10, help="agents' allocation period")
        sp.add_argument("--nodes", type=int, default=2,
                        help=f"nodes of the ring workloads, 2..{MAX_NODES} (default 2; the "
                             "incast, alltoall and asymmetric workloads place their tenants on "
                             "nodes 1-4 and add nodes as needed)")
        sp.add_argument("--rails", type=int, default=1, choices=[1, 2],
                        help="NICs per node, each on its own switch (rail-optimised); tenants "
                             "use rail 0 unless a workload says otherwise (default 1)")
        sp.add_argument("--spine-rate", default=None,
                        help="the fabric workloads' spine link, per direction, e.g. 1gbit "
                             "(default: the node link rate, 2:1 oversubscribed)")
        sp.add_argument("--port-buffer", default=None,
                        help="every emulated switch port's buffer: a time at the link rate or a "
                             "size, e.g. 2ms, 500us, 256KiB (default 4ms: 500 KB at 1 Gbit/s)")
        sp.add_argument("--only", help="comma-separated scenario names to run (default: all)")
        sp.add_argument("--modes", help="comma-separated enforcement modes (default: all of "
                                        + ", ".join(MODES) + ")")
        sp.add_argument("--workloads", help="comma-separated workloads of " +
                        ",".join(WORKLOADS) + " (demo default: " + ",".join(DEMO_WORKLOADS) +
                        "; bench: all but rails, which adds a second rail; fabric and "
                        "fabric-onoff run on four nodes under two leaves and a spine)")

    d = sub.add_parser("demo", help="the main job: the table of standalone / contended runs, "
                                    "backlogged, on/off and the leaf/spine fabric, every mode")
    common(d)
    d.add_argument("--duration", type=float, default=8, help="seconds per contended scenario")
    d.add_argument("--json", help="write the results JSON here")
    b = sub.add_parser("bench", help="bench/isolation: all scenarios, targets, JSON")
    common(b)
    b.add_argument("--quick", action="store_true",
                   help="shorter scenarios (about 13 minutes on 2 cores; the full bench about "
                        "25)")
    b.add_argument("--json", help="write the results JSON here")
    b.add_argument("--strict", action="store_true", help="exit 1 if a target is missed")
    u = sub.add_parser("up", help="create the cluster and keep it until Ctrl-C")
    common(u)
    u.add_argument("--mode", choices=["none", "htb"], default="htb", help="agents' --tc-mode")
    c = sub.add_parser("cleanup", help="remove what a previous run left behind")
    c.add_argument("--prefix", default="tqbed")
    args = p.parse_args(argv)

    if args.cmd != "cleanup" and not 2 <= args.nodes <= MAX_NODES:
        p.error(f"--nodes: 2..{MAX_NODES}")
    if os.geteuid() != 0:
        raise SystemExit("tenantqos-testbed: needs root (network namespaces, tc)")

    def on_signal(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    # Ctrl-C, SIGTERM (and SIGINT even when started in the background, where shells ignore it)
    # end the run through the same cleanup path.
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    if args.cmd == "cleanup":
        t = Topology(prefix=args.prefix)
        left = t.leftovers()
        t.cleanup()
        say("removed: " + (", ".join(left) if left else "nothing"))
        return 0
    if args.cmd == "up":
        return up(args)
    return run(args, bench=(args.cmd == "bench"))
