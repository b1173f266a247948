#include "fabric/model.h"

#include <gtest/gtest.h>

namespace tq::fabric {
namespace {

// Four nodes under two leaves in one pod; a rail class over all four.
PolicySpec policy() {
  PolicySpec p;
  p.links.push_back({"fabric", 125'000'000, 5});
  SharedLinkSpec leaf{"leaf-uplink", 125'000'000, 5, std::nullopt, {}};
  leaf.groups.push_back({"leaf1", {"node2", "node1"}, 0});
  leaf.groups.push_back({"leaf2", {"node3", "node4"}, 250'000'000});
  SharedLinkSpec pod{"pod-uplink", 100'000'000, 0, std::nullopt, {}};
  pod.groups.push_back({"pod1", {"node1", "node2", "node3", "node4"}, 0});
  SharedLinkSpec rail{"rail0", 50'000'000, 0, 0u, {}};
  rail.groups.push_back({"r0a", {"node1", "node3"}, 0});
  rail.groups.push_back({"r0b", {"node2", "node4"}, 0});
  p.shared_links = {leaf, pod, rail};
  TenantSpec a;
  a.name = "tenant-a";
  a.link = "fabric";
  a.guarantee_bytes_per_second = 50'000'000;
  a.limit_bytes_per_second = 75'000'000;
  a.weight = 2;
  a.shared_links.push_back({"pod-uplink", 20'000'000, std::nullopt, 5});
  TenantSpec b = a;
  b.name = "noisy";
  b.guarantee_bytes_per_second = 0;
  b.limit_bytes_per_second = 125'000'000;
  b.weight = 1;
  b.shared_links.clear();
  p.tenants = {a, b};
  return p;
}

TEST(FabricModel, IndexesNodesByNameAndLinksByClassThenGroup) {
  auto m = FabricModel::build(policy());
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->nodeCount(), 4u);
  EXPECT_EQ(m->tenantCount(), 2u);
  EXPECT_EQ(m->classCount(), 3u);
  EXPECT_EQ(m->linkCount(), 5u);
  EXPECT_EQ(m->nodeName(0), "node1");  // name order, whatever the file's order
  EXPECT_EQ(*m->nodeIndex("node3"), 2u);
  EXPECT_FALSE(m->nodeIndex("node9").has_value());
  EXPECT_EQ(*m->tenantIndex("noisy"), 1u);
  EXPECT_EQ(*m->classIndex("pod-uplink"), 1u);
  EXPECT_EQ(m->firstLink(1), 2u);
  // node3 is behind leaf2 (link 1), pod1 (link 2) and r0a (link 3).
  EXPECT_EQ(m->linkOf(2, 0), 1u);
  EXPECT_EQ(m->linkOf(2, 1), 2u);
  EXPECT_EQ(m->linkOf(2, 2), 3u);
  EXPECT_EQ(m->groupName(1), "leaf2");
  EXPECT_EQ(m->link(1).cls, 0u);
  EXPECT_EQ(m->link(1).group, 1u);
  EXPECT_EQ(m->link(0).allocatable, 118'750'000u);  // the shared link's capacity, 5 % headroom
  EXPECT_EQ(m->link(1).allocatable, 237'500'000u);  // the group's own
}

TEST(FabricModel, SharesAreTheTenantsOwnValuesUnlessItSetsOthers) {
  auto m = FabricModel::build(policy());
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->share(0, 0), (LinkShare{50'000'000, 75'000'000, 2}));
  EXPECT_EQ(m->share(0, 1), (LinkShare{20'000'000, 75'000'000, 5}));
  EXPECT_EQ(m->share(1, 2), (LinkShare{0, 125'000'000, 1}));
}

TEST(FabricModel, ParentsAreFoundFromTheGroups) {
  auto m = FabricModel::build(policy());
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->parentClass(0), 1u);     // each leaf lies inside pod1
  EXPECT_EQ(m->parentClass(1), kNone);  // the pod has no class above it
  // rail0 carries rail 0 only; the pod carries every rail, so the pod's traffic is not part
  // of the rail's: no parent.
  EXPECT_EQ(m->parentClass(2), kNone);
  // Groups that straddle: no parent.
  PolicySpec p = policy();
  p.shared_links[1].groups = {{"podA", {"node1", "node3"}, 0}, {"podB", {"node2", "node4"}, 0}};
  p.shared_links[0].groups.push_back({"leaf3", {"node5"}, 0});
  p.shared_links[1].groups[0].nodes.push_back("node5");
  auto straddle = FabricModel::build(p);
  ASSERT_TRUE(straddle.ok()) << straddle.status().message();
  EXPECT_EQ(straddle->parentClass(0), kNone);
}

TEST(FabricModel, RejectsWhatBreaksItsInvariants) {
  PolicySpec p = policy();
  p.shared_links[0].groups[1].nodes.push_back("node1");
  auto twice = FabricModel::build(p);
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.status().message(),
            "shared link \"leaf-uplink\": node \"node1\" is in groups \"leaf1\" and \"leaf2\"");
  p = policy();
  p.shared_links[1].capacity_bytes_per_second = 0;
  EXPECT_EQ(FabricModel::build(p).status().message(),
            "shared link \"pod-uplink\", group \"pod1\": no capacity");
  p = policy();
  p.tenants[0].shared_links[0].link = "spine";
  EXPECT_EQ(FabricModel::build(p).status().message(),
            "tenant \"tenant-a\": unknown shared link \"spine\"");
}

TEST(FabricModel, APolicyWithoutTopologyIsAnEmptyModel) {
  PolicySpec p = policy();
  p.shared_links.clear();
  p.tenants[0].shared_links.clear();
  auto m = FabricModel::build(p);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->nodeCount(), 0u);
  EXPECT_EQ(m->linkCount(), 0u);
  EXPECT_EQ(m->tenantCount(), 2u);
}

}  // namespace
}  // namespace tq::fabric
