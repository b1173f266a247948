// Backoff delays: growth, bounds, jitter, reset (pure: no clock involved).
#include "common/backoff.h"

#include <gtest/gtest.h>

#include <set>

namespace tq {
namespace {

TEST(BackoffTest, GrowsExponentiallyWithinJitterAndCaps) {
  BackoffOptions o{100'000'000, 5'000'000'000, 2.0, 0.2};
  Backoff b(o, 42);
  double base = 100e6;
  for (int i = 0; i < 20; ++i) {
    const int64_t d = b.nextDelayNs();
    const double lo = std::max(80e6, std::min(base, 5e9) * 0.8);
    const double hi = std::min(5e9, std::min(base, 5e9) * 1.2);
    EXPECT_GE(d, static_cast<int64_t>(lo) - 1) << "attempt " << i;
    EXPECT_LE(d, static_cast<int64_t>(hi) + 1) << "attempt " << i;
    base *= 2;
  }
  EXPECT_EQ(b.failures(), 20);
}

TEST(BackoffTest, BoundedForever) {
  Backoff b({100'000'000, 5'000'000'000, 2.0, 0.2}, 7);
  for (int i = 0; i < 10000; ++i) {
    const int64_t d = b.nextDelayNs();
    ASSERT_GE(d, 80'000'000);
    ASSERT_LE(d, 5'000'000'000);
  }
}

TEST(BackoffTest, ResetStartsOver) {
  Backoff b({100'000'000, 5'000'000'000, 2.0, 0.0}, 1);
  EXPECT_EQ(b.nextDelayNs(), 100'000'000);
  EXPECT_EQ(b.nextDelayNs(), 200'000'000);
  EXPECT_EQ(b.nextDelayNs(), 400'000'000);
  b.reset();
  EXPECT_EQ(b.failures(), 0);
  EXPECT_EQ(b.nextDelayNs(), 100'000'000);
}

TEST(BackoffTest, JitterSpreadsAgents) {
  // Two agents failing at the same moment must not retry in lockstep.
  std::set<int64_t> firsts;
  for (uint64_t seed = 1; seed <= 50; ++seed) {
    Backoff b({100'000'000, 5'000'000'000, 2.0, 0.2}, seed);
    b.nextDelayNs();
    firsts.insert(b.nextDelayNs());
  }
  EXPECT_GT(firsts.size(), 40u);
  EXPECT_GE(*firsts.begin(), 160'000'000);
  EXPECT_LE(*firsts.rbegin(), 240'000'000);
}

TEST(BackoffTest, DeterministicForSeed) {
  Backoff a({}, 99), b({}, 99);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(a.nextDelayNs(), b.nextDelayNs());
}

}  // namespace
}  // namespace tq
