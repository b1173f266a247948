// Per-process buckets, the agent's split (agent/process_shares.h): readings made by hand, as
// TenantShm::collect() returns them.
#include "agent/process_shares.h"

#include <gtest/gtest.h>

namespace tq::agent {
namespace {

constexpr uint64_t kRate = 100'000'000;
constexpr int64_t kPeriod = 10'000'000;

// A slot's reading: throttled all period (it wants more) or idle, on bucket 0 of 2.
SlotUsage slot(uint32_t index, pid_t pid, bool wants_more) {
  SlotUsage s{index, pid, std::vector<CounterCheck>(2)};
  if (wants_more) s.buckets[0].throttled_ns = kPeriod;
  return s;
}

TEST(ProcessShares, EachBucketIsSplitAmongTheProcessesByDemand) {
  ProcessShares shares;
  TenantUsage u;
  u.slots = {slot(0, 10, true), slot(3, 11, false), slot(5, 12, true)};
  u.processes = 3;
  const std::vector<uint64_t> rates = {kRate, 2 * kRate};
  ProcessRateTable t{};
  for (int i = 0; i < 2; ++i) t = shares.update(u, rates, kPeriod);
  // Two want more: they share what the idle one leaves; the idle one keeps a third in its bucket.
  EXPECT_EQ(t[0][0], kRate / 2);
  EXPECT_EQ(t[5][0], kRate / 2);
  EXPECT_EQ(t[3][0], kRate / 3);
  EXPECT_EQ(t[0][0] + t[5][0], kRate) << "the processes that use it never more than the rate";
  // Bucket 1: nobody uses it: an equal share each.
  EXPECT_EQ(t[0][1], 2 * kRate / 3);
  // Slots not attached and the slotless row: none.
  EXPECT_EQ(t[1][0], 0u);
  EXPECT_EQ(t[shm::kMaxSlots][0], 0u);
  // An unused entry of the table (rate 0): none.
  EXPECT_EQ(shares.update(u, {kRate, 0}, kPeriod)[0][1], 0u);
}

TEST(ProcessShares, ProcessesWithoutASlotShareOneEqualShare) {
  ProcessShares shares;
  TenantUsage u;
  u.slots = {slot(0, 10, true)};
  u.slotless = 4;
  u.processes = 5;
  ProcessRateTable t{};
  for (int i = 0; i < 2; ++i) t = shares.update(u, {kRate, kRate}, kPeriod);
  // Two participants: the slot, and the four without one, who report nothing and get their
  // equal half, a quarter of it each.
  EXPECT_EQ(t[0][0], kRate / 2);
  EXPECT_EQ(t[shm::kMaxSlots][0], kRate / 2 / 4);
}

TEST(ProcessShares, ASlotThatChangesHandsStartsAfresh) {
  ProcessShares shares;
  TenantUsage u;
  u.slots = {slot(0, 10, true), slot(1, 11, false)};
  for (int i = 0; i < 2; ++i) shares.update(u, {kRate}, kPeriod);
  // Slot 0 is another process now, idle so far: no history of its predecessor's demand.
  u.slots = {slot(0, 20, false), slot(1, 11, false)};
  const ProcessRateTable t = shares.update(u, {kRate}, kPeriod);
  EXPECT_EQ(t[0][0], kRate / 2);
  EXPECT_EQ(t[1][0], kRate / 2);
}

}  // namespace
}  // namespace tq::agent
