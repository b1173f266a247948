// Deflated policy snapshots on watch streams (PolicySnapshot.deflated; docs/policy.md,
// "Watch streams"). Every apply sends the whole snapshot to every agent: a 1000-tenant policy
// with its topology is about 60 KB, 60 MB of TLS per apply for 1,000 agents, and that volume
// is what the fan-out's time grew with under the allocator's load (docs/cli.md). Deflated once
// per version it is about 10 KB (zlib's default level, about 2 ms once); each agent inflates
// its own.
//
// A watcher asks for it (WatchPolicyRequest.accept_deflated); policyd sends older watchers the
// plain snapshot, and older servers ignore the request field, so either side may be upgraded
// first.
//
// inflateSnapshot reads hostile input (whatever came over the stream): a stream that is not
// zlib, truncated, followed by more bytes, inflating to more than `max_bytes` (checked while
// inflating: a small message cannot make it allocate more), not a PolicySnapshot, itself
// deflated again, or disagreeing with the version or store epoch beside it is refused with
// kInvalidArgument saying which.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"
#include "tenantqos/v1/policy.pb.h"

namespace tq::proto {

// The largest snapshot accepted once inflated: the watch channels' receive limit
// (rpc/channel_ring.cc), so a deflated snapshot can carry nothing a plain one could not.
inline constexpr size_t kMaxInflatedSnapshotBytes = 16u << 20;

// `plain` (not itself deflated) as PolicySnapshot{version, store_epoch, deflated}.
Result<tenantqos::v1::PolicySnapshot> deflateSnapshot(const tenantqos::v1::PolicySnapshot& plain);
// The same from `serialized`, plain's serialisation, for a caller that has it already (policyd
// sends it to the watchers that do not deflate); version and store_epoch are plain's.
Result<tenantqos::v1::PolicySnapshot> deflateSerializedSnapshot(uint64_t version,
                                                                const std::string& store_epoch,
                                                                std::string_view serialized);

// `msg` as it is when it is not deflated, else the snapshot inside it.
Result<tenantqos::v1::PolicySnapshot> inflateSnapshot(tenantqos::v1::PolicySnapshot msg,
                                                      size_t max_bytes = kMaxInflatedSnapshotBytes);

}  // namespace tq::proto
