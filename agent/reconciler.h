// The agent's state owner: turns policy snapshots into enforcement on this node and runs the
// allocation loop. Driven by ONE thread (reconcile_loop.h): other threads never call it, they
// post to that thread. Time comes from the injected Clock, so unit tests drive it with a
// FakeClock and a fake TcApplier and never sleep.
//
// onPolicy(p): desired = p ∩ node (desired_state.h); tc trees through the TcApplier (htb mode:
// a class per tenant; none mode: no tc),
// device by device, rolling back the devices already changed if a later one fails, so the node
// keeps its last good state; then the per-tenant shared memory (tenant_shm.h: create/update)
// and its attach socket (attach_server.h; a tenant that left is marked deleted, no longer served,
// and its memory dropped once no process is attached). A failure is counted, logged, kept as an
// unresolved error (reported to policyd) and retried with backoff.
// tick(): whatever is due — the retry, the allocation pass (every period: read usage (checked,
// never trusted), heartbeat; per device and direction, estimate each tenant's demand from its
// bucket's counters (DemandEstimator) and split the device's capacity (allocate(),
// work-conserving water-filling); publish a tenant's bucket rates only when one changed, to keep
// the seqlock quiet), a periodic tc
// resync (drift repair; zero writes when nothing drifted), tc statistics and RDMA port counters (~1
// s; see rdma_ports.h), and publishing AgentState for the metrics and report threads (~100 ms).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/agent_state.h"
#include "agent/allocator.h"
#include "agent/attach_server.h"
#include "agent/config.h"
#include "agent/desired_state.h"
#include "agent/fabric_links.h"
#include "agent/fence.h"
#include "agent/process_shares.h"
#include "agent/rdma_ports.h"
#include "agent/tc_applier.h"
#include "common/backoff.h"
#include "common/clock.h"
#include "common/policy.h"
#include "common/tenant_shm.h"

namespace tq::agent {

enum class PolicySource { kPersisted, kPolicyd };

struct ReconcilerOptions {
  std::string node;
  std::vector<DeviceMapping> devices;
  std::string run_dir;
  // Serves the tenants' sockets; null: none (unit tests that only look at the memory).
  AttachServer* attach = nullptr;
  // The tenant the node-wide socket attaches to (the policy's `default: true` one, else this
  // name); when the policy has neither, a built-in one paced at kConservativeRateBytesPerSecond.
  // Each uid attaches to a share of it of its own (agent/default_tenant.h).
  std::string default_tenant = "default";
  TcMode tc_mode = TcMode::kHtb;
  int64_t period_ns = 10'000'000;
  // Bucket depth: the tokens of bucket_depth_ns at the bucket's rate, at least burst_bytes.
  int64_t bucket_depth_ns = 1'000'000;
  uint64_t burst_bytes = 4096;
  int64_t publish_interval_ns = 100'000'000;  // AgentState for metrics/reports
  DemandEstimatorOptions demand;
  int64_t stats_interval_ns = 1'000'000'000;  // tc class counters, RDMA port counters
  // RDMA port counters from <sysfs_root>/class/infiniband at the stats cadence; empty: none
  // (the agent passes --sysfs-root, default /sys; unit tests leave it empty or fake a tree).
  std::string sysfs_root;
  int64_t rdma_rediscover_interval_ns = RdmaPortMonitor::kDefaultRediscoverIntervalNs;
  int64_t resync_interval_ns = 30'000'000'000;  // re-assert tc trees (drift repair)
  BackoffOptions retry{100'000'000, 30'000'000'000, 2.0, 0.2};
  DeviceExistsFn device_exists = kernelDeviceExists;
  uint64_t backoff_seed = 0;  // 0: random
};

class Reconciler {
 public:
  // `tc` must outlive the Reconciler. `board` may be null (tests).
  Reconciler(ReconcilerOptions options, TcApplier* tc, Clock& clock, StateBoard* board);
  ~Reconciler();
  Reconciler(const Reconciler&) = delete;
  Reconciler& operator=(const Reconciler&) = delete;

  // A snapshot to enforce, from the persisted file (startup) or from policyd. Applied at once;
  // an identical re-delivery of the enforced version is a no-op.
  void onPolicy(const VersionedPolicy& policy, PolicySource source);

  // The cluster allocator's stream (agent/fabric_client.h), posted to this thread: a message of
  // caps (refused and logged when of another node or an older term), and whether the stream is
  // up. The tenants' link buckets follow at the next allocation pass.
  void onFabricCaps(FabricCapsMessage message);
  void onFabricConnected(bool connected);

  // Runs everything due at clock.nowNs().
  void tick();
  // The earliest time at which tick() has something to do.
  int64_t nextDueNs() const;
  // The clock tick() and nextDueNs() read (the reconcile loop waits on the same one).
  Clock& clock() const { return clock_; }

  // ---- introspection (reconcile thread / tests / benchmarks) ----
  bool ready() const { return applied_.has_value(); }
  uint64_t appliedVersion() const { return applied_ ? applied_->version : 0; }
  const std::optional<VersionedPolicy>& pendingPolicy() const { return pending_; }
  int64_t retryDueNs() const { return retry_due_ns_; }
  const std::vector<std::string>& unresolvedErrors() const { return errors_; }
  uint64_t reconcileErrorsTotal() const { return errors_total_; }
  int lastTcWrites() const { return last_tc_writes_; }
  // Parameters currently published for a tenant (nullopt if it is not active).
  std::optional<TenantParams> tenantParams(const std::string& tenant) const;
  // The shared memory of an active or retiring tenant (tests).
  std::shared_ptr<TenantShm> tenantShm(const std::string& tenant) const;
  // What the node-wide socket serves (null before the first policy).
  const std::shared_ptr<DefaultTenant>& defaultTenant() const { return default_; }
  std::vector<std::string> activeTenants() const;
  std::vector<std::string> retiringTenants() const;
  // Builds the AgentState that would be published now.
  AgentState buildState() const;  // at the clock's now

 private:
  // One of a tenant's buckets: a device of its link, or a shared fabric link the node is
  // behind (docs/fabric.md), one direction.
  struct BucketEntry {
    BucketSpec spec;            // as published (rate, depth)
    uint64_t capacity = 0;      // allocatableCapacity() of the device's link
    DemandEstimator estimator;  // this bucket's demand (tx: sends; rx: receives)
    uint64_t demand = 0;        // bytes/s or kUnboundedDemand, from the last allocation pass
    uint64_t allocation = 0;    // the allocator's share (the bucket may be refilled faster)
    BucketUsage usage;          // as last read
    uint64_t period_bytes = 0;  // counted by its processes in the last period
    Fence fence;                // what it used against what it was allowed
  };
  struct TenantEntry {
    TenantSpec spec;
    std::shared_ptr<TenantShm> shm;
    std::optional<gid_t> group;        // unixGroup, resolved on this node
    TenantParams params;               // as last published (the agent's own copy, never read back)
    TenantUsage usage;                 // as last read
    int64_t usage_at_ns = 0;           // 0: not read yet
    int64_t period_ns = 0;             // between the last two readings
    std::vector<BucketEntry> buckets;  // index = entry of the bucket table
    ProcessShares shares;              // its processes' own buckets
  };

  void attempt(const VersionedPolicy& policy);
  Status applyTc(const DesiredNode& desired, int* writes);
  void rollbackTc(const std::vector<const DesiredDevice*>& changed);
  Status syncShm(const DesiredNode& desired);
  // The tenant's buckets on this node's devices of its link (tx, rx per device), keeping the
  // rate and estimate of those it had; new ones start at the guarantee.
  std::vector<BucketEntry> bucketsFor(const TenantSpec& spec, const DesiredNode& desired,
                                      const std::vector<BucketEntry>& old) const;
  // A bucket at `rate` (clamped into [guarantee, limit]) with its depth.
  void setRate(BucketSpec* b, const TenantSpec& spec, uint64_t rate) const;
  // A shared link's bucket at `rate` (what the fabric enforces) with its depth and the
  // tenant's guarantee and limit on the link's class.
  void setLinkRate(BucketSpec* b, const TenantSpec& spec, const NodeLink& link,
                   uint64_t rate) const;
  // The link buckets' rates at `now` (caps, held caps or the static split); true if any moved.
  bool refreshLinkRates(TenantEntry& e, int64_t now);
  // Writes <run>/fabric-peers when the map changed (common/fabric_peers.h).
  void writeFabricPeers();
  FabricDemand fabricDemand() const;
  TenantParams paramsFor(const TenantSpec& spec, uint64_t version,
                         const std::vector<BucketEntry>& buckets) const;
  void retireTenant(const std::string& name, TenantEntry e);
  Status serveTenant(const std::string& name, TenantEntry& e,
                     std::map<gid_t, std::string>& group_owner);
  void serveDefault(const DesiredNode& desired);
  // Publishes e.params: into its memory, or split among the uids when it is the default tenant.
  void publishTenant(TenantEntry& e);
  void removeStaleEntries(const DesiredNode& desired);
  void writeTrafficClasses(const DesiredNode& desired);
  void allocate(int64_t now);
  // The kernel's count of the tenant's class on the bucket's device (htb mode, tx); nullopt
  // otherwise.
  std::optional<uint64_t> kernelBytes(const std::string& tenant, const BucketSpec& b) const;
  void resync();
  void refreshClassStats();  // and hands each tenant's count to its buckets' fences
  void publish(int64_t now);
  AgentState buildStateAt(int64_t now) const;
  // The node's fabric demand to the board when it changed, telling it of an edge
  // (fabric_links.h demandEdge); nullopt once while the node is behind no shared link.
  void publishFabricDemand();

  ReconcilerOptions options_;
  TcApplier* tc_;
  Clock& clock_;
  StateBoard* board_;

  std::optional<DesiredNode> applied_;  // last good desired state
  std::optional<VersionedPolicy> applied_policy_;
  std::optional<VersionedPolicy> pending_;  // failed, retried with backoff
  uint64_t latest_seen_version_ = 0;
  Backoff retry_backoff_;
  int64_t retry_due_ns_ = 0;
  std::vector<std::string> errors_;
  uint64_t errors_total_ = 0;
  std::string not_ready_reason_ = "no policy yet";
  int last_tc_writes_ = 0;
  bool stale_removed_ = false;
  std::string traffic_classes_written_;

  FabricLinks fabric_;                   // the shared links this node is behind, their caps
  std::vector<NodeLink> pending_links_;  // the links of the policy being applied
  std::string fabric_peers_written_;
  std::optional<FabricDemand> fabric_published_;  // the board's, as last published
  bool fabric_nothing_published_ = false;         // nullopt published since the last demand
  std::map<std::string, TenantEntry> tenants_;
  // Left the policy: marked deleted, no longer served, dropped once no process is attached.
  std::map<std::string, std::shared_ptr<TenantShm>> retiring_;
  // The node-wide socket's tenant: the policy's default tenant (its memory is the group
  // participant) or the built-in one, each uid on a share of its own.
  std::shared_ptr<DefaultTenant> default_;
  // Shards of a former default tenant that processes still hold: drained, then dropped.
  std::vector<std::shared_ptr<TenantShm>> retiring_shards_;
  std::vector<ClassStat> class_stats_;
  std::unique_ptr<RdmaPortMonitor> rdma_;  // null when options_.sysfs_root is empty

  DurationHistogram reconcile_hist_;
  DurationHistogram allocation_hist_;

  int64_t alloc_due_ns_ = 0;
  int64_t stats_due_ns_ = 0;
  uint64_t stats_reads_ = 0;  // AgentState::stats_reads_total
  int64_t resync_due_ns_ = 0;
  int64_t publish_due_ns_ = 0;
  bool dirty_ = true;
};

}  // namespace tq::agent
