#include "common/topology.h"

#include <gtest/gtest.h>

#include "common/capacity.h"

namespace tq {
namespace {

TEST(Topology, ATenantsShareIsItsOwnValueWhereItSetsNone) {
  TenantSpec t;
  t.name = "tenant-a";
  t.guarantee_bytes_per_second = 50;
  t.limit_bytes_per_second = 75;
  t.weight = 2;
  EXPECT_EQ(tenantShareOn(t, "leaf-uplink"), (LinkShare{50, 75, 2}));
  t.shared_links.push_back({"leaf-uplink", 10, std::nullopt, std::nullopt});
  t.shared_links.push_back({"pod-uplink", std::nullopt, 200, 7});
  EXPECT_EQ(tenantShareOn(t, "leaf-uplink"), (LinkShare{10, 75, 2}));
  EXPECT_EQ(tenantShareOn(t, "pod-uplink"), (LinkShare{50, 200, 7}));
  EXPECT_EQ(tenantShareOn(t, "rail0"), (LinkShare{50, 75, 2}));
  // 0 set on a shared link is a value (best effort there), not "absent".
  t.shared_links[0].guarantee_bytes_per_second = 0;
  EXPECT_EQ(tenantShareOn(t, "leaf-uplink").guarantee, 0u);
  EXPECT_EQ(findTenantLinkValues(t, "pod-uplink"), &t.shared_links[1]);
  EXPECT_EQ(findTenantLinkValues(t, "spine"), nullptr);
}

TEST(Topology, AGroupHasItsOwnCapacityOrTheSharedLinksWithTheSharedLinksHeadroom) {
  SharedLinkSpec l{"leaf-uplink", 1000, 5, std::nullopt, {}};
  LinkGroupSpec own{"leaf1", {"n1"}, 2000}, inherits{"leaf2", {"n2"}, 0};
  EXPECT_EQ(groupCapacity(l, own), 2000u);
  EXPECT_EQ(groupCapacity(l, inherits), 1000u);
  EXPECT_EQ(allocatableCapacity(l, own), 1900u);
  EXPECT_EQ(allocatableCapacity(l, inherits), 950u);
}

}  // namespace
}  // namespace tq
