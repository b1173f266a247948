#include "common/allocation.h"

#include <algorithm>

#include "common/units.h"

namespace tq {

namespace {

using u128 = unsigned __int128;

uint32_t weightOf(const TenantInput& t) { return std::max<uint32_t>(t.weight, 1); }

uint64_t effectiveCap(const TenantInput& t) {
  return std::min(t.demand, t.limit);  // kUnboundedDemand -> limit
}

}  // namespace

std::vector<Allocation> allocate(uint64_t capacity, const std::vector<TenantInput>& tenants) {
  std::vector<Allocation> out(tenants.size());
  AllocationScratch scratch;
  allocateInto(capacity, tenants, out, scratch);
  return out;
}

void allocateInto(uint64_t capacity, std::span<const TenantInput> tenants,
                  std::span<Allocation> out, AllocationScratch& scratch) {
  const size_t n = tenants.size();
  std::vector<uint64_t>& cap = scratch.cap;
  std::vector<uint64_t>& rate = scratch.rate;
  cap.assign(n, 0);
  rate.assign(n, 0);
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
    std::vector<uint32_t>& unmet = scratch.unmet;  // indexes, in input order
    unmet.clear();
    for (size_t i = 0; i < n; ++i)
      if (tenants[i].active && rate[i] < cap[i]) unmet.push_back(static_cast<uint32_t>(i));
    // Water-filling. Each round either saturates at least one tenant (its weighted share of
    // what is left covers its need; capping it frees capacity, so the level only rises) or
    // hands out everything that is left.
    while (remaining > 0 && !unmet.empty()) {
      u128 weights = 0;
      for (uint32_t i : unmet) weights += weightOf(tenants[i]);
      // The shares of this round are of `remaining` as it was at its start (each <= it).
      uint64_t used = 0;
      size_t still = 0;  // the unsaturated ones move to the front, in order
      for (uint32_t i : unmet) {
        const uint64_t share = mulDivFloor(remaining, weightOf(tenants[i]), weights);
        if (share >= cap[i] - rate[i]) {
          used += cap[i] - rate[i];
          rate[i] = cap[i];
        } else {
          unmet[still++] = i;
        }
      }
      remaining -= used;
      if (still < unmet.size()) {
        unmet.resize(still);
        continue;
      }
      for (uint32_t i : unmet) {
        const uint64_t share = mulDivFloor(remaining, weightOf(tenants[i]), weights);
        rate[i] += share;
        used += share;
      }
      remaining -= used;
      // Integer-division leftovers (fewer bytes than tenants): one byte each, in input order.
      for (uint32_t i : unmet) {
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
}

std::vector<Allocation> splitRate(uint64_t rate, const std::vector<uint64_t>& demands,
                                  const std::vector<bool>& active) {
  const size_t n = demands.size();
  if (n == 0) return {};
  std::vector<TenantInput> in(n);
  for (size_t i = 0; i < n; ++i) {
    in[i].guarantee = rate / n;
    in[i].limit = rate;
    in[i].demand = demands[i];
    in[i].active = i < active.size() && active[i];
  }
  return allocate(rate, in);
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

}  // namespace tq
