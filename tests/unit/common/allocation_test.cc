#include "common/allocation.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

namespace tq {
namespace {

constexpr uint64_t kU = kUnboundedDemand;
constexpr uint64_t kCap = 100'000'000;  // 100 MB/s: percentages below are of this
constexpr uint64_t kPct = kCap / 100;

TenantInput t(uint64_t g, uint64_t l, uint32_t w, uint64_t d, bool active = true) {
  return TenantInput{g, l, w, d, active};
}

std::vector<uint64_t> rates(const std::vector<Allocation>& a) {
  std::vector<uint64_t> r;
  for (const Allocation& x : a) r.push_back(x.rate);
  return r;
}
std::vector<uint64_t> buckets(const std::vector<Allocation>& a) {
  std::vector<uint64_t> r;
  for (const Allocation& x : a) r.push_back(x.bucket_rate);
  return r;
}

struct Case {
  const char* name;
  uint64_t capacity;
  std::vector<TenantInput> tenants;
  std::vector<uint64_t> want_rates;
  std::vector<uint64_t> want_buckets;  // empty: not checked
};

TEST(Allocate, Table) {
  const Case kCases[] = {
      {"source article: a 40/60 w2, b 20/40 w1, noisy 0/100 w1, all backlogged",
       kCap,
       {t(40 * kPct, 60 * kPct, 2, kU), t(20 * kPct, 40 * kPct, 1, kU), t(0, kCap, 1, kU)},
       {60 * kPct, 30 * kPct, 10 * kPct},
       {60 * kPct, 30 * kPct, 10 * kPct}},
      {"both at limit: spare beyond a's limit flows on to b",
       kCap,
       {t(40 * kPct, 60 * kPct, 2, kU), t(20 * kPct, 40 * kPct, 1, kU)},
       {60 * kPct, 40 * kPct},
       {}},
      {"a idle: its guarantee is spare, but its bucket keeps the guarantee",
       kCap,
       {t(40 * kPct, 60 * kPct, 2, 0), t(20 * kPct, 40 * kPct, 1, kU), t(0, kCap, 1, kU)},
       {0, 40 * kPct, 60 * kPct},
       {40 * kPct, 40 * kPct, 60 * kPct}},
      {"a below its guarantee gets its demand; bucket at guarantee",
       kCap,
       {t(40 * kPct, 60 * kPct, 2, 10 * kPct), t(20 * kPct, 100 * kPct, 1, kU)},
       {10 * kPct, 90 * kPct},
       {40 * kPct, 90 * kPct}},
      {"demands below guarantees: spare stays unused (nobody wants it)",
       kCap,
       {t(40 * kPct, 60 * kPct, 2, 5 * kPct), t(20 * kPct, 40 * kPct, 1, 7 * kPct)},
       {5 * kPct, 7 * kPct},
       {40 * kPct, 20 * kPct}},
      {"demand within its fair share is met exactly, the rest by weight",
       kCap,
       {t(10 * kPct, 90 * kPct, 1, 20 * kPct), t(10 * kPct, 90 * kPct, 3, kU),
        t(10 * kPct, 90 * kPct, 1, kU)},
       {20 * kPct, 10 * kPct + 45 * kPct, 10 * kPct + 15 * kPct},
       {}},
      {"demand above its fair share gets the fair share (24 of 25)",
       kCap,
       {t(10 * kPct, 90 * kPct, 1, 25 * kPct), t(10 * kPct, 90 * kPct, 3, kU),
        t(10 * kPct, 90 * kPct, 1, kU)},
       {24 * kPct, 52 * kPct, 24 * kPct},
       {}},
      {"inactive tenant: rate 0, bucket at its guarantee for its first process",
       kCap,
       {t(30 * kPct, 50 * kPct, 1, kU, false), t(20 * kPct, 100 * kPct, 1, kU)},
       {0, 100 * kPct},
       {30 * kPct, 100 * kPct}},
      {"limit above capacity: capacity", kCap, {t(0, 10 * kCap, 1, kU)}, {kCap}, {kCap}},
      {"guarantees oversubscribed (admission failed): scaled in proportion",
       kCap,
       {t(80 * kPct, 100 * kPct, 1, kU), t(40 * kPct, 100 * kPct, 5, kU)},
       {kCap * 2 / 3 + 1, kCap / 3},
       {80 * kPct, 40 * kPct}},
      {"guarantee above limit counts as the limit",
       kCap,
       {t(50 * kPct, 30 * kPct, 1, kU), t(0, kCap, 1, kU)},
       {30 * kPct, 70 * kPct},
       {30 * kPct, 70 * kPct}},
      {"zero capacity", 0, {t(0, kCap, 1, kU), t(0, kCap, 1, kU)}, {0, 0}, {}},
      {"no tenants", kCap, {}, {}, {}},
      {"weight 0 counts as 1",
       kCap,
       {t(0, kCap, 0, kU), t(0, kCap, 1, kU)},
       {50 * kPct, 50 * kPct},
       {}},
      {"rounding leftovers go out one byte each, in order",
       10,
       {t(0, 10, 1, kU), t(0, 10, 1, kU), t(0, 10, 1, kU)},
       {4, 3, 3},
       {}},
      {"huge rates do not overflow (400 Gbit/s, weights up to 1e6)",
       50'000'000'000ull,
       {t(0, kU, 1'000'000, kU), t(0, kU, 999'999, kU)},
       {25'000'012'501ull, 24'999'987'499ull},
       {}},
  };
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    auto got = allocate(c.capacity, c.tenants);
    ASSERT_EQ(got.size(), c.tenants.size());
    EXPECT_EQ(rates(got), c.want_rates);
    if (!c.want_buckets.empty()) {
      EXPECT_EQ(buckets(got), c.want_buckets);
    }
  }
}

// Participants that distrust each other (the uids of the default tenant): an equal guarantee
// each, the spare by demand, the allocations never above the rate.
TEST(SplitRate, EqualGuaranteesSpareByDemandNeverAboveTheRate) {
  // One wants everything, one is idle: the first gets all of it, the idle one's bucket keeps its
  // equal share (it has it at once when it starts).
  auto a = splitRate(kCap, {kU, 0}, {true, true});
  EXPECT_EQ(rates(a), (std::vector<uint64_t>{kCap, 0}));
  EXPECT_EQ(buckets(a), (std::vector<uint64_t>{kCap, kCap / 2}));
  // Both want everything: halves, whatever either claims beyond that.
  a = splitRate(kCap, {kU, kU}, {true, true});
  EXPECT_EQ(rates(a), (std::vector<uint64_t>{kCap / 2, kCap / 2}));
  // One claims everything, two want a little: those get what they want, the claimer the rest.
  a = splitRate(kCap, {kU, 10 * kPct, 5 * kPct}, {true, true, true});
  EXPECT_EQ(rates(a), (std::vector<uint64_t>{85 * kPct, 10 * kPct, 5 * kPct}));
  // Three claimers and one that wants more than its third: each gets a quarter at least.
  a = splitRate(kCap, {kU, kU, kU, kU}, {true, true, true, true});
  for (const Allocation& x : a) EXPECT_EQ(x.rate, 25 * kPct);
  // An inactive participant (no process) gets nothing but keeps its share in its bucket.
  a = splitRate(kCap, {kU, kU}, {true, false});
  EXPECT_EQ(rates(a), (std::vector<uint64_t>{kCap, 0}));
  EXPECT_EQ(buckets(a)[1], kCap / 2);
  EXPECT_TRUE(splitRate(kCap, {}, {}).empty());
  // Random demands: the allocations never sum past the rate, each active participant gets at
  // least min(demand, rate / n), and no bucket is below rate / n.
  std::mt19937_64 rng(7);
  for (int round = 0; round < 2000; ++round) {
    const size_t n = 1 + rng() % 9;
    std::vector<uint64_t> d(n);
    std::vector<bool> act(n);
    for (size_t i = 0; i < n; ++i) {
      d[i] = rng() % 4 == 0 ? kU : rng() % (2 * kCap);
      act[i] = rng() % 5 != 0;
    }
    a = splitRate(kCap, d, act);
    uint64_t sum = 0;
    for (size_t i = 0; i < n; ++i) {
      sum += a[i].rate;
      if (act[i]) {
        EXPECT_GE(a[i].rate, std::min(d[i], kCap / n));
      }
      EXPECT_GE(a[i].bucket_rate, kCap / n);
    }
    EXPECT_LE(sum, kCap);
  }
}

TEST(Allocate, Describe) {
  auto got = allocate(kCap, {t(40 * kPct, 60 * kPct, 2, kU), t(0, kCap, 1, kU)});
  EXPECT_EQ(describeAllocation({"a", "b"}, got), "a=480Mbps/b=320Mbps");
}

// ---- properties over random inputs ----------------------------------------------------------

struct Scenario {
  uint64_t capacity;
  std::vector<TenantInput> tenants;
};

Scenario randomScenario(std::mt19937_64& rng) {
  Scenario s;
  auto pick = [&](uint64_t lo, uint64_t hi) {
    return std::uniform_int_distribution<uint64_t>(lo, hi)(rng);
  };
  // Small capacities exercise rounding; large ones overflow paths.
  const uint64_t caps[] = {0, 1, 7, 1000, 125'000'000, 12'500'000'000ull, 50'000'000'000ull};
  s.capacity = rng() % 4 == 0 ? caps[rng() % 7] : pick(1, 50'000'000'000ull);
  size_t n = static_cast<size_t>(pick(1, 9));
  // Most scenarios respect admission (guarantees fit); one in five does not.
  bool admitted = rng() % 5 != 0;
  uint64_t budget = s.capacity;
  for (size_t i = 0; i < n; ++i) {
    TenantInput x;
    uint64_t g = pick(0, s.capacity + 1);
    if (admitted) g = rng() % 4 == 0 ? 0 : pick(0, budget / 2 + 1) % (budget + 1);
    if (admitted) budget -= std::min(budget, g);
    x.guarantee = g;
    x.limit = rng() % 3 == 0 ? kU : g + pick(0, s.capacity + 1);
    if (rng() % 10 == 0) x.limit = g / 2;  // guarantee above limit
    x.weight = static_cast<uint32_t>(pick(0, 10));
    switch (rng() % 5) {
      case 0: x.demand = 0; break;
      case 1: x.demand = kU; break;
      case 2: x.demand = pick(0, g + 1); break;
      default: x.demand = pick(0, 2 * s.capacity + 2); break;
    }
    x.active = rng() % 10 != 0;
    s.tenants.push_back(x);
  }
  return s;
}

TEST(AllocateProperties, HoldForRandomInputs) {
  std::mt19937_64 rng(20261129);
  for (int iter = 0; iter < 50'000; ++iter) {
    Scenario s = randomScenario(rng);
    auto got = allocate(s.capacity, s.tenants);
    ASSERT_EQ(got.size(), s.tenants.size());
    const size_t n = s.tenants.size();
    unsigned __int128 sum = 0, sum_base = 0, sum_bucket = 0, unused_guarantees = 0;
    std::vector<uint64_t> cap(n), base(n);
    for (size_t i = 0; i < n; ++i) {
      const TenantInput& x = s.tenants[i];
      cap[i] = x.active ? std::min(x.demand, x.limit) : 0;
      base[i] = std::min(cap[i], x.guarantee);
      sum += got[i].rate;
      sum_base += base[i];
      sum_bucket += got[i].bucket_rate;
      uint64_t g = std::min(x.guarantee, x.limit);
      if (g > got[i].rate) unused_guarantees += g - got[i].rate;
    }
    SCOPED_TRACE("iteration " + std::to_string(iter) + " capacity " + std::to_string(s.capacity) +
                 " tenants " + std::to_string(n));
    // 1. sum <= capacity
    ASSERT_LE(sum, s.capacity);
    for (size_t i = 0; i < n; ++i) {
      const TenantInput& x = s.tenants[i];
      // 2. never above limit or demand; inactive tenants get nothing
      ASSERT_LE(got[i].rate, cap[i]);
      // 3. bucket = max(rate, guarantee capped by limit)
      ASSERT_EQ(got[i].bucket_rate, std::max(got[i].rate, std::min(x.guarantee, x.limit)));
      ASSERT_LE(got[i].bucket_rate, x.limit);
      // 4. with guarantees that fit: everyone gets min(guarantee, demand)
      if (sum_base <= s.capacity) {
        ASSERT_GE(got[i].rate, base[i]);
      }
    }
    // 5. the buckets' oversubscription is bounded by the unused guarantees
    ASSERT_LE(sum_bucket, static_cast<unsigned __int128>(s.capacity) + unused_guarantees);
    if (sum_base > s.capacity) {
      ASSERT_EQ(sum, s.capacity) << "oversubscribed guarantees use the whole link";
      continue;
    }
    // 6. work-conserving: capacity left unused only if every active tenant has all it wants
    if (sum < s.capacity) {
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[i].rate, cap[i]) << "tenant " << i;
    }
    // 7. spare split by weight: tenants still wanting more got the same extra per weight unit
    //    (within rounding); tenants that were capped got no more than that level.
    double level = -1;
    std::vector<double> unconstrained;
    for (size_t i = 0; i < n; ++i) {
      if (got[i].rate >= cap[i]) continue;
      double w = std::max<uint32_t>(s.tenants[i].weight, 1);
      unconstrained.push_back(static_cast<double>(got[i].rate - base[i]) / w);
    }
    if (!unconstrained.empty()) {
      auto [lo, hi] = std::minmax_element(unconstrained.begin(), unconstrained.end());
      ASSERT_LE(*hi - *lo, 2.0) << "unequal extra per weight among unconstrained tenants";
      level = *hi;
      for (size_t i = 0; i < n; ++i) {
        if (got[i].rate < cap[i] || got[i].rate == base[i]) continue;
        double w = std::max<uint32_t>(s.tenants[i].weight, 1);
        ASSERT_LE(static_cast<double>(got[i].rate - base[i]) / w, level + 2.0)
            << "capped tenant " << i << " got more than the water level";
      }
    }
  }
}

TEST(AllocateProperties, DeterministicAndOrderInsensitiveUpToOneByte) {
  std::mt19937_64 rng(7);
  for (int iter = 0; iter < 5'000; ++iter) {
    Scenario s = randomScenario(rng);
    auto a = allocate(s.capacity, s.tenants);
    EXPECT_EQ(rates(a), rates(allocate(s.capacity, s.tenants)));
    std::vector<size_t> perm(s.tenants.size());
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<TenantInput> shuffled;
    for (size_t i : perm) shuffled.push_back(s.tenants[i]);
    auto b = allocate(s.capacity, shuffled);
    for (size_t k = 0; k < perm.size(); ++k) {
      uint64_t x = a[perm[k]].rate, y = b[k].rate;
      ASSERT_LE(x > y ? x - y : y - x, 1u) << "iteration " << iter;
    }
  }
}

}  // namespace
}  // namespace tq
