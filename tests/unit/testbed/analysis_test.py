"""Unit tests of the testbed's figures of merit (testbed/tqbed/analysis.py): pure functions over
synthetic series, no namespaces, no processes.

  analysis_test.py --source-dir DIR [unittest args]
"""
import argparse
import sys
import unittest

analysis = None


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
        self.assertAlmostEqual(analysis.attainment_p1_busy([b], 0.2e9, 0.1, 0.0, 1.0, mask), 1.75)

    def test_a_starved_tenant_on_a_busy_link_still_counts(self):
        edges = [0.1 * k for k in range(1, 11)]
        a = steady(0.85e9, 0.0, 1.0, edges)
        b = steady(0.1e9, 0.0, 1.0, edges)  # half its guarantee while the link is full
        mask = analysis.busy_mask([[a], [b]], 0.1, 0.0, 1.0, 1e9)
        self.assertTrue(all(mask[0]))
        self.assertAlmostEqual(analysis.attainment_p1_busy([b], 0.2e9, 0.1, 0.0, 1.0, mask), 0.5)

    def test_no_guarantee_has_no_attainment(self):
        self.assertIsNone(analysis.attainment_p1_busy([[]], 0, 0.1, 0.0, 1.0, [[True]]))


def main():
    global analysis
    p = argparse.ArgumentParser()
    p.add_argument("--source-dir", required=True)
    args, rest = p.parse_known_args()
    sys.path.insert(0, args.source_dir + "/testbed")
    from tqbed import analysis as a
    analysis = a
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
