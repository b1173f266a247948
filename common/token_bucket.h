// Lock-free token bucket over one 64-bit word, shared by all processes of a tenant on a node.
//
// State: `empty_at_ns`, the virtual time at which the bucket was empty. Tokens available at `now`
// are min(burst, rate * (now - empty_at)). Taking n bytes advances empty_at by n / rate. A message
// larger than the burst is admitted once the bucket is full and leaves the bucket in debt
// (empty_at in the future), so the long-run rate holds for any message size while no single
// admission exceeds max(burst, message).
//
// The word lives in memory every process of the tenant can write (common/shm_layout.h), so it is
// never trusted: every take clamps it against the parameters, which the tenant cannot write.
//  * at most one burst saved up: the start is max(word, now - burst/rate);
//  * a word further than kMaxBucketDebtNs in the future is garbage: a take repairs it to `now`
//    (an empty bucket that refills from there), so no value can wedge the bucket; a message's
//    cost is capped at the same bound, so an honest word never gets there;
//  * `floor` (optional, process-local): the latest word this process wrote. The honest word only
//    moves forward, so a take starts at least there: a value written back into the past by
//    another process wins it nothing beyond the one-burst cap. A process alone then never admits
//    more than rate x T + burst over any window T, whatever anyone writes into the word.
// Thread/process-safety: tryTake is a CAS loop on one atomic; wait-free for a single taker,
// lock-free under contention. Never blocks, never sleeps. Units: bytes, bytes/s, ns.
#pragma once

#include <atomic>
#include <cstdint>

namespace tq {

struct BucketConfig {
  uint64_t rate_bytes_per_second = 0;  // 0: nothing is admitted
  uint64_t burst_bytes = 256 * 1024;   // the depth
  // How far below empty a take may leave the bucket: a take of n bytes is admitted once
  // min(n, depth) - debt tokens are there, so the bucket spans [-debt, depth] and admits at most
  // rate x T + depth + debt over any window T (the long-run rate is unchanged). 0: a take needs
  // its tokens (or a full bucket). For an admitter that comes back late to move what a paced
  // peer already holds to the rate (TenantPacer: receives, TENANTQOS_RX_DEBT_US).
  uint64_t debt_bytes = 0;
};

// Bucket depth sized in time. Over any window T a bucket admits at most rate x T + max(depth,
// the largest single admission): a depth of `depth_ns` at the bucket's rate bounds that to
// rate x (T + depth_ns) whatever the link's speed, where a fixed byte count gives a slow tenant
// a larger share on top (256 KiB: 3.5 % over 100 ms at 600 Mbit/s). 1 ms keeps every tenant
// within 1 % of its rate over 100 ms windows; it is also the chunk the ib transport paces in
// (TENANTQOS_PACE_CHUNK_US), so a chunk fits a full bucket. Below `floor` bytes the depth does not
// go (one page by default: the smallest paced chunk always fits).
inline constexpr int64_t kDefaultBucketDepthNs = 1'000'000;
inline constexpr uint64_t kDefaultMinBucketDepthBytes = 4096;
// max(rate x depth_ns, floor), saturating.
uint64_t bucketDepthBytes(uint64_t rate_bytes_per_second, int64_t depth_ns, uint64_t floor);

// Most debt a bucket carries: one take never costs more than this much of the rate.
inline constexpr int64_t kMaxBucketDebtNs = 10'000'000'000;

// Most bytes one take should carry at `rate`: half the debt bound's worth (at least 1). A larger
// message is charged in parts of this size, the rest before its admitter's next admission
// (TenantPacer::admit), so its whole cost is paid, where one take of it would be capped at the
// debt bound (a 32 MiB message at 1 Mbit/s would cost 10 s instead of 268 s).
uint64_t bucketMaxTakeBytes(uint64_t rate_bytes_per_second);

// ns needed to earn `bytes` at `rate` (rounded up), saturating.
int64_t bucketCostNs(uint64_t bytes, uint64_t rate_bytes_per_second);

// Tries to take `bytes` tokens at time `now_ns`. Returns true if admitted. `floor` as above;
// cfg.debt_bytes: how far below empty the take may leave the bucket.
bool bucketTryTake(std::atomic<int64_t>& empty_at_ns, int64_t now_ns, uint64_t bytes,
                   const BucketConfig& cfg, std::atomic<int64_t>* floor = nullptr);

// Gives back `bytes` taken earlier and not used (a receive admitted at its posted size that
// carried less): moves the word back by their cost, and the process's floor with it (its own
// tokens). The cap of one depth of saved tokens still applies at the next take. A garbage word
// (beyond the debt bound) is left for the next take to repair.
void bucketGiveBack(std::atomic<int64_t>& empty_at_ns, int64_t now_ns, uint64_t bytes,
                    const BucketConfig& cfg, std::atomic<int64_t>* floor = nullptr);

// Tokens (bytes) available at now_ns; negative when in debt. For metrics and tests.
int64_t bucketAvailable(const std::atomic<int64_t>& empty_at_ns, int64_t now_ns,
                        const BucketConfig& cfg, const std::atomic<int64_t>* floor = nullptr);

// Earliest time at which `bytes` could be admitted (now_ns if already possible). Lets a sender
// that was refused decide when to retry without spinning.
int64_t bucketReadyAt(const std::atomic<int64_t>& empty_at_ns, int64_t now_ns, uint64_t bytes,
                      const BucketConfig& cfg, const std::atomic<int64_t>* floor = nullptr);

}  // namespace tq
