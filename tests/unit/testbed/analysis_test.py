"""Unit tests of the testbed's figures of merit (testbed/tqbed/analysis.py), its peer modes'
plans (peers.py), its report and scenario lists (report.py), placements (workload.py) and
topology arithmetic (topology.py): pure functions over synthetic series and results, no
namespaces, no processes.

  analysis_test.py --source-dir DIR [unittest args]
"""
import argparse
import contextlib
import io
import math
import sys
import unittest

analysis = peers = report = topology = workload = None


def steady(rate_bps, t0, t1, edges):
    """A series delivering rate_bps throughout, sampled at the given window edges."""
    out = []
    prev = t0
    for e in edges:
        out.append((e, e - prev, rate_bps))
        prev = e
    return out


class RebinTest(unittest.TestCase):
    def test_jittered_samples_rebin_to_the_true_rate(self):
        # The meter was late once: a 175 ms interval, then a 25 ms one. Delivered bytes are
        # the same steady 0.5 Gbit/s, but the late sample's counters were read 25 ms before
        # its timestamp, so taken as they come the short window shows twice the rate.
        rate = 0.5e9
        edges = [0.1 * k for k in range(1, 11)]
        series = steady(rate, 0.0, 1.0, edges)
        # Late timestamp at 0.575 for counters read at 0.55 (bytes up to 0.55 in it).
        bits_to_055 = rate * 0.55
        series = [w for w in series if w[0] < 0.45] + [
            (0.575, 0.175, (bits_to_055 - rate * 0.4) / 0.175),
            (0.6, 0.025, (rate * 0.6 - bits_to_055) / 0.025),
        ] + [w for w in series if w[0] > 0.65]
        raw = analysis.tenant_figures([series], 0.4e9, 0.6e9, 0.0, 1.0)
        self.assertGreater(raw["cap_conformance_max"], 1.6, "the artefact this guards against")
        fixed = analysis.tenant_figures([series], 0.4e9, 0.6e9, 0.0, 1.0, width_s=0.1)
        self.assertEqual(fixed["windows"], 10)
        self.assertLess(fixed["cap_conformance_max"], 1.0)  # true: 0.83; raw: 1.67
        self.assertGreater(fixed["attainment_p1"], 1.0)  # true: 1.25; spread, not doubled

    def test_rebin_conserves_bytes(self):
        series = [(0.07, 0.07, 1e9), (0.31, 0.24, 2e9), (0.5, 0.19, 0.0), (0.93, 0.43, 5e8)]
        bins = analysis.rebin(series, 0.1, 0.0, 0.9)
        self.assertEqual(len(bins), 9)
        total_in = 1e9 * 0.07 + 2e9 * 0.24 + 5e8 * 0.40  # the last window clipped at 0.9
        self.assertAlmostEqual(sum(b * 0.1 for b in bins), total_in, delta=1.0)


class ReactionTest(unittest.TestCase):
    def test_first_time_at_start_is_when_the_rate_was_already_held(self):
        # 10 ms windows; the tenant wakes in the window starting at 0.02 and is at its rate from
        # the window starting at 0.03 on.
        series = [(0.01, 0.01, 0.0), (0.02, 0.01, 0.0), (0.03, 0.01, 1e8), (0.04, 0.01, 4e8),
                  (0.05, 0.01, 4e8)]
        ok = lambda r: r >= 0.95 * 4e8
        self.assertAlmostEqual(analysis.first_time(series, 0.02, ok, 1.0), 0.04)
        self.assertAlmostEqual(analysis.first_time(series, 0.02, ok, 1.0, at_start=True), 0.03)

    def test_short_windows_are_not_trusted(self):
        # A 2 ms window right after a late tick shows the rate by chance; it is skipped.
        series = [(0.02, 0.01, 0.0), (0.022, 0.002, 5e8), (0.03, 0.008, 1e8), (0.04, 0.01, 4e8)]
        ok = lambda r: r >= 0.95 * 4e8
        self.assertAlmostEqual(
            analysis.first_time(series, 0.02, ok, 1.0, min_window_s=0.005, at_start=True), 0.03)


class BusyMaskTest(unittest.TestCase):
    def test_a_window_with_the_whole_link_idle_is_not_counted_against_a_tenant(self):
        link = 1e9
        edges = [0.1 * k for k in range(1, 11)]
        a = steady(0.6e9, 0.0, 1.0, edges)
        b = steady(0.35e9, 0.0, 1.0, edges)
        # Window 5: everybody stalls (the host did not schedule the ranks).
        a[4] = (a[4][0], 0.1, 0.1e9)
        b[4] = (b[4][0], 0.1, 0.05e9)
        mask = analysis.busy_mask({(2, 0): [a, b]}, 0.1, 0.0, 1.0, link)
        self.assertEqual(mask, {(2, 0): [k != 4 for k in range(10)]})
        fig = analysis.tenant_figures([b], 0.2e9, 0.4e9, 0.0, 1.0, width_s=0.1)
        self.assertLess(fig["attainment_p1"], 0.5)
        self.assertAlmostEqual(
            analysis.attainment_masked([b], 0.2e9, 0.1, 0.0, 1.0, [mask[(2, 0)]])[1], 1.75)

    def test_a_starved_tenant_on_a_busy_link_still_counts(self):
        edges = [0.1 * k for k in range(1, 11)]
        a = steady(0.85e9, 0.0, 1.0, edges)
        b = steady(0.1e9, 0.0, 1.0, edges)  # half its guarantee while the link is full
        mask = analysis.busy_mask({1: [a, b]}, 0.1, 0.0, 1.0, 1e9)
        self.assertTrue(all(mask[1]))
        self.assertAlmostEqual(
            analysis.attainment_masked([b], 0.2e9, 0.1, 0.0, 1.0, [mask[1]])[1], 0.5)

    def test_each_receiving_node_is_busy_on_its_own(self):
        # Incast into node 3: its link is full; node 1 receives one tenant at 0.6: never busy.
        edges = [0.1 * k for k in range(1, 11)]
        a3, n3 = steady(0.3e9, 0.0, 1.0, edges), steady(0.65e9, 0.0, 1.0, edges)
        a1 = steady(0.6e9, 0.0, 1.0, edges)
        mask = analysis.busy_mask({3: [a3, n3], 1: [a1]}, 0.1, 0.0, 1.0, 1e9)
        self.assertEqual((all(mask[3]), any(mask[1])), (True, False))
        # tenant-a's figure pools its receiving nodes' busy windows: node 3's alone here.
        self.assertAlmostEqual(analysis.attainment_masked([a1, a3], 0.4e9, 0.1, 0.0, 1.0,
                                                          [mask[1], mask[3]])[0], 0.75)

    def test_no_guarantee_has_no_attainment(self):
        self.assertEqual(analysis.attainment_masked([[]], 0, 0.1, 0.0, 1.0, [[True]]),
                         (None, None))


class OnOffTest(unittest.TestCase):
    def test_on_windows_follow_the_wall_clock_schedule(self):
        # 300 ms on from 800 ms past every second: 0.8-1.1 s on, 1.1-1.8 off, 1.8-2.1 on ...
        on = analysis.on_windows("300:700:800", 0.1, 1.0, 2.0)
        self.assertEqual(on, [k == 0 for k in range(8)] + [True, True])
        self.assertEqual(analysis.on_windows(None, 0.1, 0.0, 0.3), [True] * 3)
        # A schedule from each rank's own start: unknown here, so no window counts.
        self.assertEqual(analysis.on_windows("300:700", 0.1, 0.0, 0.3), [False] * 3)
        self.assertAlmostEqual(analysis.align_up(12.34, 0.1), 12.4)
        self.assertAlmostEqual(analysis.align_up(12.4, 0.1), 12.4)

    def test_attainment_counts_only_the_on_phase(self):
        edges = [0.1 * k for k in range(1, 11)]
        b = steady(0.2e9, 0.0, 1.0, edges)
        for k in range(3, 10):
            b[k] = (b[k][0], 0.1, 0.0)  # off after 300 ms
        on = analysis.on_windows("300:700:0", 0.1, 0.0, 1.0)
        self.assertEqual(analysis.attainment_masked([b], 0.2e9, 0.1, 0.0, 1.0, [on]), (1.0, 1.0))

    def test_utilisation_only_while_demand_exceeds_the_link(self):
        edges = [0.1 * k for k in range(1, 11)]
        a = steady(0.6e9, 0.0, 1.0, edges)
        n = steady(0.35e9, 0.0, 1.0, edges)
        for k in range(3, 10):
            n[k] = (n[k][0], 0.1, 0.0)
        always = [True] * 10
        on = analysis.on_windows("300:700:0", 0.1, 0.0, 1.0)
        u = analysis.utilization_over_demand({2: [(a, always, 0.6e9), (n, on, 1e9)]}, 1e9, 0.1,
                                             0.0, 1.0, lambda p: p)
        self.assertAlmostEqual(u, 0.95)  # the 3 windows with noisy on; not a's 0.6 alone
        self.assertIsNone(analysis.utilization_over_demand({2: [(a, always, 0.6e9)]}, 1e9, 0.1,
                                                           0.0, 1.0, lambda p: p))
        # Per receiving node: a's other node, where it is alone at 0.6, never counts.
        u = analysis.utilization_over_demand(
            {2: [(a, always, 0.6e9), (n, on, 1e9)], 1: [(a, always, 0.6e9)]}, 1e9, 0.1, 0.0,
            1.0, lambda p: p)
        self.assertAlmostEqual(u, 0.95)


class TrainingTest(unittest.TestCase):
    def test_iteration_times_are_gaps_between_ends_inside_the_span(self):
        ends = [[0.5, 1.0, 1.6, 2.1, 2.9], [0.55, 1.1]]
        self.assertEqual([round(x, 3) for x in analysis.iteration_times(ends, 0.9, 2.5)],
                         [0.6, 0.5])


class ViolationsTest(unittest.TestCase):
    def tenant(self, **kw):
        t = {"name": "t", "guarantee_bps": 2e8, "limit_bps": 4e8, "attainment_p50": 1.0,
             "attainment_p1": 1.0, "attainment_p50_link_busy": 1.0,
             "attainment_p1_link_busy": 1.0, "cap_conformance_max": 1.0}
        t.update(kw)
        return t

    def test_each_property_with_its_figure(self):
        sc = {"link_bps": 1e9, "utilization_over_demand": 0.9, "tenants": [
            self.tenant(name="starved", attainment_p50_link_busy=0.5),
            self.tenant(name="dips", attainment_p1_link_busy=0.8),
            self.tenant(name="over", cap_conformance_max=1.5),
            self.tenant(name="linkwide", limit_bps=1e9, cap_conformance_max=1.02),
            self.tenant(name="noisy", guarantee_bps=0, limit_bps=1e9)]}
        got = [(v["property"], v["tenant"], v["figure"], v["measure"])
               for v in analysis.violations(sc)]
        self.assertEqual(got, [("guarantee", "starved", 0.5, "attainment_p50_link_busy"),
                               ("guarantee", "dips", 0.8, "attainment_p1_link_busy"),
                               ("limit", "over", 1.5, "cap_conformance_max"),
                               ("utilization", None, 0.9, "utilization_over_demand")])

    def test_training_is_judged_by_iteration_time_and_none_is_none(self):
        sc = {"link_bps": 1e9, "utilization_over_demand": None, "tenants": [
            self.tenant(name="slow", attainment_p50_link_busy=None, iteration_p99_s=0.6,
                        iteration_alone_p99_s=0.5),
            self.tenant(name="fine", attainment_p50_link_busy=None, iteration_p99_s=0.51,
                        iteration_alone_p99_s=0.5)]}
        v = analysis.violations(sc)
        self.assertEqual([(x["tenant"], x["figure"]) for x in v], [("slow", 1.2)])
        self.assertEqual(analysis.violations({"tenants": [self.tenant()], "link_bps": 1e9}), [])

    def test_a_link_left_mostly_idle_does_not_excuse_the_other_windows(self):
        # 15 busy of 90 contended windows with demand: the busy filter is not trusted, all
        # windows count. Windows at a receiver the tenant has to itself never are busy and do
        # not count against the filter (most: 60 of 90 contended, 180 with demand).
        few = self.tenant(name="few", attainment_p1=0.3, busy_windows_with_demand=15,
                          contended_windows_with_demand=90, windows_with_demand=90)
        most = self.tenant(name="most", attainment_p1=0.3, busy_windows_with_demand=60,
                           contended_windows_with_demand=90, windows_with_demand=180)
        self.assertEqual(analysis.target_attainment(few), (1.0, 0.3, ""))
        self.assertEqual(analysis.target_attainment(most), (1.0, 1.0, "_link_busy"))
        v = analysis.violations({"link_bps": 1e9, "tenants": [few, most]})
        self.assertEqual([(x["tenant"], x["measure"]) for x in v], [("few", "attainment_p1")])
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            report.check_targets([{"name": "incast-tenantqos-tcp", "workload": "incast",
                                   "mode": "tenantqos-tcp", "skipped": None, "link_bps": 1e9,
                                   "tenants": [few]}], {})
        self.assertIn("[MISS] incast/tenantqos-tcp: few attainment p50 1.000 (>= 0.99), p1 0.300 "
                      "(>= 0.95) over all windows with demand (15 busy of 90 contended windows "
                      "with demand); too few busy windows", out.getvalue())


class Spec:
    def __init__(self, name, g, l, w, dscp):
        self.name, self.guarantee_bps, self.limit_bps, self.weight, self.dscp = name, g, l, w, dscp


DEMO = [Spec("tenant-a", 4e8, 6e8, 2, 26), Spec("tenant-b", 2e8, 4e8, 1, 18),
        Spec("noisy", 0, 1e9, 1, 10)]


class PeersTest(unittest.TestCase):
    def test_wire_rate_is_tc_plan_h(self):
        # tests/unit/tc/plan_test.cc WireFraming.PayloadToWireRate: 300 Mbit/s -> 40063882 B/s.
        self.assertEqual(math.ceil(peers.wire_rate(300e6) / 8), 40_063_882)

    def test_each_mode_models_its_tool(self):
        by = lambda pcs: {c.label: c for c in pcs}
        where, caps = peers.plan("caps", DEMO, 1e9)
        c = by(caps)
        self.assertEqual(where, "node")  # the NIC, both ways
        self.assertEqual(c["tenant-a"].rate, c["tenant-a"].ceil)
        self.assertEqual(c["tenant-a"].rate, int(peers.wire_rate(6e8)))
        self.assertEqual(c["noisy"].ceil, 1e9)  # a cap at the link caps nothing

        where, prio = peers.plan("priority", DEMO, 1e9)
        p = by(prio)
        self.assertEqual(where, "switch")
        self.assertEqual([p[n].prio for n in ("tenant-a", "tenant-b", "noisy", "default")],
                         [0, 1, 2, 7])
        self.assertTrue(all(x.ceil == 1e9 and x.rate == 1e7 for x in prio))

        _, static = peers.plan("static", DEMO, 1e9)
        s = by(static)
        self.assertEqual(s["tenant-b"].rate, s["tenant-b"].ceil)
        self.assertEqual(s["tenant-b"].rate, int(peers.wire_rate(2e8)))
        self.assertEqual(s["noisy"].minor, s["unguaranteed"].minor)  # the rest, shared
        classes = peers.classes(static)
        self.assertEqual(len(classes), 4)  # default, a, b, the shared rest
        self.assertLessEqual(sum(x.rate for x in classes), 1e9)

        _, weights = peers.plan("weights", DEMO, 1e9)
        w = by(weights)
        self.assertAlmostEqual(w["tenant-a"].rate / w["tenant-b"].rate, 2.0, places=3)
        self.assertEqual(w["tenant-a"].quantum, 2 * w["noisy"].quantum)
        self.assertLessEqual(sum(x.rate for x in weights), 1e9)
        self.assertTrue(all(x.ceil == 1e9 for x in weights))

    def topo(self, nodes=4, rails=1):
        """A Topology's objects without creating anything."""
        return topology.Topology(prefix="tqx", nodes=nodes, link_bits=int(1e9),
                                 buffer_bytes=500_000, rails=rails)

    def test_a_mode_the_kernel_refuses_is_unavailable_with_the_reason(self):
        def run(argv, netns=None, check=True):
            if check and "htb" in argv and argv[2] == "add" and argv[1] == "qdisc":
                raise RuntimeError("command failed (2)\nError: Specified qdisc kind is unknown.")

        with self.assertRaises(peers.PeerUnavailable) as e:
            peers.install(self.topo(), "weights", DEMO, run)
        self.assertIn("qdisc kind is unknown", str(e.exception))
        self.assertIn("in tqx-switch", str(e.exception))

    def test_switch_modes_go_on_every_port_towards_a_node_with_the_byte_bound(self):
        calls = []
        peers.install(self.topo(nodes=4, rails=2), "static", DEMO,
                      lambda argv, netns=None, check=True: calls.append((netns, argv)))
        roots = sorted(argv[4] for ns, argv in calls if argv[:3] == ["tc", "qdisc", "add"]
                       and "root" in argv)
        self.assertEqual(roots, sorted(f"tqxp{i}" + (f"r{r}" if r else "")
                                       for i in range(1, 5) for r in range(2)))
        fifos = [argv for _, argv in calls if "bfifo" in argv]
        self.assertTrue(fifos and all(a[-2:] == ["limit", "500000"] for a in fifos), fifos)
        self.assertEqual({ns for ns, _ in calls}, {"tqx-switch"})

    def test_caps_shape_each_nic_both_ways_through_an_ingress_ifb(self):
        calls = []
        peers.install(self.topo(nodes=2), "caps", DEMO,
                      lambda argv, netns=None, check=True: calls.append((netns, argv)))
        n1 = [argv for ns, argv in calls if ns == "tqx-node1"]
        self.assertIn(["ip", "link", "add", "ifb0", "type", "ifb"], n1)
        self.assertIn(["tc", "qdisc", "add", "dev", "eth0", "handle", "ffff:", "ingress"], n1)
        self.assertTrue(any("mirred" in a and a[-1] == "ifb0" for a in n1), n1)
        roots = {a[4] for a in n1 if a[:3] == ["tc", "qdisc", "add"] and "root" in a}
        self.assertEqual(roots, {"eth0", "ifb0"})  # egress on the NIC, ingress on the ifb
        self.assertFalse([a for a in n1 if "bfifo" in a])  # host queues, not switch buffers
        self.assertFalse([ns for ns, _ in calls if ns == "tqx-switch"])


class TopologyTest(unittest.TestCase):
    def test_port_buffer_as_time_at_the_link_rate_or_as_a_size(self):
        self.assertEqual(topology.buffer_to_bytes("4ms", 1e9), 500_000)
        self.assertEqual(topology.buffer_to_bytes("500us", 10e9), 625_000)
        self.assertEqual(topology.buffer_to_bytes("256KiB", 1e9), 262_144)
        self.assertEqual(topology.buffer_to_bytes("300KB", 1e9), 300_000)
        self.assertEqual(topology.buffer_to_bytes("10", 1e9), 3028)  # two full frames at least
        for bad in ("", "lots", "-1ms", "0", "4 parsecs"):
            with self.assertRaises(ValueError):
                topology.buffer_to_bytes(bad, 1e9)

    def test_nodes_rails_and_their_names(self):
        t = topology.Topology(prefix="tqx", nodes=3, rails=2)
        self.assertEqual(t.buffer_bytes, 500_000)  # the default: 4 ms at 1 Gbit/s
        self.assertEqual([s.bridge for s in t.switches], ["br0", "br1"])
        self.assertEqual(len(t.ports()), 6)
        link = t.link(3, 1)
        self.assertEqual((link.dev, link.addr, link.port.dev, link.switch.bridge),
                         ("eth1", "10.213.1.3", "tqxp3r1", "br1"))
        self.assertEqual(t.node_devs(), ["eth0", "eth1"])
        for bad in (dict(nodes=1), dict(nodes=9), dict(rails=3), dict(prefix="Bad")):
            with self.assertRaises(ValueError):
                topology.Topology(**bad)


class PlacementTest(unittest.TestCase):
    def test_who_sends_and_who_receives(self):
        P = workload.Placement
        self.assertEqual((P("incast", (3, 1)).receivers(), P("incast", (3, 2, 4)).senders()),
                         ([3], [2, 4]))
        self.assertEqual(P("alltoall", (2, 3, 4)).receivers(), [2, 3, 4])
        self.assertEqual(P("incast", (3, 2, 4)).describe(), "incast 2,4->3")
        self.assertEqual(P("allreduce", (1, 2), rail=1).describe(), "ring 1-2 rail 1")
        for bad in (("incast", (3,)), ("allreduce", (1, 1)), ("gather", (1, 2))):
            with self.assertRaises(ValueError):
                P(*bad)

    def test_the_placed_workloads_are_the_issues(self):
        sc = report.workload_scenario("incast", "static", DEMO, 1e9, 10)
        self.assertEqual((sc.name, sc.tenants, sc.policy), ("incast-static", ["tenant-a", "noisy"],
                                                            ["tenant-a", "noisy"]))
        self.assertEqual({n: (p.pattern, p.nodes) for n, p in sc.placement.items()},
                         {"tenant-a": ("incast", [3, 1]), "noisy": ("incast", [3, 2, 4])})
        self.assertEqual(sc.nodes_used(2), 4)
        sc = report.workload_scenario("asymmetric", "none", DEMO, 1e9, 10)
        self.assertEqual({n: p.nodes for n, p in sc.placement.items()},
                         {"tenant-a": [1, 2], "noisy": [2, 3, 4]})
        sc = report.workload_scenario("rails", "none", DEMO, 1e9, 10)
        self.assertEqual({n: p.rail for n, p in sc.placement.items()},
                         {"tenant-a": 0, "noisy": 0, "tenant-b": 1})
        self.assertEqual(sc.rails_used(), 2)
        with self.assertRaises(ValueError):  # one tenant: no noisy neighbour to place
            report.workload_scenario("incast", "none", DEMO[:1], 1e9, 10)
        # A placed-only run has no two-node baselines; the bench adds the ingress reaction.
        names = [s.name for s in report.bench_scenarios(DEMO, 1e9, True, ["none",
                 "tenantqos-rdma", "tenantqos-tcp"], ["incast"])]
        self.assertEqual(names, ["incast-none", "incast-tenantqos-rdma", "incast-tenantqos-tcp",
                                 "incast-wake-tenantqos-rdma", "incast-wake-tenantqos-tcp"])
        names = [s.name for s in report.demo_scenarios(DEMO, 1e9, 8, ["none"], ["alltoall"])]
        self.assertEqual(names, ["alltoall-none"])


class ReportTest(unittest.TestCase):
    def test_a_skipped_mode_is_named_and_the_rest_of_the_table_prints(self):
        def tenant(name, g, l, bw):
            return {"name": name, "guarantee_bps": g, "limit_bps": l, "busbw_bps": bw,
                    "attainment_p50_link_busy": 1.0, "attainment_p1_link_busy": 0.97,
                    "cap_conformance_max": 0.99}
        results = [
            {"name": "standalone-tenant-a", "tenants": [tenant("tenant-a", 4e8, 6e8, 8e8)]},
            {"name": "contended-caps", "workload": "backlogged", "mode": "caps",
             "skipped": "caps: tc ... refused", "tenants": [], "violations": []},
            {"name": "contended-tenantqos-tcp", "workload": "backlogged",
             "mode": "tenantqos-tcp", "skipped": None, "link_bps": 1e9,
             "link_utilization": 0.97, "utilization_over_demand": 0.96,
             "tenants": [tenant("tenant-a", 4e8, 6e8, 4.4e8)], "violations": []}]
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            report.print_table(results, 1e9, ["caps", "tenantqos-tcp"], ["backlogged"],
                               lambda w: DEMO[:1])
            missed = report.check_targets(results, {})
        text = out.getvalue()
        self.assertIn("skipped: contended-caps: caps: tc ... refused", text)
        self.assertIn("0.440  55% 1.00/0.97 0.99", text)
        self.assertIn("backlogged/caps: skipped (caps: tc ... refused)", text)
        self.assertIn("[PASS] backlogged/tenantqos-tcp: tenant-a attainment p50 1.000", text)
        self.assertEqual(missed, 0)

    def test_receiver_targets_name_both_ends_and_the_ingress_reaction(self):
        a = {"name": "tenant-a", "guarantee_bps": 4e8, "limit_bps": 6e8, "busbw_bps": 3e8,
             "attainment_p50_link_busy": 0.74, "attainment_p1_link_busy": 0.2,
             "cap_conformance_max": 1.64, "cap_conformance_rx_max": 1.5,
             "cap_conformance_tx_max": 1.64}
        results = [
            {"name": "incast-tenantqos-rdma", "workload": "incast", "mode": "tenantqos-rdma",
             "skipped": None, "link_bps": 1e9, "utilization_over_demand": 0.99,
             "tenants": [a], "violations": []},
            {"name": "incast-none", "workload": "incast", "mode": "none", "skipped": None,
             "link_bps": 1e9, "tenants": [a], "violations": analysis.violations(
                 {"link_bps": 1e9, "tenants": [a]})},
            {"name": "incast-wake-tenantqos-rdma", "workload": "incast-wake",
             "mode": "tenantqos-rdma", "skipped": None, "link_bps": 1e9, "tenants": [a],
             "reaction_ms": {"tenant-a": {"wake_to_guarantee_p50": 80.2, "cycles": 4}}}]
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            missed = report.check_targets(results, {})
        text = out.getvalue()
        self.assertIn("[MISS] incast/tenantqos-rdma: tenant-a attainment p50 0.740", text)
        self.assertIn("cap conformance max 1.640 (tenant-a; received 1.500, sent 1.640", text)
        self.assertIn("[MISS] incast-wake/tenantqos-rdma: tenant-a waking has its guarantee at "
                      "its receiver in 80.2 ms p50 (<= 20 ms, 4 cycles)", text)
        self.assertNotIn("incast-wake/tenantqos-rdma: tenant-a attainment", text)
        self.assertIn("incast/none: violates guarantee (tenant-a attainment_p50_link_busy 0.740)",
                      text)
        self.assertEqual(missed, 3)  # attainment, cap conformance, ingress reaction


class FabricTest(unittest.TestCase):
    """The leaf/spine fabric (issue 21): its objects, the peers on the spine's ports, the
    policy's topology, the workloads and their targets."""

    def topo(self, **kw):
        return topology.Topology(prefix="tqx", nodes=4, link_bits=int(1e9),
                                 buffer_bytes=500_000, fabric=True, **kw)

    def test_two_leaves_and_a_spine_with_a_port_at_each_end(self):
        t = self.topo(spine_bits=int(5e8))
        self.assertEqual([s.bridge for s in t.switches], ["br0", "br1"])
        self.assertEqual([t.link(i).switch.bridge for i in range(1, 5)],
                         ["br0", "br0", "br1", "br1"])
        self.assertEqual(t.spine.devs, ("tqxs0", "tqxs1"))
        self.assertEqual(t.spine.arrive_dev, ("tqxs1", "tqxs0"))  # counted at the far leaf
        self.assertEqual([(p.dev, p.rate_bits, p.buffer_bytes) for p in t.spine.ports],
                         [("tqxs0", 5e8, 250_000), ("tqxs1", 5e8, 250_000)])  # 4 ms each
        self.assertEqual(len(t.ports()), 6)  # 4 towards nodes, 2 on the spine
        self.assertEqual(t.leaf_groups(), [("leaf-1", ["node1", "node2"]),
                                           ("leaf-2", ["node3", "node4"])])
        for bad in (dict(nodes=3), dict(nodes=4, rails=2)):
            with self.assertRaises(ValueError):
                topology.Topology(prefix="tqx", fabric=True, **bad)

    def test_switch_peers_configure_the_spine_at_its_rate_and_caps_stay_at_hosts(self):
        calls = []
        peers.install(self.topo(spine_bits=int(5e8)), "weights", DEMO,
                      lambda argv, netns=None, check=True: calls.append(argv))
        roots = sorted(a[4] for a in calls if a[:3] == ["tc", "qdisc", "add"] and "root" in a)
        self.assertEqual(roots, ["tqxp1", "tqxp2", "tqxp3", "tqxp4", "tqxs0", "tqxs1"])
        link = {a[4]: a[a.index("rate") + 1] for a in calls
                if a[:3] == ["tc", "class", "add"] and a[a.index("classid") + 1] == "1:1"}
        self.assertEqual((link["tqxs0"], link["tqxp1"]), ("500000000bit", "1000000000bit"))
        calls = []
        peers.install(self.topo(), "caps", DEMO,
                      lambda argv, netns=None, check=True: calls.append(argv))
        self.assertFalse([a for a in calls if "tqxs0" in a or "tqxs1" in a])

    def test_the_policy_has_the_leaves_as_a_shared_link(self):
        from tqbed import scenarios
        specs = [scenarios.TenantSpec(t.name, t.guarantee_bps, t.limit_bps, t.weight, k + 1,
                                      t.dscp) for k, t in enumerate(DEMO)]
        text = scenarios.policy_yaml(1e9, specs, 5, shared=(1e9, self.topo().leaf_groups()))
        self.assertIn("sharedLinks:\n  - name: leaf-uplink\n    capacity: 1000000000\n"
                      "    headroom: 5%\n    groups:\n      - name: leaf-1\n"
                      "        nodes: [node1, node2]\n      - name: leaf-2\n"
                      "        nodes: [node3, node4]\ntenants:", text)
        self.assertNotIn("sharedLinks", scenarios.policy_yaml(1e9, specs, 5))

    def test_the_workloads_cross_the_spine_both_ways(self):
        from tqbed import scenarios
        sc = report.workload_scenario("fabric", "static", DEMO, 1e9, 10)
        self.assertTrue(sc.fabric)
        self.assertEqual({n: p.nodes for n, p in sc.placement.items()},
                         {"tenant-a": [1, 3], "tenant-b": [2, 4], "noisy": [1, 4]})
        self.assertEqual(sc.policy, ["tenant-a", "tenant-b", "noisy"])
        runner = scenarios.Runner(self.topo(), None, None, None, None, 1e9, 5, DEMO)
        for p in sc.placement.values():
            self.assertEqual(runner.spine_directions(p), [0, 1])
        self.assertEqual(runner.spine_directions(workload.Placement("allreduce", (1, 2))), [])
        self.assertEqual(runner.spine_directions(workload.Placement("incast", (3, 1, 2))), [0])
        sc = report.workload_scenario("fabric-onoff", "none", DEMO, 1e9, 10)
        self.assertEqual(set(sc.on_off), {"tenant-b", "noisy"})
        self.assertEqual(sc.report_ms, 10)
        names = [s.name for s in report.bench_scenarios(
            DEMO, 1e9, True, ["none", "tenantqos-tcp"], ["fabric-failover"])]
        self.assertEqual(names, ["fabric-failover-tenantqos-tcp"])  # the allocator's own
        with self.assertRaises(ValueError):  # no tenant-b to place
            report.workload_scenario("fabric", "none", DEMO[::2], 1e9, 10)

    def test_the_caps_reaction_from_the_agents_metrics(self):
        from tqbed import capsprobe
        text = ('# HELP x\ntenantqos_fabric_link_cap_bytes_per_second{direction="tx",'
                'link="leaf-uplink",node="node2",tenant="tenant-b"} 2.5e+07\n'
                'tenantqos_fabric_link_cap_bytes_per_second{direction="rx",link="leaf-uplink",'
                'node="node2",tenant="noisy"} 1e6\ntenantqos_fabric_link_bytes_total{} 5\n')
        self.assertEqual(capsprobe.parse_caps(text),
                         {("tenant-b", "leaf-uplink", "tx"): 2.5e7,
                          ("noisy", "leaf-uplink", "rx"): 1e6})
        # Two nodes; tenant-b's caps rise 120 ms after its wake at t=10 and fall 70 ms after it
        # sleeps at 10.3; the edge at 11.0 changes nothing (left out).
        samples = []
        for k in range(0, 40):
            t = 9.9 + k * 0.05
            v = 3e7 if 10.12 <= t < 10.37 else 1e7
            for node in (2, 4):
                samples.append((t + node * 1e-4, node, {("tenant-b", "l", "tx"): v / 2,
                                                        ("noisy", "l", "tx"): 5.0}))
        series = capsprobe.tenant_caps(samples, "tenant-b")
        self.assertEqual(series[-1][1], 1e7)
        delays = capsprobe.reaction_ms(series, [10.0, 10.3, 11.0])
        self.assertEqual(len(delays), 2)
        self.assertAlmostEqual(delays[0], 150, delta=1)  # first scrape round after the rise
        self.assertAlmostEqual(delays[1], 100, delta=1)
        # Wakes at 0.8 s of every second, sleeps at 0.1 s (the wall clock's).
        edges = capsprobe.schedule_edges("300:700:800", 10.0, 12.0)
        self.assertEqual([round(e, 3) for e in edges], [10.1, 10.8, 11.1, 11.8])

    def test_targets_on_the_spine_a_mode_not_run_and_the_failover(self):
        a = {"name": "tenant-a", "guarantee_bps": 4e8, "limit_bps": 6e8, "busbw_bps": 5e8,
             "attainment_p50_link_busy": 1.4, "attainment_p1_link_busy": 1.2,
             "cap_conformance_max": 1.0, "cap_conformance_rx_max": 1.0,
             "cap_conformance_tx_max": 0.9}
        results = [
            {"name": "fabric-tenantqos-rdma", "workload": "fabric", "mode": "tenantqos-rdma",
             "skipped": "agent has no cluster-allocator client", "tenants": [],
             "violations": []},
            {"name": "fabric-failover-tenantqos-tcp", "workload": "fabric-failover",
             "mode": "tenantqos-tcp", "skipped": None, "link_bps": 1e9,
             "utilization_over_demand": 0.97, "tenants": [a], "violations": [],
             "failover": {"killed_replica": 1, "takeover_ms": 2100.0, "fallback_ms": 3000,
                          "longest_below_guarantee_ms": {"tenant-a": 3200.0}}},
            {"name": "fabric-onoff-tenantqos-tcp", "workload": "fabric-onoff",
             "mode": "tenantqos-tcp", "skipped": None, "link_bps": 1e9, "tenants": [],
             "reaction_ms": {"tenant-b": {"wake_to_guarantee_p50": 120.0, "cycles": 5}}}]
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            report.print_table(results, 1e9, ["tenantqos-rdma"], ["fabric"], lambda w: DEMO)
            missed = report.check_targets(results, {})
        text = out.getvalue()
        self.assertIn("not run: fabric-tenantqos-rdma: agent has no cluster-allocator client",
                      text)
        self.assertIn("[MISS] fabric/tenantqos-rdma: not run: agent has no", text)
        self.assertIn("[PASS] fabric-failover/tenantqos-tcp: tenant-a attainment on the spine "
                      "p50 1.400", text)
        self.assertIn("[MISS] fabric-failover/tenantqos-tcp: active allocator killed (-9): a "
                      "standby active after 2100 ms; the longest time a tenant had < 0.95 x its "
                      "guarantee on the spine after it: 3200 ms (tenant-a; <= the fallback "
                      "window 3000 ms)", text)
        self.assertIn("[PASS] fabric-onoff/tenantqos-tcp: tenant-b waking has its guarantee on "
                      "the spine in 120.0 ms p50 (<= 200 ms", text)
        self.assertEqual(missed, 2)  # not run, failover too long


def main():
    global analysis
    p = argparse.ArgumentParser()
    p.add_argument("--source-dir", required=True)
    args, rest = p.parse_known_args()
    sys.path.insert(0, args.source_dir + "/testbed")
    global peers, report, topology, workload
    from tqbed import analysis as a, peers as p, report as r, topology as t, workload as w
    analysis, peers, report, topology, workload = a, p, r, t, w
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
