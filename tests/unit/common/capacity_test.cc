#include "common/capacity.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

namespace tq {
namespace {

TEST(CapacityTest, WholePercentHeadroomIsExact) {
  EXPECT_EQ(allocatableCapacity(12'500'000'000, 5), 11'875'000'000u);
  EXPECT_EQ(allocatableCapacity(12'500'000'000, 0), 12'500'000'000u);
  // Rounded down: 99 x 0.95 = 94.05.
  EXPECT_EQ(allocatableCapacity(99, 5), 94u);
  for (uint64_t cap : {1ull, 7ull, 1'000'000'007ull, 123'456'789'012'345ull}) {
    for (int h = 0; h < 100; ++h) {
      const unsigned __int128 want = static_cast<unsigned __int128>(cap) * (100 - h) / 100;
      EXPECT_EQ(allocatableCapacity(cap, h), static_cast<uint64_t>(want)) << cap << " " << h;
    }
  }
}

TEST(CapacityTest, FractionalHeadroomToTheNearestPpm) {
  // 100000000001 x 0.975 = 97500000000.975: down to a whole byte/s.
  EXPECT_EQ(allocatableCapacity(100'000'000'001, 2.5), 97'500'000'000u);
  EXPECT_EQ(headroomPpm(2.5), 25'000u);
  EXPECT_EQ(headroomPpm(0.0001), 1u);
  EXPECT_EQ(headroomPpm(0.00004), 0u);
  EXPECT_EQ(headroomPpm(0.00006), 1u);
  // 0.1 is not exact in binary; the nearest ppm still is.
  EXPECT_EQ(headroomPpm(0.1), 1'000u);
  EXPECT_EQ(allocatableCapacity(1'000'000'000, 0.1), 999'000'000u);
}

TEST(CapacityTest, OutOfRangeHeadroomIsClamped) {
  EXPECT_EQ(allocatableCapacity(1000, -3), 1000u);
  EXPECT_EQ(allocatableCapacity(1000, std::nan("")), 1000u);
  EXPECT_EQ(allocatableCapacity(1000, 100), 0u);
  EXPECT_EQ(allocatableCapacity(1000, 250), 0u);
}

TEST(CapacityTest, NoOverflowAtTheTopOfTheRange) {
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  EXPECT_EQ(allocatableCapacity(max, 0), max);
  const unsigned __int128 want = static_cast<unsigned __int128>(max) * 95 / 100;
  EXPECT_EQ(allocatableCapacity(max, 5), static_cast<uint64_t>(want));
}

TEST(CapacityTest, LinkSpecOverload) {
  LinkSpec link;
  link.capacity_bytes_per_second = 1'250'000'000;
  link.headroom_percent = 5;
  EXPECT_EQ(allocatableCapacity(link), 1'187'500'000u);
}

}  // namespace
}  // namespace tq
