// Fencing a tenant that used more than its buckets allowed (agent/fence.h), with simulated
// periods: an honest tenant is never fenced, one over is slowed until it has paid the excess
// back, by either measure, and a tenant whose processes left owes nothing.
#include "agent/fence.h"

#include <gtest/gtest.h>

namespace tq::agent {
namespace {

constexpr uint64_t kRate = 12'500'000;  // 100 Mbit/s
constexpr int64_t kPeriod = 10'000'000;
constexpr uint64_t kDepth = 12'500;

struct Periods {
  Fence fence;
  int64_t now = 1'000'000'000;
  uint64_t kernel = 0;
  uint64_t last_rate = kRate;
  // `periods` periods in which the processes count `fraction` of what was published last, and
  // the kernel `kernel_fraction` of it (negative: no kernel count).
  uint64_t run(int periods, double fraction, double kernel_fraction = -1) {
    uint64_t lowest = kRate;
    for (int i = 0; i < periods; ++i) {
      now += kPeriod;
      const auto bytes = static_cast<uint64_t>(static_cast<double>(last_rate) * fraction / 100);
      kernel += kernel_fraction < 0
                    ? 0
                    : static_cast<uint64_t>(static_cast<double>(last_rate) * kernel_fraction / 100);
      last_rate = fence.step(now, kPeriod, kRate, bytes, kDepth, 2);
      // The kernel's count is read every second (the agent's stats cadence).
      if (kernel_fraction >= 0 && (now / kPeriod) % 100 == 0)
        fence.kernelReading(kernel, kDepth, 2);
      lowest = std::min(lowest, last_rate);
    }
    return lowest;
  }
};

TEST(Fence, AnHonestTenantIsNeverFenced) {
  Periods r;
  // Exactly its rate, its rate plus what a depth or a catch-up adds, and 10 % of framing and
  // ACKs in the kernel's count.
  EXPECT_EQ(r.run(500, 1.0, 1.10), kRate);
  EXPECT_EQ(r.run(500, 1.03, 1.10), kRate);
  EXPECT_FALSE(r.fence.fenced());
  EXPECT_EQ(r.fence.overrunBytesTotal(), 0u);
  EXPECT_FALSE(r.fence.takeReport().has_value());
}

TEST(Fence, ATenantOverItsAllocationPaysTheExcessBack) {
  Periods r;
  // Its processes count twice what it was allowed (a co-tenant reset its words): after the
  // first window it is fenced, and what it gets over the next windows makes up for it.
  r.run(110, 2.0);
  EXPECT_TRUE(r.fence.fenced());
  EXPECT_GT(r.fence.overrunBytesTotal(), kRate / 2);
  auto report = r.fence.takeReport();
  ASSERT_TRUE(report.has_value());
  EXPECT_NE(report->find("its processes counted"), std::string::npos) << *report;
  EXPECT_FALSE(r.fence.takeReport().has_value()) << "reported once";
  EXPECT_LT(r.last_rate, kRate);
  EXPECT_GE(r.last_rate, kRate / 4) << "never below a quarter of the allocation";
  // Honest again: the rate comes back once the debt is paid, within a few windows.
  uint64_t used = 0, allowed = 0;
  for (int i = 0; i < 400; ++i) {
    allowed += kRate / 100;
    used += r.last_rate / 100;
    r.run(1, 1.0);
  }
  EXPECT_FALSE(r.fence.fenced());
  EXPECT_EQ(r.last_rate, kRate);
  EXPECT_LT(used, allowed) << "the excess was paid back";
}

TEST(Fence, TheKernelsCountCatchesWhatTheCountersDoNotShow) {
  Periods r;
  // The counters are honest (or lie low); the kernel counts 1.5 x in the tenant's class: a
  // process that bypasses the plugin, marked with the tenant's DSCP.
  r.run(210, 1.0, 1.5);
  EXPECT_TRUE(r.fence.fenced());
  auto report = r.fence.takeReport();
  ASSERT_TRUE(report.has_value());
  EXPECT_NE(report->find("the kernel counted"), std::string::npos) << *report;
}

TEST(Fence, TheDebtIsCappedAndForgivenWhenTheProcessesLeave) {
  Periods r;
  r.run(1000, 50.0);  // absurd overrun for 10 s
  EXPECT_LE(r.fence.debtBytes(), kRate * 10);
  EXPECT_EQ(r.fence.step(r.now + kPeriod, kPeriod, kRate, 0, kDepth, 0), kRate);
  EXPECT_FALSE(r.fence.fenced());
}

}  // namespace
}  // namespace tq::agent
