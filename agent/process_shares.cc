#include "agent/process_shares.h"

namespace tq::agent {

std::vector<uint64_t> bucketRates(const TenantParams& p) {
  std::vector<uint64_t> r;
  for (const BucketSpec& b : p.buckets) {
    r.push_back(b.scope == shm::kScopeNone ? 0 : b.rate_bytes_per_second);
  }
  return r;
}

ProcessRateTable ProcessShares::update(const TenantUsage& u, const std::vector<uint64_t>& rates,
                                       int64_t period_ns) {
  const size_t nb = std::min<size_t>(rates.size(), shm::kMaxBuckets);
  // Forget the slots that left (or changed hands: another pid, another history).
  std::map<uint32_t, Slot> kept;
  for (const SlotUsage& s : u.slots) {
    auto it = slots_.find(s.index);
    Slot slot = it != slots_.end() && it->second.pid == s.pid ? std::move(it->second) : Slot{};
    slot.pid = s.pid;
    slot.estimators.resize(nb, DemandEstimator(options_));
    kept.emplace(s.index, std::move(slot));
  }
  slots_ = std::move(kept);

  ProcessRateTable table{};
  const bool slotless = u.slotless > 0;
  const size_t n = u.slots.size() + (slotless ? 1 : 0);
  if (n == 0) return table;
  for (size_t b = 0; b < nb; ++b) {
    if (rates[b] == 0) continue;
    std::vector<uint64_t> demands;
    std::vector<bool> active(n, true);
    for (const SlotUsage& s : u.slots) {
      DemandSignals sig;
      if (b < s.buckets.size()) {
        const CounterCheck& c = s.buckets[b];
        sig.bytes_sent = c.bytes;
        sig.throttled_ns = c.throttled_ns;
        sig.backlog_bytes = c.backlog_bytes;
        sig.busy_ns = c.busy_ns > c.peer_wait_ns ? c.busy_ns - c.peer_wait_ns : 0;
      }
      demands.push_back(slots_.at(s.index).estimators[b].update(sig, period_ns));
    }
    // Processes without a slot report nothing: their share is the equal one, no spare.
    if (slotless) demands.push_back(rates[b] / n);
    const std::vector<Allocation> out = splitRate(rates[b], demands, active);
    for (size_t i = 0; i < u.slots.size(); ++i) {
      table[u.slots[i].index][b] = out[i].bucket_rate;
    }
    if (slotless)
      table[shm::kMaxSlots][b] = std::max<uint64_t>(out.back().bucket_rate / u.slotless, 1);
  }
  return table;
}

}  // namespace tq::agent
