#include "agent/allocator.h"

#include <algorithm>
#include <cmath>

#include "common/units.h"

namespace tq::agent {
namespace {

using u128 = unsigned __int128;

uint32_t weightOf(const TenantInput& t) { return std::max<uint32_t>(t.weight, 1); }

uint64_t effectiveCap(const TenantInput& t) {
  return std::min(t.demand, t.limit);  // kUnboundedDemand -> limit
}

}  // namespace

std::vector<Allocation> allocate(uint64_t capacity, const std::vector<TenantInput>& tenants) {
  const size_t n = tenants.size();
  std::vector<Allocation> out(n);
  std::vector<uint64_t> cap(n, 0), rate(n, 0);
  u128 sum_base = 0;
  for (size_t i = 0; i < n; ++i) {
    const TenantInput& t = tenants[i];
    if (!t.active) continue;
    cap[i] = effectiveCap(t);
    rate[i] = std::min(cap[i], t.guarantee);
    sum_base += rate[i];
  }

  if (sum_base > capacity) {
    // Guarantees do not fit (admission failed): scale them down proportionally.
    u128 given = 0;
    for (size_t i = 0; i < n; ++i) {
      rate[i] = static_cast<uint64_t>(static_cast<u128>(rate[i]) * capacity / sum_base);
      given += rate[i];
    }
    // Rounding leftovers, one byte each, to tenants that wanted more.
    uint64_t left = capacity - static_cast<uint64_t>(given);
    for (size_t i = 0; i < n && left > 0; ++i)
      if (tenants[i].active && rate[i] < cap[i] && tenants[i].guarantee > 0) ++rate[i], --left;
  } else {
    uint64_t remaining = capacity - static_cast<uint64_t>(sum_base);
    std::vector<size_t> unmet;
    for (size_t i = 0; i < n; ++i)
      if (tenants[i].active && rate[i] < cap[i]) unmet.push_back(i);
    // Water-filling. Each round either saturates at least one tenant (its weighted share of
    // what is left covers its need; capping it frees capacity, so the level only rises) or
    // hands out everything that is left.
    while (remaining > 0 && !unmet.empty()) {
      u128 weights = 0;
      for (size_t i : unmet) weights += weightOf(tenants[i]);
      std::vector<size_t> still;
      uint64_t used = 0;
      for (size_t i : unmet) {
        u128 share = static_cast<u128>(remaining) * weightOf(tenants[i]) / weights;
        if (share >= cap[i] - rate[i]) {
          used += cap[i] - rate[i];
          rate[i] = cap[i];
        } else {
          still.push_back(i);
        }
      }
      remaining -= used;
      if (still.size() < unmet.size()) {
        unmet.swap(still);
        continue;
      }
      for (size_t i : unmet) {
        uint64_t share =
            static_cast<uint64_t>(static_cast<u128>(remaining) * weightOf(tenants[i]) / weights);
        rate[i] += share;
        used += share;
      }
      remaining -= used;
      // Integer-division leftovers (fewer bytes than tenants): one byte each, in input order.
      for (size_t i : unmet) {
        if (remaining == 0) break;
        if (rate[i] < cap[i]) ++rate[i], --remaining;
      }
      break;
    }
  }

  for (size_t i = 0; i < n; ++i) {
    const TenantInput& t = tenants[i];
    out[i].rate = rate[i];
    out[i].bucket_rate = std::max(rate[i], std::min(t.guarantee, t.limit));
  }
  return out;
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

std::string describeAllocation(const std::vector<std::string>& names,
                               const std::vector<Allocation>& allocations) {
  std::string s;
  for (size_t i = 0; i < allocations.size(); ++i) {
    if (!s.empty()) s += '/';
    s += (i < names.size() ? names[i] : "#" + std::to_string(i)) + "=" +
         formatRate(allocations[i].rate);
  }
  return s;
}

}  // namespace tq::agent
