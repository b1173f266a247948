// Allocatable capacity of a link (a node's, or a link between switches that a group of nodes
// shares): the one rule that policy admission (policyd, tenantqosctl) and the allocators (the
// agent's per node, fabric/'s per shared link) share, so that policyd never admits guarantees
// an allocator will not hand out.
//
//   allocatable = floor(capacity x (1 - headroom))      exact integer arithmetic
//
// Headroom is applied at a resolution of 1 ppm (0.0001 %), rounded to the nearest; a headroom
// outside [0, 100] % (or NaN) is clamped, so the function is total. Why headroom at all: the
// plugin paces payload bytes while the link also carries headers (TCP/IP/Ethernet: ~4.4 % at
// MTU 1500; RoCE: ~2 % at MTU 4096), and traffic outside tenantqos needs room; handing out the
// whole capacity would fill the NIC's FIFO and bring back the contention pacing removes.
// Units: bytes per second. Pure; thread-safe.
#pragma once

#include <cstdint>

#include "common/policy.h"

namespace tq {

inline constexpr uint64_t kHeadroomPpmScale = 1'000'000;  // 100 %

// `headroom_percent` in parts per million of capacity, clamped to [0, kHeadroomPpmScale].
uint64_t headroomPpm(double headroom_percent);

uint64_t allocatableCapacity(uint64_t capacity_bytes_per_second, double headroom_percent);
inline uint64_t allocatableCapacity(const LinkSpec& link) {
  return allocatableCapacity(link.capacity_bytes_per_second, link.headroom_percent);
}

// A group's link of a shared link class (common/policy.h): the group's own capacity, else the
// class's; the class's headroom. Per direction.
uint64_t groupCapacity(const SharedLinkSpec& link, const LinkGroupSpec& group);
inline uint64_t allocatableCapacity(const SharedLinkSpec& link, const LinkGroupSpec& group) {
  return allocatableCapacity(groupCapacity(link, group), link.headroom_percent);
}

}  // namespace tq
