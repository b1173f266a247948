// Work-conserving per-tenant rate allocation on one node's egress link, and the demand
// estimate that feeds it. Pure logic: no clock, no I/O, no shared memory. The agent runs it
// every period (default 10 ms) and writes the results to the tenants' shm files.
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
// Units: bytes per second. Thread-safety: pure functions; DemandEstimator is a value (one per
// tenant, owned by the agent's reconcile thread).
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace tq::agent {

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

// What a tenant's processes reported for one period (summed over its processes).
struct DemandSignals {
  uint64_t bytes_sent = 0;     // bytes sent in the period
  uint64_t throttled_ns = 0;   // time spent waiting for tokens in the period (any process)
  uint64_t backlog_bytes = 0;  // bytes waiting to be sent at the end of the period
  uint64_t busy_ns = 0;        // time some process had sends in flight (queued in the network)
};

struct DemandEstimatorOptions {
  // A tenant throttled for at least this fraction of the period is held back by its bucket.
  // Its demand is unknown and treated as unbounded: it takes what the allocator gives.
  double backlogged_throttle_fraction = 0.05;
  // A tenant below its guarantee whose sends were in flight for at least this fraction of the
  // period is held back by the network, not by its bucket: on a FIFO link (RDMA-like mode)
  // other tenants' buckets, grown while this one looked idle, can starve it. Its demand is
  // treated as unbounded too, so the next allocation takes the lent guarantee back. Above its
  // guarantee a busy tenant is estimated from what it sends (a CPU-bound sender is busy too,
  // and must not hold spare it cannot use).
  double network_bound_busy_fraction = 0.9;
  // Room to grow without being throttled first: demand = observed x (1 + headroom). This
  // matters only above the guarantee, because below it the bucket is at the guarantee anyway.
  // It costs link utilisation in the RDMA-like mode, where the other tenants' buckets are
  // sized around it: a tenant steady at D leaves headroom x D unused. Hence only 5 %. A tenant
  // that needs more is throttled and becomes unbounded one period later.
  double headroom = 0.05;
  // Smoothing of FALLING demand: estimate = decay x previous + (1 - decay) x observed. Rising
  // demand is always taken at once. The default 0 (no smoothing) lets the other tenants get an
  // idle tenant's share in the next period (issue 5 targets <= 20 ms). Smoothing is not needed
  // to protect a bursty tenant: when it resumes, its bucket is still at its guarantee.
  double decay = 0.0;
};

// Turns per-period signals into a demand estimate. The caller passes the period length, so
// there is no clock inside.
class DemandEstimator {
 public:
  DemandEstimator() = default;
  explicit DemandEstimator(DemandEstimatorOptions options) : options_(options) {}

  // Returns bytes/s or kUnboundedDemand. period_ns <= 0 returns the previous estimate.
  // `guarantee` (bytes/s) enables the network-bound rule (0: no guarantee, rule off).
  uint64_t update(const DemandSignals& signals, int64_t period_ns, uint64_t guarantee = 0);
  uint64_t estimate() const { return last_; }
  // Forget the history (a tenant became inactive).
  void reset() {
    smoothed_ = 0;
    last_ = 0;
  }

 private:
  DemandEstimatorOptions options_;
  double smoothed_ = 0;  // bytes/s observed (sent + backlog drain), smoothed when falling
  uint64_t last_ = 0;
};

// "a=60Mbps/b=30Mbps": a debug rendering of rates (names in input order).
std::string describeAllocation(const std::vector<std::string>& names,
                               const std::vector<Allocation>& allocations);

}  // namespace tq::agent
