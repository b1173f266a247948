// The agent's shared links and caps (agent/fabric_links.h): which links a node is behind, the
// caps as the allocator sent them, held, then the static split; older terms refused; and the
// static split's promise that the tenants of a link never add up to more than it carries.
#include "agent/fabric_links.h"

#include <gtest/gtest.h>

#include <random>

#include "common/topology.h"

namespace tq::agent {
namespace {

constexpr uint64_t kGbps = 125'000'000;
constexpr int64_t kMs = 1'000'000;

TenantSpec tenant(const std::string& name, uint64_t g, uint64_t l, uint32_t w = 1) {
  TenantSpec t;
  t.name = name;
  t.link = "fabric";
  t.guarantee_bytes_per_second = g;
  t.limit_bytes_per_second = l;
  t.weight = w;
  return t;
}

PolicySpec policy() {
  PolicySpec p;
  p.links = {{"fabric", 100 * kGbps, 5}};
  SharedLinkSpec leaf;
  leaf.name = "leaf-uplink";
  leaf.capacity_bytes_per_second = 100 * kGbps;
  leaf.headroom_percent = 5;
  leaf.groups = {{"leaf-1", {"node1", "node2"}, 0}, {"leaf-2", {"node3", "node4"}, 0}};
  p.shared_links = {leaf};
  p.tenants = {tenant("a", 40 * kGbps, 60 * kGbps, 2), tenant("b", 20 * kGbps, 40 * kGbps)};
  return p;
}

FabricCapsMessage caps(uint64_t term, std::vector<FabricCap> c, const std::string& node = "node1") {
  FabricCapsMessage m;
  m.node = node;
  m.term = term;
  m.round = 1;
  m.hold_ns = 3000 * kMs;
  m.caps = std::move(c);
  m.allocator = "replica-a";
  return m;
}

TEST(FabricLinks, TheLinksANodeIsBehind) {
  FabricLinks f;
  EXPECT_TRUE(f.setPolicy(policy(), "node1").empty());
  ASSERT_EQ(f.links().size(), 1u);
  const NodeLink& l = f.links()[0];
  EXPECT_EQ(l.index, 0u);
  EXPECT_EQ(l.name, "leaf-uplink");
  EXPECT_EQ(l.group, "leaf-1");
  EXPECT_EQ(l.group_nodes, 2u);
  EXPECT_EQ(l.allocatable, 95 * kGbps);
  EXPECT_EQ(l.guarantees, 60 * kGbps);
  FabricLinks none;
  none.setPolicy(policy(), "node9");
  EXPECT_TRUE(none.links().empty());
  EXPECT_EQ(none.mode(0), FabricMode::kNone);
  // More classes than the memory has link buckets for: the rest is said, not enforced.
  PolicySpec many = policy();
  for (int i = 0; i < 9; ++i) {
    SharedLinkSpec s = many.shared_links[0];
    s.name = "class-" + std::to_string(i);
    many.shared_links.push_back(s);
  }
  FabricLinks f2;
  const auto warnings = f2.setPolicy(many, "node1");
  EXPECT_EQ(f2.links().size(), shm::kMaxLinkBuckets);
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_NE(warnings[0].find("shared link class-7 is not enforced"), std::string::npos);
}

TEST(FabricLinks, CapsThenHeldThenTheStaticSplit) {
  const PolicySpec p = policy();
  FabricLinks f;
  f.setPolicy(p, "node1");
  const NodeLink& l = f.links()[0];
  // Nothing from the allocator yet: each tenant's guarantee over the group's 2 nodes.
  EXPECT_EQ(f.mode(0), FabricMode::kStatic);
  EXPECT_EQ(f.rate(p.tenants[0], l, shm::kTx, 0), 20 * kGbps);
  EXPECT_EQ(f.rate(p.tenants[1], l, shm::kRx, 0), 10 * kGbps);

  ASSERT_TRUE(f.onCaps(caps(5, {{"a", "leaf-uplink", "leaf-1", 55 * kGbps, 30 * kGbps, 1, 2},
                                {"b", "leaf-uplink", "leaf-1", 0, 40 * kGbps, 1, 2}}),
                       1000 * kMs)
                  .ok());
  f.setConnected(true, 1000 * kMs);
  EXPECT_EQ(f.mode(1000 * kMs), FabricMode::kAllocator);
  EXPECT_EQ(f.rate(p.tenants[0], l, shm::kTx, 1000 * kMs), 55 * kGbps);
  EXPECT_EQ(f.rate(p.tenants[0], l, shm::kRx, 1000 * kMs), 30 * kGbps);
  EXPECT_EQ(f.rate(p.tenants[1], l, shm::kTx, 1000 * kMs), kMinLinkRate);  // never 0
  // The stream drops: the caps are held for hold_ms after the last message.
  f.setConnected(false, 1500 * kMs);
  EXPECT_EQ(f.mode(3999 * kMs), FabricMode::kHeld);
  EXPECT_EQ(f.rate(p.tenants[0], l, shm::kTx, 3999 * kMs), 55 * kGbps);
  // Then the static split with the last round's counts: a had 1 node there and the link 2
  // pairs: 40 / 1 + (95 - 60) / 2 = 57.5; b: 20 + 17.5 = 37.5.
  EXPECT_EQ(f.mode(4000 * kMs), FabricMode::kStatic);
  f.logTransitions(4000 * kMs);
  EXPECT_EQ(f.rate(p.tenants[0], l, shm::kTx, 4000 * kMs), 57'500 * kGbps / 1000);
  EXPECT_EQ(f.rate(p.tenants[1], l, shm::kRx, 4000 * kMs), 37'500 * kGbps / 1000);
  FabricStatus s = f.status(4000 * kMs);
  EXPECT_EQ(s.mode, FabricMode::kStatic);
  EXPECT_EQ(s.last_caps_age_ns, 3000 * kMs);
  EXPECT_EQ(s.static_since_ns, 4000 * kMs);
  EXPECT_EQ(s.term, 5u);
}

TEST(FabricLinks, OlderTermsAndOtherNodesAreRefusedUntilTheFallback) {
  const PolicySpec p = policy();
  FabricLinks f;
  f.setPolicy(p, "node1");
  ASSERT_TRUE(
      f.onCaps(caps(7, {{"a", "leaf-uplink", "leaf-1", 50 * kGbps, 50 * kGbps, 1, 1}}), 0).ok());
  Status st = f.onCaps(caps(6, {{"a", "leaf-uplink", "leaf-1", kGbps, kGbps, 1, 1}}), kMs);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("term 6 (from replica-a), older than term 7"), std::string::npos);
  EXPECT_EQ(f.onCaps(caps(8, {}, "node2"), kMs).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(f.rate(p.tenants[0], f.links()[0], shm::kTx, kMs), 50 * kGbps);
  EXPECT_EQ(f.status(kMs).caps_refused, 2u);
  // Once static, nothing of term 7 is enforced: a (restarted) allocator's lower term is taken.
  f.logTransitions(3000 * kMs);
  EXPECT_TRUE(f.onCaps(caps(2, {}), 3000 * kMs).ok());
}

TEST(FabricLinks, PeersOfTheGroupForThePlugin) {
  FabricLinks f;
  f.setPolicy(policy(), "node1");
  FabricCapsMessage m = caps(1, {});
  m.peers = std::vector<FabricGroupPeers>{
      {"leaf-uplink", "leaf-1", {"10.0.0.2", "FD00::2", "not-an-address"}}};
  ASSERT_TRUE(f.onCaps(m, 0).ok());
  const FabricPeerMap map = f.peerMap();
  ASSERT_EQ(map.links.size(), 1u);
  EXPECT_EQ(map.links[0].group, "leaf-1");
  EXPECT_EQ(map.links[0].peers, (std::set<std::string>{"10.0.0.2", "fd00::2"}));
  // A message without peers keeps the map.
  ASSERT_TRUE(f.onCaps(caps(1, {}), kMs).ok());
  EXPECT_EQ(f.peerMap(), map);
}

// The static split never oversubscribes a link: for any placement of tenants on the link's
// nodes that the last round saw, the static rates of every (tenant, node) pair add up to at
// most the link's allocatable capacity; and every tenant's rates add up to at least its
// guarantee (less rounding), so a tenant whose demand is spread over its nodes keeps it.
TEST(FabricLinks, TheStaticSplitFitsTheLinkAndKeepsGuaranteesForAnyPlacement) {
  std::mt19937 rng(42);
  for (int trial = 0; trial < 200; ++trial) {
    PolicySpec p = policy();
    const int nodes = 2 + static_cast<int>(rng() % 30);
    p.shared_links[0].groups = {{"leaf-1", {}, 0}};
    for (int n = 0; n < nodes; ++n) {
      p.shared_links[0].groups[0].nodes.push_back("n" + std::to_string(n));
    }
    p.tenants.clear();
    const int tenants = 1 + static_cast<int>(rng() % 8);
    uint64_t left = 95 * kGbps;
    for (int t = 0; t < tenants; ++t) {
      const uint64_t g = left == 0 ? 0 : rng() % (left / 2 + 1);
      left -= g;
      p.tenants.push_back(tenant("t" + std::to_string(t), g, g + 1 + rng() % (95 * kGbps)));
    }
    // Which tenant runs on which node in the last round.
    std::vector<std::vector<bool>> on(tenants, std::vector<bool>(nodes));
    uint32_t pairs = 0;
    std::vector<uint32_t> k(tenants);
    for (int t = 0; t < tenants; ++t) {
      for (int n = 0; n < nodes; ++n) {
        on[t][n] = rng() % 3 == 0;
        k[t] += on[t][n];
      }
      pairs += k[t];
    }
    uint64_t total = 0;
    uint64_t allocatable = 0;
    for (int n = 0; n < nodes; ++n) {
      FabricLinks f;
      f.setPolicy(p, "n" + std::to_string(n));
      allocatable = f.links()[0].allocatable;
      std::vector<FabricCap> c;
      for (int t = 0; t < tenants; ++t) {
        if (on[t][n])
          c.push_back({"t" + std::to_string(t), "leaf-uplink", "leaf-1", 0, 0, k[t], pairs});
      }
      ASSERT_TRUE(f.onCaps(caps(1, c, "n" + std::to_string(n)), 0).ok());
      for (int t = 0; t < tenants; ++t) {
        if (!on[t][n]) continue;
        const uint64_t r = f.rate(p.tenants[t], f.links()[0], shm::kTx, 10'000 * kMs);
        total += r;
        const LinkShare share = tenantShareOn(p.tenants[t], "leaf-uplink");
        // Each node of the tenant gets at least its part of the guarantee (or the limit).
        EXPECT_GE(r, std::min(share.limit, share.guarantee / k[t]));
      }
    }
    // kMinLinkRate is the one exception: a tenant whose part is below it gets it anyway.
    EXPECT_LE(total, allocatable + uint64_t{pairs} * kMinLinkRate) << "trial " << trial;
  }
}

}  // namespace
}  // namespace tq::agent
