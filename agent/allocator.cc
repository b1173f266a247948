#include "agent/allocator.h"

#include <algorithm>
#include <cmath>

namespace tq::agent {

DemandSignals signalsBetween(const BucketUsage& prev, const BucketUsage& cur, bool first) {
  auto delta = [](uint64_t now_v, uint64_t before) { return now_v >= before ? now_v - before : 0; };
  DemandSignals sig;
  if (!first) {
    sig.bytes_sent = delta(cur.bytes, prev.bytes);
    sig.throttled_ns = delta(cur.throttled_ns, prev.throttled_ns);
    // Summed over processes (the estimator caps it at the period); a reclaimed slot can make
    // the sum shrink, which reads as "not busy" for one period.
    const uint64_t busy = delta(cur.busy_ns, prev.busy_ns);
    const uint64_t peer_wait = delta(cur.peer_wait_ns, prev.peer_wait_ns);
    sig.busy_ns = busy > peer_wait ? busy - peer_wait : 0;
  }
  sig.backlog_bytes = cur.backlog_bytes;
  return sig;
}

uint64_t DemandEstimator::update(const DemandSignals& s, int64_t period_ns, uint64_t guarantee) {
  if (period_ns <= 0) return last_;
  // bytes x 1e9 / ns: exact for whole-millisecond periods, so tests can compare exactly.
  const double period = static_cast<double>(period_ns);
  const double sent_rate = static_cast<double>(s.bytes_sent) * 1e9 / period;
  const double drain_rate = static_cast<double>(s.backlog_bytes) * 1e9 / period;
  const double observed = sent_rate + drain_rate;
  const double throttled =
      std::min(static_cast<double>(s.throttled_ns), static_cast<double>(period_ns)) /
      static_cast<double>(period_ns);
  const double busy = std::min(static_cast<double>(s.busy_ns), period) / period;
  const bool network_bound = guarantee > 0 && busy >= options_.network_bound_busy_fraction &&
                             observed < static_cast<double>(guarantee);
  if (throttled >= options_.backlogged_throttle_fraction || network_bound) {
    // Held back by the bucket: it wants more than it got, we cannot tell how much.
    smoothed_ = std::max(smoothed_, observed);
    last_ = kUnboundedDemand;
    return last_;
  }
  if (observed >= smoothed_) {
    smoothed_ = observed;
  } else {
    smoothed_ = options_.decay * smoothed_ + (1.0 - options_.decay) * observed;
  }
  const double demand = std::round(smoothed_ * (1.0 + options_.headroom));
  last_ = demand >= 1.8e19 ? kUnboundedDemand : static_cast<uint64_t>(demand);
  return last_;
}

}  // namespace tq::agent
