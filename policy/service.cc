#include "policy/service.h"

#include <cinttypes>
#include <cmath>
#include <set>
#include <string_view>

#include "common/log.h"
#include "common/text.h"
#include "common/thread_annotations.h"
#include "policy/audit_log.h"
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

PolicyCore::PolicyCore(PolicyStore& store, Clock& clock, PolicydMetrics* metrics, AuditLog* audit,
                       CoreOptions options)
    : store_(store), clock_(clock), metrics_(metrics), audit_(audit), options_(options) {
  if (auto l = store_.latest()) latest_ = std::make_shared<const PolicyRecord>(std::move(*l));
  if (metrics_ != nullptr) {
    metrics_->setPolicyVersion(latest_ ? latest_->version : 0);
    metrics_->setStoreCorruptRecords(store_.corruptRecords());
  }
  store_.setOnExternalAppend([this] {
    {
      MutexLock lock(mu_);
      refreshLocked();
    }
    publishLatest();
  });
}

PolicyCore::~PolicyCore() { store_.setOnExternalAppend(nullptr); }

Status PolicyCore::sync() {
  Status st = store_.sync();
  {
    MutexLock lock(mu_);
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
  MutexLock lock(mu_);
  publisher_ = std::move(publisher);
}

namespace {

// Counts a caller among those waiting for the apply lock while it lives.
class WaitingApply {
 public:
  explicit WaitingApply(std::atomic<int>* n) : n_(n), count_(n->fetch_add(1) + 1) {}
  ~WaitingApply() { n_->fetch_sub(1); }
  int count() const { return count_; }

 private:
  std::atomic<int>* n_;
  int count_;
};

}  // namespace

Result<ApplyResult> PolicyCore::apply(const ApplyRequest& request) {
  const int64_t start = clock_.nowNs();
  Result<ApplyResult> r = [&]() -> Result<ApplyResult> {
    // Serialised, parse included: policy parsing holds up to its budget in memory, and two
    // parses at once would hold twice that (policy_file.h, "Memory").
    WaitingApply waiting(&applies_waiting_);
    if (waiting.count() > static_cast<int>(kMaxWaitingApplies) + 1) {
      return resourceExhausted("apply: " + std::to_string(waiting.count() - 1) +
                               " applies are already in progress or waiting (at most " +
                               std::to_string(kMaxWaitingApplies + 1) + "); retry shortly");
    }
    MutexLock serial(apply_mu_);
    ParsedPolicy parsed = parsePolicyYaml(request.yaml, request.source_name);
    if (!parsed.ok()) return parsed.status();
    MutexLock lock(mu_);
    return commitLocked({std::move(parsed.policy), request.yaml, request.source_name,
                         request.dry_run, request.expected_version, request.author, 0});
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
                                         const Author& author) {
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
    MutexLock lock(mu_);
    return commitLocked({std::move(target->policy), std::move(target->source_yaml),
                         target->source_name, false, expected_version, author, version});
  }();
  publishLatest();
  if (metrics_ != nullptr) {
    metrics_->countApply("rollback",
                         r.ok() ? (r->changed ? "applied" : "unchanged") : resultOf(r.status()));
  }
  return r;
}

Result<ApplyResult> PolicyCore::commitLocked(const Commit& c) {
  for (int race = 0;; ++race) {
    refreshLocked();
    Result<ApplyResult> r = commitOnceLocked(c);
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

Result<ApplyResult> PolicyCore::commitOnceLocked(const Commit& c) {
  const uint64_t current = latest_ ? latest_->version : 0;
  if (c.expected_version && *c.expected_version != current) {
    return failedPrecondition("expected_version " + std::to_string(*c.expected_version) +
                              " is stale: the latest version is " + std::to_string(current) +
                              " (fetch it, re-apply your change on top, and retry)");
  }
  ApplyResult out;
  out.dry_run = c.dry_run;
  out.diff = diffPolicies(latest_ ? latest_->policy : PolicySpec{}, c.policy);
  if (latest_ && !out.diff.hasChanges()) {
    out.version = current;
    out.changed = false;
    return out;
  }
  out.changed = true;
  out.version = store_.nextVersion();
  if (c.dry_run) return out;

  PolicyRecord rec;
  rec.version = out.version;
  rec.policy = c.policy;  // copies: a lost race decides again with the same commit
  rec.source_yaml = c.source_yaml;
  rec.applied_at_unix_ms = clock_.wallNs() / kNsPerMs;
  rec.applied_by = c.author.identity;
  rec.applied_by_groups = c.author.groups;
  rec.rollback_of = c.rollback_of;
  rec.source_name = c.source_name;
  rec.diff_summary = summarizeDiff(out.diff);
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
  TQ_LOG(kInfo, "policy version %" PRIu64 " stored (%zu tenants, by %s%s): %s", latest_->version,
         latest_->policy.tenants.size(), escapeControl(latest_->applied_by).c_str(),
         c.rollback_of ? (", rollback of " + std::to_string(c.rollback_of)).c_str() : "",
         escapeControl(latest_->diff_summary).c_str());
  if (audit_ != nullptr) {
    // Under mu_, so the log's order is the versions' order. The version is stored already: a
    // failed audit write is logged loudly but does not undo it.
    Status st = audit_->append(*latest_);
    if (!st.ok()) {
      TQ_LOG(kError, "policy version %" PRIu64 " is stored but NOT in the audit log: %s",
             latest_->version, st.message().c_str());
    }
  }
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
    MutexLock lock(mu_);
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
  MutexLock lock(mu_);
  return latest_;
}

std::vector<VersionSummary> PolicyCore::list() const { return store_.list(); }

namespace {

bool printableName(std::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) return false;
  }
  return true;
}

}  // namespace

void PolicyCore::expireUsageLocked() {
  const int64_t cutoff = clock_.nowNs() - options_.usage_expiry_ns;
  for (auto it = usage_seen_ns_.begin(); it != usage_seen_ns_.end();) {
    if (it->second >= cutoff) {
      ++it;
      continue;
    }
    auto entry = usage_.find(it->first);
    usage_entries_ -= entry->second.report.tenants.size();
    TQ_LOG(kInfo, "usage of node %s dropped: no report for %lld s",
           escapeControl(it->first).c_str(),
           static_cast<long long>(options_.usage_expiry_ns / 1'000'000'000));
    usage_.erase(entry);
    it = usage_seen_ns_.erase(it);
  }
}

Status PolicyCore::reportUsage(NodeUsageReport report) {
  if (report.node.empty() || report.node.size() > 253 || !printableName(report.node)) {
    return invalidArgument("usage report: node name must be 1-253 printable characters");
  }
  if (report.tenants.size() > kMaxTenantsPerAgent) {
    return invalidArgument("usage report from " + report.node + ": " +
                           std::to_string(report.tenants.size()) + " tenants, at most " +
                           std::to_string(kMaxTenantsPerAgent) + " (what one agent supports)");
  }
  std::set<std::string_view> seen;
  for (const TenantUsageReport& t : report.tenants) {
    if (t.tenant.empty() || t.tenant.size() > 63 || !printableName(t.tenant)) {
      return invalidArgument("usage report from " + report.node +
                             ": a tenant name is not 1-63 printable characters");
    }
    if (!std::isfinite(t.throttled_seconds_total) || t.throttled_seconds_total < 0) {
      return invalidArgument("usage report from " + report.node + ": tenant " + t.tenant +
                             ": throttled seconds is not a finite, non-negative number");
    }
    // An agent reports each tenant once; a second entry would count it twice in the totals.
    if (!seen.insert(t.tenant).second) {
      return invalidArgument("usage report from " + report.node + ": tenant " + t.tenant +
                             " is listed twice");
    }
  }
  if (report.errors.size() > kMaxUsageErrorsPerNode) report.errors.resize(kMaxUsageErrorsPerNode);
  for (std::string& e : report.errors) {
    if (e.size() > kMaxUsageErrorBytes) e.resize(kMaxUsageErrorBytes);
  }
  MutexLock lock(mu_);
  expireUsageLocked();
  auto old = usage_.find(report.node);
  const size_t before = old == usage_.end() ? 0 : old->second.report.tenants.size();
  if (old == usage_.end() && usage_.size() >= kMaxUsageNodes) {
    return resourceExhausted("usage report from " + report.node + ": already tracking " +
                             std::to_string(usage_.size()) + " nodes (at most " +
                             std::to_string(kMaxUsageNodes) + ")");
  }
  if (usage_entries_ - before + report.tenants.size() > options_.max_usage_entries) {
    return resourceExhausted("usage report from " + report.node + ": " +
                             std::to_string(report.tenants.size()) + " tenants would exceed the " +
                             std::to_string(options_.max_usage_entries) +
                             " tenant entries kept over all nodes");
  }
  usage_entries_ = usage_entries_ - before + report.tenants.size();
  std::string node = report.node;
  usage_seen_ns_[node] = clock_.nowNs();
  usage_[node] = NodeUsageEntry{std::move(report), clock_.wallNs() / kNsPerMs};
  if (metrics_ != nullptr) metrics_->setUsageNodes(usage_.size());
  return okStatus();
}

ClusterUsage PolicyCore::usage(const std::string& page_token) {
  ClusterUsage out;
  std::map<std::string, TenantUsageReport> totals;
  MutexLock lock(mu_);
  expireUsageLocked();
  if (metrics_ != nullptr) metrics_->setUsageNodes(usage_.size());
  out.latest_version = latest_ ? latest_->version : 0;
  out.total_nodes = static_cast<uint32_t>(usage_.size());
  size_t page_entries = 0;
  bool page_full = false;
  for (const auto& [name, entry] : usage_) {
    if (name > page_token || page_token.empty()) {
      const size_t n = entry.report.tenants.size();
      if (!page_full && (out.nodes.empty() || page_entries + n <= kUsagePageEntries)) {
        out.nodes.push_back(entry);
        page_entries += n;
      } else if (!page_full) {
        page_full = true;
        out.next_page_token = out.nodes.back().report.node;
      }
    }
    for (const TenantUsageReport& t : entry.report.tenants) {
      auto it = totals.find(t.tenant);
      if (it == totals.end()) {
        if (totals.size() >= kMaxUsageTotals) {
          ++out.omitted_totals;
          continue;
        }
        it = totals.emplace(t.tenant, TenantUsageReport{}).first;
        it->second.tenant = t.tenant;
      }
      it->second += t;
    }
  }
  for (auto& [name, t] : totals) out.totals.push_back(std::move(t));
  return out;
}

}  // namespace tq::policy
