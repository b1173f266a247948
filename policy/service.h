// The policy service's logic, free of gRPC: apply (validate, optimistic concurrency, diff,
// durable store, publish), rollback, reads, and the in-memory cluster usage view. The gRPC
// layer (grpc_service.h) only translates messages and status codes.
//
// Semantics:
//   - apply: an invalid policy fails with kInvalidArgument listing every error; a stale
//     expected_version fails with kFailedPrecondition; a policy equal to the latest (per-object
//     diff empty: formatting, comments and order do not count) stores nothing and reports
//     changed = false with the latest version; a dry run validates and diffs only. Otherwise the
//     new version is durable in the store before apply returns, then published.
//   - several replicas on one store (etcd): the store's compare-and-append decides; an apply that
//     lost the race to another replica is re-decided on top of the winner (no expected_version:
//     up to kMaxApplyRaces times) or fails with kFailedPrecondition (expected_version is stale).
//     Versions other replicas commit reach this core through the store's external-append
//     callback and are published like local ones.
//   - rollback(N): the content of version N becomes a new version (rollback_of = N).
//   - usage: the latest report per node, in memory only.
// Thread-safety: all methods are safe from any thread. One mutex serialises applies and is held
// only for the decision and the durable store; publishing happens after it is released.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/policy.h"
#include "common/status.h"
#include "policy/metrics.h"
#include "policy/policy_diff.h"
#include "policy/store.h"

namespace tq::policy {

struct ApplyRequest {
  std::string yaml;
  std::string source_name = "<request>";  // FILE in error positions
  bool dry_run = false;
  std::optional<uint64_t> expected_version;
  std::string applied_by;
};

struct ApplyResult {
  uint64_t version = 0;  // the new version; unchanged: the latest; dry run: the one it would get
  bool changed = false;
  bool dry_run = false;
  PolicyDiff diff;
};

struct NodeUsageEntry {
  NodeUsageReport report;
  int64_t received_unix_ms = 0;
};

struct ClusterUsage {
  std::vector<NodeUsageEntry> nodes;      // by node name
  std::vector<TenantUsageReport> totals;  // per tenant, summed over nodes, by tenant name
  uint64_t latest_version = 0;
};

inline constexpr size_t kMaxUsageNodes = 100000;
inline constexpr int kMaxApplyRaces = 5;
inline constexpr size_t kMaxUsageTenantsPerNode = 10000;

class PolicyCore {
 public:
  // Receives new versions, each at most once, on the thread that applied them, after the
  // core's lock is released (so it may take its time, e.g. start a write to every watcher).
  // Concurrent applies may deliver out of order or skip a version that was superseded before
  // it was delivered: the publisher must drop a version older than one it already has.
  using Publisher = std::function<void(const std::shared_ptr<const PolicyRecord>&)>;

  // `store`, `clock` and `metrics` (may be null) must outlive the core.
  PolicyCore(PolicyStore& store, Clock& clock, PolicydMetrics* metrics = nullptr);
  ~PolicyCore();

  // Installs the publisher; it is not called for versions that exist already (read latest()).
  void setPublisher(Publisher publisher);

  Result<ApplyResult> apply(const ApplyRequest& request);
  Result<ApplyResult> rollback(uint64_t version, std::optional<uint64_t> expected_version,
                               const std::string& applied_by);

  // version 0 = latest. kNotFound when there is no such version (or none at all).
  Result<PolicyRecord> get(uint64_t version) const;
  // The latest record (shared, immutable), or null before the first apply.
  std::shared_ptr<const PolicyRecord> latest() const;
  std::vector<VersionSummary> list() const;
  // The store's epoch (policy/store.h).
  std::string epoch() const { return store_.epoch(); }
  // Catches up with versions other replicas committed (PolicyStore::sync), publishing them.
  Status sync();

  Status reportUsage(NodeUsageReport report);
  ClusterUsage usage() const;

 private:
  Result<ApplyResult> commitLocked(PolicySpec policy, std::string source_yaml, bool dry_run,
                                   std::optional<uint64_t> expected_version,
                                   const std::string& applied_by, uint64_t rollback_of);
  Result<ApplyResult> commitOnceLocked(const PolicySpec& policy, const std::string& source_yaml,
                                       bool dry_run, std::optional<uint64_t> expected_version,
                                       const std::string& applied_by, uint64_t rollback_of);
  void publishLatest();
  // Takes the store's latest if it is newer than latest_ (another replica appended it).
  void refreshLocked();

  PolicyStore& store_;
  Clock& clock_;
  PolicydMetrics* metrics_;
  mutable std::mutex mu_;
  std::shared_ptr<const PolicyRecord> latest_;
  Publisher publisher_;
  uint64_t published_version_ = 0;  // newest version handed to the publisher
  std::map<std::string, NodeUsageEntry> usage_;
};

}  // namespace tq::policy
