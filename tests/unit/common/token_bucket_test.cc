#include "common/token_bucket.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>
#include <thread>
#include <vector>

namespace tq {
namespace {

constexpr int64_t kSec = 1'000'000'000;

TEST(TokenBucket, StartsFullAndRefusesWhenEmpty) {
  std::atomic<int64_t> state{0};
  BucketConfig cfg{1'000'000, 64 * 1024};  // 1 MB/s, 64 KiB burst
  int64_t now = 10 * kSec;
  EXPECT_EQ(bucketAvailable(state, now, cfg), 64 * 1024);
  EXPECT_TRUE(bucketTryTake(state, now, 64 * 1024, cfg));
  EXPECT_FALSE(bucketTryTake(state, now, 1, cfg));
  EXPECT_EQ(bucketReadyAt(state, now, 1000, cfg), now + 1'000'000);  // 1000 B at 1 MB/s = 1 ms
  now += 1'000'000;
  EXPECT_TRUE(bucketTryTake(state, now, 1000, cfg));
  EXPECT_FALSE(bucketTryTake(state, now, 1000, cfg));
}

TEST(TokenBucket, ZeroRateAdmitsNothing) {
  std::atomic<int64_t> state{0};
  EXPECT_FALSE(bucketTryTake(state, kSec, 1, BucketConfig{0, 1 << 20}));
}

TEST(TokenBucket, MessageLargerThanBurstGoesIntoDebt) {
  std::atomic<int64_t> state{0};
  BucketConfig cfg{1'000'000, 1000};
  int64_t now = kSec;
  EXPECT_TRUE(bucketTryTake(state, now, 10'000, cfg));  // full bucket admits one big message
  EXPECT_LT(bucketAvailable(state, now, cfg), 0);       // ... and leaves 9000 B of debt
  EXPECT_FALSE(bucketTryTake(state, now + 9'000'000, 1000, cfg));  // debt repaid at +9 ms,
  EXPECT_TRUE(bucketTryTake(state, now + 10'000'000, 1000, cfg));  // then 1000 B earned at +10 ms
}

// Simulated senders retrying whenever refused: achieved rate over 10 s must match the configured
// rate within the burst.
TEST(TokenBucket, LongRunRateIsExact) {
  for (uint64_t rate : {12'500'000ull, 125'000'000ull, 625'000'000ull}) {
    std::atomic<int64_t> state{0};
    BucketConfig cfg{rate, 256 * 1024};
    const int64_t start = 5 * kSec, end = start + 10 * kSec;
    uint64_t sent = 0;
    std::mt19937_64 rng(rate);
    for (int64_t now = start; now < end;) {
      uint64_t msg = 1 + rng() % (1 << 20);
      if (bucketTryTake(state, now, msg, cfg)) {
        sent += msg;
      } else {
        now = bucketReadyAt(state, now, msg, cfg);
      }
    }
    const double expected = static_cast<double>(rate) * 10.0;
    // Upper bound: rate*T + burst + one message (the last admission can go into debt).
    EXPECT_LE(static_cast<double>(sent), expected + cfg.burst_bytes + (1 << 20)) << rate;
    EXPECT_GE(static_cast<double>(sent), expected * 0.99) << rate;
  }
}

TEST(TokenBucket, ConcurrentTakersNeverExceedBudget) {
  std::atomic<int64_t> state{0};
  BucketConfig cfg{1'000'000'000, 1 << 20};
  const int64_t now = 100 * kSec;  // frozen time: exactly one burst is available
  std::atomic<uint64_t> admitted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        if (bucketTryTake(state, now, 1000, cfg)) admitted.fetch_add(1000);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LE(admitted.load(), 1u << 20);
  EXPECT_GE(admitted.load(), (1u << 20) - 1000);
}

TEST(TokenBucket, RateChangeTakesEffectImmediately) {
  std::atomic<int64_t> state{0};
  int64_t now = kSec;
  BucketConfig slow{1'000'000, 1000};
  ASSERT_TRUE(bucketTryTake(state, now, 1000, slow));
  BucketConfig fast{1'000'000'000, 1000};
  EXPECT_TRUE(bucketTryTake(state, now + 1000, 1000, fast));  // 1 us at 1 GB/s earns 1000 B
}

// The word is tenant-writable: whatever is written into it, a take never starts with more than
// one burst, and no value wedges the bucket.
TEST(TokenBucket, TamperedWordWinsAtMostOneBurst) {
  const BucketConfig cfg{1'000'000, 10'000};  // 1 B/us, 10 ms of burst
  const int64_t now = 100 * kSec;
  for (int64_t garbage : {int64_t{0}, std::numeric_limits<int64_t>::min(), int64_t{-1}}) {
    std::atomic<int64_t> state{garbage};
    EXPECT_TRUE(bucketTryTake(state, now, 10'000, cfg)) << garbage;
    EXPECT_FALSE(bucketTryTake(state, now, 1, cfg)) << garbage;
  }
  // Far in the future (or the maximum): reads as empty, not as forever.
  for (int64_t garbage : {std::numeric_limits<int64_t>::max(), now + 100 * kSec}) {
    std::atomic<int64_t> state{garbage};
    EXPECT_FALSE(bucketTryTake(state, now, 1000, cfg));
    EXPECT_TRUE(bucketTryTake(state, now + kSec / 1000, 1000, cfg)) << "1 ms earns 1000 B";
  }
}

TEST(TokenBucket, FloorKeepsAProcessAtItsRateWhateverOthersWrite) {
  const BucketConfig cfg{1'000'000, 10'000};
  std::atomic<int64_t> state{0};
  std::atomic<int64_t> floor{0};
  int64_t now = 100 * kSec;
  uint64_t admitted = 0;
  for (int i = 0; i < 1000; ++i) {  // 1 s, while someone resets the word before every take
    state.store(0);
    if (bucketTryTake(state, now, 1000, cfg, &floor)) admitted += 1000;
    now += kSec / 1000;
  }
  EXPECT_LE(admitted, 1'000'000u + 10'000u + 1000u) << "rate x T + burst";
  EXPECT_GE(admitted, 990'000u);
}

TEST(TokenBucket, OneMessageCostsAtMostTheDebtBound) {
  const BucketConfig cfg{1000, 1000};  // 1 kB/s
  std::atomic<int64_t> state{0};
  const int64_t now = 100 * kSec;
  EXPECT_TRUE(bucketTryTake(state, now, 1ull << 40, cfg));  // ~35 years of tokens
  EXPECT_LE(state.load(), now + kMaxBucketDebtNs);
  EXPECT_FALSE(bucketTryTake(state, now + kMaxBucketDebtNs - kSec, 1, cfg));
  EXPECT_TRUE(bucketTryTake(state, now + kMaxBucketDebtNs + kSec, 1, cfg));
}

// The depth is time at the bucket's rate, never below the floor; over any window T the bucket
// then admits at most rate x (T + depth time) for admissions within the depth.
TEST(TokenBucket, DepthIsTimeAtTheRateAboveAFloor) {
  EXPECT_EQ(bucketDepthBytes(75'000'000, 1'000'000, 4096), 75'000u);  // 600 Mbit/s, 1 ms
  EXPECT_EQ(bucketDepthBytes(1'000'000, 1'000'000, 4096), 4096u);     // the floor
  EXPECT_EQ(bucketDepthBytes(UINT64_MAX, 1'000'000'000'000, 0), UINT64_MAX) << "saturates";
  const uint64_t rate = 75'000'000;
  const BucketConfig cfg{rate, bucketDepthBytes(rate, kDefaultBucketDepthNs, 4096)};
  std::atomic<int64_t> state{0};
  int64_t now = 100 * kSec;
  uint64_t worst = 0;
  std::vector<uint64_t> per_ms;  // admitted per ms, 8 KiB chunks offered every 10 us
  for (int ms = 0; ms < 2000; ++ms) {
    uint64_t got = 0;
    for (int i = 0; i < 100; ++i, now += 10'000) {
      if (ms % 500 > 200 && bucketTryTake(state, now, 8192, cfg)) got += 8192;  // on/off
    }
    per_ms.push_back(got);
  }
  for (size_t start = 0; start + 100 <= per_ms.size(); ++start) {
    uint64_t w = 0;
    for (size_t i = start; i < start + 100; ++i) w += per_ms[i];
    worst = std::max(worst, w);
  }
  const double conformance = static_cast<double>(worst) / (rate * 0.1);
  EXPECT_LE(conformance, 1.01 + 8192.0 / (rate * 0.1)) << "rate x (100 ms + 1 ms) + a chunk";
  EXPECT_GE(conformance, 0.99);
}

TEST(TokenBucket, GivingBackReturnsUnusedTokensUpToTheDepth) {
  const BucketConfig cfg{1'000'000, 10'000};  // 1 byte per us, 10 ms deep
  std::atomic<int64_t> state{0};
  std::atomic<int64_t> floor{0};
  const int64_t now = 100 * kSec;
  ASSERT_TRUE(bucketTryTake(state, now, 10'000, cfg, &floor));
  EXPECT_FALSE(bucketTryTake(state, now, 3'000, cfg, &floor));
  bucketGiveBack(state, now, 3'000, cfg, &floor);  // 3000 of the 10000 were not used
  EXPECT_TRUE(bucketTryTake(state, now, 3'000, cfg, &floor)) << "the floor moved back too";
  EXPECT_FALSE(bucketTryTake(state, now, 1, cfg, &floor));
  // A full bucket takes nothing back; a garbage word is left for the next take to repair.
  const int64_t later = now + kSec;
  bucketGiveBack(state, later, 1'000'000, cfg, &floor);
  EXPECT_EQ(bucketAvailable(state, later, cfg, &floor), 10'000);
  state.store(later + 2 * kMaxBucketDebtNs);
  bucketGiveBack(state, later, 1'000, cfg, &floor);
  EXPECT_EQ(state.load(), later + 2 * kMaxBucketDebtNs);
}

// A debt allowance admits a take once its tokens less the debt are there, and no further: the
// bucket spans [-debt, depth], readyAt agrees with tryTake, and the long-run rate is unchanged.
TEST(TokenBucket, DebtAdmitsEarlyWithinItsBound) {
  std::atomic<int64_t> state{0};
  BucketConfig cfg{1'000'000, 1000};  // 1 B per us, 1 ms deep
  cfg.debt_bytes = 1000;              // 1 ms below empty
  int64_t now = kSec;
  EXPECT_TRUE(bucketTryTake(state, now, 1000, cfg));  // the full bucket
  EXPECT_TRUE(bucketTryTake(state, now, 1000, cfg));  // into debt: -1000
  EXPECT_EQ(bucketAvailable(state, now, cfg), -1000);
  EXPECT_FALSE(bucketTryTake(state, now, 1, cfg));  // at the bound: nothing more
  // 400 B need 400 tokens less the 1000 of debt: the bucket back at -600, 400 us from now.
  EXPECT_EQ(bucketReadyAt(state, now, 400, cfg), now + 400'000);
  EXPECT_FALSE(bucketTryTake(state, now + 399'999, 400, cfg));
  EXPECT_TRUE(bucketTryTake(state, now + 400'000, 400, cfg));
  // Without the allowance the same word refuses until the tokens are really there.
  BucketConfig plain = cfg;
  plain.debt_bytes = 0;
  EXPECT_EQ(bucketReadyAt(state, now + 400'000, 400, plain), now + 1'400'000 + 400'000);
}

// A taker of 8 KiB chunks at 0.3 Gbit/s that sleeps for its tokens and wakes 0-2 ms late (the
// helpers of a loaded 2-core host, docs/testbed.md): a bucket 1 ms deep loses the lateness beyond
// what it holds, a debt of one more depth absorbs most of it; either way no 100 ms window gets
// more than rate x 100 ms + depth + debt.
TEST(TokenBucket, DebtAbsorbsLateWakeUpsWithinEveryWindowsBound) {
  const uint64_t rate = 37'500'000;
  const uint64_t depth = bucketDepthBytes(rate, 1'000'000, 4096);
  auto run = [&](uint64_t debt) {
    BucketConfig cfg{rate, depth};
    cfg.debt_bytes = debt;
    std::atomic<int64_t> state{0};
    std::mt19937_64 rng(7);
    std::vector<std::pair<int64_t, uint64_t>> takes;  // (time, bytes)
    const int64_t start = kSec, end = start + 4 * kSec;
    const uint64_t chunk = 8192;
    for (int64_t now = start; now < end;) {
      if (bucketTryTake(state, now, chunk, cfg)) {
        takes.emplace_back(now, chunk);
        continue;
      }
      now = bucketReadyAt(state, now, chunk, cfg) + static_cast<int64_t>(rng() % 2'000'000);
    }
    const int64_t w = 100'000'000;
    const double bound = rate * 0.1 + static_cast<double>(depth + debt) + 1;
    size_t lo = 0, hi = 0;
    uint64_t in = 0;
    for (int64_t t0 = start; t0 + w <= end; t0 += 1'000'000) {
      while (hi < takes.size() && takes[hi].first < t0 + w) in += takes[hi++].second;
      while (lo < hi && takes[lo].first < t0) in -= takes[lo++].second;
      EXPECT_LE(static_cast<double>(in), bound) << "debt " << debt << ", window at " << t0;
    }
    uint64_t total = 0;
    for (const auto& t : takes) total += t.second;
    return static_cast<double>(total) / (static_cast<double>(rate) * 4);
  };
  const double plain = run(0);
  const double with_debt = run(depth);
  EXPECT_LT(plain, 0.9) << "1 ms deep, woken up to 2 ms late";
  EXPECT_GT(with_debt, 0.97);
  EXPECT_LE(with_debt, 1.0 + 2.0 * depth / (rate * 4.0) + 1e-6);
}

}  // namespace
}  // namespace tq
