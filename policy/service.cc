#include "policy/service.h"

#include <cinttypes>

#include "common/log.h"
#include "policy/policy_file.h"

namespace tq::policy {
namespace {

std::string_view resultOf(const Status& s) {
  switch (s.code()) {
    case StatusCode::kInvalidArgument: return "invalid";
    case StatusCode::kFailedPrecondition: return "conflict";
    case StatusCode::kNotFound: return "not_found";
    default: return "error";
  }
}

}  // namespace

PolicyCore::PolicyCore(PolicyStore& store, Clock& clock, PolicydMetrics* metrics)
    : store_(store), clock_(clock), metrics_(metrics) {
  if (auto l = store_.latest()) latest_ = std::make_shared<const PolicyRecord>(std::move(*l));
  if (metrics_ != nullptr) {
    metrics_->setPolicyVersion(latest_ ? latest_->version : 0);
    metrics_->setStoreCorruptRecords(store_.corruptRecords());
  }
  store_.setOnExternalAppend([this] {
    {
      std::lock_guard<std::mutex> lock(mu_);
      refreshLocked();
    }
    publishLatest();
  });
}

PolicyCore::~PolicyCore() { store_.setOnExternalAppend(nullptr); }

Status PolicyCore::sync() {
  Status st = store_.sync();
  {
    std::lock_guard<std::mutex> lock(mu_);
    refreshLocked();
  }
  publishLatest();
  return st;
}

void PolicyCore::refreshLocked() {
  const uint64_t have = latest_ ? latest_->version : 0;
  if (store_.nextVersion() <= have + 1) return;  // nothing newer (the common, cheap case)
  auto l = store_.latest();
  if (!l || l->version <= have) return;
  latest_ = std::make_shared<const PolicyRecord>(std::move(*l));
  TQ_LOG(kInfo, "policy version %" PRIu64 " committed by another replica", latest_->version);
  if (metrics_ != nullptr) metrics_->setPolicyVersion(latest_->version);
}

void PolicyCore::setPublisher(Publisher publisher) {
  std::lock_guard<std::mutex> lock(mu_);
  publisher_ = std::move(publisher);
}

Result<ApplyResult> PolicyCore::apply(const ApplyRequest& request) {
  const int64_t start = clock_.nowNs();
  ParsedPolicy parsed = parsePolicyYaml(request.yaml, request.source_name);
  Result<ApplyResult> r = [&]() -> Result<ApplyResult> {
    if (!parsed.ok()) return parsed.status();
    std::lock_guard<std::mutex> lock(mu_);
    return commitLocked(std::move(parsed.policy), request.yaml, request.dry_run,
                        request.expected_version, request.applied_by, 0);
  }();
  publishLatest();
  if (metrics_ != nullptr) {
    metrics_->countApply("apply", r.ok() ? (r->dry_run   ? "dry_run"
                                            : r->changed ? "applied"
                                                         : "unchanged")
                                         : resultOf(r.status()));
    if (r.ok() && r->changed && !r->dry_run) {
      metrics_->observeApplySeconds(static_cast<double>(clock_.nowNs() - start) / 1e9);
    }
  }
  return r;
}

Result<ApplyResult> PolicyCore::rollback(uint64_t version, std::optional<uint64_t> expected_version,
                                         const std::string& applied_by) {
  Result<ApplyResult> r = [&]() -> Result<ApplyResult> {
    if (version == 0) return invalidArgument("rollback: version must be >= 1");
    Result<PolicyRecord> target = store_.get(version);
    if (!target.ok())
      return target.status().withContext("rollback to version " + std::to_string(version));
    // Rules may have tightened since that version was applied: it must still be valid.
    auto errors = validatePolicy(target->policy, "version " + std::to_string(version));
    if (!errors.empty()) {
      return failedPrecondition("rollback to version " + std::to_string(version) +
                                ": it no longer passes validation:\n" +
                                errorsToStatus(errors).message());
    }
    std::lock_guard<std::mutex> lock(mu_);
    return commitLocked(std::move(target->policy), std::move(target->source_yaml), false,
                        expected_version, applied_by, version);
  }();
  publishLatest();
  if (metrics_ != nullptr) {
    metrics_->countApply("rollback",
                         r.ok() ? (r->changed ? "applied" : "unchanged") : resultOf(r.status()));
  }
  return r;
}

Result<ApplyResult> PolicyCore::commitLocked(PolicySpec policy, std::string source_yaml,
                                             bool dry_run, std::optional<uint64_t> expected_version,
                                             const std::string& applied_by, uint64_t rollback_of) {
  for (int race = 0;; ++race) {
    refreshLocked();
    Result<ApplyResult> r =
        commitOnceLocked(policy, source_yaml, dry_run, expected_version, applied_by, rollback_of);
    // kAborted: another replica committed this version number first. Decide again on top of it
    // (the policy may now be unchanged, or expected_version stale).
    if (r.ok() || r.status().code() != StatusCode::kAborted || race + 1 >= kMaxApplyRaces) {
      return r;
    }
    TQ_LOG(kInfo, "apply lost a race to another replica (%s); deciding again",
           r.status().message().c_str());
    Status synced = store_.sync();
    if (!synced.ok()) return unavailable(synced.message());
  }
}

Result<ApplyResult> PolicyCore::commitOnceLocked(const PolicySpec& policy,
                                                 const std::string& source_yaml, bool dry_run,
                                                 std::optional<uint64_t> expected_version,
                                                 const std::string& applied_by,
                                                 uint64_t rollback_of) {
  const uint64_t current = latest_ ? latest_->version : 0;
  if (expected_version && *expected_version != current) {
    return failedPrecondition("expected_version " + std::to_string(*expected_version) +
                              " is stale: the latest version is " + std::to_string(current) +
                              " (fetch it, re-apply your change on top, and retry)");
  }
  ApplyResult out;
  out.dry_run = dry_run;
  out.diff = diffPolicies(latest_ ? latest_->policy : PolicySpec{}, policy);
  if (latest_ && !out.diff.hasChanges()) {
    out.version = current;
    out.changed = false;
    return out;
  }
  out.changed = true;
  out.version = store_.nextVersion();
  if (dry_run) return out;

  PolicyRecord rec;
  rec.version = out.version;
  rec.policy = policy;
  rec.source_yaml = source_yaml;
  rec.applied_at_unix_ms = clock_.wallNs() / kNsPerMs;
  rec.applied_by = applied_by;
  rec.rollback_of = rollback_of;
  Result<PolicyRecord> stored = store_.append(std::move(rec));
  if (!stored.ok()) {
    const Status& st = stored.status();
    TQ_LOG(kError, "policy version %" PRIu64 " was not stored: %s", out.version,
           st.message().c_str());
    // A store failure is the server's problem, whatever errno said (EACCES on the data dir is
    // not the client's permission). Out of space stays visible as such; a lost compare-and-append
    // race (another replica appended first) is a retryable conflict.
    if (st.code() == StatusCode::kResourceExhausted) return st;
    if (st.code() == StatusCode::kFailedPrecondition) return aborted(st.message());
    // etcd without quorum or unreachable: retryable, and nothing was stored.
    if (st.code() == StatusCode::kUnavailable) return st;
    return internalError(st.message());
  }
  latest_ = std::make_shared<const PolicyRecord>(std::move(*stored));
  TQ_LOG(kInfo, "policy version %" PRIu64 " stored (%zu tenants, by %s%s)", latest_->version,
         latest_->policy.tenants.size(), applied_by.empty() ? "?" : applied_by.c_str(),
         rollback_of ? (", rollback of " + std::to_string(rollback_of)).c_str() : "");
  if (metrics_ != nullptr) metrics_->setPolicyVersion(latest_->version);
  return out;
}

void PolicyCore::publishLatest() {
  // Outside mu_: fanning a snapshot out to many watchers takes a while and must not block
  // readers and usage reports. Two applies may race to here; the older one then arrives second
  // and the publisher drops it (it never sends a version older than one already sent), so
  // watchers still see versions in order and end on the latest.
  std::shared_ptr<const PolicyRecord> latest;
  Publisher publisher;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!latest_ || !publisher_ || latest_->version <= published_version_) return;
    latest = latest_;
    publisher = publisher_;
    published_version_ = latest->version;
  }
  publisher(latest);
}

Result<PolicyRecord> PolicyCore::get(uint64_t version) const {
  if (version == 0) {
    auto l = latest();
    if (!l) return notFound("no policy has been applied yet");
    return *l;
  }
  return store_.get(version);
}

std::shared_ptr<const PolicyRecord> PolicyCore::latest() const {
  std::lock_guard<std::mutex> lock(mu_);
  return latest_;
}

std::vector<VersionSummary> PolicyCore::list() const { return store_.list(); }

Status PolicyCore::reportUsage(NodeUsageReport report) {
  if (report.node.empty() || report.node.size() > 253) {
    return invalidArgument("usage report: node name must be 1-253 characters");
  }
  if (report.tenants.size() > kMaxUsageTenantsPerNode) {
    return invalidArgument("usage report from " + report.node + ": " +
                           std::to_string(report.tenants.size()) + " tenants, at most " +
                           std::to_string(kMaxUsageTenantsPerNode));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!usage_.count(report.node) && usage_.size() >= kMaxUsageNodes) {
    return resourceExhausted("usage report from " + report.node + ": already tracking " +
                             std::to_string(usage_.size()) + " nodes");
  }
  std::string node = report.node;
  usage_[node] = NodeUsageEntry{std::move(report), clock_.wallNs() / kNsPerMs};
  if (metrics_ != nullptr) metrics_->setUsageNodes(usage_.size());
  return okStatus();
}

ClusterUsage PolicyCore::usage() const {
  ClusterUsage out;
  std::map<std::string, TenantUsageReport> totals;
  std::lock_guard<std::mutex> lock(mu_);
  out.latest_version = latest_ ? latest_->version : 0;
  for (const auto& [name, entry] : usage_) {
    out.nodes.push_back(entry);
    for (const TenantUsageReport& t : entry.report.tenants) {
      TenantUsageReport& sum = totals[t.tenant];
      sum.tenant = t.tenant;
      sum.transmit_bytes_total += t.transmit_bytes_total;
      sum.receive_bytes_total += t.receive_bytes_total;
      sum.transmit_rate_bytes_per_second += t.transmit_rate_bytes_per_second;
      sum.allocated_rate_bytes_per_second += t.allocated_rate_bytes_per_second;
      sum.guarantee_bytes_per_second += t.guarantee_bytes_per_second;
      sum.limit_bytes_per_second += t.limit_bytes_per_second;
      sum.throttled_seconds_total += t.throttled_seconds_total;
      sum.processes += t.processes;
    }
  }
  for (auto& [name, t] : totals) out.totals.push_back(std::move(t));
  return out;
}

}  // namespace tq::policy
