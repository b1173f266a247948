// The agent <-> plugin shared-memory contract: one fixed-size file per tenant per node,
// <run_dir>/tenants/<tenant>, created by the agent, mapped MAP_SHARED by every NCCL process of
// that tenant on the node. This header IS the ABI between two separately released programs:
// change it only by bumping kLayoutVersion (readers refuse other versions).
//
// Rules:
//  * No pointers; every field naturally aligned; every shared field a lock-free 64/32-bit atomic
//    (address-free, so valid across processes).
//  * Params: written by the agent alone under a seqlock (seq odd while writing).
//  * Bucket: written by plugins (CAS), never by the agent except at creation.
//  * Slot i: claimed by a plugin process that first takes an OFD write lock on byte
//    kSlotLockBase + i of the file (F_OFD_SETLK) and then CASes `owner` from 0 to its pid. The
//    lock is held for the process's lifetime, so the kernel drops it when the process dies —
//    even across pid namespaces, where the agent cannot interpret the pid. The agent reclaims a
//    slot whose owner != 0 when it can take that byte's lock itself: it folds the counters into
//    the header's retired_* totals (so totals stay monotonic), zeroes the slot, releases.
//  * Times are CLOCK_MONOTONIC nanoseconds (system-wide, so comparable across processes).
//
// Layout v1 (offsets checked by static_asserts below):
//   0     Header   (256 B)  magic, version, sizes, tenant name, agent liveness, retired totals
//   256   Params   (192 B)  seqlock-protected policy parameters
//   448   Bucket   ( 64 B)  token bucket state
//   512   Slot[64] (128 B each) per-process counters (tx, rx, throttled, busy, backlog, ...)
//   8704  end
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace tq::shm {

inline constexpr uint64_t kMagic = 0x314d48535154514eULL;  // bytes "NQTQSHM1"
inline constexpr uint32_t kLayoutVersion = 1;
inline constexpr uint32_t kMaxSlots = 64;
inline constexpr uint32_t kTenantNameBytes = 64;  // DNS-1123 label (<= 63) + NUL
inline constexpr uint32_t kMaxTrafficClasses = 8;
// OFD lock bytes for slot i are at kSlotLockBase + i: beyond the data so locks never overlap
// real content (OFD locks work on any offset, even past EOF).
inline constexpr uint64_t kSlotLockBase = 1u << 20;

// Params::flags
inline constexpr uint32_t kFlagPaced = 1u << 0;    // the bucket applies; clear = unpaced
inline constexpr uint32_t kFlagDeleted = 1u << 1;  // tenant removed from policy; file going away

static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<int64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

struct Header {
  uint64_t magic;           // written last at creation (after a release fence)
  uint32_t layout_version;  // kLayoutVersion
  uint32_t file_size;       // sizeof(TenantFile)
  uint32_t max_slots;       // kMaxSlots
  uint32_t reserved0;
  char tenant[kTenantNameBytes];  // NUL-terminated; immutable after creation
  std::atomic<uint64_t> agent_pid;           // pid of the agent (host pid namespace)
  std::atomic<uint64_t> agent_heartbeat_ns;  // agent refreshes every allocation period
  std::atomic<uint64_t> retired_tx_bytes;    // counters of reclaimed slots (agent only)
  std::atomic<uint64_t> retired_rx_bytes;
  std::atomic<uint64_t> retired_throttled_ns;
  std::atomic<uint64_t> create_wall_ns;      // CLOCK_REALTIME at creation
  uint8_t pad[256 - 136];
};

struct Params {
  std::atomic<uint64_t> seq;  // even: stable; odd: being written
  std::atomic<uint64_t> policy_version;
  std::atomic<uint64_t> rate_bytes_per_second;  // bucket refill rate (allocated, bytes/s)
  std::atomic<uint64_t> burst_bytes;            // bucket depth
  std::atomic<uint64_t> guarantee_bytes_per_second;
  std::atomic<uint64_t> limit_bytes_per_second;
  std::atomic<uint32_t> weight;
  std::atomic<uint32_t> service_level;  // IB SL 0-15
  std::atomic<uint32_t> dscp;           // 0-63 (TOS byte = dscp << 2)
  std::atomic<uint32_t> flags;          // kFlag*
  std::atomic<uint32_t> num_traffic_classes;
  std::atomic<int32_t> traffic_classes[kMaxTrafficClasses];
  uint8_t pad[192 - 100];
};

struct Bucket {
  // Virtual time (CLOCK_MONOTONIC ns) at which the bucket was empty: the available tokens at
  // `now` are min(burst, rate * (now - empty_at_ns)). One word, so a CAS updates it atomically.
  std::atomic<int64_t> empty_at_ns;
  uint8_t pad[64 - 8];
};

struct Slot {
  std::atomic<uint64_t> owner;          // 0 = free; else the owner's pid (its own namespace)
  std::atomic<uint64_t> tx_bytes;       // bytes handed to the network (isend completed/admitted)
  std::atomic<uint64_t> rx_bytes;       // bytes received
  std::atomic<uint64_t> throttled_ns;   // closed throttled intervals
  std::atomic<int64_t> throttled_since_ns;  // start of the open throttled interval, 0 = none
  std::atomic<uint64_t> backlog_bytes;  // bytes refused by the bucket and not yet sent (demand)
  std::atomic<uint64_t> heartbeat_ns;   // last isend/irecv/test activity
  std::atomic<uint64_t> throttle_events;  // isend calls refused by the bucket
  std::atomic<uint64_t> claim_wall_ns;  // CLOCK_REALTIME when claimed
  // Time this process had at least one admitted send not yet completed (closed intervals, and
  // the start of the open one, 0 = none). A tenant whose sends stay queued in the network while
  // its bucket admits them is held back by the network, not by lack of demand: the agent's
  // demand estimator reads it so a starved tenant gets its share back.
  std::atomic<uint64_t> busy_ns;
  std::atomic<int64_t> busy_since_ns;
  uint8_t pad[128 - 88];
};

struct TenantFile {
  Header header;
  Params params;
  Bucket bucket;
  Slot slots[kMaxSlots];
};

static_assert(sizeof(Header) == 256);
static_assert(sizeof(Params) == 192);
static_assert(sizeof(Bucket) == 64);
static_assert(sizeof(Slot) == 128);
static_assert(offsetof(TenantFile, header) == 0);
static_assert(offsetof(TenantFile, params) == 256);
static_assert(offsetof(TenantFile, bucket) == 448);
static_assert(offsetof(TenantFile, slots) == 512);
static_assert(sizeof(TenantFile) == 8704);
static_assert(offsetof(Header, agent_pid) == 88);
static_assert(offsetof(Params, traffic_classes) == 68);
static_assert(offsetof(Slot, claim_wall_ns) == 64);
static_assert(offsetof(Slot, busy_since_ns) == 80);

}  // namespace tq::shm
