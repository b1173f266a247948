#include "common/token_bucket.h"

#include <algorithm>
#include <limits>

namespace tq {
namespace {
constexpr int64_t kMaxCost = std::numeric_limits<int64_t>::max() / 4;
}

int64_t bucketCostNs(uint64_t bytes, uint64_t rate) {
  if (rate == 0) return kMaxCost;
  unsigned __int128 ns = (static_cast<unsigned __int128>(bytes) * 1'000'000'000u + rate - 1) / rate;
  return ns > static_cast<unsigned __int128>(kMaxCost) ? kMaxCost : static_cast<int64_t>(ns);
}

bool bucketTryTake(std::atomic<int64_t>& empty_at_ns, int64_t now_ns, uint64_t bytes,
                   const BucketConfig& cfg) {
  if (cfg.rate_bytes_per_second == 0) return false;
  const int64_t burst_ns = bucketCostNs(cfg.burst_bytes, cfg.rate_bytes_per_second);
  const int64_t cost_ns = bucketCostNs(bytes, cfg.rate_bytes_per_second);
  // A message larger than the burst needs a full bucket, not more than that.
  const int64_t need_ns = std::min(cost_ns, burst_ns);
  int64_t cur = empty_at_ns.load(std::memory_order_relaxed);
  for (;;) {
    const int64_t effective = std::max(cur, now_ns - burst_ns);  // tokens capped at burst
    if (now_ns - effective < need_ns) return false;
    if (empty_at_ns.compare_exchange_weak(cur, effective + cost_ns, std::memory_order_relaxed)) {
      return true;
    }
  }
}

int64_t bucketAvailable(const std::atomic<int64_t>& empty_at_ns, int64_t now_ns,
                        const BucketConfig& cfg) {
  if (cfg.rate_bytes_per_second == 0) return 0;
  const int64_t burst_ns = bucketCostNs(cfg.burst_bytes, cfg.rate_bytes_per_second);
  const int64_t effective = std::max(empty_at_ns.load(std::memory_order_relaxed), now_ns - burst_ns);
  const __int128 bytes =
      static_cast<__int128>(now_ns - effective) * cfg.rate_bytes_per_second / 1'000'000'000;
  return static_cast<int64_t>(bytes);
}

int64_t bucketReadyAt(const std::atomic<int64_t>& empty_at_ns, int64_t now_ns, uint64_t bytes,
                      const BucketConfig& cfg) {
  if (cfg.rate_bytes_per_second == 0) return std::numeric_limits<int64_t>::max();
  const int64_t burst_ns = bucketCostNs(cfg.burst_bytes, cfg.rate_bytes_per_second);
  const int64_t need_ns = std::min(bucketCostNs(bytes, cfg.rate_bytes_per_second), burst_ns);
  const int64_t effective = std::max(empty_at_ns.load(std::memory_order_relaxed), now_ns - burst_ns);
  return std::max(now_ns, effective + need_ns);
}

}  // namespace tq
