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
//   - every stored version records its author (the caller's verified identity and groups), the
//     source file name and a one-line diff summary, in the store and in the audit log.
//   - usage: the latest report per node, in memory only, bounded (CoreOptions) and expiring.
// Memory: applies are serialised (one policy parse in memory at a time, bounded by the parser's
// budget, policy_file.h); at most kMaxWaitingApplies wait, more get kResourceExhausted.
// Thread-safety: all methods are safe from any thread. One mutex guards the latest version and
// the usage view and is held only for the decision and the durable store; publishing happens
// after it is released.
#pragma once

#include <atomic>
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
#include "common/thread_annotations.h"
#include "policy/metrics.h"
#include "policy/policy_diff.h"
#include "policy/store.h"

namespace tq::policy {

// Who changed the policy: from the verified client certificate, never from the request.
struct Author {
  std::string identity;
  std::vector<std::string> groups;
};

struct ApplyRequest {
  std::string yaml;
  std::string source_name = "<request>";  // FILE in error positions
  bool dry_run = false;
  std::optional<uint64_t> expected_version;
  Author author;
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

// One page of the cluster usage view (GetUsage).
struct ClusterUsage {
  std::vector<NodeUsageEntry> nodes;      // this page's nodes, by node name
  std::vector<TenantUsageReport> totals;  // per tenant over ALL nodes, by name, capped
  uint64_t latest_version = 0;
  std::string next_page_token;  // the last node of this page; "" when it is the last page
  uint32_t total_nodes = 0;
  uint32_t omitted_totals = 0;  // node entries of tenants beyond kMaxUsageTotals (not summed)
};

// Usage reports are bounded per report and in total (docs/policy.md, "Resource limits").
inline constexpr size_t kMaxUsageNodes = 10000;
inline constexpr size_t kMaxUsageErrorsPerNode = 16;
inline constexpr size_t kMaxUsageErrorBytes = 256;
inline constexpr size_t kUsagePageEntries = 20000;              // tenant entries per GetUsage page
inline constexpr size_t kMaxUsageTotals = kMaxTenantsPerAgent;  // per-tenant sums in GetUsage
inline constexpr size_t kMaxWaitingApplies = 4;
inline constexpr int kMaxApplyRaces = 5;

struct CoreOptions {
  // A node that has not reported for this long is dropped from the usage view (30 report
  // intervals of the agent's default 1 s).
  int64_t usage_expiry_ns = 30'000'000'000;
  // Tenant entries kept over all nodes (about 150 bytes each).
  size_t max_usage_entries = 200'000;
};

class AuditLog;

class PolicyCore {
 public:
  // Receives new versions, each at most once, on the thread that applied them, after the
  // core's lock is released (so it may take its time, e.g. start a write to every watcher).
  // Concurrent applies may deliver out of order or skip a version that was superseded before
  // it was delivered: the publisher must drop a version older than one it already has.
  using Publisher = std::function<void(const std::shared_ptr<const PolicyRecord>&)>;

  // `store`, `clock`, `metrics` and `audit` (both may be null) must outlive the core.
  PolicyCore(PolicyStore& store, Clock& clock, PolicydMetrics* metrics = nullptr,
             AuditLog* audit = nullptr, CoreOptions options = {});
  ~PolicyCore();

  // Installs the publisher; it is not called for versions that exist already (read latest()).
  void setPublisher(Publisher publisher);

  Result<ApplyResult> apply(const ApplyRequest& request);
  Result<ApplyResult> rollback(uint64_t version, std::optional<uint64_t> expected_version,
                               const Author& author);

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
  // The page of nodes after `page_token` (a node name; "" = from the first).
  ClusterUsage usage(const std::string& page_token = "");

 private:
  struct Commit {
    PolicySpec policy;
    std::string source_yaml;
    std::string source_name;
    bool dry_run = false;
    std::optional<uint64_t> expected_version;
    Author author;
    uint64_t rollback_of = 0;
  };
  Result<ApplyResult> commitLocked(const Commit& commit) TQ_REQUIRES(mu_);
  Result<ApplyResult> commitOnceLocked(const Commit& commit) TQ_REQUIRES(mu_);
  void publishLatest();
  void expireUsageLocked() TQ_REQUIRES(mu_);
  // Takes the store's latest if it is newer than latest_ (another replica appended it).
  void refreshLocked() TQ_REQUIRES(mu_);

  PolicyStore& store_;
  Clock& clock_;
  PolicydMetrics* metrics_;
  AuditLog* audit_;
  const CoreOptions options_;
  Mutex apply_mu_;  // serialises applies, parse included (one parse in memory at a time)
  std::atomic<int> applies_waiting_{0};
  mutable Mutex mu_;
  std::shared_ptr<const PolicyRecord> latest_ TQ_GUARDED_BY(mu_);
  Publisher publisher_ TQ_GUARDED_BY(mu_);
  uint64_t published_version_ TQ_GUARDED_BY(mu_) = 0;  // newest version handed to the publisher
  std::map<std::string, NodeUsageEntry> usage_ TQ_GUARDED_BY(mu_);
  std::map<std::string, int64_t> usage_seen_ns_
      TQ_GUARDED_BY(mu_);                        // node -> clock_.nowNs() of its last report
  size_t usage_entries_ TQ_GUARDED_BY(mu_) = 0;  // tenant entries over all of usage_
};

}  // namespace tq::policy
