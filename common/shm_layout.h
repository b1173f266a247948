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
//   SharedPage  written by the tenant's processes: the tenant's token buckets and, per bucket,
//               one counter block per process. Sealed F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL,
//               so no one can truncate it under a reader (no SIGBUS). Everything in it is hostile
//               to every reader: the plugin clamps each bucket word against the read-only
//               parameters on every take (common/token_bucket.h), the agent never maps it (pread
//               copies, common/tenant_shm.h: checkCounters) and never reads back its own state from
//               it.
//
// Buckets. A tenant has a table of at most kMaxBuckets token buckets, each identified by
// (scope, index, direction): scope kScopeDevice is a network device of this node (a rail: up to
// kMaxDeviceBuckets per tenant, `name` = the device), kScopeFabricLink a shared link between
// switches (reserved for the fabric allocator, up to kMaxLinkBuckets); direction kTx is what the
// tenant's processes send over it, kRx what they receive. The agent writes each bucket's key,
// refill rate and depth in the ParamsPage (BucketParams[i]); bucket i's shared word is
// SharedPage::buckets[i] and process s's counters for it are SharedPage::counters[i][s]. A
// connection charges the buckets it crosses (today: its device's, in its direction). The table
// index of a key stays the same while the tenant's devices do; a key that moves to another
// index resets that index's readings (the agent takes its next values as the new baseline).
//
// Process buckets (issue 23 item 9). The shared bucket words are writable by every process of the
// tenant, so one process could reset them and let its co-tenants admit more than the tenant's
// rate (each keeps its own floor, so each gets the whole rate). Each take therefore also passes
// a bucket of the process's own, in its own memory, refilled at the rate the agent writes for
// its slot here (ProcessRates, read-only to tenants): the agent splits each bucket's rate among
// the tenant's processes by demand, so the processes together stay within the tenant's rate
// whatever anyone writes. `slotless` is the rate of each process attached without a slot. 0: no
// process bucket for that entry (the shared one alone, which the process's own floor already
// bounds to the tenant's rate for that process).
//
// Slot s belongs to the process the agent assigned it to when that process connected; it is
// released when the process's socket closes (the kernel closes it when the process dies). The
// agent zeroes a slot's header and its counters in every bucket before handing it out and counts
// each counter's increments from there. Times are CLOCK_MONOTONIC nanoseconds (system-wide, so
// comparable across processes). Counters are 64-byte blocks: one process writes one cache line
// per bucket, the agent reads a bucket's blocks of every slot with one pread.
//
// Layout v4 (offsets checked by static_asserts below):
//   ParamsPage:  0 Header (128 B), 128 Params (192 B), 320 BucketParams[32] (64 B each),
//                2368 ProcessRates[64] by slot (256 B each), 18752 ProcessRates slotless; 19008 B
//   SharedPage:  0 Bucket[32] (64 B each), 2048 SlotHeader[64] (64 B each),
//                6144 Counters[32][64] (64 B each); 137216 B
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace tq::shm {

inline constexpr uint64_t kMagic = 0x344d48535154514eULL;  // bytes "NQTQSHM4"
inline constexpr uint32_t kLayoutVersion = 4;
inline constexpr uint32_t kMaxSlots = 64;
inline constexpr uint32_t kTenantNameBytes = 64;  // DNS-1123 label (<= 63) + NUL
inline constexpr uint32_t kMaxTrafficClasses = 8;
inline constexpr uint32_t kMaxDeviceBuckets = 8;  // devices (rails) per tenant per direction
inline constexpr uint32_t kMaxLinkBuckets = 8;    // shared fabric links per tenant per direction
inline constexpr uint32_t kMaxBuckets = 2 * (kMaxDeviceBuckets + kMaxLinkBuckets);
inline constexpr uint32_t kBucketNameBytes =
    16;  // a device name (IFNAMSIZ) or a link's, NUL-padded

// Params::flags
inline constexpr uint32_t kFlagPaced = 1u << 0;    // the buckets apply; clear = unpaced
inline constexpr uint32_t kFlagDeleted = 1u << 1;  // tenant removed from policy: re-attach

// BucketParams::key = scope | index << 8 | direction << 16; 0 = no bucket in this entry.
enum BucketScope : uint8_t { kScopeNone = 0, kScopeDevice = 1, kScopeFabricLink = 2 };
enum Direction : uint8_t { kTx = 0, kRx = 1 };
constexpr uint32_t bucketKey(BucketScope scope, uint32_t index, Direction dir) {
  return static_cast<uint32_t>(scope) | (index & 0xff) << 8 | static_cast<uint32_t>(dir) << 16;
}
constexpr BucketScope keyScope(uint32_t key) { return static_cast<BucketScope>(key & 0xff); }
constexpr uint32_t keyIndex(uint32_t key) { return (key >> 8) & 0xff; }
constexpr Direction keyDirection(uint32_t key) { return static_cast<Direction>((key >> 16) & 1); }

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

// The tenant's policy values and tags (under the seqlock, with the bucket table).
struct Params {
  std::atomic<uint64_t> seq;  // even: stable; odd: being written
  std::atomic<uint64_t> policy_version;
  std::atomic<uint64_t> guarantee_bytes_per_second;  // per device of its link, per direction
  std::atomic<uint64_t> limit_bytes_per_second;      // same
  std::atomic<uint32_t> weight;
  std::atomic<uint32_t> service_level;  // IB SL 0-15
  std::atomic<uint32_t> dscp;           // 0-63 (TOS byte = dscp << 2)
  std::atomic<uint32_t> flags;          // kFlag*
  std::atomic<uint32_t> num_traffic_classes;
  std::atomic<int32_t> traffic_classes[kMaxTrafficClasses];
  std::atomic<uint32_t> num_buckets;  // entries [0, num_buckets) of the table may be in use
  uint8_t pad[192 - 88];
};

// One bucket of the table (under the Params seqlock).
struct BucketParams {
  std::atomic<uint32_t> key;  // bucketKey(); 0: unused
  std::atomic<uint32_t> reserved;
  std::atomic<uint64_t> name[kBucketNameBytes / 8];  // NUL-padded bytes
  std::atomic<uint64_t> rate_bytes_per_second;       // refill rate (allocated)
  std::atomic<uint64_t> depth_bytes;                 // bucket depth
  std::atomic<uint64_t> guarantee_bytes_per_second;
  std::atomic<uint64_t> limit_bytes_per_second;
  uint8_t pad[64 - 56];
};

// One process's own bucket rates, per entry of the bucket table (under the Params seqlock).
struct ProcessRates {
  std::atomic<uint64_t> rate_bytes_per_second[kMaxBuckets];
};

struct ParamsPage {
  Header header;
  Params params;
  BucketParams buckets[kMaxBuckets];
  ProcessRates processes[kMaxSlots];  // by slot
  ProcessRates slotless;              // each process attached without a slot
};

struct Bucket {
  // Virtual time (CLOCK_MONOTONIC ns) at which the bucket was empty: the available tokens at
  // `now` are min(depth, rate * (now - empty_at_ns)). One word, so a CAS updates it atomically.
  std::atomic<int64_t> empty_at_ns;
  uint8_t pad[64 - 8];
};

// Per process (written by that process only, relaxed atomics).
struct SlotHeader {
  std::atomic<uint64_t> pid;           // the writer's own claim, for diagnostics only
  std::atomic<uint64_t> heartbeat_ns;  // last isend/irecv/test activity
  uint8_t pad[64 - 16];
};

// One process's counters for one bucket (written by that process only, relaxed atomics).
struct Counters {
  // tx: bytes admitted by the bucket; rx: bytes received (a completion's size).
  std::atomic<uint64_t> bytes;
  // Bytes refused by the bucket and not yet admitted (sends, or receives waiting to be let in):
  // the demand signal.
  std::atomic<uint64_t> backlog_bytes;
  std::atomic<uint64_t> throttled_ns;       // closed throttled intervals
  std::atomic<int64_t> throttled_since_ns;  // start of the open throttled interval, 0 = none
  // tx: time this process had at least one admitted send not yet completed on this bucket
  // (closed intervals, and the start of the open one, 0 = none). A tenant whose sends stay
  // queued in the network while its bucket admits them is held back by the network, not by
  // lack of demand: the agent's demand estimator reads it so a starved tenant gets its share
  // back. rx: unused (0).
  std::atomic<uint64_t> busy_ns;
  std::atomic<int64_t> busy_since_ns;
  // tx: time sends in flight waited for their receiver (a closed TCP window): part of busy_ns
  // that is the receiver's pacing, not the network's, and no demand at this end.
  std::atomic<uint64_t> peer_wait_ns;
  std::atomic<uint64_t> throttle_events;  // admissions refused by the bucket
};

struct SharedPage {
  Bucket buckets[kMaxBuckets];
  SlotHeader slots[kMaxSlots];
  Counters counters[kMaxBuckets][kMaxSlots];
};

static_assert(sizeof(Header) == 128);
static_assert(sizeof(Params) == 192);
static_assert(sizeof(BucketParams) == 64);
static_assert(offsetof(ParamsPage, params) == 128);
static_assert(offsetof(ParamsPage, buckets) == 320);
static_assert(sizeof(ProcessRates) == 256);
static_assert(offsetof(ParamsPage, processes) == 2368);
static_assert(offsetof(ParamsPage, slotless) == 18752);
static_assert(sizeof(ParamsPage) == 19008);
static_assert(offsetof(Header, agent_pid) == 88);
static_assert(offsetof(Params, traffic_classes) == 52);
static_assert(offsetof(Params, num_buckets) == 84);
static_assert(offsetof(BucketParams, rate_bytes_per_second) == 24);
static_assert(sizeof(Bucket) == 64);
static_assert(sizeof(SlotHeader) == 64);
static_assert(sizeof(Counters) == 64);
static_assert(offsetof(SharedPage, slots) == 2048);
static_assert(offsetof(SharedPage, counters) == 6144);
static_assert(sizeof(SharedPage) == 137216);
static_assert(offsetof(Counters, peer_wait_ns) == 48);

}  // namespace tq::shm
