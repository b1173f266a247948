#include "agent/default_tenant.h"

#include <algorithm>

#include "common/log.h"
#include "common/thread_annotations.h"
#include "common/token_bucket.h"
#include "common/units.h"

namespace tq::agent {
namespace {

// Adds `u`'s monotonic totals (bytes, times, rejected readings) to `sum`.
void addTotals(TenantUsage* sum, const TenantUsage& u) {
  if (sum->buckets.size() < u.buckets.size()) sum->buckets.resize(u.buckets.size());
  for (size_t b = 0; b < u.buckets.size(); ++b) {
    BucketUsage& s = sum->buckets[b];
    const BucketUsage& x = u.buckets[b];
    s.bytes += x.bytes;
    s.throttled_ns += x.throttled_ns;
    s.busy_ns += x.busy_ns;
    s.peer_wait_ns += x.peer_wait_ns;
  }
  sum->tx_bytes += u.tx_bytes;
  sum->rx_bytes += u.rx_bytes;
  sum->throttled_ns += u.throttled_ns;
  sum->rejected_readings += u.rejected_readings;
}

// Adds `u`'s gauges (what is true now: backlog, processes) to `sum`.
void addGauges(TenantUsage* sum, const TenantUsage& u) {
  if (sum->buckets.size() < u.buckets.size()) sum->buckets.resize(u.buckets.size());
  for (size_t b = 0; b < u.buckets.size(); ++b) {
    sum->buckets[b].backlog_bytes += u.buckets[b].backlog_bytes;
    sum->buckets[b].throttled_processes += u.buckets[b].throttled_processes;
  }
  sum->backlog_bytes += u.backlog_bytes;
  sum->processes += u.processes;
  sum->throttled_processes += u.throttled_processes;
  sum->slots.insert(sum->slots.end(), u.slots.begin(), u.slots.end());
}

}  // namespace

DefaultTenant::DefaultTenant(Options options, std::shared_ptr<TenantShm> group, Clock& clock)
    : options_(std::move(options)), group_(std::move(group)), clock_(clock) {
  if (group_) {
    parts_[kGroup].shm = group_;
    parts_[kGroup].shares = ProcessShares(options_.demand);
  }
}

Result<std::shared_ptr<TenantShm>> DefaultTenant::shardFor(uid_t uid) {
  const int64_t now = clock_.nowNs();
  MutexLock lock(mu_);
  if (!have_params_) return unavailable("the default tenant has no parameters yet");
  int64_t key = static_cast<int64_t>(uid);
  if (parts_.count(key) == 0 && uid_shards_ >= options_.max_uids) key = kOverflow;
  if (auto it = parts_.find(key); it != parts_.end()) {
    it->second.handed_out_ns = now;
    return it->second.shm;
  }
  TQ_ASSIGN_OR_RETURN(std::shared_ptr<TenantShm> shm,
                      TenantShm::create(options_.tenant, clock_.wallNs()));
  // Room for the newcomer first: the k participants with processes attached are scaled by
  // k / (k + 1), and the newcomer gets what that leaves of each bucket (at least an equal
  // share), so the rates of the participants in use never sum past the tenant's on account of a
  // new shard; the next split() sets every share by demand.
  size_t k = 0;
  for (const auto& [key2, p] : parts_) k += p.shm->idle() ? 0 : 1;
  std::vector<uint64_t> rates, shares;
  for (const BucketSpec& b : template_.buckets) {
    rates.push_back(b.rate_bytes_per_second);
    shares.push_back(b.rate_bytes_per_second);
  }
  for (auto& [key2, p] : parts_) {
    if (p.shm->idle()) continue;
    TenantParams scaled = p.published;
    for (size_t b = 0; b < scaled.buckets.size() && b < shares.size(); ++b) {
      BucketSpec& bs = scaled.buckets[b];
      if (bs.scope == shm::kScopeNone) continue;
      bs.rate_bytes_per_second = static_cast<uint64_t>(
          static_cast<unsigned __int128>(bs.rate_bytes_per_second) * k / (k + 1));
      bs.depth_bytes = depthAt(b, bs.rate_bytes_per_second);
      shares[b] -= std::min(shares[b], bs.rate_bytes_per_second);
    }
    publish(&p, std::move(scaled));
  }
  const size_t n = parts_.size();
  for (size_t b = 0; b < shares.size(); ++b) shares[b] = std::max(shares[b], rates[b] / (n + 1));
  Participant& p = parts_[key];
  p.shares = ProcessShares(options_.demand);
  p.shm = shm;
  p.handed_out_ns = now;
  publish(&p, paramsAt(rates, shares));
  if (key != kOverflow) {
    ++uid_shards_;
    TQ_LOG(kInfo, "default tenant %s: uid %u has buckets of its own now (%zu participants)",
           options_.tenant.c_str(), static_cast<unsigned>(uid), parts_.size());
  } else {
    TQ_LOG(kWarn,
           "default tenant %s: %u uids have buckets of their own, the most there may be; uid %u "
           "and every later one share one set",
           options_.tenant.c_str(), options_.max_uids, static_cast<unsigned>(uid));
  }
  return shm;
}

TenantParams DefaultTenant::paramsAt(const std::vector<uint64_t>& rates,
                                     const std::vector<uint64_t>& shares) const {
  TenantParams p = template_;
  for (size_t b = 0; b < p.buckets.size(); ++b) {
    BucketSpec& bs = p.buckets[b];
    if (bs.scope == shm::kScopeNone) continue;
    bs.rate_bytes_per_second = shares[b];
    bs.depth_bytes = depthAt(b, shares[b]);
    bs.guarantee_bytes_per_second = 0;
    // Late retries may catch up to the tenant's rate at most (tenant.h, admit()).
    bs.limit_bytes_per_second = rates[b];
  }
  return p;
}

uint64_t DefaultTenant::depthAt(size_t b, uint64_t share) const {
  const BucketSpec& t = template_.buckets[b];
  if (t.rate_bytes_per_second == 0) return std::max(t.depth_bytes, options_.min_depth_bytes);
  const unsigned __int128 d =
      static_cast<unsigned __int128>(t.depth_bytes) * share / t.rate_bytes_per_second;
  return std::max(static_cast<uint64_t>(d), options_.min_depth_bytes);
}

void DefaultTenant::publish(Participant* p, TenantParams params) {
  if (p->published_once && params == p->published) return;
  p->published_once = true;
  p->shm->publish(params);
  p->published = std::move(params);
}

void DefaultTenant::setParams(const TenantParams& p) {
  MutexLock lock(mu_);
  template_ = p;
  have_params_ = true;
  redistribute();
}

void DefaultTenant::redistribute() {
  const size_t nb = template_.buckets.size();
  const size_t n = parts_.size();
  if (n == 0) return;
  std::vector<uint64_t> rates(nb, 0);
  std::vector<std::vector<uint64_t>> shares(n, std::vector<uint64_t>(nb, 0));
  std::vector<bool> active;
  for (const auto& [k, p] : parts_) active.push_back(p.usage.processes > 0);
  for (size_t b = 0; b < nb; ++b) {
    const BucketSpec& bs = template_.buckets[b];
    if (bs.scope == shm::kScopeNone) continue;
    rates[b] = bs.rate_bytes_per_second;
    std::vector<uint64_t> demands;
    for (const auto& [k, p] : parts_) demands.push_back(b < p.demand.size() ? p.demand[b] : 0);
    const std::vector<Allocation> out = splitRate(rates[b], demands, active);
    for (size_t i = 0; i < n; ++i) shares[i][b] = out[i].bucket_rate;
  }
  size_t i = 0;
  for (auto& [k, p] : parts_) publish(&p, paramsAt(rates, shares[i++]));
}

TenantUsage DefaultTenant::collect(int64_t now_ns, uint64_t max_rate) {
  MutexLock lock(mu_);
  TenantUsage sum = retired_;
  sum.buckets.resize(template_.buckets.size());
  for (auto& [k, p] : parts_) {
    TenantUsage u = p.shm->collect(now_ns, max_rate);
    const int64_t period = p.usage_at_ns != 0 ? now_ns - p.usage_at_ns : 0;
    p.estimators.resize(u.buckets.size(), DemandEstimator(options_.demand));
    p.demand.resize(u.buckets.size(), 0);
    for (size_t b = 0; b < u.buckets.size(); ++b) {
      const BucketUsage prev = b < p.usage.buckets.size() ? p.usage.buckets[b] : BucketUsage{};
      if (u.processes == 0) {
        p.estimators[b].reset();
        p.demand[b] = 0;
      } else {
        p.demand[b] =
            p.estimators[b].update(signalsBetween(prev, u.buckets[b], p.usage_at_ns == 0), period);
      }
    }
    addTotals(&sum, u);
    addGauges(&sum, u);
    p.usage = std::move(u);
    p.period_ns = period;
    p.usage_at_ns = now_ns;
    p.shm->heartbeat(now_ns);
  }
  return sum;
}

void DefaultTenant::split(int64_t now_ns) {
  MutexLock lock(mu_);
  for (auto it = parts_.begin(); it != parts_.end();) {
    Participant& p = it->second;
    if (it->first != kGroup && now_ns - p.handed_out_ns >= options_.idle_grace_ns &&
        p.shm->idle()) {
      // Nobody attached, nobody asked for it: its totals stay in the tenant's.
      addTotals(&retired_, p.usage);
      TQ_LOG(kDebug, "default tenant %s: %s of uid %lld dropped (idle)", options_.tenant.c_str(),
             it->first == kOverflow ? "the shared buckets" : "the buckets",
             static_cast<long long>(it->first));
      if (it->first != kOverflow) --uid_shards_;
      it = parts_.erase(it);
      continue;
    }
    ++it;
  }
  if (!have_params_) return;
  redistribute();
  for (auto& [k, p] : parts_) {
    if (p.usage_at_ns == 0) continue;  // not read yet: its processes keep their full rates
    p.shm->publishProcessRates(p.shares.update(p.usage, bucketRates(p.published), p.period_ns));
  }
}

std::vector<std::shared_ptr<TenantShm>> DefaultTenant::retire() {
  MutexLock lock(mu_);
  std::vector<std::shared_ptr<TenantShm>> busy;
  for (auto& [k, p] : parts_) {
    if (k == kGroup) continue;
    TenantParams gone = p.published;
    gone.deleted = true;
    p.shm->publish(gone);
    if (!p.shm->idle()) busy.push_back(p.shm);
  }
  parts_.clear();
  uid_shards_ = 0;
  return busy;
}

size_t DefaultTenant::shards() const {
  MutexLock lock(mu_);
  return parts_.size() - (group_ ? 1 : 0);
}

std::shared_ptr<TenantShm> DefaultTenant::shardOf(uid_t uid) const {
  MutexLock lock(mu_);
  auto it = parts_.find(static_cast<int64_t>(uid));
  return it == parts_.end() ? nullptr : it->second.shm;
}

uint64_t DefaultTenant::rateOf(int64_t participant, uint32_t b) const {
  MutexLock lock(mu_);
  auto it = parts_.find(participant);
  if (it == parts_.end() || b >= it->second.published.buckets.size()) return 0;
  return it->second.published.buckets[b].rate_bytes_per_second;
}

}  // namespace tq::agent
