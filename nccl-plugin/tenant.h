// Tenant of a communicator, and the per-tenant pacer every comm of that tenant in this process
// shares.
//
// Resolution of the tenant to *ask for* (first match wins): TENANTQOS_TENANT; the
// communicator's trafficClass mapped by the agent's traffic-classes file; TENANTQOS_DEFAULT_TENANT.
// What the process gets is decided by the kernel: the agent socket it can reach
// (common/attach_protocol.h). The name is only which socket to try first.
//
// TenantPacer modes:
//   kAgent         attached: through the tenant's socket, or else through the node-wide socket
//                  (the default tenant). Parameters (rates, depths, DSCP, SL) come from the
//                  agent's read-only memory, re-read only when its sequence number changes; the
//                  token buckets are the tenant's, shared by its processes on the node and
//                  clamped on every take (common/token_bucket.h); this process's slot carries
//                  its counters.
//   kConservative  a governed node (the run directory exists) where no socket answered:
//                  process-local buckets at kConservativeRateBytesPerSecond, both directions
//                  (fail closed).
//   kEnvRate       no run directory (not a governed node), TENANTQOS_RATE or TENANTQOS_RX_RATE
//                  set: local buckets (a direction without a rate is unpaced).
//   kUnpaced       no run directory, neither rate: admit everything (tagged and counted).
// Attaching happens when the pacer is created (at init/connect: bounded by kAttachTimeoutMs per
// socket). Later, from admit() and without ever blocking (a non-blocking attempt advanced by
// one poll per check), every TENANTQOS_SHM_RECHECK_MS: a pacer that is not attached to its own
// tenant tries again, and an attached one checks its connection (the agent restarted: it keeps
// the memory it has and attaches anew). Every mode change is logged once, with why.
//
// Buckets: the agent's table (common/shm_layout.h) has a tx and an rx bucket per device of the
// tenant's link, and per shared fabric link the node is behind (kScopeFabricLink, the cluster
// allocator's cap, docs/fabric.md). A comm charges, through its channel, the bucket of its
// device and direction and the bucket of every shared link its peer is behind: every link of
// the agent's <run-dir>/fabric-peers map (common/fabric_peers.h) whose group does not list the
// peer's address. An unknown peer, a missing or unreadable map, a map not written by root (or
// TENANTQOS_AGENT_UID) or writable by others: every link (the safe side). The map is re-read
// when it changes, checked every TENANTQOS_SHM_RECHECK_MS. Attached, the device's bucket is
// also charged to a bucket of this process's own at the rate the agent gives its slot
// (shm_layout.h "Process buckets"), so that a co-tenant resetting the shared word cannot lift
// this process past its share of the tenant's rate. A send or receive is admitted only when
// every bucket it charges has the tokens (all or none are taken), so it gets the least of its
// share, the node's allocation and the caps; the bytes are counted on each shared bucket, a
// refusal's backlog and throttled time on the bucket that refused. Rails: a link class with a
// rail is charged only by connections on a device of that rail (the map's `device` lines, from
// the agent's --device DEV=LINK,rail=N) whatever their peer; a device the map gives no rail is
// on every rail (the safe side).
// Without the agent the fallback has one tx and one rx bucket (rx unpaced unless
// TENANTQOS_RX_RATE, or conservative).
//
// Thread-safety: admit/onReceived/release are lock-free (atomics; a try-lock guards the rare
// re-read/attach, and a caller that loses it proceeds with the previous values) and may be
// called from any thread, each with its own PaceState. Time: CLOCK_MONOTONIC ns from the injected
// Clock, the same clock in every process sharing a bucket.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/attach_protocol.h"
#include "common/clock.h"
#include "common/fabric_peers.h"
#include "common/shm_layout.h"
#include "common/tenant_shm.h"
#include "common/thread_annotations.h"
#include "common/token_bucket.h"
#include "nccl-plugin/params.h"
#include "nccl-plugin/transport.h"

namespace tq::plugin {

enum class TenantSource { kEnv, kTrafficClass, kDefault };
const char* tenantSourceName(TenantSource s);

struct TenantChoice {
  std::string tenant;
  TenantSource source = TenantSource::kDefault;
};

// Maps a traffic class to a tenant (production: attach::tenantForTrafficClass over the run dir).
using TrafficClassLookup = std::function<std::optional<std::string>(int traffic_class)>;

// Pure resolution order. traffic_class < 0 means undefined.
TenantChoice resolveTenant(const std::string& env_tenant, int traffic_class,
                           const TrafficClassLookup& lookup, const std::string& default_tenant);

// Pacing state of one admitter: a comm's isend path, or one of its transport threads that admit
// chunks (one PaceState per thread; touched by that thread only, except in_flight).
struct PaceState {
  int channel = 0;                            // TenantPacer::channel(): which buckets it charges
  uint64_t refused_bytes = 0;                 // backlog this admitter contributes
  shm::Counters* refused_counters = nullptr;  // the counters that backlog was added to
  int64_t ready_at_ns = 0;                    // when the refused bytes could first be admitted
  int64_t lag_ns = 0;                         // how late the retry came (catch-up allowance)
  // Of a message admitted earlier whose cost was more than one take carries (a 32 MiB message at
  // 1 Mbit/s): bytes still to take before this admitter admits anything else.
  uint64_t owed_bytes = 0;
  std::atomic<int64_t> in_flight{0};  // sends handed to the transport, not completed
  int busy_index = -1;                // the bucket those sends keep busy
  uint32_t busy_links = 0;            // and the link buckets (table indices, bits)
};

struct PacerConfig {
  std::string run_dir;
  std::optional<uint64_t> rate;                  // TENANTQOS_RATE
  std::optional<uint64_t> rx_rate;               // TENANTQOS_RX_RATE
  uint64_t burst = kDefaultMinBucketDepthBytes;  // smallest depth
  int64_t depth_ns = kDefaultBucketDepthNs;      // TENANTQOS_BUCKET_DEPTH_US
  std::optional<int64_t> dscp, sl, priority;
  int64_t recheck_ns = 1'000'000'000;
  int64_t catchup_ns = 20'000'000;
  int64_t chunk_ns = 250'000;  // TENANTQOS_PACE_CHUNK_US: time one paced chunk covers
  int64_t rx_debt_ns = 0;      // TENANTQOS_RX_DEBT_US: debt a receive may leave (admit())
  uid_t agent_uid = 0;         // TENANTQOS_AGENT_UID: besides root, who may answer
};

// How long attaching through one socket may take when a pacer is created.
inline constexpr int kAttachTimeoutMs = 1000;

// Smallest chunk a paced message is cut into (one page; also the registration granule).
inline constexpr uint64_t kMinPaceChunk = 4096;
PacerConfig pacerConfigFromParams(const PluginParams& p);

class TenantPacer {
 public:
  enum class Mode { kAgent, kConservative, kEnvRate, kUnpaced };
  // Channels 0 and 1: sending and receiving on a device the pacer was not told about (the
  // agent's first device bucket of each direction).
  static constexpr int kTxChannel = 0;
  static constexpr int kRxChannel = 1;
  // A channel per (direction, device, peer): enough for a rank's peers in an all-to-all of a
  // few hundred nodes; past it, the direction's default channel (every link charged).
  static constexpr int kMaxChannels = 512;

  TenantPacer(std::string tenant, PacerConfig cfg, Clock& clock);
  ~TenantPacer();
  TenantPacer(const TenantPacer&) = delete;
  TenantPacer& operator=(const TenantPacer&) = delete;

  // The tenant asked for; attachedTenant(): the one the agent attached this process to (empty
  // when not attached).
  const std::string& tenant() const { return tenant_; }
  std::string attachedTenant() const;
  Mode mode() const;
  // An attach attempt is in flight: its request is sent and the agent's reply not read yet
  // (the next check, a millisecond of the clock later, reads it).
  bool attaching() const;
  // Marking for a new connection of this tenant.
  TrafficQos qos() const;
  // One line: tenant, mode, rates and depths per bucket, dscp, socket.
  std::string describe() const;

  // The channel of a connection: its direction, the network device it runs on (the
  // transport's DeviceProperties::netdev) and its peer's address (canonical,
  // common/fabric_peers.h; empty: unknown). The agent's bucket of that device and direction
  // applies, and the buckets of the shared links the peer is behind; a device the agent does not
  // list gets the first device bucket of the direction (said once in the log). Control path
  // (connect/accept); the same triple gives the same channel; past kMaxChannels, the
  // direction's default channel.
  int channel(shm::Direction dir, const std::string& netdev, const std::string& peer = "");
  // The table indices of the shared-link buckets the channel charges (bit i: bucket i).
  uint32_t linkBuckets(int channel) const {
    return chan_links_[channel].load(std::memory_order_relaxed);
  }

  // Hot path: takes tokens for `bytes` from the bucket of ps->channel (true) or refuses (false:
  // the caller retries later: a NULL request for NCCL, or a transport thread's wait). Updates
  // the counters. Never blocks.
  //
  // Large messages: one take carries at most bucketMaxTakeBytes (5 s at the rate). A larger
  // message is admitted with that part taken and the rest owed (ps->owed_bytes): this admitter's
  // next calls take the owed bytes part by part, refusing, before they admit anything else, so
  // the long-run rate holds for any message size.
  //
  // Late retries: a token bucket caps saved-up tokens at its depth, so an admitter that comes
  // back later than `depth / rate` after a refusal (descheduled, or napping between polls)
  // would lose its allocation for the time it was late. When refused bytes are retried after
  // the moment they could have been admitted, the admitter may take tokens from that far back
  // too (at most cfg.catchup_ns): the bucket's cap moves back by the lateness until it has
  // caught up (its next refusal). Tokens are only there if nobody used them — the bucket state
  // is shared — so this restores the rate of a backlogged tenant without ever exceeding it; the
  // extra is bounded by rate x catchup. The limit is a hard cap, the rate is not: when the agent
  // gives a limit, the catch-up is also bounded by (limit - rate) x catchup, so the tenant stays
  // under its limit over any window of >= catchup + depth / limit (none at all when its rate is
  // its limit).
  //
  // Receives (channels of shm::kRx) with cfg.rx_debt_ns > 0: a receive is admitted once its
  // tokens less rate x rx_debt_ns are there (BucketConfig::debt_bytes, on every bucket charged):
  // a receiving thread that wakes late reads what arrived at once instead of sleeping for each
  // chunk's tokens, so a transfer a paced sender already holds to the rate does not pass a second
  // sleeping stage. What any sender gets into the receiver stays at most rate x (T + depth +
  // rx_debt_ns) over any window T.
  //
  // `pending` (0: same as `bytes`) is what a refusal adds to the backlog: an admitter of
  // chunks passes the bytes still waiting behind this chunk, so the agent sees the real demand
  // rather than one chunk.
  bool admit(uint64_t bytes, PaceState* ps, uint64_t pending = 0);
  // How long (ns, this pacer's clock) until `bytes` could be admitted on ps->channel: 0 when
  // already possible or unpaced. A transport thread sleeps that long.
  int64_t waitNs(uint64_t bytes, const PaceState& ps) const;
  // Tokens taken for bytes that did not come (a receive admitted at its posted size that
  // carried less): off what ps still owes first, the rest back into the bucket of ps->channel.
  void giveBack(uint64_t bytes, PaceState* ps);
  // Chunk size for admitters of chunks: min(depth / 2, rate x cfg.chunk_ns) of the channel's
  // bucket, rounded down to a multiple of kMinPaceChunk and at least kMinPaceChunk; 0 when unpaced.
  uint64_t chunkBytes(int channel = kTxChannel) const;
  // The channel's current rate (bytes/s); 0 when unpaced.
  uint64_t rateBytesPerSecond(int channel = kTxChannel) const;
  // A receive of `bytes` completed on ps->channel.
  void onReceived(uint64_t bytes, const PaceState& ps);
  // A send was handed to the transport / `count` sends completed, failed or were abandoned
  // (comm closed). They keep the bucket's busy time: how long this process had sends in flight
  // there, the agent's signal that a tenant is held back by the network rather than short of
  // demand.
  void onSendStarted(PaceState* ps);
  void onSendFinished(PaceState* ps, int64_t count = 1);
  // Sends of ps->channel spent `ns` waiting for their receiver (a closed TCP window): busy time
  // that is no demand at this end.
  void onPeerWait(const PaceState& ps, int64_t ns);
  // An admitter goes away (comm closed): withdraw its backlog.
  void release(PaceState* ps);

  // For tests and diagnostics: the counters this process is writing for the channel's bucket
  // (the agent's slot or the process-local ones).
  const shm::Counters& counters(int channel = kTxChannel) const;

 private:
  // The parameters of one bucket, copied from the agent's memory (or the fallback) for the
  // hot path.
  struct HotBucket {
    std::atomic<uint64_t> rate{0};
    std::atomic<uint64_t> depth{0};
    std::atomic<uint64_t> limit{0};  // 0: none (fallback, env)
    // This process's own bucket (shm_layout.h "Process buckets"): its rate from the agent and
    // a depth as deep in time as the shared one; rate 0: none.
    std::atomic<uint64_t> own_rate{0};
    std::atomic<uint64_t> own_depth{0};
  };
  struct AgentBinding {
    std::unique_ptr<TenantShmView> view;
    Fd conn;          // open for the life of the attachment
    std::string via;  // the socket
    // False: the agent answered and closed (attach::kReplyNotHeld, `not_held` says why): the
    // memory is ours to pace with, without a slot; a better attachment is sought every recheck.
    bool held = true;
    std::string not_held;
    dev_t shared_dev = 0;  // the shared memfd (fstat), to tell the same memory handed out again
    ino_t shared_ino = 0;
    // Latest bucket word this process wrote, per bucket (token_bucket.h).
    std::atomic<int64_t> floor[shm::kMaxBuckets] = {};
  };
  struct Channel {
    shm::Direction dir = shm::kTx;
    std::string netdev;  // empty: the direction's default
    std::string peer;    // canonical address; empty: unknown (crosses every link)
  };
  // Counter block index for "no bucket" in a direction (unpaced): after the real buckets.
  static constexpr int kNoBucket = static_cast<int>(shm::kMaxBuckets);
  static constexpr int kCounterBlocks = kNoBucket + 2;

  // mu_ held by all of these.
  std::string describeLocked() const TQ_REQUIRES(mu_);
  void attachAtStart() TQ_REQUIRES(mu_);
  void stepAttach(int64_t now) TQ_REQUIRES(mu_);  // the non-blocking re-attach; never waits
  void checkConnection(int64_t now) TQ_REQUIRES(mu_);
  Result<std::unique_ptr<AgentBinding>> bind(attach::Attached a, const std::string& via)
      TQ_REQUIRES(mu_);
  void install(std::unique_ptr<AgentBinding> b, bool first) TQ_REQUIRES(mu_);
  bool governed() const TQ_REQUIRES(mu_);
  // Try-locks mu_ itself (the hot path never waits for it).
  void refresh(AgentBinding* a) TQ_EXCLUDES(mu_);
  // Copies the agent's parameters (sequence `seq`) into the hot-path atomics.
  void applyParams(const TenantParams& p, uint64_t seq) TQ_REQUIRES(mu_);
  void useFallback() TQ_REQUIRES(mu_);
  // Maps every channel to a bucket of params_ (agent) or of the fallback.
  void mapChannels() TQ_REQUIRES(mu_);
  int bucketFor(const Channel& c) TQ_REQUIRES(mu_);
  uint32_t linksFor(const Channel& c) const TQ_REQUIRES(mu_);
  // Re-reads <run-dir>/fabric-peers when its identity or time changed; true if the map changed.
  bool loadFabricPeers() TQ_REQUIRES(mu_);
  std::vector<std::string> socketsToTry() const TQ_REQUIRES(mu_);

  // Hot path helpers.
  void maybeRefresh(int64_t now);
  int bucketOf(int channel) const { return chan_bucket_[channel].load(std::memory_order_relaxed); }
  int blockOf(int channel) const {
    const int b = bucketOf(channel);
    return b >= 0 ? b : kNoBucket + static_cast<int>(channels_dir_[channel]);
  }
  shm::Counters* countersFor(AgentBinding* a, int block) {
    if (a != nullptr && block < kNoBucket) {
      if (shm::Counters* c = a->view->counters(static_cast<uint32_t>(block))) return c;
    }
    return &local_counters_[block];
  }
  const shm::Counters* countersFor(AgentBinding* a, int block) const {
    return const_cast<TenantPacer*>(this)->countersFor(a, block);
  }
  std::atomic<int64_t>& wordFor(AgentBinding* a, int b) {
    return a != nullptr ? a->view->bucketWord(static_cast<uint32_t>(b)) : local_words_[b];
  }
  std::atomic<int64_t>* floorFor(AgentBinding* a, int b) {
    return a != nullptr ? &a->floor[b] : &local_floors_[b];
  }
  BucketConfig ownConfigOf(int b) const {
    return {hot_[b].own_rate.load(std::memory_order_relaxed),
            hot_[b].own_depth.load(std::memory_order_relaxed)};
  }
  BucketConfig configOf(int b) const {
    return {hot_[b].rate.load(std::memory_order_relaxed),
            hot_[b].depth.load(std::memory_order_relaxed)};
  }
  // Bucket `b`'s config with the catch-up allowance of an admitter `lag_ns` late (admit()).
  BucketConfig withCatchUp(int b, int64_t lag_ns) const;
  // `c` with the debt a take of the channel may leave: rate x cfg_.rx_debt_ns on receives, none
  // on sends (admit()).
  BucketConfig withDebt(BucketConfig c, int channel) const;
  // The earliest time every bucket the channel charges (and this process's own of each) could
  // admit `bytes`.
  int64_t readyAtAll(AgentBinding* a, int channel, int64_t now, uint64_t bytes) const;
  // The tightest of the channel's buckets and this process's own of each: the least rate and
  // the least depth.
  BucketConfig chargedConfig(int channel) const;

  const std::string tenant_;
  const PacerConfig cfg_;
  Clock& clock_;

  std::atomic<AgentBinding*> agent_{nullptr};
  std::atomic<bool> governed_{false};  // the run directory existed at the last look
  std::atomic<bool> paced_{false};
  std::atomic<int> dscp_{0};
  std::atomic<int> sl_{0};
  std::atomic<uint64_t> seq_{0};
  std::atomic<int64_t> next_check_ns_{0};
  HotBucket hot_[shm::kMaxBuckets];
  std::atomic<int> chan_bucket_[kMaxChannels];      // -1: unpaced in that direction
  std::atomic<uint32_t> chan_links_[kMaxChannels];  // link buckets charged too (bits)
  shm::Direction channels_dir_[kMaxChannels] = {};  // written before the channel is handed out
  std::atomic<int> num_channels_{2};
  std::atomic<int64_t> local_words_[shm::kMaxBuckets] = {};
  // This process's own buckets (agent mode): in its own memory, so no other process of the
  // tenant can refill them; every take passes one and the shared word.
  std::atomic<int64_t> own_words_[shm::kMaxBuckets] = {};
  std::atomic<int64_t> local_floors_[shm::kMaxBuckets] = {};
  // Sends in flight per counter block, this process, all comms of the tenant.
  std::atomic<int64_t> sends_in_flight_[kCounterBlocks] = {};
  shm::Counters local_counters_[kCounterBlocks] = {};
  shm::SlotHeader local_header_{};

  mutable Mutex mu_;  // attach / refresh / channels; try-locked from the hot path
  std::vector<Channel> channels_ TQ_GUARDED_BY(mu_);  // index = channel
  TenantParams params_ TQ_GUARDED_BY(mu_);            // the agent's, as last applied
  std::set<std::string> logged_unknown_devices_ TQ_GUARDED_BY(mu_);
  // The agent's peer map as last read (nullopt: none, every link crosses), and what identified
  // the file then (st_dev, st_ino, st_mtim, st_size: a change means read it again).
  std::optional<FabricPeerMap> fabric_peers_ TQ_GUARDED_BY(mu_);
  std::string fabric_peers_stamp_ TQ_GUARDED_BY(mu_);
  std::string fabric_peers_logged_ TQ_GUARDED_BY(mu_);  // the last problem logged with the file
  // Every binding ever made; never freed before the pacer (hot-path callers may hold one).
  std::vector<std::unique_ptr<AgentBinding>> bindings_ TQ_GUARDED_BY(mu_);
  // The re-attach in progress (mu_): the attempt, which socket of socketsToTry(), its deadline.
  std::unique_ptr<attach::Attempt> attempt_ TQ_GUARDED_BY(mu_);
  size_t attempt_index_ TQ_GUARDED_BY(mu_) = 0;
  int64_t attempt_deadline_ns_ TQ_GUARDED_BY(mu_) = 0;
  bool lost_ TQ_GUARDED_BY(mu_) = false;  // the attached agent's connection closed
  std::string why_
      TQ_GUARDED_BY(mu_);  // why the pacer is not attached to its own tenant (for describe)
  std::string logged_why_
      TQ_GUARDED_BY(mu_);  // the last `why_` logged, so each reason is logged once
};

// The agent's fabric-peers map (common/fabric_peers.h) from an open descriptor of it, judged
// on that descriptor: a regular file owned by root or `agent_uid`, writable by nobody else, at
// most kMaxFabricPeersBytes; then parsed as untrusted text. The error says which check failed.
Result<FabricPeerMap> readAgentFabricPeers(int fd, uid_t agent_uid);

// One pacer per tenant name per process, shared by every communicator of that tenant.
class TenantRegistry {
 public:
  TenantRegistry(const PluginParams& params, Clock& clock, TrafficClassLookup lookup = nullptr);

  // Tenant of a communicator with this traffic class (-1: undefined), and its pacer.
  std::shared_ptr<TenantPacer> forTrafficClass(int traffic_class, TenantSource* source = nullptr);
  std::shared_ptr<TenantPacer> byName(const std::string& tenant);

 private:
  const PluginParams params_;
  Clock& clock_;
  TrafficClassLookup lookup_;
  Mutex mu_;
  std::map<std::string, std::shared_ptr<TenantPacer>> pacers_ TQ_GUARDED_BY(mu_);
  std::set<int> logged_tc_ TQ_GUARDED_BY(mu_);  // traffic classes whose mapping was logged
};

}  // namespace tq::plugin
