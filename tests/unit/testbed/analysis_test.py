"""Unit tests of the testbed's figures of merit (testbed/tqbed/analysis.py), its peer modes'
plans (peers.py) and its report (report.py): pure functions over synthetic series and results,
no namespaces, no processes.

  analysis_test.py --source-dir DIR [unittest args]
"""
import argparse
import contextlib
import io
import math
import sys
import unittest

analysis = peers = report = None


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
        mask = analysis.busy_mask([[a], [b]], 0.1, 0.0, 1.0, link)
        self.assertEqual(mask, [[k != 4 for k in range(10)]])
        fig = analysis.tenant_figures([b], 0.2e9, 0.4e9, 0.0, 1.0, width_s=0.1)
        self.assertLess(fig["attainment_p1"], 0.5)
        self.assertAlmostEqual(
            analysis.attainment_masked([b], 0.2e9, 0.1, 0.0, 1.0, mask)[1], 1.75)

    def test_a_starved_tenant_on_a_busy_link_still_counts(self):
        edges = [0.1 * k for k in range(1, 11)]
        a = steady(0.85e9, 0.0, 1.0, edges)
        b = steady(0.1e9, 0.0, 1.0, edges)  # half its guarantee while the link is full
        mask = analysis.busy_mask([[a], [b]], 0.1, 0.0, 1.0, 1e9)
        self.assertTrue(all(mask[0]))
        self.assertAlmostEqual(
            analysis.attainment_masked([b], 0.2e9, 0.1, 0.0, 1.0, mask)[1], 0.5)

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
        u = analysis.utilization_over_demand([([a], always, 0.6e9), ([n], on, 1e9)], 1e9, 0.1,
                                             0.0, 1.0, lambda p: p)
        self.assertAlmostEqual(u, 0.95)  # the 3 windows with noisy on; not a's 0.6 alone
        self.assertIsNone(analysis.utilization_over_demand([([a], always, 0.6e9)], 1e9, 0.1, 0.0,
                                                           1.0, lambda p: p))


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
        self.assertEqual(where, "node")
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

    def test_a_mode_the_kernel_refuses_is_unavailable_with_the_reason(self):
        class Topo:
            nodes, link_bits, queue_packets, switch, node_dev = 2, int(1e9), 1000, "sw", "eth0"

            def switch_port(self, i):
                return f"p{i}"

            def node_ns(self, i):
                return f"n{i}"

        def run(argv, netns=None, check=True):
            if check and "htb" in argv and argv[2] == "add" and argv[1] == "qdisc":
                raise RuntimeError("command failed (2)\nError: Specified qdisc kind is unknown.")

        with self.assertRaises(peers.PeerUnavailable) as e:
            peers.install(Topo(), "weights", DEMO, run)
        self.assertIn("qdisc kind is unknown", str(e.exception))
        self.assertIn("in sw", str(e.exception))


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


def main():
    global analysis
    p = argparse.ArgumentParser()
    p.add_argument("--source-dir", required=True)
    args, rest = p.parse_known_args()
    sys.path.insert(0, args.source_dir + "/testbed")
    global peers, report
    from tqbed import analysis as a, peers as p, report as r
    analysis, peers, report = a, p, r
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
