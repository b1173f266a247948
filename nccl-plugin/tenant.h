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
//                  (the default tenant). Parameters (rate, burst, DSCP, SL) come from the
//                  agent's read-only memory, re-read only when its sequence number changes; the
//                  token bucket is the tenant's, shared by its processes on the node and clamped
//                  on every take (common/token_bucket.h); this process's slot carries its
//                  counters.
//   kConservative  a governed node (the run directory exists) where no socket answered: a
//                  process-local bucket at kConservativeRateBytesPerSecond (fail closed).
//   kEnvRate       no run directory (not a governed node), TENANTQOS_RATE set: a local bucket.
//   kUnpaced       no run directory, no TENANTQOS_RATE: admit everything (tagged and counted).
// Attaching happens when the pacer is created (at init/connect: bounded by kAttachTimeoutMs per
// socket). Later, from admit() and without ever blocking (a non-blocking attempt advanced by
// one poll per check), every TENANTQOS_SHM_RECHECK_MS: a pacer that is not attached to its own
// tenant tries again, and an attached one checks its connection (the agent restarted: it keeps
// the memory it has and attaches anew). Every mode change is logged once, with why.
//
// Thread-safety: admit/onReceived/release are lock-free (atomics; a try-lock guards the rare
// re-read/attach, and a caller that loses it proceeds with the previous values) and may be
// called from any thread. Time: CLOCK_MONOTONIC ns from the injected Clock, the same clock in
// every process sharing a bucket.
#pragma once

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
#include "common/shm_layout.h"
#include "common/tenant_shm.h"
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

// Per-comm pacing state (owned by the send comm; touched by its caller thread only).
struct PaceState {
  uint64_t refused_bytes = 0;         // backlog this comm contributes (its refused message)
  shm::Slot* refused_slot = nullptr;  // the slot that backlog was added to
  int64_t ready_at_ns = 0;            // when the refused message could first be admitted
  int64_t lag_ns = 0;                 // how late the retry came (catch-up allowance)
  std::atomic<int64_t> in_flight{0};  // sends handed to the transport, not yet completed
};

struct PacerConfig {
  std::string run_dir;
  std::optional<uint64_t> rate;  // TENANTQOS_RATE
  uint64_t burst = 256 * 1024;
  std::optional<int64_t> dscp, sl, priority;
  int64_t recheck_ns = 1'000'000'000;
  int64_t catchup_ns = 20'000'000;
  int64_t chunk_ns = 1'000'000;  // TENANTQOS_PACE_CHUNK_US: time one paced chunk covers
};

// How long attaching through one socket may take when a pacer is created.
inline constexpr int kAttachTimeoutMs = 1000;

// Smallest chunk a paced message is cut into (one page; also the registration granule).
inline constexpr uint64_t kMinPaceChunk = 4096;
PacerConfig pacerConfigFromParams(const PluginParams& p);

class TenantPacer {
 public:
  enum class Mode { kAgent, kConservative, kEnvRate, kUnpaced };

  TenantPacer(std::string tenant, PacerConfig cfg, Clock& clock);
  ~TenantPacer();
  TenantPacer(const TenantPacer&) = delete;
  TenantPacer& operator=(const TenantPacer&) = delete;

  // The tenant asked for; attachedTenant(): the one the agent attached this process to (empty
  // when not attached).
  const std::string& tenant() const { return tenant_; }
  std::string attachedTenant() const;
  Mode mode() const;
  // Marking for a new connection of this tenant.
  TrafficQos qos() const;
  // One line: tenant, mode, rate, burst, dscp, file.
  std::string describe() const;

  // Hot path of isend: takes tokens for `bytes` (true) or refuses (false: the caller returns a
  // NULL request and NCCL retries). Updates the slot counters. Never blocks.
  //
  // Late retries: a token bucket caps saved-up tokens at the burst, so a sender that comes
  // back later than `burst / rate` after a refusal (descheduled, or napping between polls)
  // would lose its allocation for the time it was late. When a refused message is retried
  // after the moment it could have been admitted, the comm may take tokens from that far back
  // too (at most cfg.catchup_ns): the bucket's cap moves back by the lateness until the sender
  // has caught up (its next refusal). Tokens are only there if nobody used them — the bucket
  // state is shared — so this restores the rate of a backlogged tenant without ever exceeding
  // it; the extra burst is bounded by rate x catchup. The limit is a hard cap, the rate is not:
  // when the agent gives a limit, the catch-up is also bounded by (limit - rate) x
  // catchup, so the tenant stays under its limit over any window of >= catchup + burst / limit
  // (none at all when its rate is its limit).
  //
  // `pending` (0: same as `bytes`) is what a refusal adds to the slot's backlog: a transport
  // that admits chunks passes the bytes still waiting behind this chunk, so the agent sees the
  // real demand rather than one chunk.
  bool admit(uint64_t bytes, PaceState* ps, uint64_t pending = 0);
  // Chunk size for transports that pace in chunks: min(burst, rate x cfg.chunk_ns), rounded
  // down to a multiple of kMinPaceChunk and at least kMinPaceChunk; 0 when unpaced.
  uint64_t chunkBytes() const;
  // The current rate (bytes/s); 0 when unpaced.
  uint64_t rateBytesPerSecond() const;
  // A receive of `bytes` completed.
  void onReceived(uint64_t bytes);
  // A send was handed to the transport / `count` sends completed, failed or were abandoned
  // (comm closed). They keep the slot's busy time: how long this process had sends in flight,
  // the agent's signal that a tenant is held back by the network rather than short of demand.
  void onSendStarted(PaceState* ps);
  void onSendFinished(PaceState* ps, int64_t count = 1);
  // A send comm closes: withdraw its backlog.
  void release(PaceState* ps);

  // For tests and diagnostics: the counters this process is writing (the agent's slot or the
  // process-local one).
  const shm::Slot& counters() const;

 private:
  struct AgentBinding {
    std::unique_ptr<TenantShmView> view;
    Fd conn;                        // open for the life of the attachment
    std::string via;                // the socket
    std::atomic<int64_t> floor{0};  // latest bucket word this process wrote (token_bucket.h)
  };
  // mu_ held by all of these.
  void attachAtStart();
  void stepAttach(int64_t now);  // the non-blocking re-attach; never waits
  void checkConnection(int64_t now);
  Result<std::unique_ptr<AgentBinding>> bind(attach::Attached a, const std::string& via);
  void install(std::unique_ptr<AgentBinding> b, bool first);
  bool governed() const;
  void refresh(AgentBinding* a);
  // Copies the agent's parameters (sequence `seq`) into the hot-path atomics.
  void applyParams(const TenantParams& p, uint64_t seq);
  void useFallback();
  std::vector<std::string> socketsToTry() const;
  shm::Slot* slotFor(AgentBinding* a) {
    return a != nullptr && a->view->slot() != nullptr ? a->view->slot() : &local_slot_;
  }

  const std::string tenant_;
  const PacerConfig cfg_;
  Clock& clock_;

  std::atomic<AgentBinding*> agent_{nullptr};
  std::atomic<bool> governed_{false};  // the run directory existed at the last look
  std::atomic<uint64_t> rate_{0};
  std::atomic<uint64_t> burst_{0};
  std::atomic<uint64_t> limit_{0};  // bytes/s from the agent; 0: none (fallback, env)
  std::atomic<bool> paced_{false};
  std::atomic<int> dscp_{0};
  std::atomic<int> sl_{0};
  std::atomic<uint64_t> seq_{0};
  std::atomic<int64_t> next_check_ns_{0};
  std::atomic<int64_t> local_bucket_{0};
  std::atomic<int64_t> local_floor_{0};
  std::atomic<int64_t> sends_in_flight_{0};  // this process, all comms of the tenant
  shm::Slot local_slot_{};

  std::mutex mu_;  // attach / refresh; try-locked from the hot path
  // Every binding ever made; never freed before the pacer (hot-path callers may hold one).
  std::vector<std::unique_ptr<AgentBinding>> bindings_;
  // The re-attach in progress (mu_): the attempt, which socket of socketsToTry(), its deadline.
  std::unique_ptr<attach::Attempt> attempt_;
  size_t attempt_index_ = 0;
  int64_t attempt_deadline_ns_ = 0;
  bool lost_ = false;       // the attached agent's connection closed
  std::string why_;         // why the pacer is not attached to its own tenant (for describe)
  std::string logged_why_;  // the last `why_` logged, so each reason is logged once
};

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
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<TenantPacer>> pacers_;
  std::set<int> logged_tc_;  // traffic classes whose mapping was logged
};

}  // namespace tq::plugin
