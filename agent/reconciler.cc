#include "agent/reconciler.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <set>

#include "agent/fabric_client.h"
#include "common/attach_protocol.h"
#include "common/capacity.h"
#include "common/fabric_peers.h"
#include "common/file_util.h"
#include "common/log.h"
#include "common/token_bucket.h"
#include "common/topology.h"
#include "common/units.h"

namespace tq::agent {
namespace {

double secondsBetween(int64_t from_ns, int64_t to_ns) {
  return static_cast<double>(std::max<int64_t>(0, to_ns - from_ns)) / 1e9;
}

}  // namespace

Reconciler::Reconciler(ReconcilerOptions options, TcApplier* tc, Clock& clock, StateBoard* board)
    : options_(std::move(options)),
      tc_(tc),
      clock_(clock),
      board_(board),
      retry_backoff_(options_.retry,
                     options_.backoff_seed != 0 ? options_.backoff_seed : std::random_device{}()) {
  if (!options_.sysfs_root.empty()) {
    rdma_ = std::make_unique<RdmaPortMonitor>(options_.sysfs_root,
                                              options_.rdma_rediscover_interval_ns);
  }
  const int64_t now = clock_.nowNs();
  alloc_due_ns_ = now;
  stats_due_ns_ = now;
  resync_due_ns_ = now + options_.resync_interval_ns;
  publish_due_ns_ = now;
}

Reconciler::~Reconciler() = default;

void Reconciler::onPolicy(const VersionedPolicy& policy, PolicySource source) {
  const char* from = source == PolicySource::kPersisted ? "persisted snapshot" : "policyd";
  if (applied_policy_ && applied_policy_->version == policy.version &&
      applied_policy_->policy == policy.policy) {
    TQ_LOG(kDebug, "policy v%llu from %s is already enforced",
           static_cast<unsigned long long>(policy.version), from);
    if (pending_) {
      // The newer version failed and policyd now sends back the enforced one (a rollback).
      pending_.reset();
      errors_.clear();
      retry_backoff_.reset();
      dirty_ = true;
    }
    return;
  }
  if (applied_policy_ && policy.version < applied_policy_->version) {
    TQ_LOG(kWarn,
           "policy v%llu from %s is older than the enforced v%llu; applying it anyway "
           "(policyd is the authority)",
           static_cast<unsigned long long>(policy.version), from,
           static_cast<unsigned long long>(applied_policy_->version));
  }
  TQ_LOG(kInfo, "policy v%llu from %s: %zu tenants, %zu links",
         static_cast<unsigned long long>(policy.version), from, policy.policy.tenants.size(),
         policy.policy.links.size());
  latest_seen_version_ = std::max(latest_seen_version_, policy.version);
  retry_backoff_.reset();
  attempt(policy);
}

void Reconciler::attempt(const VersionedPolicy& policy) {
  const int64_t start = clock_.nowNs();
  int writes = 0;
  auto desired = computeDesired(policy, options_.devices, options_.device_exists);
  if (desired.ok() && options_.tc_mode == TcMode::kNone) {
    for (DesiredDevice& d : desired->devices) {
      d.tenant_classes = false;
      d.tenants.clear();  // no tc tree depends on them
    }
  }
  Status s = desired.status();
  std::vector<std::string> fabric_warnings;
  if (s.ok()) {
    FabricLinks next;
    fabric_warnings = next.setPolicy(policy.policy, options_.node);
    pending_links_ = next.links();
  }
  if (s.ok()) s = applyTc(*desired, &writes);
  if (s.ok()) s = syncShm(*desired);
  const int64_t end = clock_.nowNs();
  reconcile_hist_.observe(secondsBetween(start, end));
  last_tc_writes_ = writes;
  dirty_ = true;

  if (!s.ok()) {
    errors_total_++;
    const std::string msg = "apply policy v" + std::to_string(policy.version) + ": " + s.message();
    errors_ = {msg};
    pending_ = policy;
    const int64_t delay = retry_backoff_.nextDelayNs();
    retry_due_ns_ = end + delay;
    if (!applied_) not_ready_reason_ = msg;
    TQ_LOG(kError, "%s; keeping %s, retry %d in %lld ms", msg.c_str(),
           applied_ ? ("policy v" + std::to_string(applied_->version)).c_str()
                    : "the previous kernel and shm state",
           retry_backoff_.failures(), static_cast<long long>(delay / 1'000'000));
    return;
  }

  const bool new_version = !applied_policy_ || applied_policy_->version != policy.version;
  if (new_version) {
    for (const std::string& w : desired->warnings) TQ_LOG(kWarn, "%s", w.c_str());
    for (const std::string& w : fabric_warnings) TQ_LOG(kWarn, "fabric: %s", w.c_str());
  }
  fabric_.setPolicy(policy.policy, options_.node);
  writeFabricPeers();
  TQ_LOG(kInfo, "enforcing policy v%llu: %zu tenants on %zu devices (%s), %d tc writes, %.2f ms",
         static_cast<unsigned long long>(policy.version), desired->tenants.size(),
         desired->devices.size(), std::string(tcModeName(options_.tc_mode)).c_str(), writes,
         static_cast<double>(end - start) / 1e6);
  applied_ = std::move(desired).value();
  applied_policy_ = policy;
  pending_.reset();
  errors_.clear();
  retry_backoff_.reset();
  not_ready_reason_.clear();
  stats_due_ns_ = end;  // fresh class counters for the new tree
  resync_due_ns_ = end + options_.resync_interval_ns;
}

Status Reconciler::applyTc(const DesiredNode& desired, int* writes) {
  *writes = 0;
  std::vector<const DesiredDevice*> changed;
  for (const DesiredDevice& d : desired.devices) {
    auto r = tc_->apply(d);
    if (!r.ok()) {
      rollbackTc(changed);
      return r.status();
    }
    *writes += *r;
    if (*r > 0) changed.push_back(&d);
  }
  for (const std::string& dev : desired.unmanaged_devices) {
    Status s = tc_->remove(dev);
    if (!s.ok()) {
      rollbackTc(changed);
      return s;
    }
  }
  return okStatus();
}

void Reconciler::rollbackTc(const std::vector<const DesiredDevice*>& changed) {
  if (!applied_) return;  // nothing known to be good; each device is old-or-new on its own
  for (const DesiredDevice* d : changed) {
    auto it = std::find_if(applied_->devices.begin(), applied_->devices.end(),
                           [&](const DesiredDevice& o) { return o.device == d->device; });
    // A device the last good state did not manage had no tree of ours before: remove it.
    Status s = it != applied_->devices.end() ? tc_->apply(*it).status() : tc_->remove(d->device);
    if (!s.ok()) {
      TQ_LOG(kError, "roll back dev %s to policy v%llu: %s", d->device.c_str(),
             static_cast<unsigned long long>(applied_->version), s.message().c_str());
    } else {
      TQ_LOG(kInfo, "rolled back dev %s to policy v%llu", d->device.c_str(),
             static_cast<unsigned long long>(applied_->version));
    }
  }
}

void Reconciler::setRate(BucketSpec* b, const TenantSpec& spec, uint64_t rate) const {
  // The allocator never refills a bucket below the guarantee nor above the limit; a new policy
  // moves the rate into that band at once (the next allocation pass refines it).
  const uint64_t floor = std::min(spec.guarantee_bytes_per_second, spec.limit_bytes_per_second);
  b->rate_bytes_per_second = std::clamp(rate, floor, spec.limit_bytes_per_second);
  b->depth_bytes =
      bucketDepthBytes(b->rate_bytes_per_second, options_.bucket_depth_ns, options_.burst_bytes);
  b->guarantee_bytes_per_second = spec.guarantee_bytes_per_second;
  b->limit_bytes_per_second = spec.limit_bytes_per_second;
}

void Reconciler::setLinkRate(BucketSpec* b, const TenantSpec& spec, const NodeLink& link,
                             uint64_t rate) const {
  const LinkShare share = tenantShareOn(spec, link.name);
  b->rate_bytes_per_second = rate;
  b->depth_bytes = bucketDepthBytes(rate, options_.bucket_depth_ns, options_.burst_bytes);
  b->guarantee_bytes_per_second = share.guarantee;
  b->limit_bytes_per_second = share.limit;
}

std::vector<Reconciler::BucketEntry> Reconciler::bucketsFor(
    const TenantSpec& spec, const DesiredNode& desired, const std::vector<BucketEntry>& old) const {
  std::vector<BucketEntry> out;
  uint32_t index = 0;
  for (const DesiredDevice& d : desired.devices) {
    if (d.link != spec.link || index >= shm::kMaxDeviceBuckets) continue;
    for (shm::Direction dir : {shm::kTx, shm::kRx}) {
      BucketEntry e;
      e.spec.scope = shm::kScopeDevice;
      e.spec.index = index;
      e.spec.direction = dir;
      e.spec.name = d.device;
      e.capacity = allocatableCapacity(desired.links.at(d.link));
      e.estimator = DemandEstimator(options_.demand);
      uint64_t rate = spec.guarantee_bytes_per_second;
      for (const BucketEntry& o : old) {
        if (o.spec.scope == shm::kScopeDevice && o.spec.name == d.device &&
            o.spec.direction == dir) {
          rate = o.spec.rate_bytes_per_second;
          e.estimator = o.estimator;
          e.demand = o.demand;
          e.allocation = o.allocation;
        }
      }
      setRate(&e.spec, spec, rate);
      out.push_back(std::move(e));
    }
    ++index;
  }
  // A tx and an rx bucket per shared link the node is behind, at what the fabric enforces now
  // (the allocator's cap, or the static split until one comes).
  const int64_t now = clock_.nowNs();
  for (const NodeLink& link : pending_links_) {
    for (shm::Direction dir : {shm::kTx, shm::kRx}) {
      BucketEntry e;
      e.spec.scope = shm::kScopeFabricLink;
      e.spec.index = link.index;
      e.spec.direction = dir;
      e.spec.name = link.name.substr(0, shm::kBucketNameBytes - 1);
      e.capacity = link.allocatable;
      e.estimator = DemandEstimator(options_.demand);
      for (const BucketEntry& o : old) {
        if (o.spec.scope == shm::kScopeFabricLink && o.spec.name == e.spec.name &&
            o.spec.direction == dir) {
          e.estimator = o.estimator;
          e.demand = o.demand;
        }
      }
      setLinkRate(&e.spec, spec, link, fabric_.rate(spec, link, dir, now));
      out.push_back(std::move(e));
    }
  }
  return out;
}

TenantParams Reconciler::paramsFor(const TenantSpec& spec, uint64_t version,
                                   const std::vector<BucketEntry>& buckets) const {
  TenantParams p;
  p.policy_version = version;
  p.guarantee_bytes_per_second = spec.guarantee_bytes_per_second;
  p.limit_bytes_per_second = spec.limit_bytes_per_second;
  p.weight = std::max<uint32_t>(1, spec.weight);
  p.service_level = spec.service_level;
  p.dscp = spec.dscp;
  p.paced = true;
  p.deleted = false;
  p.traffic_classes = spec.traffic_classes;
  for (const BucketEntry& b : buckets) p.buckets.push_back(b.spec);
  return p;
}

Status Reconciler::syncShm(const DesiredNode& desired) {
  removeStaleEntries(desired);
  Status first_error;
  auto note = [&](Status s) {
    if (!s.ok() && first_error.ok()) first_error = s;
  };
  for (const auto& [name, spec] : desired.tenants) {
    auto it = tenants_.find(name);
    if (it == tenants_.end()) {
      TenantEntry e;
      auto r = retiring_.find(name);
      if (r != retiring_.end()) {
        e.shm = std::move(r->second);  // came back before its last process left
        retiring_.erase(r);
      } else {
        auto created = TenantShm::create(name, clock_.wallNs());
        if (!created.ok()) {
          note(created.status().withContext("tenant " + name));
          continue;
        }
        e.shm = std::move(created).value();
      }
      e.shares = ProcessShares(options_.demand);
      // A new tenant's buckets start at its guarantee, the rate the allocator gives a tenant
      // without processes.
      e.spec = spec;
      e.buckets = bucketsFor(spec, desired, {});
      e.params = paramsFor(spec, desired.version, e.buckets);
      e.shm->publish(e.params);
      e.shm->heartbeat(clock_.nowNs());
      TQ_LOG(kInfo,
             "tenant %s: shared memory (%zu buckets: tx and rx on %zu devices at %s, guarantee "
             "%s, limit %s)",
             name.c_str(), e.buckets.size(), e.buckets.size() / 2,
             formatRate(e.buckets.empty() ? 0 : e.buckets[0].spec.rate_bytes_per_second).c_str(),
             formatRate(spec.guarantee_bytes_per_second).c_str(),
             formatRate(spec.limit_bytes_per_second).c_str());
      it = tenants_.emplace(name, std::move(e)).first;
    } else {
      TenantEntry& e = it->second;
      e.spec = spec;
      e.buckets = bucketsFor(spec, desired, e.buckets);
      TenantParams p = paramsFor(spec, desired.version, e.buckets);
      if (!(p == e.params)) {
        e.params = p;
        publishTenant(e);
      }
    }
  }
  std::vector<std::string> gone;
  for (const auto& [name, e] : tenants_) {
    if (desired.tenants.count(name) == 0) gone.push_back(name);
  }
  for (const std::string& name : gone) {
    auto node = tenants_.extract(name);
    retireTenant(name, std::move(node.mapped()));
  }
  // Sockets after the memory: a process that attaches finds its parameters published. Groups
  // in name order, so which of two tenants resolving to one gid gets it is stable.
  std::map<gid_t, std::string> group_owner;
  for (auto& [name, e] : tenants_) note(serveTenant(name, e, group_owner));
  serveDefault(desired);
  writeTrafficClasses(desired);
  return first_error;
}

Status Reconciler::serveTenant(const std::string& name, TenantEntry& e,
                               std::map<gid_t, std::string>& group_owner) {
  e.group.reset();
  if (!e.spec.unix_group.empty()) {
    auto gid = resolveUnixGroup(e.spec.unix_group);
    if (!gid.ok()) return gid.status().withContext("tenant " + name);
    auto [it, fresh] = group_owner.emplace(*gid, name);
    if (!fresh) {
      return failedPrecondition("tenant " + name + ": unixGroup " + e.spec.unix_group + " is gid " +
                                std::to_string(*gid) + " on this node, tenant " + it->second +
                                "'s too; not served");
    }
    e.group = *gid;
  }
  if (options_.attach == nullptr) return okStatus();
  return options_.attach->serve(name, e.shm, e.group).withContext("tenant " + name);
}

void Reconciler::publishTenant(TenantEntry& e) {
  if (default_ && default_->group() == e.shm) {
    default_->setParams(e.params);
  } else {
    e.shm->publish(e.params);
  }
}

void Reconciler::serveDefault(const DesiredNode& desired) {
  // The policy's `default: true` tenant, else the one named --default-tenant, else built in.
  std::string name = options_.default_tenant;
  for (const auto& [n, spec] : desired.tenants) {
    if (spec.is_default) name = n;
  }
  std::shared_ptr<TenantShm> group;
  TenantParams params;
  if (auto it = tenants_.find(name); it != tenants_.end()) {
    group = it->second.shm;
    params = it->second.params;
  } else {
    params.policy_version = desired.version;
    params.limit_bytes_per_second = kConservativeRateBytesPerSecond;
    params.buckets = nodeBuckets(kConservativeRateBytesPerSecond,
                                 bucketDepthBytes(kConservativeRateBytesPerSecond,
                                                  options_.bucket_depth_ns, options_.burst_bytes),
                                 kConservativeRateBytesPerSecond);
  }
  if (!default_ || default_->tenant() != name || default_->group() != group) {
    if (default_) {
      const std::shared_ptr<TenantShm> old_group = default_->group();
      for (auto& shm : default_->retire()) retiring_shards_.push_back(std::move(shm));
      // A tenant that stops being the default has its whole rate to itself again.
      for (auto& [n, e] : tenants_) {
        if (e.shm == old_group) e.shm->publish(e.params);
      }
    }
    DefaultTenant::Options o;
    o.tenant = name;
    o.min_depth_bytes = options_.burst_bytes;
    o.demand = options_.demand;
    default_ = std::make_shared<DefaultTenant>(o, group, clock_);
    if (group) {
      TQ_LOG(kInfo,
             "the node-wide socket attaches processes to tenant %s, each uid to a share of its own",
             name.c_str());
    } else {
      TQ_LOG(kInfo,
             "the policy has no tenant %s: the node-wide socket attaches processes to a "
             "built-in default tenant paced at %s, each uid to a share of its own",
             name.c_str(), formatRate(kConservativeRateBytesPerSecond).c_str());
    }
  }
  default_->setParams(params);
  if (options_.attach) options_.attach->serveDefault(default_);
}

void Reconciler::writeTrafficClasses(const DesiredNode& desired) {
  std::vector<std::pair<int, std::string>> map;
  for (const auto& [name, spec] : desired.tenants) {
    for (int32_t tc : spec.traffic_classes) map.emplace_back(tc, name);
  }
  std::sort(map.begin(), map.end());
  const std::string text = attach::encodeTrafficClasses(map);
  if (text == traffic_classes_written_) return;
  const std::string path = attach::trafficClassesPath(options_.run_dir);
  Status s = makeDirs(options_.run_dir, 0755);
  if (s.ok()) s = writeFileAtomic(path, text, 0644);
  if (!s.ok()) {
    TQ_LOG(kWarn, "write %s: %s", path.c_str(), s.message().c_str());
    return;
  }
  traffic_classes_written_ = text;
}

void Reconciler::retireTenant(const std::string& name, TenantEntry e) {
  TenantParams p = e.params;
  p.deleted = true;
  e.shm->publish(p);
  if (options_.attach) options_.attach->unserve(name);
  if (e.shm->idle()) {
    TQ_LOG(kInfo, "tenant %s: left the policy; its memory is released", name.c_str());
    return;
  }
  TQ_LOG(kInfo,
         "tenant %s: left the policy; marked deleted, kept until its %zu attached "
         "process(es) leave",
         name.c_str(), e.shm->attachments().size());
  retiring_[name] = std::move(e.shm);
}

void Reconciler::removeStaleEntries(const DesiredNode& desired) {
  if (stale_removed_) return;
  stale_removed_ = true;
  // What an earlier agent left under <run>/tenants: sockets of tenants this policy no longer
  // has, and layout v1 files (processes that map one keep it until they restart).
  const std::string dir = attach::tenantsDir(options_.run_dir);
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  std::vector<std::string> names;
  while (dirent* ent = ::readdir(d)) names.emplace_back(ent->d_name);
  ::closedir(d);
  for (const std::string& name : names) {
    if (name == "." || name == "..") continue;
    const std::string path = dir + "/" + name;
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) continue;
    if (!S_ISDIR(st.st_mode)) {
      if (::unlink(path.c_str()) == 0) {
        TQ_LOG(kInfo, "removed %s, left by an earlier agent (layout v1 or a stray file)",
               path.c_str());
      }
      continue;
    }
    if (desired.tenants.count(name) != 0) continue;
    ::unlink((path + "/agent.sock").c_str());
    if (::rmdir(path.c_str()) == 0) {
      TQ_LOG(kInfo, "removed %s of tenant %s, no longer in the policy", path.c_str(), name.c_str());
    }
  }
}

void Reconciler::allocate(int64_t now) {
  const int64_t start = clock_.nowNs();
  // Per device and direction: the buckets of the tenants sharing it, as allocator inputs.
  struct Group {
    std::vector<TenantEntry*> tenants;
    std::vector<size_t> bucket;  // the bucket index in each tenant's table
  };
  std::map<std::pair<std::string, int>, Group> groups;
  for (auto& [name, e] : tenants_) {
    // The default tenant's usage is its own memory's and every uid's shard's.
    TenantUsage u = default_ && default_->group() == e.shm
                        ? default_->collect(now, e.spec.limit_bytes_per_second)
                        : e.shm->collect(now, e.spec.limit_bytes_per_second);
    const int64_t period = e.usage_at_ns != 0 ? now - e.usage_at_ns : 0;
    for (size_t i = 0; i < e.buckets.size(); ++i) {
      BucketEntry& b = e.buckets[i];
      const BucketUsage cur = i < u.buckets.size() ? u.buckets[i] : BucketUsage{};
      const DemandSignals sig = signalsBetween(b.usage, cur, e.usage_at_ns == 0);
      if (u.processes == 0) {
        b.estimator.reset();
        b.demand = 0;
      } else {
        // The network-bound rule (a busy tenant below its guarantee) is for sends only: a
        // receiver's ingress is admitted by the receivers' buckets, so receives that take long
        // to arrive are their senders' doing, and claiming more here would only take the
        // receiver's spare from others.
        const uint64_t g = b.spec.direction == shm::kTx ? e.spec.guarantee_bytes_per_second : 0;
        b.demand = b.estimator.update(sig, period, g);
      }
      b.usage = cur;
      b.period_bytes = sig.bytes_sent;
      // A shared link's bucket is not the node's to allocate: it enforces the fabric's cap
      // (refreshLinkRates), and its demand goes to the cluster allocator (fabricDemand).
      if (b.spec.scope != shm::kScopeDevice) continue;
      groups[{b.spec.name, b.spec.direction}].tenants.push_back(&e);
      groups[{b.spec.name, b.spec.direction}].bucket.push_back(i);
    }
    e.usage = std::move(u);
    e.period_ns = period;
    e.usage_at_ns = now;
    e.shm->heartbeat(now);
  }
  std::set<TenantEntry*> changed;
  for (auto& [key, g] : groups) {
    std::vector<TenantInput> in;
    in.reserve(g.tenants.size());
    for (size_t k = 0; k < g.tenants.size(); ++k) {
      const TenantEntry* e = g.tenants[k];
      in.push_back({e->spec.guarantee_bytes_per_second, e->spec.limit_bytes_per_second,
                    e->spec.weight, e->buckets[g.bucket[k]].demand, e->usage.processes > 0});
    }
    const uint64_t capacity = g.tenants.front()->buckets[g.bucket.front()].capacity;
    const std::vector<Allocation> out = tq::agent::allocate(capacity, in);
    for (size_t k = 0; k < g.tenants.size(); ++k) {
      TenantEntry& e = *g.tenants[k];
      BucketEntry& b = e.buckets[g.bucket[k]];
      b.allocation = out[k].rate;
      // What the tenant sent against what it was allowed: a tenant over it pays it back. Sends
      // only: a send is counted as it is admitted (chunk by chunk), a receive when it completes
      // (a whole message in one period), so a receiver's count says nothing per window.
      BucketSpec next = b.spec;
      setRate(&next, e.spec, out[k].bucket_rate);
      const uint64_t rate = b.spec.direction == shm::kTx
                                ? b.fence.step(now, e.period_ns, next.rate_bytes_per_second,
                                               b.period_bytes, next.depth_bytes, e.usage.processes)
                                : next.rate_bytes_per_second;
      if (auto report = b.fence.takeReport()) {
        TQ_LOG(kWarn,
               "tenant %s, %s %s: %s; fenced: its rate is lowered to %s until that is paid back",
               e.spec.name.c_str(), b.spec.direction == shm::kTx ? "tx" : "rx", b.spec.name.c_str(),
               report->c_str(), formatRate(rate).c_str());
      }
      if (rate != next.rate_bytes_per_second) {
        next.rate_bytes_per_second = rate;  // below the guarantee too: it overran
        next.depth_bytes = bucketDepthBytes(rate, options_.bucket_depth_ns, options_.burst_bytes);
      }
      if (!(next == b.spec)) {
        b.spec = next;
        e.params.buckets[g.bucket[k]] = b.spec;
        changed.insert(&e);
      }
    }
  }
  fabric_.logTransitions(now);
  for (auto& [name, e] : tenants_) {
    if (refreshLinkRates(e, now)) changed.insert(&e);
  }
  for (TenantEntry* e : changed) publishTenant(*e);
  // Each process's own buckets: its share of each of its tenant's (the default tenant's
  // participants get theirs in split() below).
  for (auto& [name, e] : tenants_) {
    if (default_ && default_->group() == e.shm) continue;
    e.shm->publishProcessRates(e.shares.update(e.usage, bucketRates(e.params), e.period_ns));
  }
  for (auto it = retiring_.begin(); it != retiring_.end();) {
    it->second->collect(now, 0);  // drains the slots of processes that left
    it->second->heartbeat(now);
    if (it->second->idle()) {
      TQ_LOG(kInfo, "tenant %s: last process gone; its memory is released", it->first.c_str());
      it = retiring_.erase(it);
    } else {
      ++it;
    }
  }
  if (default_) {
    if (!default_->group()) default_->collect(now, kConservativeRateBytesPerSecond);
    default_->split(now);
  }
  for (auto it = retiring_shards_.begin(); it != retiring_shards_.end();) {
    (*it)->collect(now, 0);
    (*it)->heartbeat(now);
    it = (*it)->idle() ? retiring_shards_.erase(it) : it + 1;
  }
  allocation_hist_.observe(secondsBetween(start, clock_.nowNs()));
}

std::optional<uint64_t> Reconciler::kernelBytes(const std::string& tenant,
                                                const BucketSpec& b) const {
  if (options_.tc_mode != TcMode::kHtb || b.direction != shm::kTx || b.scope != shm::kScopeDevice) {
    return std::nullopt;
  }
  for (const ClassStat& c : class_stats_) {
    if (c.device == b.name && c.tenant == tenant) return c.bytes;
  }
  return std::nullopt;
}

bool Reconciler::refreshLinkRates(TenantEntry& e, int64_t now) {
  bool moved = false;
  for (size_t i = 0; i < e.buckets.size(); ++i) {
    BucketEntry& b = e.buckets[i];
    if (b.spec.scope != shm::kScopeFabricLink) continue;
    const std::vector<NodeLink>& links = fabric_.links();
    if (b.spec.index >= links.size()) continue;  // a policy whose links are being replaced
    const NodeLink& link = links[b.spec.index];
    const uint64_t rate = fabric_.rate(e.spec, link, b.spec.direction, now);
    if (rate == b.spec.rate_bytes_per_second) continue;
    setLinkRate(&b.spec, e.spec, link, rate);
    b.allocation = rate;
    if (i < e.params.buckets.size()) e.params.buckets[i] = b.spec;
    moved = true;
  }
  return moved;
}

void Reconciler::onFabricCaps(FabricCapsMessage message) {
  const bool peers = message.peers.has_value();
  Status st = fabric_.onCaps(std::move(message), clock_.nowNs());
  if (!st.ok()) {
    TQ_LOG(kWarn, "fabric: %s", st.message().c_str());
    return;
  }
  if (peers) writeFabricPeers();
  // The new caps go into the buckets now rather than at the next pass, and into /metrics at
  // this tick rather than at the next publish (up to 100 ms later).
  const int64_t now = clock_.nowNs();
  fabric_.logTransitions(now);
  for (auto& [name, e] : tenants_) {
    if (refreshLinkRates(e, now)) {
      publishTenant(e);
      dirty_ = true;
    }
  }
}

void Reconciler::onFabricConnected(bool connected) {
  fabric_.setConnected(connected, clock_.nowNs());
  dirty_ = true;
}

void Reconciler::writeFabricPeers() {
  const std::string path = attach::fabricPeersPath(options_.run_dir);
  if (fabric_.links().empty()) {
    if (!fabric_peers_written_.empty() && ::unlink(path.c_str()) == 0) {
      TQ_LOG(kInfo, "removed %s: this node is behind no shared link", path.c_str());
    }
    fabric_peers_written_.clear();
    return;
  }
  FabricPeerMap map = fabric_.peerMap();
  for (const DeviceMapping& d : options_.devices) {
    if (d.rail) map.device_rails.emplace(d.device, *d.rail);
  }
  const std::string text = formatFabricPeers(map);
  if (text == fabric_peers_written_) return;
  Status st = makeDirs(options_.run_dir, 0755);
  if (st.ok()) st = writeFileAtomic(path, text, 0644);
  if (!st.ok()) {
    TQ_LOG(kWarn, "write %s: %s", path.c_str(), st.message().c_str());
    return;
  }
  fabric_peers_written_ = text;
}

FabricDemand Reconciler::fabricDemand() const {
  FabricDemand d;
  d.policy_version = appliedVersion();
  const std::vector<NodeLink>& links = fabric_.links();
  for (const auto& [name, e] : tenants_) {
    if (e.usage.processes == 0) continue;  // hosts no process: no demand, no cap
    std::vector<FabricDemandEntry> rows(links.size());
    for (const BucketEntry& b : e.buckets) {
      if (b.spec.scope != shm::kScopeFabricLink || b.spec.index >= links.size()) continue;
      FabricDemandEntry& row = rows[b.spec.index];
      row.tenant = name;
      row.link = links[b.spec.index].name;
      (b.spec.direction == shm::kTx ? row.tx : row.rx) = b.demand;
    }
    for (FabricDemandEntry& row : rows) {
      if (!row.tenant.empty()) d.entries.push_back(std::move(row));
    }
  }
  return d;
}

void Reconciler::resync() {
  if (!applied_ || pending_) return;
  for (const DesiredDevice& d : applied_->devices) {
    auto r = tc_->apply(d);
    if (!r.ok()) {
      errors_total_++;
      TQ_LOG(kError, "resync dev %s: %s", d.device.c_str(), r.status().message().c_str());
    } else if (*r > 0) {
      TQ_LOG(kWarn, "dev %s had drifted from policy v%llu; repaired with %d tc writes",
             d.device.c_str(), static_cast<unsigned long long>(applied_->version), *r);
    }
  }
}

void Reconciler::refreshClassStats() {
  if (!applied_) {
    class_stats_.clear();
    return;
  }
  std::vector<ClassStat> all;
  for (const DesiredDevice& d : applied_->devices) {
    auto r = tc_->stats(d.device);
    if (!r.ok()) {
      TQ_LOG(kDebug, "tc stats dev %s: %s", d.device.c_str(), r.status().message().c_str());
      continue;
    }
    all.insert(all.end(), r->begin(), r->end());
  }
  class_stats_ = std::move(all);
  // What the kernel counted in each tenant's class, against what its buckets allowed.
  for (auto& [name, e] : tenants_) {
    for (BucketEntry& b : e.buckets) {
      if (auto total = kernelBytes(name, b.spec)) {
        b.fence.kernelReading(*total, b.spec.depth_bytes, e.usage.processes);
      }
    }
  }
}

AgentState Reconciler::buildState() const { return buildStateAt(clock_.nowNs()); }

AgentState Reconciler::buildStateAt(int64_t now) const {
  AgentState s;
  s.node = options_.node;
  s.tc_mode = std::string(tcModeName(options_.tc_mode));
  s.ready = applied_.has_value();
  s.not_ready_reason = s.ready ? "" : not_ready_reason_;
  s.policy_version = appliedVersion();
  s.latest_seen_version = std::max(latest_seen_version_, appliedVersion());
  for (const auto& [name, e] : tenants_) {
    TenantStatus t;
    t.name = name;
    t.link = e.spec.link;
    t.transmit_bytes = e.usage.tx_bytes;
    t.receive_bytes = e.usage.rx_bytes;
    t.throttled_ns = e.usage.throttled_ns;
    t.backlog_bytes = e.usage.backlog_bytes;
    for (const BucketEntry& b : e.buckets) {
      BucketStatus bs;
      bs.device = b.spec.name;
      bs.fabric_link = b.spec.scope == shm::kScopeFabricLink;
      if (bs.fabric_link && b.spec.index < fabric_.links().size()) {
        bs.device = fabric_.links()[b.spec.index].name;  // the whole class name
      }
      bs.receive = b.spec.direction == shm::kRx;
      bs.bytes = b.usage.bytes;
      bs.throttled_ns = b.usage.throttled_ns;
      bs.backlog_bytes = b.usage.backlog_bytes;
      bs.allocated_bytes_per_second = b.spec.rate_bytes_per_second;
      bs.depth_bytes = b.spec.depth_bytes;
      bs.demand_bytes_per_second = b.demand;
      bs.overrun_bytes = b.fence.overrunBytesTotal();
      bs.fenced = b.fence.fenced();
      if (!bs.receive && !bs.fabric_link) {
        t.allocated_bytes_per_second += bs.allocated_bytes_per_second;
      }
      t.buckets.push_back(std::move(bs));
    }
    t.guarantee_bytes_per_second = e.spec.guarantee_bytes_per_second;
    t.limit_bytes_per_second = e.spec.limit_bytes_per_second;
    t.processes = e.usage.processes;
    s.tenants.push_back(std::move(t));
  }
  // The attached processes as the kernel names them (SO_PEERCRED on their sockets, in the
  // agent's pid namespace, whatever namespace they run in).
  if (options_.attach != nullptr) {
    for (const Attachment& a : options_.attach->attachments()) {
      s.attached.push_back({static_cast<int32_t>(a.peer.pid), a.tenant});
    }
  }
  std::sort(s.attached.begin(), s.attached.end(),
            [](const AttachedProcess& a, const AttachedProcess& b) { return a.pid < b.pid; });
  s.classes = class_stats_;
  if (rdma_) s.rdma_ports = rdma_->ports();
  s.errors = errors_;
  s.reconcile_errors_total = errors_total_;
  s.stats_reads_total = stats_reads_;
  s.reconcile_duration = reconcile_hist_;
  s.allocation_duration = allocation_hist_;
  s.published_at_ns = now;
  s.fabric = fabric_.status(now);
  return s;
}

void Reconciler::publishFabricDemand() {
  if (board_ == nullptr) return;
  if (fabric_.links().empty()) {
    if (fabric_published_ || !fabric_nothing_published_) board_->publishFabricDemand(std::nullopt);
    fabric_published_.reset();
    fabric_nothing_published_ = true;
    return;
  }
  FabricDemand d = fabricDemand();
  if (fabric_published_ && *fabric_published_ == d) return;
  // An edge against the last pass's demand (a tenant started or stopped, a large step) wakes
  // the allocator stream's writer now; smaller moves wait for its periodic look.
  const bool edge = !fabric_published_ || demandEdge(*fabric_published_, d);
  board_->publishFabricDemand(d, edge);
  fabric_published_ = std::move(d);
  fabric_nothing_published_ = false;
}

void Reconciler::publish(int64_t now) {
  if (board_ != nullptr) {
    // The link buckets at the time the state says the caps' mode for: a hold that ran out
    // since this tick's pass shows as the static split, never as "static" with the held caps.
    const int64_t at = clock_.nowNs();
    for (auto& [name, e] : tenants_) {
      if (refreshLinkRates(e, at)) publishTenant(e);
    }
    board_->publish(buildStateAt(at));
  }
  publishFabricDemand();
  dirty_ = false;
  publish_due_ns_ = now + options_.publish_interval_ns;
}

void Reconciler::tick() {
  int64_t now = clock_.nowNs();
  if (pending_ && now >= retry_due_ns_) {
    VersionedPolicy p = *pending_;
    TQ_LOG(kInfo, "retrying policy v%llu", static_cast<unsigned long long>(p.version));
    attempt(p);
    now = clock_.nowNs();
  }
  if (now >= resync_due_ns_) {
    resync();
    resync_due_ns_ = now + options_.resync_interval_ns;
  }
  if (now >= alloc_due_ns_) {
    allocate(now);
    publishFabricDemand();  // each pass: an edge reaches the allocator stream at once
    // Keep the cadence, but never try to catch up on missed periods.
    alloc_due_ns_ = std::max(alloc_due_ns_ + options_.period_ns, now + options_.period_ns / 2);
  }
  if (now >= stats_due_ns_) {
    refreshClassStats();
    if (rdma_) rdma_->refresh(now);  // node facts: read with or without a policy
    ++stats_reads_;
    stats_due_ns_ = now + options_.stats_interval_ns;
    dirty_ = true;
  }
  if (dirty_ || now >= publish_due_ns_) publish(now);
}

int64_t Reconciler::nextDueNs() const {
  int64_t due = std::min({alloc_due_ns_, stats_due_ns_, resync_due_ns_, publish_due_ns_});
  if (pending_) due = std::min(due, retry_due_ns_);
  return due;
}

std::optional<TenantParams> Reconciler::tenantParams(const std::string& tenant) const {
  auto it = tenants_.find(tenant);
  if (it == tenants_.end()) return std::nullopt;
  return it->second.params;
}

std::shared_ptr<TenantShm> Reconciler::tenantShm(const std::string& tenant) const {
  if (auto it = tenants_.find(tenant); it != tenants_.end()) return it->second.shm;
  if (auto it = retiring_.find(tenant); it != retiring_.end()) return it->second;
  return nullptr;
}

std::vector<std::string> Reconciler::activeTenants() const {
  std::vector<std::string> v;
  for (const auto& [name, e] : tenants_) v.push_back(name);
  return v;
}

std::vector<std::string> Reconciler::retiringTenants() const {
  std::vector<std::string> v;
  for (const auto& [name, w] : retiring_) v.push_back(name);
  return v;
}

}  // namespace tq::agent
