// The agent -> plugin map of which peers are behind which shared link (common/fabric_peers.h):
// the text round-trips, every malformed line is refused naming it, and a peer not in a link's
// group crosses the link.
#include "common/fabric_peers.h"

#include <gtest/gtest.h>

namespace tq {
namespace {

FabricPeerMap sample() {
  FabricPeerMap m;
  m.links.push_back({0, "leaf-uplink", "leaf-1", std::nullopt, {"10.0.0.2", "fd00::2"}});
  m.links.push_back({1, "rail-0", "pod-1", 0u, {}});
  return m;
}

TEST(FabricPeers, RoundTripsThroughItsText) {
  const std::string text = formatFabricPeers(sample());
  EXPECT_EQ(text,
            "tenantqos-fabric-peers 1\n"
            "link 0 leaf-uplink leaf-1 all\n"
            "link 1 rail-0 pod-1 0\n"
            "peer 0 10.0.0.2\n"
            "peer 0 fd00::2\n");
  auto parsed = parseFabricPeers(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status().toString();
  EXPECT_EQ(*parsed, sample());
}

TEST(FabricPeers, CanonicalAddresses) {
  EXPECT_EQ(canonicalAddress("10.0.0.1"), "10.0.0.1");
  EXPECT_EQ(canonicalAddress("FD00:0:0::1"), "fd00::1");
  EXPECT_EQ(canonicalAddress("::ffff:10.1.2.3"), "10.1.2.3");  // what an IPv6 socket shows
  EXPECT_FALSE(canonicalAddress("10.0.0.1; rm -rf /").has_value());
  EXPECT_FALSE(canonicalAddress("node-1").has_value());
  EXPECT_FALSE(canonicalAddress("").has_value());
}

TEST(FabricPeers, EveryBadLineIsRefusedByNumber) {
  const std::string head = "tenantqos-fabric-peers 1\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "empty file"},
      {"tenantqos-fabric-peers 3\n", "line 1: not a tenantqos-fabric-peers 1 or 2 file"},
      {head + "device eth0 1\n", "line 2: a device line in a version 1 file"},
      {"tenantqos-fabric-peers 2\ndevice eth0\n", "line 2: a device line has 2 fields"},
      {"tenantqos-fabric-peers 2\ndevice eth0 256\n", "line 2: rail is not 0..255"},
      {"tenantqos-fabric-peers 2\ndevice eth0 -1\n", "line 2: rail is not 0..255"},
      {"tenantqos-fabric-peers 2\ndevice eth\x7f 1\n", "line 2: bad device name"},
      {"tenantqos-fabric-peers 2\ndevice eth0 1\ndevice eth0 2\n", "line 3: device eth0 twice"},
      {head + "link 8 a b all\n", "line 2: link index is not 0..7"},
      {head + "link 0 a b\n", "line 2: a link line has 4 fields"},
      {head + "link 0 a b 256\n", "line 2: rail is not 0..255 or all"},
      {head + "link 0 a b all\nlink 0 c d all\n", "line 3: link index 0 twice"},
      {head + "peer 0 10.0.0.1\n", "line 2: peer of a link index no link line names"},
      {head + "link 0 a b all\npeer 0 010.0.0.1\n", "line 3: not a canonical"},
      {head + "link 0 a b all\npeer 0 FD00::1\n", "line 3: not a canonical"},
      {head + "bogus\n", "line 2: unknown record \"bogus\""},
      {head + "link 0 a\x01 b all\n", "line 2: bad link or group name"},
  };
  for (const auto& [text, want] : cases) {
    auto r = parseFabricPeers(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.status().message().find(want), std::string::npos)
        << text << " -> " << r.status().message();
  }
  EXPECT_FALSE(parseFabricPeers(head + std::string(kMaxFabricPeersBytes, '\n')).ok());
  std::string many = "tenantqos-fabric-peers 2\n";
  for (size_t i = 0; i <= kMaxFabricDevices; ++i) many += "device e" + std::to_string(i) + " 0\n";
  auto r = parseFabricPeers(many);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("more than 64 devices"), std::string::npos)
      << r.status().message();
}

// The devices' rails (the agent's --device DEV=LINK,rail=N) are version 2 of the file; a map
// without them stays version 1, which the plugin of the release before rails reads.
TEST(FabricPeers, DeviceRailsMakeAVersion2File) {
  FabricPeerMap m = sample();
  m.device_rails = {{"eth1", 1}, {"eth0", 0}};
  const std::string text = formatFabricPeers(m);
  EXPECT_EQ(text,
            "tenantqos-fabric-peers 2\n"
            "link 0 leaf-uplink leaf-1 all\n"
            "link 1 rail-0 pod-1 0\n"
            "peer 0 10.0.0.2\n"
            "peer 0 fd00::2\n"
            "device eth0 0\n"
            "device eth1 1\n");
  auto parsed = parseFabricPeers(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status().toString();
  EXPECT_EQ(*parsed, m);
  EXPECT_EQ(railOf(*parsed, "eth1"), 1u);
  EXPECT_EQ(railOf(*parsed, "eth9"), std::nullopt) << "not named: every rail";
  EXPECT_EQ(formatFabricPeers(sample()).substr(0, 25), "tenantqos-fabric-peers 1\n");
}

TEST(FabricPeers, AConnectionCrossesALinkUnlessItsPeerIsInTheGroup) {
  const FabricPeerMap m = sample();
  EXPECT_FALSE(crossesLink(m.links[0], "10.0.0.2", std::nullopt));
  EXPECT_TRUE(crossesLink(m.links[0], "10.0.0.9", std::nullopt));  // unknown: crossing
  // A rail's class: only connections on a device of that rail cross it.
  EXPECT_TRUE(crossesLink(m.links[1], "10.0.0.9", 0u));
  EXPECT_FALSE(crossesLink(m.links[1], "10.0.0.9", 1u));
  EXPECT_TRUE(crossesLink(m.links[1], "10.0.0.9", std::nullopt));  // rail unknown: crossing
  // A peer without an address (InfiniBand) crosses every link of its device's rail only.
  EXPECT_TRUE(crossesLink(m.links[0], "", 1u));
  EXPECT_TRUE(crossesLink(m.links[1], "", 0u));
  EXPECT_FALSE(crossesLink(m.links[1], "", 1u));
}

}  // namespace
}  // namespace tq
