#include "nccl-plugin/tenant.h"

#include <unistd.h>

#include <algorithm>
#include <climits>

#include "common/log.h"
#include "common/token_bucket.h"
#include "common/units.h"

namespace tq::plugin {

const char* tenantSourceName(TenantSource s) {
  switch (s) {
    case TenantSource::kEnv: return "TENANTQOS_TENANT";
    case TenantSource::kTrafficClass: return "trafficClass";
    case TenantSource::kDefault: return "default";
  }
  return "?";
}

TenantChoice resolveTenant(const std::string& env_tenant, int traffic_class,
                           const TrafficClassLookup& lookup, const std::string& default_tenant) {
  if (!env_tenant.empty()) return {env_tenant, TenantSource::kEnv};
  if (traffic_class >= 0 && lookup) {
    if (std::optional<std::string> t = lookup(traffic_class)) {
      return {*t, TenantSource::kTrafficClass};
    }
  }
  return {default_tenant, TenantSource::kDefault};
}

PacerConfig pacerConfigFromParams(const PluginParams& p) {
  PacerConfig c;
  c.run_dir = p.run_dir;
  c.rate = p.rate;
  c.burst = p.burst;
  c.dscp = p.dscp;
  c.sl = p.sl;
  c.priority = p.priority;
  c.recheck_ns = p.shm_recheck_ms * 1'000'000;
  c.catchup_ns = p.catchup_ms * 1'000'000;
  c.chunk_ns = p.pace_chunk_us * 1'000;
  return c;
}

// ---------------------------------------------------------------------------------------------

TenantPacer::TenantPacer(std::string tenant, PacerConfig cfg, Clock& clock)
    : tenant_(std::move(tenant)), cfg_(std::move(cfg)), clock_(clock) {
  useFallback();
  const int64_t now = clock_.nowNs();
  std::lock_guard<std::mutex> lock(mu_);
  tryAttach(now, /*first=*/true);
  next_check_ns_.store(now + cfg_.recheck_ns, std::memory_order_relaxed);
}

TenantPacer::~TenantPacer() {
  // Withdraw nothing here: comms release their own backlog; readers release their slots.
}

TenantPacer::Mode TenantPacer::mode() const {
  if (agent_.load(std::memory_order_acquire) != nullptr) return Mode::kAgent;
  return cfg_.rate.has_value() ? Mode::kEnvRate : Mode::kUnpaced;
}

TrafficQos TenantPacer::qos() const {
  TrafficQos q;
  q.dscp = dscp_.load(std::memory_order_relaxed);
  q.service_level = sl_.load(std::memory_order_relaxed);
  q.priority = cfg_.priority.has_value() ? static_cast<uint32_t>(*cfg_.priority)
                                         : static_cast<uint32_t>(q.service_level);
  q.tenant = tenant_;
  return q;
}

std::string TenantPacer::describe() const {
  const Mode m = mode();
  std::string s = "tenant " + tenant_ + ": ";
  const std::string marking = "dscp " + std::to_string(dscp_.load()) + ", sl " +
                              std::to_string(sl_.load());
  const std::string path = tenantShmPath(cfg_.run_dir, tenant_);
  if (m == Mode::kAgent) {
    if (!paced_.load()) return s + "governed by the agent (" + path + "), unpaced by policy; " + marking;
    return s + "paced by the agent (" + path + ") at " + formatRate(rate_.load()) + ", burst " +
           formatSize(burst_.load()) + "; " + marking;
  }
  if (m == Mode::kEnvRate) {
    return s + "no agent file " + path + "; pacing at TENANTQOS_RATE " +
           formatRate(*cfg_.rate) + ", burst " + formatSize(cfg_.burst) + "; " + marking;
  }
  return s + "no agent file " + path + " and no TENANTQOS_RATE: UNPACED (marked with " + marking +
         " and counted); looking for the file every " +
         std::to_string(cfg_.recheck_ns / 1'000'000) + " ms";
}

void TenantPacer::useFallback() {
  rate_.store(cfg_.rate.value_or(0), std::memory_order_relaxed);
  burst_.store(cfg_.burst, std::memory_order_relaxed);
  limit_.store(0, std::memory_order_relaxed);
  paced_.store(cfg_.rate.has_value(), std::memory_order_relaxed);
  dscp_.store(static_cast<int>(cfg_.dscp.value_or(0)), std::memory_order_relaxed);
  sl_.store(static_cast<int>(cfg_.sl.value_or(0)), std::memory_order_relaxed);
}

// mu_ held.
void TenantPacer::tryAttach(int64_t now, bool first) {
  const std::string path = tenantShmPath(cfg_.run_dir, tenant_);
  if (!first && ::access(path.c_str(), F_OK) != 0) return;  // cheap probe before open+mmap
  auto reader = TenantShmReader::attach(cfg_.run_dir, tenant_);
  if (!reader.ok()) {
    if (first) {
      if (reader.status().code() != StatusCode::kNotFound) {
        TQ_LOG(kWarn, "tenant %s: cannot use agent file: %s", tenant_.c_str(),
               reader.status().message().c_str());
      }
      const Mode m = mode();
      if (m == Mode::kUnpaced) {
        TQ_LOG(kWarn, "%s", describe().c_str());
      } else {
        TQ_LOG(kInfo, "%s", describe().c_str());
      }
    }
    return;
  }
  uint64_t seq = 0;
  const TenantParams p = (*reader)->readParams(&seq);
  if (p.deleted) return;  // the agent is removing this tenant: not a policy to follow
  auto b = std::make_unique<AgentBinding>();
  b->reader = std::move(reader).value();
  b->slot = b->reader->claimSlot();
  if (b->slot == nullptr && !warned_no_slot_) {
    warned_no_slot_ = true;
    TQ_LOG(kWarn,
           "tenant %s: all %u process slots of %s are taken; pacing with the shared bucket but "
           "this process's usage is not reported to the agent",
           tenant_.c_str(), shm::kMaxSlots, path.c_str());
  }
  applyParams(p, seq);
  AgentBinding* raw = b.get();
  bindings_.push_back(std::move(b));
  agent_.store(raw, std::memory_order_release);
  if (!first) {
    TQ_LOG(kInfo, "tenant %s: the agent's file appeared; the tenant is governed from now on",
           tenant_.c_str());
  }
  TQ_LOG(kInfo, "%s", describe().c_str());
  (void)now;
}

void TenantPacer::applyParams(const TenantParams& p, uint64_t seq) {
  rate_.store(p.rate_bytes_per_second, std::memory_order_relaxed);
  burst_.store(p.burst_bytes != 0 ? p.burst_bytes : cfg_.burst, std::memory_order_relaxed);
  limit_.store(p.limit_bytes_per_second, std::memory_order_relaxed);
  paced_.store(p.paced, std::memory_order_relaxed);
  dscp_.store(static_cast<int>(p.dscp & 63), std::memory_order_relaxed);
  sl_.store(static_cast<int>(p.service_level & 15), std::memory_order_relaxed);
  seq_.store(seq, std::memory_order_release);  // last: a reader that sees seq sees the values
}

void TenantPacer::refresh(AgentBinding* a) {
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) return;  // someone else is refreshing; use the current values
  if (agent_.load(std::memory_order_acquire) != a) return;
  uint64_t seq = 0;
  const TenantParams p = a->reader->readParams(&seq);
  if (p.deleted) {
    agent_.store(nullptr, std::memory_order_release);
    useFallback();
    next_check_ns_.store(clock_.nowNs() + cfg_.recheck_ns, std::memory_order_relaxed);
    TQ_LOG(kWarn, "tenant %s was removed from the policy; now: %s", tenant_.c_str(),
           describe().c_str());
    return;
  }
  const bool was_paced = paced_.load(std::memory_order_relaxed);
  applyParams(p, seq);
  if (was_paced != p.paced) TQ_LOG(kInfo, "%s", describe().c_str());
}

uint64_t TenantPacer::rateBytesPerSecond() const {
  return paced_.load(std::memory_order_relaxed) ? rate_.load(std::memory_order_relaxed) : 0;
}

uint64_t TenantPacer::chunkBytes() const {
  if (!paced_.load(std::memory_order_relaxed)) return 0;
  const uint64_t rate = rate_.load(std::memory_order_relaxed);
  const uint64_t burst = burst_.load(std::memory_order_relaxed);
  const unsigned __int128 by_time =
      static_cast<unsigned __int128>(rate) * static_cast<uint64_t>(cfg_.chunk_ns) / 1'000'000'000u;
  uint64_t c = static_cast<uint64_t>(std::min<unsigned __int128>(by_time, burst));
  c -= c % kMinPaceChunk;
  return std::max(c, kMinPaceChunk);
}

bool TenantPacer::admit(uint64_t bytes, PaceState* ps, uint64_t pending) {
  if (pending == 0) pending = bytes;
  const int64_t now = clock_.nowNs();
  AgentBinding* a = agent_.load(std::memory_order_acquire);
  if (a != nullptr) {
    if (a->reader->paramsChanged(seq_.load(std::memory_order_relaxed))) {
      refresh(a);
      a = agent_.load(std::memory_order_acquire);
    }
  } else if (now >= next_check_ns_.load(std::memory_order_relaxed)) {
    std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
    if (lock.owns_lock() && agent_.load(std::memory_order_acquire) == nullptr) {
      next_check_ns_.store(now + cfg_.recheck_ns, std::memory_order_relaxed);
      tryAttach(now, /*first=*/false);
    }
    a = agent_.load(std::memory_order_acquire);
  }
  shm::Slot* slot = slotFor(a);
  slot->heartbeat_ns.store(static_cast<uint64_t>(now), std::memory_order_relaxed);

  bool ok = true;
  if (paced_.load(std::memory_order_relaxed)) {
    const BucketConfig bc{rate_.load(std::memory_order_relaxed),
                          burst_.load(std::memory_order_relaxed)};
    std::atomic<int64_t>& bucket = a != nullptr ? a->reader->bucketState() : local_bucket_;
    if (ps->refused_bytes != 0 && ps->ready_at_ns != 0 && now > ps->ready_at_ns) {
      ps->lag_ns = std::max(ps->lag_ns, std::min(now - ps->ready_at_ns, cfg_.catchup_ns));
    }
    BucketConfig eff = bc;
    if (ps->lag_ns > 0) {
      unsigned __int128 extra =
          static_cast<unsigned __int128>(ps->lag_ns) * bc.rate_bytes_per_second / 1'000'000'000u;
      const uint64_t limit = limit_.load(std::memory_order_relaxed);
      if (limit != 0) {  // never past the limit: only the headroom above the rate
        const uint64_t headroom = limit > bc.rate_bytes_per_second ? limit - bc.rate_bytes_per_second : 0;
        extra = std::min<unsigned __int128>(
            extra, static_cast<unsigned __int128>(headroom) * static_cast<uint64_t>(cfg_.catchup_ns) /
                       1'000'000'000u);
      }
      eff.burst_bytes += static_cast<uint64_t>(std::min<unsigned __int128>(extra, UINT64_MAX / 2));
    }
    ok = bucketTryTake(bucket, now, bytes, eff);
    if (!ok) {
      ps->lag_ns = 0;  // caught up: refused on time
      ps->ready_at_ns = bucketReadyAt(bucket, now, bytes, bc);
    }
  }
  if (!ok) {
    slot->throttle_events.fetch_add(1, std::memory_order_relaxed);
    if (slot->throttled_since_ns.load(std::memory_order_relaxed) == 0) {
      int64_t zero = 0;
      slot->throttled_since_ns.compare_exchange_strong(zero, now, std::memory_order_relaxed);
    }
    if (ps->refused_bytes != pending) {
      // One backlog entry per comm: the bytes it is waiting to send now (they change as a
      // chunked message progresses).
      release(ps);
      ps->refused_bytes = pending;
      ps->refused_slot = slot;
      slot->backlog_bytes.fetch_add(pending, std::memory_order_relaxed);
    }
    return false;
  }
  if (slot->throttled_since_ns.load(std::memory_order_relaxed) != 0) {
    const int64_t since = slot->throttled_since_ns.exchange(0, std::memory_order_relaxed);
    if (since != 0 && now > since) {
      slot->throttled_ns.fetch_add(static_cast<uint64_t>(now - since), std::memory_order_relaxed);
    }
  }
  release(ps);
  slot->tx_bytes.fetch_add(bytes, std::memory_order_relaxed);
  return true;
}

void TenantPacer::onReceived(uint64_t bytes) {
  slotFor(agent_.load(std::memory_order_acquire))
      ->rx_bytes.fetch_add(bytes, std::memory_order_relaxed);
}

void TenantPacer::onSendStarted(PaceState* ps) {
  ps->in_flight.fetch_add(1, std::memory_order_relaxed);
  if (sends_in_flight_.fetch_add(1, std::memory_order_acq_rel) == 0) {
    shm::Slot* slot = slotFor(agent_.load(std::memory_order_acquire));
    int64_t zero = 0;
    slot->busy_since_ns.compare_exchange_strong(zero, clock_.nowNs(), std::memory_order_relaxed);
  }
}

void TenantPacer::onSendFinished(PaceState* ps, int64_t count) {
  if (count <= 0) return;
  ps->in_flight.fetch_sub(count, std::memory_order_relaxed);
  if (sends_in_flight_.fetch_sub(count, std::memory_order_acq_rel) == count) {
    shm::Slot* slot = slotFor(agent_.load(std::memory_order_acquire));
    const int64_t since = slot->busy_since_ns.exchange(0, std::memory_order_relaxed);
    const int64_t now = clock_.nowNs();
    if (since != 0 && now > since) {
      slot->busy_ns.fetch_add(static_cast<uint64_t>(now - since), std::memory_order_relaxed);
    }
  }
}

void TenantPacer::release(PaceState* ps) {
  if (ps->refused_bytes == 0) return;
  ps->refused_slot->backlog_bytes.fetch_sub(ps->refused_bytes, std::memory_order_relaxed);
  ps->refused_bytes = 0;
  ps->refused_slot = nullptr;
}

const shm::Slot& TenantPacer::counters() const {
  AgentBinding* a = agent_.load(std::memory_order_acquire);
  return a != nullptr && a->slot != nullptr ? *a->slot : local_slot_;
}

// ---------------------------------------------------------------------------------------------

TenantRegistry::TenantRegistry(const PluginParams& params, Clock& clock, TrafficClassLookup lookup)
    : params_(params), clock_(clock), lookup_(std::move(lookup)) {
  if (!lookup_) {
    const std::string dir = params_.run_dir;
    lookup_ = [dir](int tc) { return tenantForTrafficClass(dir, tc); };
  }
}

std::shared_ptr<TenantPacer> TenantRegistry::forTrafficClass(int traffic_class,
                                                             TenantSource* source) {
  const TenantChoice c =
      resolveTenant(params_.tenant, traffic_class, lookup_, params_.default_tenant);
  if (source != nullptr) *source = c.source;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (traffic_class >= 0 && logged_tc_.insert(traffic_class).second) {
      if (c.source == TenantSource::kTrafficClass) {
        TQ_LOG(kInfo, "trafficClass %d -> tenant %s", traffic_class, c.tenant.c_str());
      } else if (c.source == TenantSource::kDefault) {
        TQ_LOG(kInfo, "trafficClass %d names no tenant in %s; using the default tenant %s",
               traffic_class, params_.run_dir.c_str(), c.tenant.c_str());
      }
    }
  }
  return byName(c.tenant);
}

std::shared_ptr<TenantPacer> TenantRegistry::byName(const std::string& tenant) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pacers_.find(tenant);
  if (it != pacers_.end()) return it->second;
  auto p = std::make_shared<TenantPacer>(tenant, pacerConfigFromParams(params_), clock_);
  pacers_.emplace(tenant, p);
  return p;
}

}  // namespace tq::plugin
