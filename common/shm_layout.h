// The agent <-> plugin shared-memory contract. This header IS the ABI between two separately
// released programs: change it only by bumping kLayoutVersion (readers refuse other versions).
//
// Per tenant per node the agent creates two memfds and hands them to each attached process over
// the tenant's Unix socket (SCM_RIGHTS; protocol in common/attach_protocol.h):
//
//   ParamsPage  written by the agent alone. Sealed F_SEAL_SHRINK | F_SEAL_GROW |
//               F_SEAL_FUTURE_WRITE | F_SEAL_SEAL after the agent mapped it read-write, so no
//               other process can write, truncate or grow it, nor map it writable (the kernel
//               clears VM_MAYWRITE on every later shared mapping). The parameters are under a
//               seqlock (seq odd while the agent writes); readers retry a bounded number of
//               times, then keep the values they had.
//   SharedPage  written by the tenant's processes: the tenant's token bucket and one counter
//               slot per process. Sealed F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL, so no one can
//               truncate it under a reader (no SIGBUS). Everything in it is hostile to every
//               reader: the plugin clamps the bucket word against the read-only parameters on
//               every take (common/token_bucket.h), the agent never maps it (pread copies,
//               common/tenant_shm.h: checkSlot) and never reads back its own state from it.
//
// Slot i belongs to the process the agent assigned it to when that process connected; it is
// released when the process's socket closes (the kernel closes it when the process dies). The
// agent zeroes a slot before handing it out and counts each slot's increments from there.
// Times are CLOCK_MONOTONIC nanoseconds (system-wide, so comparable across processes).
//
// Layout v2 (offsets checked by static_asserts below):
//   ParamsPage:  0 Header (128 B), 128 Params (192 B); 320 B
//   SharedPage:  0 Bucket (64 B), 64 Slot[64] (128 B each); 8256 B
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace tq::shm {

inline constexpr uint64_t kMagic = 0x324d48535154514eULL;  // bytes "NQTQSHM2"
inline constexpr uint32_t kLayoutVersion = 2;
inline constexpr uint32_t kMaxSlots = 64;
inline constexpr uint32_t kTenantNameBytes = 64;  // DNS-1123 label (<= 63) + NUL
inline constexpr uint32_t kMaxTrafficClasses = 8;

// Params::flags
inline constexpr uint32_t kFlagPaced = 1u << 0;    // the bucket applies; clear = unpaced
inline constexpr uint32_t kFlagDeleted = 1u << 1;  // tenant removed from policy: re-attach

static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<int64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

struct Header {
  uint64_t magic;                            // written last at creation (after a release fence)
  uint32_t layout_version;                   // kLayoutVersion
  uint32_t params_size;                      // sizeof(ParamsPage)
  uint32_t shared_size;                      // sizeof(SharedPage)
  uint32_t max_slots;                        // kMaxSlots
  char tenant[kTenantNameBytes];             // NUL-terminated; immutable after creation
  std::atomic<uint64_t> agent_pid;           // pid of the agent (host pid namespace)
  std::atomic<uint64_t> agent_heartbeat_ns;  // refreshed every allocation period
  uint64_t create_wall_ns;                   // CLOCK_REALTIME at creation
  uint8_t pad[128 - 112];
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

struct ParamsPage {
  Header header;
  Params params;
};

struct Bucket {
  // Virtual time (CLOCK_MONOTONIC ns) at which the bucket was empty: the available tokens at
  // `now` are min(burst, rate * (now - empty_at_ns)). One word, so a CAS updates it atomically.
  std::atomic<int64_t> empty_at_ns;
  uint8_t pad[64 - 8];
};

// Counters of one process, written by that process only (relaxed atomics).
struct Slot {
  std::atomic<uint64_t> pid;                // the writer's own claim, for diagnostics only
  std::atomic<uint64_t> tx_bytes;           // bytes admitted by the bucket
  std::atomic<uint64_t> rx_bytes;           // bytes received
  std::atomic<uint64_t> throttled_ns;       // closed throttled intervals
  std::atomic<int64_t> throttled_since_ns;  // start of the open throttled interval, 0 = none
  std::atomic<uint64_t> backlog_bytes;      // bytes refused by the bucket and not yet sent (demand)
  std::atomic<uint64_t> heartbeat_ns;       // last isend/irecv/test activity
  std::atomic<uint64_t> throttle_events;    // isend calls refused by the bucket
  std::atomic<uint64_t> reserved;
  // Time this process had at least one admitted send not yet completed (closed intervals, and
  // the start of the open one, 0 = none). A tenant whose sends stay queued in the network while
  // its bucket admits them is held back by the network, not by lack of demand: the agent's
  // demand estimator reads it so a starved tenant gets its share back.
  std::atomic<uint64_t> busy_ns;
  std::atomic<int64_t> busy_since_ns;
  uint8_t pad[128 - 88];
};

struct SharedPage {
  Bucket bucket;
  Slot slots[kMaxSlots];
};

static_assert(sizeof(Header) == 128);
static_assert(sizeof(Params) == 192);
static_assert(sizeof(ParamsPage) == 320);
static_assert(offsetof(ParamsPage, params) == 128);
static_assert(offsetof(Header, agent_pid) == 88);
static_assert(offsetof(Params, traffic_classes) == 68);
static_assert(sizeof(Bucket) == 64);
static_assert(sizeof(Slot) == 128);
static_assert(offsetof(SharedPage, slots) == 64);
static_assert(sizeof(SharedPage) == 8256);
static_assert(offsetof(Slot, busy_since_ns) == 80);

}  // namespace tq::shm
