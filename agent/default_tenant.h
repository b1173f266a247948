// The default tenant as the node-wide socket serves it (issue 23 item 6). That socket is every
// uid's (mode 0666: users no tenant maps), so no memory handed out there may be shared between
// uids: whatever one uid could write, it could turn against the others (wedge a shared bucket
// word with debt, hold every slot, feed the allocator lies in their counters).
//
// Each uid gets a shared memory of its own, a *shard* (TenantShm: its own bucket words, its own
// kMaxSlots slots), with the tenant's name, marking and bucket table. The tenant's own memory
// (what its unixGroup's processes and root attach to through its tenant socket), if it has one,
// is one more participant. Each bucket's rate R (the allocator's for the tenant, or the built-in
// 100 Mbit/s) is split among the participants every period by splitRate(): R / n guaranteed to
// each of the n participants (its bucket never below that: a uid that starts sending has its
// share at once), the rest by each one's demand as its own counters show it. So:
//   * a uid can starve nobody: it writes only its own bucket words, holds only its own slots,
//     and its counters move only its own share above R / n;
//   * the uids cannot lift each other: the allocations sum to at most R, and the bucket rates
//     exceed R only by the guarantees their holders leave unused (the allocator's price: for a
//     period after one wakes up; common/allocation.h);
//   * a new shard gets R / (n + 1) and every other participant is scaled by n / (n + 1) first, so
//     not even a burst of new uids takes the sum past R before the next split.
// Uids beyond `max_uids` share one overflow shard among themselves (bounded memory: 2 memfds of
// 140 KiB per shard). A shard that has had no process attached for `idle_grace_ns` since it was
// last handed out is dropped (its counters stay in the totals).
//
// Threads: shardFor() runs on the attach thread, everything else on the reconcile thread; one
// mutex guards the participants (TenantShm has its own).
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "agent/allocator.h"
#include "agent/process_shares.h"
#include "common/clock.h"
#include "common/status.h"
#include "common/tenant_shm.h"
#include "common/thread_annotations.h"
#include "common/token_bucket.h"

namespace tq::agent {

class DefaultTenant {
 public:
  struct Options {
    std::string tenant;       // the name in every shard's header
    uint32_t max_uids = 256;  // uids with a shard of their own; the rest share one
    int64_t idle_grace_ns = 10'000'000'000;
    // A share's bucket is as deep in time as the tenant's (depth x share / rate), at least this.
    uint64_t min_depth_bytes = kDefaultMinBucketDepthBytes;
    DemandEstimatorOptions demand;
  };
  // `group`: the tenant's own memory, one more participant; null when it has none (the built-in
  // default tenant). Participants are published only by setParams() and later calls.
  DefaultTenant(Options options, std::shared_ptr<TenantShm> group, Clock& clock);
  DefaultTenant(const DefaultTenant&) = delete;
  DefaultTenant& operator=(const DefaultTenant&) = delete;

  const std::string& tenant() const { return options_.tenant; }
  const std::shared_ptr<TenantShm>& group() const { return group_; }

  // Attach thread: the memory `uid`'s processes attach to; its shard, made at its equal share
  // of every bucket (the others' rates scaled down first), or the overflow shard. An error only
  // when no memory can be made (memfd_create failed) or setParams() was never called.
  Result<std::shared_ptr<TenantShm>> shardFor(uid_t uid);

  // Reconcile thread. The tenant's parameters: its bucket table at the tenant's rates. Splits
  // them among the participants by the demands last estimated and publishes what changed.
  void setParams(const TenantParams& p);
  const TenantParams& params() const { return template_; }
  // Reconcile thread, every period: reads every participant (TenantShm::collect, each value
  // bounded by `max_rate`), estimates each one's demand per bucket, and returns what the tenant
  // as a whole used (sums; the totals of dropped shards are kept, so counters stay monotonic).
  TenantUsage collect(int64_t now_ns, uint64_t max_rate);
  // Reconcile thread, after collect() and setParams(): splits each bucket among the
  // participants by the demands collect() estimated, each participant's share among its
  // processes (ProcessShares), publishes what changed, and drops shards idle past the grace.
  void split(int64_t now_ns);
  // Reconcile thread: another tenant became the default, or the agent stops. Marks every shard
  // deleted (their processes attach again) and returns those a process still holds, for the
  // caller to drain (TenantShm::collect) and drop once idle. The group memory is not touched:
  // it is its tenant's.
  std::vector<std::shared_ptr<TenantShm>> retire();

  // For metrics and tests.
  size_t shards() const;
  std::shared_ptr<TenantShm> shardOf(uid_t uid) const;
  // The shard's (or the group's, kGroup) published rate of bucket `b`; 0 when none.
  uint64_t rateOf(int64_t participant, uint32_t b) const;
  static constexpr int64_t kGroup = -1;
  static constexpr int64_t kOverflow = -2;

 private:
  struct Participant {
    std::shared_ptr<TenantShm> shm;
    TenantParams published;
    TenantUsage usage;  // as last read
    int64_t usage_at_ns = 0;
    int64_t period_ns = 0;                    // between its last two readings
    ProcessShares shares;                     // its processes' own buckets
    std::vector<DemandEstimator> estimators;  // per bucket of the table
    std::vector<uint64_t> demand;             // per bucket, bytes/s or kUnboundedDemand
    int64_t handed_out_ns = 0;                // last shardFor(), on the clock
    bool published_once = false;
  };
  // mu_ held. The participants' rates per bucket by splitRate() over their demands; published
  // where they changed.
  void redistribute() TQ_REQUIRES(mu_);
  // mu_ held. The template with each bucket at a participant's share (rates: the tenant's).
  TenantParams paramsAt(const std::vector<uint64_t>& rates,
                        const std::vector<uint64_t>& shares) const TQ_REQUIRES(mu_);
  uint64_t depthAt(size_t b, uint64_t share) const TQ_REQUIRES(mu_);
  void publish(Participant* p, TenantParams params) TQ_REQUIRES(mu_);

  const Options options_;
  const std::shared_ptr<TenantShm> group_;
  Clock& clock_;

  mutable Mutex mu_;
  TenantParams template_ TQ_GUARDED_BY(mu_);
  bool have_params_ TQ_GUARDED_BY(mu_) = false;
  std::map<int64_t, Participant> parts_ TQ_GUARDED_BY(mu_);  // by uid; kGroup, kOverflow
  uint32_t uid_shards_ TQ_GUARDED_BY(mu_) = 0;               // entries of parts_ keyed by a uid
  TenantUsage retired_ TQ_GUARDED_BY(mu_);                   // totals of the shards dropped
};

}  // namespace tq::agent
