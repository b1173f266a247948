#include "common/token_bucket.h"

#include <algorithm>
#include <cstdint>
#include <limits>

namespace tq {
namespace {

constexpr int64_t kMaxCost = std::numeric_limits<int64_t>::max() / 4;

// Where a take starts: the shared word clamped as token_bucket.h says. `now_ns - burst_ns` and
// `now_ns + kMaxBucketDebtNs` cannot overflow: burst_ns <= kMaxCost and now_ns is a monotonic
// clock reading (far from the int64 limits).
int64_t clampedStart(int64_t word, int64_t now_ns, int64_t burst_ns,
                     const std::atomic<int64_t>* floor) {
  int64_t start = word > now_ns + kMaxBucketDebtNs ? now_ns : word;
  if (floor != nullptr) start = std::max(start, floor->load(std::memory_order_relaxed));
  return std::max(start, now_ns - burst_ns);
}

// The debt a take may leave (cfg.debt_bytes as time), bounded so that no word it writes is
// taken for garbage (beyond kMaxBucketDebtNs).
int64_t debtNs(const BucketConfig& cfg) {
  if (cfg.debt_bytes == 0) return 0;
  return std::min(bucketCostNs(cfg.debt_bytes, cfg.rate_bytes_per_second), kMaxBucketDebtNs / 4);
}

void raiseFloor(std::atomic<int64_t>* floor, int64_t v) {
  if (floor == nullptr) return;
  int64_t cur = floor->load(std::memory_order_relaxed);
  while (cur < v && !floor->compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
}

}  // namespace

int64_t bucketCostNs(uint64_t bytes, uint64_t rate) {
  if (rate == 0) return kMaxCost;
  unsigned __int128 ns = (static_cast<unsigned __int128>(bytes) * 1'000'000'000u + rate - 1) / rate;
  return ns > static_cast<unsigned __int128>(kMaxCost) ? kMaxCost : static_cast<int64_t>(ns);
}

bool bucketTryTake(std::atomic<int64_t>& empty_at_ns, int64_t now_ns, uint64_t bytes,
                   const BucketConfig& cfg, std::atomic<int64_t>* floor) {
  if (cfg.rate_bytes_per_second == 0) return false;
  const int64_t burst_ns = bucketCostNs(cfg.burst_bytes, cfg.rate_bytes_per_second);
  const int64_t cost_ns =
      std::min(bucketCostNs(bytes, cfg.rate_bytes_per_second), kMaxBucketDebtNs);
  // A message larger than the burst needs a full bucket, not more than that; less the debt the
  // take may leave (negative: admitted while the bucket is less than that far below empty).
  const int64_t need_ns = std::min(cost_ns, burst_ns) - debtNs(cfg);
  int64_t cur = empty_at_ns.load(std::memory_order_relaxed);
  for (;;) {
    if (cur > now_ns + kMaxBucketDebtNs) {
      // Garbage: repair it to "empty now", so the bucket refills from here (a failed CAS
      // reloads `cur`; either way, look again).
      empty_at_ns.compare_exchange_weak(cur, now_ns, std::memory_order_relaxed);
      continue;
    }
    const int64_t start = clampedStart(cur, now_ns, burst_ns, floor);
    if (now_ns - start < need_ns) return false;
    const int64_t next = start + cost_ns;
    if (empty_at_ns.compare_exchange_weak(cur, next, std::memory_order_relaxed)) {
      raiseFloor(floor, next);
      return true;
    }
  }
}

uint64_t bucketMaxTakeBytes(uint64_t rate) {
  const unsigned __int128 b = static_cast<unsigned __int128>(rate) *
                              static_cast<uint64_t>(kMaxBucketDebtNs / 2) / 1'000'000'000u;
  return std::max<uint64_t>(b > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(b), 1);
}

uint64_t bucketDepthBytes(uint64_t rate, int64_t depth_ns, uint64_t floor) {
  const unsigned __int128 d = static_cast<unsigned __int128>(rate) *
                              static_cast<uint64_t>(std::max<int64_t>(depth_ns, 0)) /
                              1'000'000'000u;
  const uint64_t by_time = d > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(d);
  return std::max(by_time, floor);
}

void bucketGiveBack(std::atomic<int64_t>& empty_at_ns, int64_t now_ns, uint64_t bytes,
                    const BucketConfig& cfg, std::atomic<int64_t>* floor) {
  if (cfg.rate_bytes_per_second == 0 || bytes == 0) return;
  const int64_t cost_ns =
      std::min(bucketCostNs(bytes, cfg.rate_bytes_per_second), kMaxBucketDebtNs);
  const int64_t burst_ns = bucketCostNs(cfg.burst_bytes, cfg.rate_bytes_per_second);
  int64_t cur = empty_at_ns.load(std::memory_order_relaxed);
  for (;;) {
    if (cur > now_ns + kMaxBucketDebtNs) return;  // garbage: the next take repairs it
    if (cur <= now_ns - burst_ns) return;         // full already: nothing more to hold
    if (empty_at_ns.compare_exchange_weak(cur, cur - cost_ns, std::memory_order_relaxed)) break;
  }
  if (floor != nullptr) floor->fetch_sub(cost_ns, std::memory_order_relaxed);
}

int64_t bucketAvailable(const std::atomic<int64_t>& empty_at_ns, int64_t now_ns,
                        const BucketConfig& cfg, const std::atomic<int64_t>* floor) {
  if (cfg.rate_bytes_per_second == 0) return 0;
  const int64_t burst_ns = bucketCostNs(cfg.burst_bytes, cfg.rate_bytes_per_second);
  const int64_t start =
      clampedStart(empty_at_ns.load(std::memory_order_relaxed), now_ns, burst_ns, floor);
  const __int128 bytes =
      static_cast<__int128>(now_ns - start) * cfg.rate_bytes_per_second / 1'000'000'000;
  return static_cast<int64_t>(bytes);
}

int64_t bucketReadyAt(const std::atomic<int64_t>& empty_at_ns, int64_t now_ns, uint64_t bytes,
                      const BucketConfig& cfg, const std::atomic<int64_t>* floor) {
  if (cfg.rate_bytes_per_second == 0) return std::numeric_limits<int64_t>::max();
  const int64_t burst_ns = bucketCostNs(cfg.burst_bytes, cfg.rate_bytes_per_second);
  const int64_t need_ns =
      std::min({bucketCostNs(bytes, cfg.rate_bytes_per_second), burst_ns, kMaxBucketDebtNs}) -
      debtNs(cfg);
  const int64_t start =
      clampedStart(empty_at_ns.load(std::memory_order_relaxed), now_ns, burst_ns, floor);
  return std::max(now_ns, start + need_ns);
}

}  // namespace tq
