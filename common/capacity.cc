#include "common/capacity.h"

#include <cmath>

namespace tq {

uint64_t headroomPpm(double headroom_percent) {
  if (!(headroom_percent > 0)) return 0;  // also NaN
  if (headroom_percent >= 100) return kHeadroomPpmScale;
  return static_cast<uint64_t>(std::llround(headroom_percent * 10'000.0));
}

uint64_t allocatableCapacity(uint64_t capacity_bytes_per_second, double headroom_percent) {
  // capacity < 2^64 and the factor <= 10^6 < 2^20: the product fits in 128 bits.
  const unsigned __int128 keep = kHeadroomPpmScale - headroomPpm(headroom_percent);
  return static_cast<uint64_t>(static_cast<unsigned __int128>(capacity_bytes_per_second) * keep /
                               kHeadroomPpmScale);
}

uint64_t groupCapacity(const SharedLinkSpec& link, const LinkGroupSpec& group) {
  return group.capacity_bytes_per_second != 0 ? group.capacity_bytes_per_second
                                              : link.capacity_bytes_per_second;
}

}  // namespace tq
