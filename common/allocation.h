// Work-conserving rate allocation of one link's capacity among tenants: guarantees first, the
// spare by weight, never above a tenant's limit or its demand. Pure logic: no clock, no I/O. One
// rule in one place: the node agent runs it for each device every period (agent/allocator.h adds
// the demand estimate that feeds it), and the cluster allocator for each shared fabric link.
//
// allocate():
//   1. each active tenant gets base = min(demand, guarantee, limit);
//   2. the capacity left over is split by weight among tenants whose demand is still unmet,
//      by water-filling: a tenant whose share would take it past min(demand, limit) gets
//      exactly that and drops out, and the rest is split again among the others, until no one
//      is capped or nothing is left;
//   3. so: nobody above its limit or its demand, sum <= capacity, and capacity stays unused
//      only when every active tenant already has min(demand, limit) (work-conserving).
//   If the guarantees of the tenants that want them exceed capacity (admission should prevent
//   it), each gets base x capacity / sum(base) and there is no spare.
//
// The bucket rate (Allocation::bucket_rate) is what the plugin's token bucket is refilled at:
// max(rate, guarantee) (a guarantee above the limit counts as the limit). The allocation of a
// tenant that currently uses less than its guarantee is its demand, and the unused part of its
// guarantee goes to others as spare. If its bucket were refilled at that low allocation, the
// tenant would wake up throttled to its old demand and would only reach its guarantee one period
// later, after the estimator saw it throttled. With the bucket at its guarantee, a waking tenant
// gets its guarantee at once. An inactive tenant (no process on this node) also keeps its
// guarantee in the bucket, so the first process of a new job starts at its guarantee.
//
// The price: for at most one period after a wake-up, the buckets together may admit more than
// the capacity. The overshoot is bounded by the sum of the unused guarantees, sum(max(0,
// guarantee - rate)), and is never more than the spare handed out in that period. The next
// allocation sees the waking tenant's demand and takes the spare back from the others. The
// link (the NIC queue, or HTB in TCP mode) absorbs the excess for that period. The
// alternatives were worse. Reserving unused guarantees wastes them, which is not
// work-conserving. Refilling at the allocation makes the waking tenant wait a period, which
// misses "guarantee at once".
//
// Units: bytes per second. Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

namespace tq {

// Demand of a backlogged tenant: it would take any rate it is given.
constexpr uint64_t kUnboundedDemand = std::numeric_limits<uint64_t>::max();

struct TenantInput {
  uint64_t guarantee = 0;  // bytes/s
  uint64_t limit = 0;      // bytes/s; a guarantee above it counts as the limit
  uint32_t weight = 1;     // share of spare capacity; 0 counts as 1 (policy rejects 0)
  uint64_t demand = 0;     // bytes/s, or kUnboundedDemand
  bool active = true;      // false: no process of the tenant on this node -> rate 0
};

struct Allocation {
  uint64_t rate = 0;         // what the tenant gets this period
  uint64_t bucket_rate = 0;  // the refill rate of its token bucket: max(rate, guarantee)
};

// One Allocation per input, in the same order. Deterministic: leftover bytes from integer
// division go to the unsatisfied tenants in input order, one byte each.
std::vector<Allocation> allocate(uint64_t capacity, const std::vector<TenantInput>& tenants);

// floor(a x b / c) for c > 0 whose value fits 64 bits (a share of a rate: b <= c): in 64 bits
// when a x b fits (the common case, and several times cheaper), else in 128 bits. The same
// value either way.
inline uint64_t mulDivFloor(uint64_t a, uint64_t b, unsigned __int128 c) {
  uint64_t product;
  if (c <= std::numeric_limits<uint64_t>::max() && !__builtin_mul_overflow(a, b, &product)) {
    return product / static_cast<uint64_t>(c);
  }
  return static_cast<uint64_t>(static_cast<unsigned __int128>(a) * b / c);
}

// The working memory of allocate(), kept by a caller that allocates many times (the cluster
// allocator: a thousand links per round) so that the rule runs without a heap allocation.
// Holds no result between calls. Not thread-safe: one per thread.
struct AllocationScratch {
  std::vector<uint64_t> cap, rate;
  std::vector<uint32_t> unmet;
};

// allocate() into `out` (out.size() == tenants.size()), with `scratch`'s buffers: the same
// rule and the same result, byte for byte (allocate() is this function).
void allocateInto(uint64_t capacity, std::span<const TenantInput> tenants,
                  std::span<Allocation> out, AllocationScratch& scratch);

// Splits `rate` (one bucket's) among participants that must not be able to starve or lift each
// other (the uids sharing the default tenant, agent/default_tenant.h): allocate() with an equal
// guarantee rate / n each (n = every participant, active or not), equal weights, limit `rate`
// and each one's demand. So the allocations never sum past `rate`, each participant that wants it
// gets at least rate / n whatever the others claim, and the rest follows demand; a bucket rate
// is at least rate / n (one that wakes up has its share at once), so the bucket rates exceed
// `rate` only by the guarantees their holders leave unused (the allocator's price, above).
std::vector<Allocation> splitRate(uint64_t rate, const std::vector<uint64_t>& demands,
                                  const std::vector<bool>& active);

// "a=60Mbps/b=30Mbps": a debug rendering of rates (names in input order).
std::string describeAllocation(const std::vector<std::string>& names,
                               const std::vector<Allocation>& allocations);

}  // namespace tq
