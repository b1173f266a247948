// Runs discovery against a fake sysfs tree built in a temporary directory. The tree copies the
// layout and values seen on real devices: rxe0 as Linux 6.1 shows it inside the rxe VM (RoCE v2
// only, no PMA counters), an mlx5-style RoCE port (v1/v2 GID pairs, an IPv6 global address) and
// a native InfiniBand port with PMA counters.
#include "ib/sysfs.h"

#include <gtest/gtest.h>

#include "tests/support/fake_sysfs.h"

namespace tq::ib {
namespace {

// The fake tree (tests/support/fake_sysfs.h) is shared with the agent's tests.
class SysfsTest : public ::testing::Test, public tq::testing::FakeSysfs {};

TEST_F(SysfsTest, NoInfinibandClassMeansNoDevices) {
  auto devs = discoverDevices(root());
  ASSERT_TRUE(devs.ok()) << devs.status().toString();
  EXPECT_TRUE(devs->empty());
}

TEST_F(SysfsTest, ReadsRxePort) {
  rxe0();
  auto devs = discoverDevices(root());
  ASSERT_TRUE(devs.ok()) << devs.status().toString();
  ASSERT_EQ(devs->size(), 1u);
  const DeviceInfo& d = (*devs)[0];
  EXPECT_EQ(d.name, "rxe0");
  EXPECT_EQ(d.node_type, "1: CA");
  ASSERT_EQ(d.ports.size(), 1u);
  const PortInfo& p = d.ports[0];
  EXPECT_EQ(p.port, 1);
  EXPECT_TRUE(p.active());
  EXPECT_EQ(p.state_name, "ACTIVE");
  EXPECT_EQ(p.phys_state, 5);
  EXPECT_EQ(p.link_layer, LinkLayer::kEthernet);
  EXPECT_EQ(p.rate_bytes_per_second, 1250000000u);  // 10 Gb/s
  EXPECT_EQ(p.netdev, "rxeveth0");
  EXPECT_EQ(p.active_mtu, 4096);  // netdev MTU 9000
  ASSERT_EQ(p.gids.size(), 2u);   // zero entries skipped
  EXPECT_EQ(p.gids[1].index, 1);
  EXPECT_EQ(p.gids[1].type, GidType::kRoceV2);
  EXPECT_EQ(p.gids[1].gid.toString(), "::ffff:10.77.0.1");
  auto idx = defaultGidIndex(d, p);
  ASSERT_TRUE(idx.ok()) << idx.status().toString();
  EXPECT_EQ(*idx, 1);
}

TEST_F(SysfsTest, PrefersIpv4MappedRoceV2OverV1AndIpv6) {
  port("mlx5_1", 1, "4: ACTIVE", "Ethernet", "100 Gb/sec (2X HDR)");
  gid("mlx5_1", 1, 0, "fe80::1", "IB/RoCE v1", "eth2");
  gid("mlx5_1", 1, 1, "fe80::1", "RoCE v2", "eth2");
  gid("mlx5_1", 1, 2, "2001:db8::2", "IB/RoCE v1", "eth2");
  gid("mlx5_1", 1, 3, "2001:db8::2", "RoCE v2", "eth2");
  gid("mlx5_1", 1, 4, "::ffff:192.0.2.5", "IB/RoCE v1", "eth2");
  gid("mlx5_1", 1, 5, "::ffff:192.0.2.5", "RoCE v2", "eth2");
  put("class/net/eth2/mtu", "1500\n");
  auto d = readDevice(root(), "mlx5_1");
  ASSERT_TRUE(d.ok()) << d.status().toString();
  EXPECT_EQ(d->ports[0].active_mtu, 1024);
  EXPECT_EQ(d->ports[0].rate_bytes_per_second, 12500000000u);
  auto idx = defaultGidIndex(*d, d->ports[0]);
  ASSERT_TRUE(idx.ok());
  EXPECT_EQ(*idx, 5);
  // Without the IPv4 address, the global IPv6 RoCE v2 GID is next.
  d->ports[0].gids.resize(4);
  idx = defaultGidIndex(*d, d->ports[0]);
  ASSERT_TRUE(idx.ok());
  EXPECT_EQ(*idx, 3);
  // Only link-local left: an error that says what was found and what to do.
  d->ports[0].gids.resize(2);
  idx = defaultGidIndex(*d, d->ports[0]);
  ASSERT_FALSE(idx.ok());
  EXPECT_EQ(idx.status().code(), StatusCode::kNotFound);
  EXPECT_NE(idx.status().message().find("mlx5_1:1"), std::string::npos);
  EXPECT_NE(idx.status().message().find("1=fe80::1 (RoCE v2)"), std::string::npos);
  EXPECT_NE(idx.status().message().find("eth2"), std::string::npos);
}

TEST_F(SysfsTest, InfinibandPortAndPmaCounters) {
  mlx5Ib();  // port 2 DOWN; port 1 PMA counters, symbol_error "N/A" (non-numeric: skipped)
  auto devs = discoverDevices(root());
  ASSERT_TRUE(devs.ok());
  ASSERT_EQ(devs->size(), 1u);
  const DeviceInfo& d = (*devs)[0];
  ASSERT_EQ(d.ports.size(), 2u);
  EXPECT_EQ(d.ports[0].link_layer, LinkLayer::kInfiniBand);
  EXPECT_EQ(d.ports[0].active_mtu, 0);
  EXPECT_FALSE(d.ports[1].active());
  EXPECT_EQ(d.ports[1].state_name, "DOWN");
  auto idx = defaultGidIndex(d, d.ports[0]);
  ASSERT_TRUE(idx.ok());
  EXPECT_EQ(*idx, 0);

  auto pc = readPortCounters(root(), "mlx5_0", 1);
  ASSERT_TRUE(pc.ok()) << pc.status().toString();
  EXPECT_EQ(pc->transmitBytes(), 4000u);  // 4-octet words
  EXPECT_EQ(pc->receiveBytes(), 1000u);
  EXPECT_EQ(pc->transmitPackets(), 40u);
  EXPECT_EQ(pc->receivePackets(), 10u);
  EXPECT_EQ(pc->counters.count("symbol_error"), 0u);
  EXPECT_TRUE(pc->hw_counters.empty());
}

TEST_F(SysfsTest, RxeCountersFallBackToHwCounters) {
  rxe0();
  auto pc = readPortCounters(root(), "rxe0", 1);
  ASSERT_TRUE(pc.ok()) << pc.status().toString();
  EXPECT_TRUE(pc->counters.empty());
  EXPECT_FALSE(pc->transmitBytes().has_value());
  EXPECT_EQ(pc->transmitPackets(), 12345u);
  EXPECT_EQ(pc->receivePackets(), 678u);
  EXPECT_EQ(pc->hw_counters.count("lifespan"), 0u);  // a setting, not a counter
  EXPECT_EQ(pc->hw_counters.at("retry_exceeded_err"), 0u);
  auto missing = readPortCounters(root(), "rxe0", 2);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST_F(SysfsTest, BrokenDeviceIsSkippedNotFatal) {
  rxe0();
  put("class/infiniband/bad0/ports/1/state", "garbage\n");
  auto devs = discoverDevices(root());
  ASSERT_TRUE(devs.ok());
  ASSERT_EQ(devs->size(), 1u);
  EXPECT_EQ((*devs)[0].name, "rxe0");
  auto bad = readDevice(root(), "bad0");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("bad0 port 1"), std::string::npos);
  EXPECT_NE(bad.status().message().find("garbage"), std::string::npos);
}

TEST_F(SysfsTest, SelectPortsAppliesFilterStateAndGid) {
  rxe0();
  port("rxe1", 1, "1: DOWN", "Ethernet", "10 Gb/sec (1X FDR10)");
  gid("rxe1", 1, 1, "::ffff:10.77.0.2", "RoCE v2", "rxeveth1");
  port("mlx5_0", 1, "4: ACTIVE", "InfiniBand", "200 Gb/sec (4X HDR)");
  gid("mlx5_0", 1, 0, "fe80::c42:a103:65:4a2e", "IB/RoCE v1", "");
  port("mlx5_2", 1, "4: ACTIVE", "Ethernet", "100 Gb/sec (2X HDR)");
  gid("mlx5_2", 1, 0, "fe80::2", "RoCE v2", "eth9");  // no IP address configured
  auto devs = discoverDevices(root());
  ASSERT_TRUE(devs.ok());
  ASSERT_EQ(devs->size(), 4u);

  std::vector<std::string> skipped;
  auto all = selectPorts(*devs, HcaFilter{}, -1, &skipped);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].device, "mlx5_0");
  EXPECT_EQ(all[0].gid_index, 0);
  EXPECT_EQ(all[0].link_layer, LinkLayer::kInfiniBand);
  EXPECT_EQ(all[1].device, "rxe0");
  EXPECT_EQ(all[1].gid_index, 1);
  EXPECT_EQ(all[1].gid.toString(), "::ffff:10.77.0.1");
  EXPECT_EQ(all[1].netdev, "rxeveth0");
  ASSERT_EQ(skipped.size(), 2u);
  EXPECT_NE(skipped[0].find("mlx5_2:1"), std::string::npos) << skipped[0];
  EXPECT_EQ(skipped[1], "rxe1:1: port DOWN");

  skipped.clear();
  auto only_rxe = selectPorts(*devs, *parseHcaFilter("rxe"), -1, &skipped);
  ASSERT_EQ(only_rxe.size(), 1u);
  EXPECT_EQ(only_rxe[0].device, "rxe0");
  EXPECT_EQ(skipped.size(), 1u);  // rxe1 is down; mlx5_* are filtered out silently

  skipped.clear();
  auto forced = selectPorts(*devs, *parseHcaFilter("=rxe0"), 0, &skipped);
  ASSERT_EQ(forced.size(), 1u);
  EXPECT_EQ(forced[0].gid_index, 0);
  EXPECT_TRUE(forced[0].gid.isLinkLocal());
  auto missing = selectPorts(*devs, *parseHcaFilter("=rxe0"), 7, &skipped);
  EXPECT_TRUE(missing.empty());
  EXPECT_EQ(skipped.back(), "rxe0:1: GID index 7 is not populated");
}

TEST_F(SysfsTest, ListDevicesAndPortState) {
  auto none = listDevices(root());
  ASSERT_TRUE(none.ok()) << none.status().toString();
  EXPECT_TRUE(none->empty());
  rxe0();
  mlx5Ib();
  auto names = listDevices(root());
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(*names, (std::vector<std::string>{"mlx5_0", "rxe0"}));

  EXPECT_EQ(readPortState(root(), "rxe0", 1).value(), kPortStateActive);
  EXPECT_EQ(readPortState(root(), "mlx5_0", 2).value(), 1);  // DOWN
  setState("rxe0", 1, "1: DOWN");
  EXPECT_EQ(readPortState(root(), "rxe0", 1).value(), 1);
  auto gone = readPortState(root(), "rxe0", 2);
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.status().code(), StatusCode::kNotFound);
  EXPECT_NE(gone.status().message().find("RDMA port rxe0:2 is gone"), std::string::npos)
      << gone.status().message();
  setState("rxe0", 1, "ACTIVE");
  auto bad = readPortState(root(), "rxe0", 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
  remove("class/infiniband/rxe0");
  EXPECT_EQ(readPortState(root(), "rxe0", 1).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(*listDevices(root()), std::vector<std::string>{"mlx5_0"});
}

TEST(SysfsParseTest, Rates) {
  EXPECT_EQ(parseSysfsRate("2.5 Gb/sec (1X SDR)"), 312500000u);
  EXPECT_EQ(parseSysfsRate("12.5 Gb/sec (1X FDR10)"), 1562500000u);
  EXPECT_EQ(parseSysfsRate("400 Gb/sec (4X NDR)"), 50000000000u);
  EXPECT_EQ(parseSysfsRate("fast"), 0u);
  EXPECT_EQ(parseSysfsRate("10 Mb/sec"), 0u);
}

TEST(SysfsParseTest, RoceMtu) {
  EXPECT_EQ(roceActiveMtu(1500), 1024);
  EXPECT_EQ(roceActiveMtu(9000), 4096);
  EXPECT_EQ(roceActiveMtu(4200), 4096);  // 4200 - 96 = 4104
  EXPECT_EQ(roceActiveMtu(4191), 2048);
  EXPECT_EQ(roceActiveMtu(300), 0);
}

}  // namespace
}  // namespace tq::ib
