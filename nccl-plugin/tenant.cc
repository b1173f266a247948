#include "nccl-plugin/tenant.h"

#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>

#include "common/log.h"
#include "common/thread_annotations.h"
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
  c.rx_rate = p.rx_rate;
  c.burst = p.burst;
  c.depth_ns = p.bucket_depth_us * 1'000;
  c.dscp = p.dscp;
  c.sl = p.sl;
  c.priority = p.priority;
  c.recheck_ns = p.shm_recheck_ms * 1'000'000;
  c.catchup_ns = p.catchup_ms * 1'000'000;
  c.chunk_ns = p.pace_chunk_us * 1'000;
  c.agent_uid = static_cast<uid_t>(p.agent_uid);
  return c;
}

// ---------------------------------------------------------------------------------------------

TenantPacer::TenantPacer(std::string tenant, PacerConfig cfg, Clock& clock)
    : tenant_(std::move(tenant)), cfg_(std::move(cfg)), clock_(clock) {
  channels_ = {Channel{shm::kTx, ""}, Channel{shm::kRx, ""}};
  channels_dir_[kTxChannel] = shm::kTx;
  channels_dir_[kRxChannel] = shm::kRx;
  for (auto& c : chan_bucket_) c.store(-1, std::memory_order_relaxed);
  useFallback();
  const int64_t now = clock_.nowNs();
  MutexLock lock(mu_);
  attachAtStart();
  next_check_ns_.store(now + cfg_.recheck_ns, std::memory_order_relaxed);
}

TenantPacer::~TenantPacer() {
  // Withdraw nothing here: comms release their own backlog; closing the connections (bindings_)
  // releases the slots.
}

bool TenantPacer::governed() const { return attach::nodeIsGoverned(cfg_.run_dir); }

bool TenantPacer::attaching() const {
  MutexLock lock(mu_);
  return attempt_ != nullptr;
}

TenantPacer::Mode TenantPacer::mode() const {
  if (agent_.load(std::memory_order_acquire) != nullptr) return Mode::kAgent;
  if (governed_.load(std::memory_order_relaxed)) return Mode::kConservative;
  return cfg_.rate.has_value() || cfg_.rx_rate.has_value() ? Mode::kEnvRate : Mode::kUnpaced;
}

std::string TenantPacer::attachedTenant() const {
  AgentBinding* a = agent_.load(std::memory_order_acquire);
  return a != nullptr ? a->view->tenant() : std::string();
}

TrafficQos TenantPacer::qos() const {
  TrafficQos q;
  q.dscp = dscp_.load(std::memory_order_relaxed);
  q.service_level = sl_.load(std::memory_order_relaxed);
  q.priority = cfg_.priority.has_value() ? static_cast<uint32_t>(*cfg_.priority)
                                         : static_cast<uint32_t>(q.service_level);
  const std::string attached = attachedTenant();
  q.tenant = attached.empty() ? tenant_ : attached;
  return q;
}

namespace {

// "tx 1Gbps/125KB eth0, rx ..." for the log: every bucket of the table.
std::string describeBuckets(const std::vector<BucketSpec>& buckets) {
  std::string s;
  for (const BucketSpec& b : buckets) {
    if (b.scope == shm::kScopeNone) continue;
    if (!s.empty()) s += ", ";
    s += std::string(b.direction == shm::kTx ? "tx " : "rx ") +
         (b.name.empty() ? "" : b.name + " ") + formatRate(b.rate_bytes_per_second) + " (depth " +
         formatSize(b.depth_bytes) + ")";
  }
  return s.empty() ? "no buckets" : s;
}

}  // namespace

std::string TenantPacer::describeLocked() const {
  const Mode m = mode();
  std::string s = "tenant " + tenant_ + ": ";
  const std::string marking =
      "dscp " + std::to_string(dscp_.load()) + ", sl " + std::to_string(sl_.load());
  auto rateText = [&](const char* what, const std::optional<uint64_t>& r, const char* var) {
    return r ? std::string("pacing ") + what + " at " + var + " " + formatRate(*r) + " (depth " +
                   formatSize(bucketDepthBytes(*r, cfg_.depth_ns, cfg_.burst)) + ")"
             : std::string(what) + " unpaced (no " + var + ")";
  };
  switch (m) {
    case Mode::kAgent: {
      AgentBinding* a = agent_.load(std::memory_order_acquire);
      std::string where = "attached through " + a->via;
      if (a->view->tenant() != tenant_) {
        where =
            "attached as tenant " + a->view->tenant() + " through " + a->via + " (" + why_ + ")";
      }
      if (!paced_.load()) return s + where + ", unpaced by policy; " + marking;
      return s + where + ", paced: " + describeBuckets(params_.buckets) + "; " + marking;
    }
    case Mode::kConservative:
      return s + "governed node (" + cfg_.run_dir + " exists) but not attached (" + why_ +
             "): paced at the conservative " + formatRate(kConservativeRateBytesPerSecond) +
             " both ways; trying again every " + std::to_string(cfg_.recheck_ns / 1'000'000) +
             " ms";
    case Mode::kEnvRate:
      return s + "no agent (no " + cfg_.run_dir + "); " +
             rateText("sends", cfg_.rate, "TENANTQOS_RATE") + ", " +
             rateText("receives", cfg_.rx_rate, "TENANTQOS_RX_RATE") + "; " + marking;
    case Mode::kUnpaced: break;
  }
  return s + "no agent (no " + cfg_.run_dir + ") and no TENANTQOS_RATE: UNPACED (marked with " +
         marking + " and counted); looking for the agent every " +
         std::to_string(cfg_.recheck_ns / 1'000'000) + " ms";
}

std::string TenantPacer::describe() const {
  MutexLock lock(mu_);
  return describeLocked();
}

// Fallback buckets: 0 sends, 1 receives.
void TenantPacer::useFallback() {
  const bool gov = governed_.load(std::memory_order_relaxed);
  const std::optional<uint64_t> tx =
      gov ? std::optional<uint64_t>(kConservativeRateBytesPerSecond) : cfg_.rate;
  const std::optional<uint64_t> rx =
      gov ? std::optional<uint64_t>(kConservativeRateBytesPerSecond) : cfg_.rx_rate;
  TenantParams p;
  for (const auto& [dir, rate] : {std::pair{shm::kTx, tx}, std::pair{shm::kRx, rx}}) {
    BucketSpec b;
    b.direction = dir;
    if (rate) {
      b.rate_bytes_per_second = *rate;
      b.depth_bytes = bucketDepthBytes(*rate, cfg_.depth_ns, cfg_.burst);
      b.limit_bytes_per_second = 0;  // no policy limit: late retries may catch up
    } else {
      b.scope = shm::kScopeNone;  // unpaced in this direction
    }
    p.buckets.push_back(b);
  }
  p.paced = tx.has_value() || rx.has_value();
  p.dscp = static_cast<uint32_t>(cfg_.dscp.value_or(0));
  p.service_level = static_cast<uint32_t>(cfg_.sl.value_or(0));
  params_ = p;
  for (int b = 0; b < static_cast<int>(shm::kMaxBuckets); ++b) {
    const BucketSpec* spec = b < 2 ? &p.buckets[static_cast<size_t>(b)] : nullptr;
    hot_[b].rate.store(spec ? spec->rate_bytes_per_second : 0, std::memory_order_relaxed);
    hot_[b].depth.store(spec ? spec->depth_bytes : 0, std::memory_order_relaxed);
    hot_[b].limit.store(spec ? spec->limit_bytes_per_second : 0, std::memory_order_relaxed);
  }
  paced_.store(p.paced, std::memory_order_relaxed);
  dscp_.store(static_cast<int>(p.dscp), std::memory_order_relaxed);
  sl_.store(static_cast<int>(p.service_level), std::memory_order_relaxed);
  mapChannels();
}

// mu_ held (or the constructor). A channel's bucket in params_: on the agent's table, the
// device bucket of its direction that names its device, else an unnamed one, else the first
// one (logged once per device); on the fallback, the direction's bucket.
int TenantPacer::bucketFor(const Channel& c) {
  const std::vector<BucketSpec>& t = params_.buckets;
  if (agent_.load(std::memory_order_acquire) == nullptr) {
    const int b = c.dir == shm::kTx ? 0 : 1;
    return static_cast<size_t>(b) < t.size() && t[static_cast<size_t>(b)].scope != shm::kScopeNone
               ? b
               : -1;
  }
  int unnamed = -1, first = -1;
  std::string names;
  for (size_t i = 0; i < t.size(); ++i) {
    const BucketSpec& b = t[i];
    if (b.scope != shm::kScopeDevice || b.direction != c.dir) continue;
    if (!c.netdev.empty() && b.name == c.netdev) return static_cast<int>(i);
    if (b.name.empty() && unnamed < 0) unnamed = static_cast<int>(i);
    if (first < 0) first = static_cast<int>(i);
    if (!b.name.empty()) names += (names.empty() ? "" : ", ") + b.name;
  }
  if (unnamed >= 0) return unnamed;
  if (first >= 0 && !c.netdev.empty() && logged_unknown_devices_.insert(c.netdev).second) {
    TQ_LOG(kInfo,
           "tenant %s: device %s is not one of the agent's devices for this tenant (%s); its "
           "traffic is paced by the buckets of %s",
           tenant_.c_str(), c.netdev.c_str(), names.c_str(),
           t[static_cast<size_t>(first)].name.c_str());
  }
  return first;
}

void TenantPacer::mapChannels() {
  for (size_t c = 0; c < channels_.size(); ++c) {
    chan_bucket_[c].store(bucketFor(channels_[c]), std::memory_order_relaxed);
  }
}

int TenantPacer::channel(shm::Direction dir, const std::string& netdev) {
  MutexLock lock(mu_);
  for (size_t c = 0; c < channels_.size(); ++c) {
    if (channels_[c].dir == dir && channels_[c].netdev == netdev) return static_cast<int>(c);
  }
  if (channels_.size() >= static_cast<size_t>(kMaxChannels)) {
    return dir == shm::kTx ? kTxChannel : kRxChannel;
  }
  const int c = static_cast<int>(channels_.size());
  channels_.push_back(Channel{dir, netdev});
  channels_dir_[c] = dir;
  chan_bucket_[c].store(bucketFor(channels_.back()), std::memory_order_relaxed);
  num_channels_.store(c + 1, std::memory_order_release);
  return c;
}

std::vector<std::string> TenantPacer::socketsToTry() const {
  return {attach::tenantSocketPath(cfg_.run_dir, tenant_), attach::nodeSocketPath(cfg_.run_dir)};
}

// mu_ held.
Result<std::unique_ptr<TenantPacer::AgentBinding>> TenantPacer::bind(attach::Attached a,
                                                                     const std::string& via) {
  struct stat st {};
  if (::fstat(a.shared_fd.get(), &st) != 0) return errnoStatus("fstat the agent's shared memory");
  TQ_ASSIGN_OR_RETURN(auto view,
                      TenantShmView::map(std::move(a.params_fd), std::move(a.shared_fd), a.slot));
  auto b = std::make_unique<AgentBinding>();
  b->view = std::move(view);
  b->conn = std::move(a.conn);
  b->via = via;
  b->held = a.held;
  b->not_held = std::move(a.reason);
  b->shared_dev = st.st_dev;
  b->shared_ino = st.st_ino;
  if (!b->held) b->conn.reset();  // the agent closed its end already
  return b;
}

// mu_ held. Makes `b` the binding the hot path uses.
void TenantPacer::install(std::unique_ptr<AgentBinding> b, bool first) {
  uint64_t seq = 0;
  const std::optional<TenantParams> p = b->view->readParams(&seq);
  if (b->view->tenant() == tenant_) why_.clear();
  if (!b->held) {
    TQ_LOG(kWarn,
           "tenant %s: attached through %s without a slot and not held by the agent (%s): "
           "pacing within this uid's share, usage not reported; asking again every %lld ms",
           b->view->tenant().c_str(), b->via.c_str(), b->not_held.c_str(),
           static_cast<long long>(cfg_.recheck_ns / 1'000'000));
  } else if (b->view->slot() == nullptr) {
    TQ_LOG(kWarn,
           "tenant %s: all %u process slots are taken; pacing with the shared bucket but "
           "this process's usage is not reported to the agent",
           b->view->tenant().c_str(), shm::kMaxSlots);
  }
  AgentBinding* raw = b.get();
  bindings_.push_back(std::move(b));
  AgentBinding* old = agent_.exchange(raw, std::memory_order_acq_rel);
  if (old != nullptr) old->conn.reset();  // leaves the old agent's (or tenant's) slot
  if (p) {
    applyParams(*p, seq);
  } else {
    seq_.store(0, std::memory_order_release);  // mid-update: the next admission reads again
  }
  lost_ = false;
  if (!first) TQ_LOG(kInfo, "tenant %s: attached again", tenant_.c_str());
  TQ_LOG(kInfo, "%s", describeLocked().c_str());
}

// mu_ held. At init/connect time: bounded waits, in order of socketsToTry().
void TenantPacer::attachAtStart() {
  governed_.store(governed(), std::memory_order_relaxed);
  if (!governed_.load(std::memory_order_relaxed)) {
    useFallback();
    if (mode() == Mode::kUnpaced) {
      TQ_LOG(kWarn, "%s", describeLocked().c_str());
    } else {
      TQ_LOG(kInfo, "%s", describeLocked().c_str());
    }
    return;
  }
  std::string why;
  for (const std::string& path : socketsToTry()) {
    auto got = attach::attachWithin(path, tenant_, kAttachTimeoutMs, clock_, cfg_.agent_uid);
    Status failed = got.status();
    if (got.ok()) {
      auto b = bind(std::move(got).value(), path);
      if (b.ok()) {
        why_ = why;
        install(std::move(b).value(), /*first=*/true);
        return;
      }
      failed = b.status();
    }
    why += (why.empty() ? "" : "; ") + failed.message();
  }
  why_ = why;
  useFallback();
  TQ_LOG(kWarn, "%s", describeLocked().c_str());
  logged_why_ = why_;
}

// mu_ held. One step of re-attaching, from the hot path: starts an attempt, or polls the one in
// progress without waiting; gives up on it at its deadline and moves to the next socket.
void TenantPacer::stepAttach(int64_t now) {
  const bool was_governed = governed_.load(std::memory_order_relaxed);
  governed_.store(governed(), std::memory_order_relaxed);
  if (!governed_.load(std::memory_order_relaxed)) {
    attempt_.reset();
    if (was_governed && agent_.load(std::memory_order_acquire) == nullptr) useFallback();
    return;
  }
  if (!was_governed && agent_.load(std::memory_order_acquire) == nullptr) {
    useFallback();  // the node became governed: conservative until attached
    TQ_LOG(kInfo, "tenant %s: %s appeared; attaching", tenant_.c_str(), cfg_.run_dir.c_str());
  }
  const std::vector<std::string> paths = socketsToTry();
  if (!attempt_) {
    attempt_index_ = 0;
    auto a = attach::Attempt::start(paths[0], tenant_, cfg_.agent_uid);
    if (!a.ok()) {
      // Not our tenant's socket (missing, no permission): the node-wide one, unless already
      // attached there and nothing was lost.
      AgentBinding* cur = agent_.load(std::memory_order_acquire);
      if (cur != nullptr && !lost_ && cur->held) return;
      attempt_index_ = 1;
      a = attach::Attempt::start(paths[1], tenant_, cfg_.agent_uid);
      if (!a.ok()) {
        why_ = a.status().message();
        if (cur == nullptr && why_ != logged_why_) {
          TQ_LOG(kWarn, "%s", describeLocked().c_str());
          logged_why_ = why_;
        }
        return;
      }
    }
    attempt_ = std::move(a).value();
    attempt_deadline_ns_ = now + int64_t{kAttachTimeoutMs} * 1'000'000;
  }
  auto got = attempt_->poll(0);
  if (got.ok() && !got->has_value()) {
    if (now < attempt_deadline_ns_) return;  // the next check polls again
    got = deadlineExceeded(attempt_->path() + ": no reply in time");
  }
  const std::string path = attempt_->path();
  attempt_.reset();
  if (got.ok()) {
    AgentBinding* cur = agent_.load(std::memory_order_acquire);
    struct stat st {};
    if (!(*got)->held && cur != nullptr && !lost_ && ::fstat((*got)->shared_fd.get(), &st) == 0 &&
        st.st_dev == cur->shared_dev && st.st_ino == cur->shared_ino) {
      return;  // the memory it paces with already, still not held: nothing changes
    }
    auto b = bind(std::move(**got), path);
    if (b.ok()) {
      if (attempt_index_ == 1 && why_.empty()) why_ = "its tenant's socket is not reachable";
      install(std::move(b).value(), /*first=*/false);
      return;
    }
    got = b.status();
  }
  why_ = got.status().message();
  if (why_ != logged_why_) {
    TQ_LOG(kWarn, "tenant %s: attach through %s: %s", tenant_.c_str(), path.c_str(), why_.c_str());
    logged_why_ = why_;
  }
}

// mu_ held. An attached pacer's connection closes when the agent exits: keep its memory (the
// last parameters, fail-static) and attach to the next agent.
void TenantPacer::checkConnection(int64_t now) {
  AgentBinding* a = agent_.load(std::memory_order_acquire);
  if (a == nullptr || lost_) return;
  pollfd p{a->conn.get(), POLLIN, 0};
  if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
    lost_ = true;
    TQ_LOG(kWarn,
           "tenant %s: the agent closed the connection (%s); keeping the last parameters "
           "and attaching again",
           tenant_.c_str(), a->via.c_str());
    stepAttach(now);
  }
}

// mu_ held.
void TenantPacer::applyParams(const TenantParams& p, uint64_t seq) {
  params_ = p;
  for (uint32_t b = 0; b < shm::kMaxBuckets; ++b) {
    const BucketSpec* spec =
        b < p.buckets.size() && p.buckets[b].scope != shm::kScopeNone ? &p.buckets[b] : nullptr;
    hot_[b].rate.store(spec ? spec->rate_bytes_per_second : 0, std::memory_order_relaxed);
    const uint64_t depth =
        spec && spec->depth_bytes != 0
            ? spec->depth_bytes
            : bucketDepthBytes(spec ? spec->rate_bytes_per_second : 0, cfg_.depth_ns, cfg_.burst);
    hot_[b].depth.store(depth, std::memory_order_relaxed);
    const uint64_t limit = spec && spec->limit_bytes_per_second != 0 ? spec->limit_bytes_per_second
                                                                     : p.limit_bytes_per_second;
    hot_[b].limit.store(limit, std::memory_order_relaxed);
  }
  paced_.store(p.paced, std::memory_order_relaxed);
  dscp_.store(static_cast<int>(p.dscp & 63), std::memory_order_relaxed);
  sl_.store(static_cast<int>(p.service_level & 15), std::memory_order_relaxed);
  mapChannels();
  seq_.store(seq, std::memory_order_release);  // last: a reader that sees seq sees the values
}

void TenantPacer::refresh(AgentBinding* a) {
  std::unique_lock<Mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) return;  // someone else is refreshing; use the current values
  mu_.assertHeld();               // (std::unique_lock is not annotated; it holds it now)
  if (agent_.load(std::memory_order_acquire) != a) return;
  uint64_t seq = 0;
  const std::optional<TenantParams> p = a->view->readParams(&seq);
  if (!p) return;  // the agent is mid-update: the next isend reads again
  const bool was_paced = paced_.load(std::memory_order_relaxed);
  applyParams(*p, seq);
  if (p->deleted && !lost_) {
    // The tenant left the policy: keep its last parameters until attached elsewhere.
    lost_ = true;
    TQ_LOG(kWarn, "tenant %s was removed from the policy; attaching again",
           a->view->tenant().c_str());
    next_check_ns_.store(0, std::memory_order_relaxed);
    return;
  }
  if (was_paced != p->paced) TQ_LOG(kInfo, "%s", describeLocked().c_str());
}

uint64_t TenantPacer::rateBytesPerSecond(int channel) const {
  const int b = bucketOf(channel);
  if (!paced_.load(std::memory_order_relaxed) || b < 0) return 0;
  return hot_[b].rate.load(std::memory_order_relaxed);
}

uint64_t TenantPacer::chunkBytes(int channel) const {
  const int b = bucketOf(channel);
  if (!paced_.load(std::memory_order_relaxed) || b < 0) return 0;
  const BucketConfig bc = configOf(b);
  const unsigned __int128 by_time = static_cast<unsigned __int128>(bc.rate_bytes_per_second) *
                                    static_cast<uint64_t>(cfg_.chunk_ns) / 1'000'000'000u;
  // At most half the depth: a chunk then fits a bucket that is not full, so an admitter that
  // comes back late (descheduled) loses nothing until the bucket overflows.
  uint64_t c = static_cast<uint64_t>(std::min<unsigned __int128>(by_time, bc.burst_bytes / 2));
  c -= c % kMinPaceChunk;
  return std::max(c, kMinPaceChunk);
}

void TenantPacer::maybeRefresh(int64_t now) {
  AgentBinding* a = agent_.load(std::memory_order_acquire);
  if (a != nullptr && a->view->paramsChanged(seq_.load(std::memory_order_relaxed))) {
    refresh(a);
  }
  if (now >= next_check_ns_.load(std::memory_order_relaxed)) {
    std::unique_lock<Mutex> lock(mu_, std::try_to_lock);
    if (lock.owns_lock()) {
      mu_.assertHeld();
      AgentBinding* cur = agent_.load(std::memory_order_acquire);
      const bool settled = cur != nullptr && !lost_ && cur->held && cur->view->tenant() == tenant_;
      if (settled) {
        checkConnection(now);
      } else {
        stepAttach(now);
      }
      // An attempt in progress is polled again soon; otherwise at the next check.
      next_check_ns_.store(
          now + (attempt_ ? std::min<int64_t>(cfg_.recheck_ns, 1'000'000) : cfg_.recheck_ns),
          std::memory_order_relaxed);
    }
  }
}

bool TenantPacer::admit(uint64_t bytes, PaceState* ps, uint64_t pending) {
  if (pending == 0) pending = bytes;
  const int64_t now = clock_.nowNs();
  maybeRefresh(now);
  AgentBinding* a = agent_.load(std::memory_order_acquire);
  shm::SlotHeader* header = a != nullptr ? a->view->slot() : nullptr;
  (header != nullptr ? header : &local_header_)
      ->heartbeat_ns.store(static_cast<uint64_t>(now), std::memory_order_relaxed);
  const int b = bucketOf(ps->channel);
  shm::Counters* ctr = countersFor(a, blockOf(ps->channel));

  bool ok = true;
  if (b >= 0 && paced_.load(std::memory_order_relaxed)) {
    const BucketConfig bc = configOf(b);
    std::atomic<int64_t>& word = wordFor(a, b);
    std::atomic<int64_t>* floor = floorFor(a, b);
    if (ps->refused_bytes != 0 && ps->ready_at_ns != 0 && now > ps->ready_at_ns) {
      ps->lag_ns = std::max(ps->lag_ns, std::min(now - ps->ready_at_ns, cfg_.catchup_ns));
    }
    BucketConfig eff = bc;
    if (ps->lag_ns > 0) {
      unsigned __int128 extra =
          static_cast<unsigned __int128>(ps->lag_ns) * bc.rate_bytes_per_second / 1'000'000'000u;
      const uint64_t limit = hot_[b].limit.load(std::memory_order_relaxed);
      if (limit != 0) {  // never past the limit: only the headroom above the rate
        const uint64_t headroom =
            limit > bc.rate_bytes_per_second ? limit - bc.rate_bytes_per_second : 0;
        extra = std::min<unsigned __int128>(extra, static_cast<unsigned __int128>(headroom) *
                                                       static_cast<uint64_t>(cfg_.catchup_ns) /
                                                       1'000'000'000u);
      }
      eff.burst_bytes += static_cast<uint64_t>(std::min<unsigned __int128>(extra, UINT64_MAX / 2));
    }
    ok = bucketTryTake(word, now, bytes, eff, floor);
    if (!ok) {
      ps->lag_ns = 0;  // caught up: refused on time
      ps->ready_at_ns = bucketReadyAt(word, now, bytes, bc, floor);
    }
  }
  if (!ok) {
    ctr->throttle_events.fetch_add(1, std::memory_order_relaxed);
    if (ctr->throttled_since_ns.load(std::memory_order_relaxed) == 0) {
      int64_t zero = 0;
      ctr->throttled_since_ns.compare_exchange_strong(zero, now, std::memory_order_relaxed);
    }
    if (ps->refused_bytes != pending || ps->refused_counters != ctr) {
      // One backlog entry per admitter: the bytes it is waiting to admit now (they change as a
      // chunked message progresses).
      release(ps);
      ps->refused_bytes = pending;
      ps->refused_counters = ctr;
      ctr->backlog_bytes.fetch_add(pending, std::memory_order_relaxed);
    }
    return false;
  }
  if (ctr->throttled_since_ns.load(std::memory_order_relaxed) != 0) {
    const int64_t since = ctr->throttled_since_ns.exchange(0, std::memory_order_relaxed);
    if (since != 0 && now > since) {
      ctr->throttled_ns.fetch_add(static_cast<uint64_t>(now - since), std::memory_order_relaxed);
    }
  }
  release(ps);
  if (channels_dir_[ps->channel] == shm::kTx) {
    ctr->bytes.fetch_add(bytes, std::memory_order_relaxed);
  }
  return true;
}

int64_t TenantPacer::waitNs(uint64_t bytes, const PaceState& ps) const {
  const int b = bucketOf(ps.channel);
  if (b < 0 || !paced_.load(std::memory_order_relaxed)) return 0;
  const int64_t now = clock_.nowNs();
  AgentBinding* a = agent_.load(std::memory_order_acquire);
  auto* self = const_cast<TenantPacer*>(this);
  return bucketReadyAt(self->wordFor(a, b), now, bytes, configOf(b), self->floorFor(a, b)) - now;
}

void TenantPacer::giveBack(uint64_t bytes, PaceState* ps) {
  const int b = bucketOf(ps->channel);
  if (b < 0 || bytes == 0 || !paced_.load(std::memory_order_relaxed)) return;
  AgentBinding* a = agent_.load(std::memory_order_acquire);
  bucketGiveBack(wordFor(a, b), clock_.nowNs(), bytes, configOf(b), floorFor(a, b));
}

void TenantPacer::onReceived(uint64_t bytes, const PaceState& ps) {
  countersFor(agent_.load(std::memory_order_acquire), blockOf(ps.channel))
      ->bytes.fetch_add(bytes, std::memory_order_relaxed);
}

void TenantPacer::onSendStarted(PaceState* ps) {
  if (ps->in_flight.fetch_add(1, std::memory_order_relaxed) == 0) {
    ps->busy_index = blockOf(ps->channel);
  }
  const int block = ps->busy_index >= 0 ? ps->busy_index : blockOf(ps->channel);
  if (sends_in_flight_[block].fetch_add(1, std::memory_order_acq_rel) == 0) {
    shm::Counters* c = countersFor(agent_.load(std::memory_order_acquire), block);
    int64_t zero = 0;
    c->busy_since_ns.compare_exchange_strong(zero, clock_.nowNs(), std::memory_order_relaxed);
  }
}

void TenantPacer::onSendFinished(PaceState* ps, int64_t count) {
  if (count <= 0 || ps->busy_index < 0) return;
  const int block = ps->busy_index;
  ps->in_flight.fetch_sub(count, std::memory_order_relaxed);
  if (sends_in_flight_[block].fetch_sub(count, std::memory_order_acq_rel) == count) {
    shm::Counters* c = countersFor(agent_.load(std::memory_order_acquire), block);
    const int64_t since = c->busy_since_ns.exchange(0, std::memory_order_relaxed);
    const int64_t now = clock_.nowNs();
    if (since != 0 && now > since) {
      c->busy_ns.fetch_add(static_cast<uint64_t>(now - since), std::memory_order_relaxed);
    }
  }
}

void TenantPacer::onPeerWait(const PaceState& ps, int64_t ns) {
  if (ns <= 0) return;
  countersFor(agent_.load(std::memory_order_acquire), blockOf(ps.channel))
      ->peer_wait_ns.fetch_add(static_cast<uint64_t>(ns), std::memory_order_relaxed);
}

void TenantPacer::release(PaceState* ps) {
  if (ps->refused_bytes == 0) return;
  ps->refused_counters->backlog_bytes.fetch_sub(ps->refused_bytes, std::memory_order_relaxed);
  ps->refused_bytes = 0;
  ps->refused_counters = nullptr;
}

const shm::Counters& TenantPacer::counters(int channel) const {
  return *countersFor(agent_.load(std::memory_order_acquire), blockOf(channel));
}

// ---------------------------------------------------------------------------------------------

TenantRegistry::TenantRegistry(const PluginParams& params, Clock& clock, TrafficClassLookup lookup)
    : params_(params), clock_(clock), lookup_(std::move(lookup)) {
  if (!lookup_) {
    const std::string dir = params_.run_dir;
    lookup_ = [dir](int tc) { return attach::tenantForTrafficClass(dir, tc); };
  }
}

std::shared_ptr<TenantPacer> TenantRegistry::forTrafficClass(int traffic_class,
                                                             TenantSource* source) {
  const TenantChoice c =
      resolveTenant(params_.tenant, traffic_class, lookup_, params_.default_tenant);
  if (source != nullptr) *source = c.source;
  {
    MutexLock lock(mu_);
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
  MutexLock lock(mu_);
  auto it = pacers_.find(tenant);
  if (it != pacers_.end()) return it->second;
  auto p = std::make_shared<TenantPacer>(tenant, pacerConfigFromParams(params_), clock_);
  pacers_.emplace(tenant, p);
  return p;
}

}  // namespace tq::plugin
