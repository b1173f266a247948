#include "nccl-plugin/tenant.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <climits>
#include <cstring>

#include "common/fd.h"
#include "common/file_util.h"
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
  c.rx_debt_ns = p.rx_debt_us * 1'000;
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
  for (auto& c : chan_links_) c.store(0, std::memory_order_relaxed);
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
         (b.scope == shm::kScopeFabricLink ? "link " : "") + (b.name.empty() ? "" : b.name + " ") +
         formatRate(b.rate_bytes_per_second) + " (depth " + formatSize(b.depth_bytes) + ")";
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
    hot_[b].own_rate.store(0, std::memory_order_relaxed);  // no agent: nobody to share with
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

static_assert(shm::kMaxBuckets <= 32, "a channel's link buckets are bits of a uint32_t");

// mu_ held. The shared-link buckets of params_ a channel charges: those of its direction whose
// link the map says the peer is behind. A link the map does not name (no map, a map of another
// policy version whose index holds another class) is charged: the safe side.
uint32_t TenantPacer::linksFor(const Channel& c) const {
  if (agent_.load(std::memory_order_acquire) == nullptr) return 0;
  const std::vector<BucketSpec>& t = params_.buckets;
  const std::optional<uint32_t> rail =
      fabric_peers_ ? railOf(*fabric_peers_, c.netdev) : std::nullopt;
  uint32_t mask = 0;
  for (size_t i = 0; i < t.size() && i < shm::kMaxBuckets; ++i) {
    const BucketSpec& b = t[i];
    if (b.scope != shm::kScopeFabricLink || b.direction != c.dir) continue;
    bool crosses = true;
    if (fabric_peers_) {
      for (const FabricLinkPeers& l : fabric_peers_->links) {
        if (l.index == b.index && l.name.substr(0, shm::kBucketNameBytes - 1) == b.name) {
          crosses = crossesLink(l, c.peer, rail);
        }
      }
    }
    if (crosses) mask |= 1u << i;
  }
  return mask;
}

Result<FabricPeerMap> readAgentFabricPeers(int fd, uid_t agent_uid) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return errnoStatus("fstat");
  if (!S_ISREG(st.st_mode)) return invalidArgument("not a regular file");
  if (st.st_uid != 0 && st.st_uid != agent_uid) {
    return permissionDenied("owned by uid " + std::to_string(st.st_uid) +
                            ", not root or the agent's");
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return permissionDenied("writable by group or others");
  }
  if (static_cast<uint64_t>(st.st_size) > kMaxFabricPeersBytes) {
    return invalidArgument(std::to_string(st.st_size) + " bytes, more than " +
                           std::to_string(kMaxFabricPeersBytes));
  }
  TQ_ASSIGN_OR_RETURN(std::string text, readFd(fd, "fabric peers", kMaxFabricPeersBytes));
  return parseFabricPeers(text);
}

// mu_ held.
bool TenantPacer::loadFabricPeers() {
  const std::string path = attach::fabricPeersPath(cfg_.run_dir);
  auto problem = [&](const std::string& why) {
    mu_.assertHeld();  // (a lambda is analysed on its own; the caller holds it)
    if (why != fabric_peers_logged_) {
      TQ_LOG(kWarn,
             "tenant %s: %s: %s; every connection is charged to every shared link the node is "
             "behind (the safe side)",
             tenant_.c_str(), path.c_str(), why.c_str());
      fabric_peers_logged_ = why;
    }
    const bool changed = fabric_peers_.has_value();
    fabric_peers_.reset();
    return changed;
  };
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    // No map: the node is behind no shared link, or the agent has not written it yet.
    fabric_peers_stamp_.clear();
    const bool changed = fabric_peers_.has_value();
    fabric_peers_.reset();
    return changed;
  }
  const std::string stamp = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) + ":" +
                            std::to_string(st.st_mtim.tv_sec) + "." +
                            std::to_string(st.st_mtim.tv_nsec) + ":" + std::to_string(st.st_size);
  if (stamp == fabric_peers_stamp_) return false;
  fabric_peers_stamp_ = stamp;
  // Checked on the descriptor read: a file swapped after the stat is the one judged.
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (!fd.valid()) return problem(std::string("open: ") + std::strerror(errno));
  Result<FabricPeerMap> map = readAgentFabricPeers(fd.get(), cfg_.agent_uid);
  if (!map.ok()) return problem(map.status().message());
  fabric_peers_logged_.clear();
  if (fabric_peers_ && *fabric_peers_ == *map) return false;
  fabric_peers_ = std::move(map).value();
  return true;
}

void TenantPacer::mapChannels() {
  for (size_t c = 0; c < channels_.size(); ++c) {
    chan_bucket_[c].store(bucketFor(channels_[c]), std::memory_order_relaxed);
    chan_links_[c].store(linksFor(channels_[c]), std::memory_order_relaxed);
  }
}

int TenantPacer::channel(shm::Direction dir, const std::string& netdev, const std::string& peer) {
  MutexLock lock(mu_);
  if (loadFabricPeers()) mapChannels();
  for (size_t c = 0; c < channels_.size(); ++c) {
    if (channels_[c].dir == dir && channels_[c].netdev == netdev && channels_[c].peer == peer) {
      return static_cast<int>(c);
    }
  }
  if (channels_.size() >= static_cast<size_t>(kMaxChannels)) {
    return dir == shm::kTx ? kTxChannel : kRxChannel;
  }
  const int c = static_cast<int>(channels_.size());
  channels_.push_back(Channel{dir, netdev, peer});
  channels_dir_[c] = dir;
  chan_bucket_[c].store(bucketFor(channels_.back()), std::memory_order_relaxed);
  chan_links_[c].store(linksFor(channels_.back()), std::memory_order_relaxed);
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
    // This process's own bucket: as deep in time as the shared one, and at least two of the
    // smallest chunks (a chunk then fits a bucket that is not full, as chunkBytes() keeps for
    // the shared one).
    const uint64_t own = spec && b < p.process_rates.size() ? p.process_rates[b] : 0;
    const uint64_t rate = spec ? spec->rate_bytes_per_second : 0;
    const unsigned __int128 own_depth =
        rate != 0 ? static_cast<unsigned __int128>(depth) * own / rate : depth;
    hot_[b].own_depth.store(
        std::max<uint64_t>(static_cast<uint64_t>(std::min<unsigned __int128>(own_depth, depth)),
                           2 * kMinPaceChunk),
        std::memory_order_relaxed);
    hot_[b].own_rate.store(own, std::memory_order_relaxed);
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

BucketConfig TenantPacer::chargedConfig(int channel) const {
  // The device's bucket and every shared link's, each with this process's own (when the agent
  // gave it one): the least rate and the least depth.
  BucketConfig c{UINT64_MAX, UINT64_MAX};
  auto tighten = [&](int k) {
    const BucketConfig shared = configOf(k);
    c.rate_bytes_per_second = std::min(c.rate_bytes_per_second, shared.rate_bytes_per_second);
    c.burst_bytes = std::min(c.burst_bytes, shared.burst_bytes);
    const BucketConfig own = ownConfigOf(k);
    if (own.rate_bytes_per_second != 0) {
      c.rate_bytes_per_second = std::min(c.rate_bytes_per_second, own.rate_bytes_per_second);
      c.burst_bytes = std::min(c.burst_bytes, own.burst_bytes);
    }
  };
  tighten(bucketOf(channel));
  for (uint32_t m = linkBuckets(channel); m != 0; m &= m - 1) tighten(std::countr_zero(m));
  return c;
}

uint64_t TenantPacer::rateBytesPerSecond(int channel) const {
  const int b = bucketOf(channel);
  if (!paced_.load(std::memory_order_relaxed) || b < 0) return 0;
  return chargedConfig(channel).rate_bytes_per_second;
}

uint64_t TenantPacer::chunkBytes(int channel) const {
  const int b = bucketOf(channel);
  if (!paced_.load(std::memory_order_relaxed) || b < 0) return 0;
  // The tightest of the channel's buckets (its device's, every shared link's, and this
  // process's own of each): a chunk fits them all.
  const BucketConfig bc = chargedConfig(channel);
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
      if (loadFabricPeers()) mapChannels();
      // An attempt in progress is polled again soon; otherwise at the next check.
      next_check_ns_.store(
          now + (attempt_ ? std::min<int64_t>(cfg_.recheck_ns, 1'000'000) : cfg_.recheck_ns),
          std::memory_order_relaxed);
    }
  }
}

BucketConfig TenantPacer::withCatchUp(int b, int64_t lag_ns) const {
  BucketConfig eff = configOf(b);
  if (lag_ns <= 0) return eff;
  unsigned __int128 extra =
      static_cast<unsigned __int128>(lag_ns) * eff.rate_bytes_per_second / 1'000'000'000u;
  const uint64_t limit = hot_[b].limit.load(std::memory_order_relaxed);
  if (limit != 0) {  // never past the limit: only the headroom above the rate
    const uint64_t headroom =
        limit > eff.rate_bytes_per_second ? limit - eff.rate_bytes_per_second : 0;
    extra = std::min<unsigned __int128>(extra, static_cast<unsigned __int128>(headroom) *
                                                   static_cast<uint64_t>(cfg_.catchup_ns) /
                                                   1'000'000'000u);
  }
  eff.burst_bytes += static_cast<uint64_t>(std::min<unsigned __int128>(extra, UINT64_MAX / 2));
  return eff;
}

BucketConfig TenantPacer::withDebt(BucketConfig c, int channel) const {
  if (cfg_.rx_debt_ns <= 0 || channels_dir_[channel] != shm::kRx) return c;
  const unsigned __int128 d = static_cast<unsigned __int128>(c.rate_bytes_per_second) *
                              static_cast<uint64_t>(cfg_.rx_debt_ns) / 1'000'000'000u;
  c.debt_bytes = static_cast<uint64_t>(std::min<unsigned __int128>(d, UINT64_MAX / 2));
  return c;
}

int64_t TenantPacer::readyAtAll(AgentBinding* a, int channel, int64_t now, uint64_t bytes) const {
  auto* self = const_cast<TenantPacer*>(this);
  const int b = bucketOf(channel);
  int64_t at = now;
  auto wait_for = [&](int k) {
    at = std::max(at, bucketReadyAt(self->wordFor(a, k), now, bytes, withDebt(configOf(k), channel),
                                    self->floorFor(a, k)));
    const BucketConfig own = ownConfigOf(k);
    if (own.rate_bytes_per_second != 0) {
      at = std::max(at, bucketReadyAt(self->own_words_[k], now, bytes, withDebt(own, channel)));
    }
  };
  wait_for(b);
  if (a != nullptr) {
    for (uint32_t m = linkBuckets(channel); m != 0; m &= m - 1) wait_for(std::countr_zero(m));
  }
  return at;
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
  const uint32_t links = b >= 0 && a != nullptr ? linkBuckets(ps->channel) : 0;
  shm::Counters* ctr = countersFor(a, blockOf(ps->channel));
  shm::Counters* refused = ctr;  // the bucket that refused: its backlog, its throttled time

  bool ok = true;
  if (b >= 0 && paced_.load(std::memory_order_relaxed)) {
    if (ps->refused_bytes != 0 && ps->ready_at_ns != 0 && now > ps->ready_at_ns) {
      ps->lag_ns = std::max(ps->lag_ns, std::min(now - ps->ready_at_ns, cfg_.catchup_ns));
    }
    // Every bucket the channel charges: the device's, then each shared link's, each behind
    // this process's own (nobody else can refill that one, so it goes first). All of them or
    // none: what was taken before a refusal goes back, so the connection runs at the least of
    // its share, the node's allocation and the caps.
    struct Charge {
      std::atomic<int64_t>* word;
      std::atomic<int64_t>* floor;
      BucketConfig eff;   // with the catch-up allowance
      BucketConfig back;  // what a give-back refills against
      shm::Counters* counters;
    };
    std::array<Charge, 2 * (1 + shm::kMaxLinkBuckets)> charges{};
    size_t n_charges = 0;
    auto add = [&](int k) {
      const BucketConfig base = configOf(k);
      const BucketConfig eff = withDebt(withCatchUp(k, ps->lag_ns), ps->channel);
      shm::Counters* c = k == b ? ctr : countersFor(a, k);
      const BucketConfig own = ownConfigOf(k);
      if (own.rate_bytes_per_second != 0) {
        // The own bucket catches up in proportion: together the processes make up at most
        // what the tenant may.
        BucketConfig own_eff = own;
        if (base.rate_bytes_per_second != 0 && eff.burst_bytes > base.burst_bytes) {
          own_eff.burst_bytes += static_cast<uint64_t>(std::min<unsigned __int128>(
              static_cast<unsigned __int128>(eff.burst_bytes - base.burst_bytes) *
                  own.rate_bytes_per_second / base.rate_bytes_per_second,
              UINT64_MAX / 2));
        }
        charges[n_charges++] = {&own_words_[k], nullptr, withDebt(own_eff, ps->channel), own, c};
      }
      charges[n_charges++] = {&wordFor(a, k), floorFor(a, k), eff, eff, c};
    };
    add(b);
    for (uint32_t m = links; m != 0; m &= m - 1) add(std::countr_zero(m));
    auto take = [&](uint64_t n) {
      for (size_t i = 0; i < n_charges; ++i) {
        const Charge& c = charges[i];
        if (bucketTryTake(*c.word, now, n, c.eff, c.floor)) continue;
        refused = c.counters;
        while (i-- > 0) {
          bucketGiveBack(*charges[i].word, now, n, charges[i].back, charges[i].floor);
        }
        return false;
      }
      return true;
    };
    // What one take may carry (bucketMaxTakeBytes, at the slowest bucket charged): a larger
    // message is charged in parts, the first when it is admitted and the rest, owed, before
    // this admitter admits anything else.
    const uint64_t max_take = bucketMaxTakeBytes(chargedConfig(ps->channel).rate_bytes_per_second);
    uint64_t part = 0;  // what the refusal below waited for
    if (ps->owed_bytes > 0) {
      part = std::min(ps->owed_bytes, max_take);
      if (take(part)) {
        ps->owed_bytes -= part;
        part = ps->owed_bytes > 0 ? std::min(ps->owed_bytes, max_take) : 0;
      }
      ok = part == 0;
    }
    if (ok) {
      part = std::min(bytes, max_take);
      ok = take(part);
      if (ok) ps->owed_bytes = bytes - part;
    }
    if (!ok) {
      ps->lag_ns = 0;  // caught up: refused on time
      ps->ready_at_ns = readyAtAll(a, ps->channel, now, part);
    }
  }
  if (!ok) {
    refused->throttle_events.fetch_add(1, std::memory_order_relaxed);
    if (refused->throttled_since_ns.load(std::memory_order_relaxed) == 0) {
      int64_t zero = 0;
      refused->throttled_since_ns.compare_exchange_strong(zero, now, std::memory_order_relaxed);
    }
    if (ps->refused_bytes != pending || ps->refused_counters != refused) {
      // One backlog entry per admitter: the bytes it is waiting to admit now (they change as a
      // chunked message progresses).
      release(ps);
      ps->refused_bytes = pending;
      ps->refused_counters = refused;
      refused->backlog_bytes.fetch_add(pending, std::memory_order_relaxed);
    }
    return false;
  }
  auto admitted = [&](shm::Counters* c) {
    if (c->throttled_since_ns.load(std::memory_order_relaxed) != 0) {
      const int64_t since = c->throttled_since_ns.exchange(0, std::memory_order_relaxed);
      if (since != 0 && now > since) {
        c->throttled_ns.fetch_add(static_cast<uint64_t>(now - since), std::memory_order_relaxed);
      }
    }
    if (channels_dir_[ps->channel] == shm::kTx) {
      c->bytes.fetch_add(bytes, std::memory_order_relaxed);
    }
  };
  release(ps);
  admitted(ctr);
  for (uint32_t m = links; m != 0; m &= m - 1) admitted(countersFor(a, std::countr_zero(m)));
  return true;
}

int64_t TenantPacer::waitNs(uint64_t bytes, const PaceState& ps) const {
  const int b = bucketOf(ps.channel);
  if (b < 0 || !paced_.load(std::memory_order_relaxed)) return 0;
  const int64_t now = clock_.nowNs();
  AgentBinding* a = agent_.load(std::memory_order_acquire);
  // The next part it takes: of what it still owes, else of these bytes (admit()).
  const uint64_t part =
      std::min(ps.owed_bytes > 0 ? ps.owed_bytes : bytes,
               bucketMaxTakeBytes(chargedConfig(ps.channel).rate_bytes_per_second));
  return readyAtAll(a, ps.channel, now, part) - now;
}

void TenantPacer::giveBack(uint64_t bytes, PaceState* ps) {
  const int b = bucketOf(ps->channel);
  if (b < 0 || bytes == 0 || !paced_.load(std::memory_order_relaxed)) return;
  // What it still owes was never taken: that goes first.
  const uint64_t unowed = std::min(bytes, ps->owed_bytes);
  ps->owed_bytes -= unowed;
  bytes -= unowed;
  if (bytes == 0) return;
  AgentBinding* a = agent_.load(std::memory_order_acquire);
  const int64_t now = clock_.nowNs();
  auto give = [&](int k) {
    bucketGiveBack(wordFor(a, k), now, bytes, configOf(k), floorFor(a, k));
    const BucketConfig own = ownConfigOf(k);
    if (own.rate_bytes_per_second != 0) bucketGiveBack(own_words_[k], now, bytes, own);
  };
  give(b);
  if (a == nullptr) return;
  for (uint32_t m = linkBuckets(ps->channel); m != 0; m &= m - 1) give(std::countr_zero(m));
}

void TenantPacer::onReceived(uint64_t bytes, const PaceState& ps) {
  AgentBinding* a = agent_.load(std::memory_order_acquire);
  countersFor(a, blockOf(ps.channel))->bytes.fetch_add(bytes, std::memory_order_relaxed);
  if (a == nullptr || bucketOf(ps.channel) < 0) return;
  for (uint32_t m = linkBuckets(ps.channel); m != 0; m &= m - 1) {
    countersFor(a, std::countr_zero(m))->bytes.fetch_add(bytes, std::memory_order_relaxed);
  }
}

void TenantPacer::onSendStarted(PaceState* ps) {
  if (ps->in_flight.fetch_add(1, std::memory_order_relaxed) == 0) {
    ps->busy_index = blockOf(ps->channel);
    ps->busy_links = bucketOf(ps->channel) >= 0 && agent_.load(std::memory_order_acquire) != nullptr
                         ? linkBuckets(ps->channel)
                         : 0;
  }
  auto started = [&](int block) {
    if (sends_in_flight_[block].fetch_add(1, std::memory_order_acq_rel) == 0) {
      shm::Counters* c = countersFor(agent_.load(std::memory_order_acquire), block);
      int64_t zero = 0;
      c->busy_since_ns.compare_exchange_strong(zero, clock_.nowNs(), std::memory_order_relaxed);
    }
  };
  started(ps->busy_index >= 0 ? ps->busy_index : blockOf(ps->channel));
  for (uint32_t m = ps->busy_links; m != 0; m &= m - 1) started(std::countr_zero(m));
}

void TenantPacer::onSendFinished(PaceState* ps, int64_t count) {
  if (count <= 0 || ps->busy_index < 0) return;
  ps->in_flight.fetch_sub(count, std::memory_order_relaxed);
  auto finished = [&](int block) {
    if (sends_in_flight_[block].fetch_sub(count, std::memory_order_acq_rel) == count) {
      shm::Counters* c = countersFor(agent_.load(std::memory_order_acquire), block);
      const int64_t since = c->busy_since_ns.exchange(0, std::memory_order_relaxed);
      const int64_t now = clock_.nowNs();
      if (since != 0 && now > since) {
        c->busy_ns.fetch_add(static_cast<uint64_t>(now - since), std::memory_order_relaxed);
      }
    }
  };
  finished(ps->busy_index);
  for (uint32_t m = ps->busy_links; m != 0; m &= m - 1) finished(std::countr_zero(m));
}

void TenantPacer::onPeerWait(const PaceState& ps, int64_t ns) {
  if (ns <= 0) return;
  AgentBinding* a = agent_.load(std::memory_order_acquire);
  countersFor(a, blockOf(ps.channel))
      ->peer_wait_ns.fetch_add(static_cast<uint64_t>(ns), std::memory_order_relaxed);
  if (a == nullptr || bucketOf(ps.channel) < 0) return;
  for (uint32_t m = linkBuckets(ps.channel); m != 0; m &= m - 1) {
    countersFor(a, std::countr_zero(m))
        ->peer_wait_ns.fetch_add(static_cast<uint64_t>(ns), std::memory_order_relaxed);
  }
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
