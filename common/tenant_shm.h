// Both sides of the per-tenant shared memory (layout and trust rules: common/shm_layout.h).
//
//   TenantShm      the agent: owns a tenant's two memfds, publishes its parameters under the
//                  seqlock, hands out and takes back process slots, and reads the tenant's
//                  counters with pread (never a mapping), checking every value
//                  (checkCounters).
//   TenantShmView  a plugin process: maps the two fds the agent sent it (parameters read-only,
//                  buckets and counters read-write), after checking their sizes and seals.
//
// Thread-safety: TenantShm is shared by the agent's attach thread (acquireSlot/releaseSlot) and
// its reconcile thread (publish, collect); an internal mutex guards the slot table. A
// TenantShmView may be shared by all threads of a process (lock-free reads).
#pragma once

#include <sys/types.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/fd.h"
#include "common/mapped_file.h"
#include "common/shm_layout.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "common/token_bucket.h"

namespace tq {

// One token bucket of a tenant as the agent publishes it (shm_layout.h "Buckets").
struct BucketSpec {
  shm::BucketScope scope = shm::kScopeDevice;
  uint32_t index = 0;  // device: its position among the devices of the tenant's link
  shm::Direction direction = shm::kTx;
  // The device (scope device) or link (scope fabric link), at most 15 bytes. A device bucket
  // without a name applies to every device that no bucket of its direction names.
  std::string name;
  uint64_t rate_bytes_per_second = 0;  // refill rate: what the allocator gives it
  uint64_t depth_bytes = 0;            // bucketDepthBytes() of the rate
  uint64_t guarantee_bytes_per_second = 0;
  uint64_t limit_bytes_per_second = 0;

  uint32_t key() const { return shm::bucketKey(scope, index, direction); }
  BucketConfig config() const { return {rate_bytes_per_second, depth_bytes}; }
  friend bool operator==(const BucketSpec&, const BucketSpec&) = default;
};

// The agent-written parameters of one tenant, as plain values.
struct TenantParams {
  uint64_t policy_version = 0;
  uint64_t guarantee_bytes_per_second = 0;  // per device of its link, per direction
  uint64_t limit_bytes_per_second = 0;
  uint32_t weight = 1;
  uint32_t service_level = 0;
  uint32_t dscp = 0;
  bool paced = true;
  bool deleted = false;
  std::vector<int32_t> traffic_classes;  // at most shm::kMaxTrafficClasses
  // The bucket table, index = table entry (at most shm::kMaxBuckets; an entry with scope
  // kScopeNone is unused).
  std::vector<BucketSpec> buckets;
  // Read for one process (readParams with a slot): its own buckets' rates, per table entry
  // (shm_layout.h "Process buckets"; 0: none). publish() does not write them.
  std::vector<uint64_t> process_rates;

  friend bool operator==(const TenantParams&, const TenantParams&) = default;
};

// A tenant paced alike on every device: one unnamed tx and one unnamed rx bucket at `rate`
// (depth `depth`, limit `limit`). The agent's built-in default tenant, and tests.
std::vector<BucketSpec> nodeBuckets(uint64_t rate, uint64_t depth, uint64_t limit = 0);

// The rate a process is paced at on a governed node when it cannot attach to any tenant and the
// agent gives no default tenant: 100 Mbit/s.
inline constexpr uint64_t kConservativeRateBytesPerSecond = 12'500'000;

// DNS-1123 label: 1-63 of [a-z0-9-], starting and ending alphanumeric. Also keeps tenant names
// safe as file names.
bool isDns1123Label(std::string_view name);

// ---- reading tenant-writable memory (pure and bounded; fuzzed by common_shm_fuzz) ----------

// One process's counters for one bucket as copied out of the tenant's memory: raw, unchecked.
struct CounterSample {
  uint64_t bytes = 0;
  uint64_t backlog_bytes = 0;
  uint64_t throttled_ns = 0;
  int64_t throttled_since_ns = 0;
  uint64_t busy_ns = 0;
  int64_t busy_since_ns = 0;
  uint64_t peer_wait_ns = 0;
  uint64_t throttle_events = 0;
};
// Decodes one 64-byte counter block of `size` bytes at `block` (zero past the end).
CounterSample countersFromBytes(const uint8_t* block, size_t size);
// Decodes block [bucket][slot] of a SharedPage image of `size` bytes (zero past the end).
CounterSample countersFromPage(const uint8_t* page, size_t size, uint32_t bucket, uint32_t slot);

// What the agent last accepted from one counter block (agent memory, never the tenant's).
struct CounterBaseline {
  uint64_t bytes = 0;
  uint64_t throttled_ns = 0;  // closed + open interval as last accepted
  uint64_t busy_ns = 0;       // closed + open interval as last accepted
  uint64_t peer_wait_ns = 0;
};

// One checked reading of a counter block: increments since the baseline (which checkCounters
// advances) and the current gauges. `problems` names every value that was out of range; such a
// value is not counted, and the baseline moves to it so that honest increments count again from
// there.
struct CounterCheck {
  uint64_t bytes = 0;
  uint64_t throttled_ns = 0;
  uint64_t busy_ns = 0;
  uint64_t peer_wait_ns = 0;
  uint64_t backlog_bytes = 0;
  bool throttled_now = false;
  std::string problems;  // empty: every value was plausible
};
// `elapsed_ns`: since the previous reading; `max_rate`: the most the bucket may carry (bytes/s;
// its limit). Bounds: counters never go backwards; bytes grow by at most 2 x max_rate x elapsed
// + 4 GiB per reading; times by at most elapsed + 1 s; open intervals start in the past and at
// most one day ago; the backlog is at most 1 TiB.
CounterCheck checkCounters(CounterBaseline* base, const CounterSample& cur, int64_t now_ns,
                           int64_t elapsed_ns, uint64_t max_rate);

// Consistent snapshot of agent-written parameters, or nullopt when the seqlock stayed odd or
// changing for kSeqlockRetries tries (the caller keeps the values it had). Bucket entries with
// a key out of range are returned as unused (scope kScopeNone).
// `slot`: also read that process's own bucket rates (kMaxSlots: the slotless row).
inline constexpr int kSeqlockRetries = 64;
std::optional<TenantParams> readParams(const shm::ParamsPage& p, uint64_t* seq_out = nullptr,
                                       std::optional<uint32_t> slot = std::nullopt);

// ---- the agent side ---------------------------------------------------------------------------

// A live process's slot.
struct SlotUsage {
  uint32_t index = 0;
  pid_t pid = 0;  // from SO_PEERCRED, in the agent's pid namespace
  // This reading of its counters, per entry of the table: increments since the last reading
  // (zero for a value checkCounters refused) and its backlog now.
  std::vector<CounterCheck> buckets;
};

// One bucket of a tenant on this node: totals since the agent created its memory (sums of the
// increments checkCounters accepted; monotonic) and the current gauges of the live slots.
struct BucketUsage {
  uint64_t bytes = 0;
  uint64_t throttled_ns = 0;
  uint64_t busy_ns = 0;
  uint64_t peer_wait_ns = 0;
  uint64_t backlog_bytes = 0;  // sum over live slots (current demand signal)
  uint32_t throttled_processes = 0;
};

// A tenant's usage on this node.
struct TenantUsage {
  std::vector<BucketUsage> buckets;  // per entry of the published table
  // Sums over the device buckets of the table (a shared link's bucket is charged for bytes
  // that its device's bucket counts already): tx and rx bytes, and the tx buckets' throttled
  // time and backlog.
  uint64_t tx_bytes = 0;
  uint64_t rx_bytes = 0;
  uint64_t throttled_ns = 0;
  uint64_t backlog_bytes = 0;
  uint32_t processes = 0;            // attached processes (with a slot or not)
  uint32_t slotless = 0;             // of those, attached without a slot
  uint32_t throttled_processes = 0;  // with a refused send waiting (any tx device bucket)
  uint64_t rejected_readings = 0;    // values checkCounters refused, since creation
  std::vector<SlotUsage> slots;
};

// Who is on the other end of a tenant socket (SO_PEERCRED, agent's namespaces).
struct PeerIdentity {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

// One attached process, for the agent's metrics and for telling governed from ungoverned
// processes.
struct Attachment {
  std::string tenant;
  uint32_t slot = shm::kMaxSlots;  // kMaxSlots: attached without a slot (all taken)
  PeerIdentity peer;
};

// The rates of the processes' own buckets (shm_layout.h "Process buckets"): row s for slot s,
// row shm::kMaxSlots for each process attached without a slot; per entry of the table.
using ProcessRateRow = std::array<uint64_t, shm::kMaxBuckets>;
using ProcessRateTable = std::array<ProcessRateRow, shm::kMaxSlots + 1>;

class TenantShm {
 public:
  // Two new memfds, sealed as shm_layout.h says; parameters zero until publish().
  static Result<std::shared_ptr<TenantShm>> create(const std::string& tenant, int64_t now_wall_ns);
  ~TenantShm();
  TenantShm(const TenantShm&) = delete;
  TenantShm& operator=(const TenantShm&) = delete;

  const std::string& tenant() const { return tenant_; }
  int paramsFd() const { return params_fd_.get(); }
  int sharedFd() const { return shared_fd_.get(); }

  // Seqlock write (reconcile thread); readers never observe a mix of old and new fields.
  void publish(const TenantParams& params);
  TenantParams published() const;
  // The processes' own bucket rates (reconcile thread), written only when they changed. A slot
  // handed out by acquireSlot keeps the row it had (0, none, or its last owner's share) until the
  // next table: at most a period.
  void publishProcessRates(const ProcessRateTable& rates);
  ProcessRateTable processRates() const;
  void heartbeat(int64_t now_ns);

  // Attach thread. A free slot for `peer`, zeroed (pwrite) and counted from zero; nullopt when
  // all kMaxSlots are in use (the process then paces without a slot).
  std::optional<uint32_t> acquireSlot(const PeerIdentity& peer);
  // The process's socket closed: its slot drains (the next collect() counts its last values)
  // and is then free. nullopt: it had no slot.
  void releaseSlot(std::optional<uint32_t> slot, pid_t pid);
  std::vector<Attachment> attachments() const;
  // No process attached and no slot draining.
  bool idle() const;

  // Reconcile thread: per bucket of the published table one pread of its counter blocks (up to
  // the highest slot in use), every attached or draining slot's block checked against its
  // baseline with `max_rate` (the tenant's limit) as the bound. Problems are logged (tenant,
  // pid, bucket, what) once per slot attachment.
  TenantUsage collect(int64_t now_ns, uint64_t max_rate);

 private:
  enum class SlotState { kFree, kAttached, kDraining };
  struct SlotEntry {
    SlotState state = SlotState::kFree;
    PeerIdentity peer;
    CounterBaseline base[shm::kMaxBuckets];
    bool logged = false;  // a problem of this attachment was logged already
  };
  // Zeroes slot i's header and counter blocks through the fd (mu_ held).
  bool zeroSlot(uint32_t i) TQ_REQUIRES(mu_);
  void writeProcessRatesLocked() TQ_REQUIRES(write_mu_);
  TenantShm(std::string tenant, Fd params_fd, Fd shared_fd, MappedFile page)
      : tenant_(std::move(tenant)),
        params_fd_(std::move(params_fd)),
        shared_fd_(std::move(shared_fd)),
        page_mapping_(std::move(page)),
        page_(page_mapping_.as<shm::ParamsPage>()) {}

  const std::string tenant_;
  const Fd params_fd_;
  const Fd shared_fd_;
  const MappedFile page_mapping_;  // the agent's own writable mapping (created before sealing)
  shm::ParamsPage* const page_;    // into it

  // Every write of page_ (publish, publishProcessRates), whichever thread makes it.
  mutable Mutex write_mu_;
  TenantParams published_ TQ_GUARDED_BY(write_mu_);       // as last published
  ProcessRateTable rates_ TQ_GUARDED_BY(write_mu_) = {};  // as last written

  mutable Mutex mu_;
  SlotEntry slots_[shm::kMaxSlots] TQ_GUARDED_BY(mu_);
  std::vector<PeerIdentity> slotless_ TQ_GUARDED_BY(mu_);  // attached without a slot
  // The published table's keys (reconcile thread; under mu_ for collect): a key that changes
  // at an index resynchronises that index's baselines at the next collect.
  uint32_t keys_[shm::kMaxBuckets] TQ_GUARDED_BY(mu_) = {};
  bool resync_[shm::kMaxBuckets] TQ_GUARDED_BY(mu_) = {};
  uint32_t num_buckets_ TQ_GUARDED_BY(mu_) = 0;
  TenantUsage totals_
      TQ_GUARDED_BY(mu_);  // counters only (per bucket and sums), and rejected readings
  int64_t last_collect_ns_ TQ_GUARDED_BY(mu_) = 0;
};

// ---- the plugin side --------------------------------------------------------------------------

class TenantShmView {
 public:
  // Maps what the agent sent: checks sizes (fstat) and seals (F_GET_SEALS) first, so neither
  // mapping can shrink under the process. `slot`: kMaxSlots for none.
  static Result<std::unique_ptr<TenantShmView>> map(Fd params_fd, Fd shared_fd, uint32_t slot);
  ~TenantShmView();
  TenantShmView(const TenantShmView&) = delete;
  TenantShmView& operator=(const TenantShmView&) = delete;

  // The tenant the agent created this memory for (its header, which only the agent can write).
  const std::string& tenant() const { return tenant_; }
  // The parameters and this process's own bucket rates (its slot's, or the slotless row).
  std::optional<TenantParams> readParams(uint64_t* seq_out = nullptr) const {
    return tq::readParams(*params_, seq_out, slot_);
  }
  bool paramsChanged(uint64_t seq) const {
    return params_->params.seq.load(std::memory_order_acquire) != seq;
  }
  // Bucket `b`'s shared word (b < kMaxBuckets).
  std::atomic<int64_t>& bucketWord(uint32_t b) { return shared_->buckets[b].empty_at_ns; }
  // This process's counters for bucket `b`; nullptr: attached without a slot.
  shm::Counters* counters(uint32_t b) {
    return slot_ < shm::kMaxSlots ? &shared_->counters[b][slot_] : nullptr;
  }
  shm::SlotHeader* slot() { return slot_ < shm::kMaxSlots ? &shared_->slots[slot_] : nullptr; }

 private:
  TenantShmView(MappedFile params, MappedFile shared, uint32_t slot, std::string tenant)
      : params_mapping_(std::move(params)),
        shared_mapping_(std::move(shared)),
        params_(params_mapping_.as<const shm::ParamsPage>()),
        shared_(shared_mapping_.as<shm::SharedPage>()),
        slot_(slot),
        tenant_(std::move(tenant)) {}
  const MappedFile params_mapping_;  // read-only: the agent sealed it against our writes
  const MappedFile shared_mapping_;
  const shm::ParamsPage* params_;
  shm::SharedPage* shared_;
  uint32_t slot_;  // kMaxSlots: none
  std::string tenant_;
};

}  // namespace tq
