// Per-process buckets, the agent's half (issue 23 item 9; the contract: common/shm_layout.h
// "Process buckets"). A tenant's shared bucket words are writable by all its processes, so one
// of them could reset them and let its co-tenants each admit the whole rate. Each process
// therefore also paces with a bucket of its own, at a rate this class gives its slot: every
// period, each of the memory's bucket rates R is split among the processes attached to it by
// splitRate() (R / n guaranteed to each, the rest by the demand its own counters show), so the
// processes that pace stay within R together whatever anyone writes into the shared words; the
// processes attached without a slot (past the 64th) are one more participant, its share divided
// among them. A process that just attached keeps its slot's row (none, or its last owner's
// share) until the next split: at most a period.
//
// Pure logic over one memory's readings (TenantShm::collect); no clock, no I/O. Thread-safety: a
// value, owned by the reconcile thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <vector>

#include "agent/allocator.h"
#include "common/tenant_shm.h"

namespace tq::agent {

class ProcessShares {
 public:
  explicit ProcessShares(DemandEstimatorOptions options = {}) : options_(options) {}

  // `u`: the memory's latest collect(); `rates`: its buckets' published rates (index = table
  // entry, 0 for an unused one); `period_ns`: since the previous call (0: the first). Returns the
  // table to publish (TenantShm::publishProcessRates): a row per attached slot, the slotless row,
  // zero elsewhere.
  ProcessRateTable update(const TenantUsage& u, const std::vector<uint64_t>& rates,
                          int64_t period_ns);

 private:
  struct Slot {
    pid_t pid = 0;
    std::vector<DemandEstimator> estimators;  // per table entry
  };
  DemandEstimatorOptions options_;
  std::map<uint32_t, Slot> slots_;  // by slot index
};

// The rates of a memory's buckets as published (0 for an unused entry), for update().
std::vector<uint64_t> bucketRates(const TenantParams& p);

}  // namespace tq::agent
