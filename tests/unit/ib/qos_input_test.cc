// The policy -> QoS plan input conversion: one link's tenants, that link's capacity.
#include "ib/qos_input.h"

#include <gtest/gtest.h>

namespace tq::ib {
namespace {

PolicySpec twoLinks() {
  PolicySpec p;
  p.links = {{"fabric", 12'500'000'000, 5}, {"storage", 3'125'000'000, 0}};
  TenantSpec a;
  a.name = "tenant-a";
  a.link = "fabric";
  a.guarantee_bytes_per_second = 5'000'000'000;
  a.limit_bytes_per_second = 7'500'000'000;
  a.weight = 2;
  a.service_level = 1;
  a.dscp = 26;
  a.traffic_classes = {1};
  TenantSpec s = a;
  s.name = "backup";
  s.link = "storage";
  s.service_level = 5;
  s.dscp = 40;
  s.guarantee_bytes_per_second = 1'250'000'000;  // 10 Gbit/s of 25
  s.limit_bytes_per_second = 2'500'000'000;
  TenantSpec b = a;
  b.name = "tenant-b";
  b.guarantee_bytes_per_second = 2'500'000'000;
  b.limit_bytes_per_second = 5'000'000'000;
  b.weight = 1;
  b.service_level = 2;
  b.dscp = 18;
  p.tenants = {a, s, b};
  return p;
}

TEST(QosInputTest, TakesTheLinksTenantsAndCapacity) {
  auto in = qosPlanInputForLink(twoLinks(), "fabric");
  ASSERT_TRUE(in.ok()) << in.status().toString();
  EXPECT_EQ(in->capacity, 12'500'000'000u);  // the line rate; headroom only limits admission
  ASSERT_EQ(in->tenants.size(), 2u);
  const QosTenant& a = in->tenants[0];
  EXPECT_EQ(a.name, "tenant-a");
  EXPECT_EQ(a.service_level, 1);
  EXPECT_EQ(a.dscp, 26);
  EXPECT_EQ(a.guarantee, 5'000'000'000u);
  EXPECT_EQ(a.limit, 7'500'000'000u);
  EXPECT_EQ(a.weight, 2u);
  EXPECT_EQ(in->tenants[1].name, "tenant-b");

  auto storage = qosPlanInputForLink(twoLinks(), "storage");
  ASSERT_TRUE(storage.ok());
  EXPECT_EQ(storage->capacity, 3'125'000'000u);
  ASSERT_EQ(storage->tenants.size(), 1u);
  EXPECT_EQ(storage->tenants[0].name, "backup");
  EXPECT_TRUE(planRoceQos(*storage).ok());
}

TEST(QosInputTest, LinkWithoutTenantsGivesAnEmptyPlan) {
  PolicySpec p = twoLinks();
  p.tenants.erase(p.tenants.begin() + 1);
  auto in = qosPlanInputForLink(p, "storage");
  ASSERT_TRUE(in.ok());
  EXPECT_TRUE(in->tenants.empty());
  auto plan = planIbQos(*in);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->classes.size(), 1u);
}

TEST(QosInputTest, UnknownLinkNamesTheKnownOnes) {
  auto in = qosPlanInputForLink(twoLinks(), "fabrik");
  ASSERT_FALSE(in.ok());
  EXPECT_EQ(in.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(in.status().message(),
            "link \"fabrik\" is not in the policy (its links: fabric, storage)");
  auto none = qosPlanInputForLink(PolicySpec{}, "fabric");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("(its links: none)"), std::string::npos);
}

}  // namespace
}  // namespace tq::ib
