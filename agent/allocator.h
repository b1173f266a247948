// The demand estimate that feeds the node's allocation (common/allocation.h: allocate(), the
// work-conserving split of one link, shared with the cluster allocator). Pure logic: no clock,
// no I/O, no shared memory. The agent runs both every period (default 10 ms) and writes the
// results to the tenants' shm files.
//
// Units: bytes per second. Thread-safety: DemandEstimator is a value (one per
// tenant, owned by the agent's reconcile thread).
#pragma once

#include <cstdint>

#include "common/allocation.h"
#include "common/tenant_shm.h"

namespace tq::agent {

using tq::allocate;
using tq::Allocation;
using tq::describeAllocation;
using tq::kUnboundedDemand;
using tq::TenantInput;

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

// One bucket's signals between two readings of its usage (common/tenant_shm.h: monotonic
// totals, the current backlog); `first`: there is no earlier reading, only the backlog counts.
// Time the sends waited for their receiver (its pacing closed the window) is not the network
// holding them back, so it is taken out of the busy time.
DemandSignals signalsBetween(const BucketUsage& prev, const BucketUsage& cur, bool first);

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

}  // namespace tq::agent
