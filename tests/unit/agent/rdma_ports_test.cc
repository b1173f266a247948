// RdmaPortMonitor against a fake sysfs tree (tests/support/fake_sysfs.h): what it reports per
// port, the discovery cache, devices coming and going, and that it logs changes only.
#include "agent/rdma_ports.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/log.h"
#include "tests/support/fake_sysfs.h"

namespace tq::agent {
namespace {

constexpr int64_t kSec = 1'000'000'000;

// Log lines at or above info, captured while a test runs (TQ_LOG calls a plain function).
std::vector<std::string>* g_lines = nullptr;
void captureSink(LogLevel level, const char*, int, const char* message) {
  if (g_lines != nullptr && level <= LogLevel::kInfo) g_lines->push_back(message);
}

class RdmaPortsTest : public ::testing::Test, public tq::testing::FakeSysfs {
 protected:
  void SetUp() override {
    g_lines = &lines_;
    setLogSink(captureSink);
  }
  void TearDown() override {
    setLogSink(nullptr);
    g_lines = nullptr;
  }
  std::vector<std::string> lines_;
};

TEST_F(RdmaPortsTest, NoDevicesNoPortsAndOneLogLine) {
  RdmaPortMonitor m(root() + "/nonexistent");
  for (int i = 0; i < 30; ++i) m.refresh(i * kSec);
  EXPECT_TRUE(m.ports().empty());
  // The class directory exists but is empty: the same.
  put("class/infiniband/.keep", "");
  remove("class/infiniband/.keep");
  RdmaPortMonitor empty(root());
  for (int i = 0; i < 30; ++i) empty.refresh(i * kSec);
  EXPECT_TRUE(empty.ports().empty());
  // One line each at the first discovery, none for the ~6 rediscoveries after it.
  ASSERT_EQ(lines_.size(), 2u) << ::testing::PrintToString(lines_);
  EXPECT_EQ(lines_[0], "no RDMA ports under " + root() +
                           "/nonexistent/class/infiniband: no RDMA port metrics");
}

TEST_F(RdmaPortsTest, ReportsStateAndTheCountersEachDeviceHas) {
  rxe0();
  mlx5Ib();
  RdmaPortMonitor m(root());
  m.refresh(0);
  ASSERT_EQ(m.ports().size(), 3u);
  const RdmaPortStat& ib1 = m.ports()[0];
  EXPECT_EQ(ib1.device, "mlx5_0");
  EXPECT_EQ(ib1.port, 1);
  EXPECT_EQ(ib1.link_layer, "InfiniBand");
  EXPECT_EQ(ib1.netdev, "");
  EXPECT_TRUE(ib1.up);
  EXPECT_EQ(ib1.transmit_bytes, 4000u);  // port_xmit_data 1000 words of 4 bytes
  EXPECT_EQ(ib1.receive_bytes, 1000u);
  EXPECT_EQ(ib1.transmit_packets, 40u);
  EXPECT_EQ(ib1.receive_packets, 10u);
  const RdmaPortStat& ib2 = m.ports()[1];
  EXPECT_EQ(ib2.port, 2);
  EXPECT_FALSE(ib2.up);  // DOWN
  EXPECT_FALSE(ib2.transmit_bytes.has_value());
  EXPECT_FALSE(ib2.transmit_packets.has_value());
  const RdmaPortStat& rxe = m.ports()[2];
  EXPECT_EQ(rxe.device, "rxe0");
  EXPECT_EQ(rxe.link_layer, "Ethernet");
  EXPECT_EQ(rxe.netdev, "rxeveth0");
  EXPECT_TRUE(rxe.up);
  EXPECT_FALSE(rxe.transmit_bytes.has_value());  // no PMA counters on rxe
  EXPECT_FALSE(rxe.receive_bytes.has_value());
  EXPECT_EQ(rxe.transmit_packets, 12345u);  // hw_counters sent_pkts
  EXPECT_EQ(rxe.receive_packets, 678u);
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_EQ(lines_[0],
            "RDMA port metrics for 3 port(s): mlx5_0:1 (InfiniBand), mlx5_0:2 (InfiniBand), "
            "rxe0:1 (Ethernet, rxeveth0)");
}

TEST_F(RdmaPortsTest, CountersAndStateAreReadEveryRefreshDiscoveryIsCached) {
  rxe0();
  RdmaPortMonitor m(root(), 10 * kSec);
  m.refresh(0);
  EXPECT_EQ(m.discoveries(), 1);
  hwCounter("rxe0", 1, "sent_pkts", 20000);
  setState("rxe0", 1, "1: DOWN");
  m.refresh(1 * kSec);
  ASSERT_EQ(m.ports().size(), 1u);
  EXPECT_EQ(m.ports()[0].transmit_packets, 20000u);
  EXPECT_FALSE(m.ports()[0].up);
  setState("rxe0", 1, "4: ACTIVE");
  m.refresh(2 * kSec);
  EXPECT_TRUE(m.ports()[0].up);
  EXPECT_EQ(m.discoveries(), 1);  // state and counters without rediscovery

  // A new device shows up at the next scheduled discovery, not before.
  mlx5Ib();
  m.refresh(9 * kSec);
  EXPECT_EQ(m.ports().size(), 1u);
  m.refresh(10 * kSec);
  EXPECT_EQ(m.discoveries(), 2);
  EXPECT_EQ(m.ports().size(), 3u);

  // A device that goes away is dropped at the very next refresh (rediscovered at once).
  remove("class/infiniband/mlx5_0");
  m.refresh(11 * kSec);
  EXPECT_EQ(m.discoveries(), 3);
  ASSERT_EQ(m.ports().size(), 1u);
  EXPECT_EQ(m.ports()[0].device, "rxe0");
  // Port list changes are logged: first list, mlx5_0 added, mlx5_0 gone.
  EXPECT_EQ(lines_.size(), 3u) << ::testing::PrintToString(lines_);
}

TEST_F(RdmaPortsTest, ABrokenDeviceIsSkippedAndLoggedOnce) {
  rxe0();
  put("class/infiniband/bad0/ports/1/state", "garbage\n");
  RdmaPortMonitor m(root(), 1 * kSec);
  for (int i = 0; i < 5; ++i) m.refresh(i * kSec);  // five discoveries
  EXPECT_EQ(m.discoveries(), 5);
  ASSERT_EQ(m.ports().size(), 1u);
  EXPECT_EQ(m.ports()[0].device, "rxe0");
  int warnings = 0;
  for (const std::string& l : lines_) {
    if (l.find("bad0") != std::string::npos) {
      ++warnings;
      EXPECT_NE(l.find("RDMA port metrics: skipping RDMA device bad0 port 1"), std::string::npos)
          << l;
      EXPECT_NE(l.find("garbage"), std::string::npos) << l;
    }
  }
  EXPECT_EQ(warnings, 1) << ::testing::PrintToString(lines_);
  // Repaired, then broken again: said again.
  put("class/infiniband/bad0/ports/1/state", "4: ACTIVE\n");
  m.refresh(5 * kSec);
  EXPECT_EQ(m.ports().size(), 2u);
  put("class/infiniband/bad0/ports/1/state", "still garbage\n");
  m.refresh(6 * kSec);
  warnings = 0;
  for (const std::string& l : lines_) warnings += l.find("skipping") != std::string::npos;
  EXPECT_EQ(warnings, 2) << ::testing::PrintToString(lines_);
}

}  // namespace
}  // namespace tq::agent
