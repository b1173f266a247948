#include "policy/policy_diff.h"

#include <gtest/gtest.h>

namespace tq::policy {
namespace {

TenantSpec tenant(std::string name, uint64_t g, uint64_t l, uint32_t w, uint32_t sl, uint32_t dscp,
                  std::vector<int32_t> tcs) {
  TenantSpec t;
  t.name = std::move(name);
  t.link = "fabric";
  t.guarantee_bytes_per_second = g;
  t.limit_bytes_per_second = l;
  t.weight = w;
  t.service_level = sl;
  t.dscp = dscp;
  t.traffic_classes = std::move(tcs);
  return t;
}

PolicySpec base() {
  PolicySpec p;
  p.links.push_back({"fabric", 12'500'000'000, 5});
  p.tenants.push_back(tenant("tenant-a", 5'000'000'000, 7'500'000'000, 2, 1, 26, {1}));
  p.tenants.push_back(tenant("tenant-b", 2'500'000'000, 5'000'000'000, 1, 2, 18, {2}));
  return p;
}

TEST(PolicyDiff, IdenticalHasNoChanges) {
  PolicyDiff d = diffPolicies(base(), base());
  EXPECT_FALSE(d.hasChanges());
  ASSERT_EQ(d.tenants.size(), 2u);
  EXPECT_EQ(d.tenants[0].kind, ChangeKind::kUnchanged);
  EXPECT_TRUE(d.tenants[0].details.empty());
}

TEST(PolicyDiff, OrderDoesNotMatter) {
  PolicySpec b = base();
  std::swap(b.tenants[0], b.tenants[1]);
  b.tenants[1].traffic_classes = {1};
  PolicySpec a = base();
  a.tenants[0].traffic_classes = {1};
  EXPECT_FALSE(diffPolicies(a, b).hasChanges());
  PolicySpec c = base(), d = base();
  c.tenants[0].traffic_classes = {1, 3};
  d.tenants[0].traffic_classes = {3, 1};
  EXPECT_FALSE(diffPolicies(c, d).hasChanges());
}

TEST(PolicyDiff, ChangedFieldsShowOldAndNewWithFormattedRates) {
  PolicySpec after = base();
  after.tenants[0].limit_bytes_per_second = 8'750'000'000;  // 70Gbps
  after.tenants[0].weight = 3;
  after.tenants[0].traffic_classes = {1, 5};
  after.tenants[0].share_class = true;
  after.tenants[0].namespaces = {"team-a", "ml"};
  after.tenants[0].is_default = true;
  PolicyDiff d = diffPolicies(base(), after);
  ASSERT_TRUE(d.hasChanges());
  ASSERT_EQ(d.tenants.size(), 2u);
  EXPECT_EQ(d.tenants[0].name, "tenant-a");
  EXPECT_EQ(d.tenants[0].kind, ChangeKind::kChanged);
  EXPECT_EQ(d.tenants[0].details,
            (std::vector<std::string>{"limit: 60Gbps -> 70Gbps", "weight: 2 -> 3",
                                      "trafficClasses: [1] -> [1, 5]", "shareClass: false -> true",
                                      "namespaces: [] -> [ml, team-a]", "default: false -> true"}));
  EXPECT_EQ(d.tenants[1].kind, ChangeKind::kUnchanged);
}

TEST(PolicyDiff, AddedAndRemovedAndLinks) {
  PolicySpec after = base();
  after.tenants.erase(after.tenants.begin() + 1);
  after.tenants.push_back(tenant("tenant-c", 1'250'000'000, 2'500'000'000, 1, 3, 10, {}));
  after.links[0].capacity_bytes_per_second = 25'000'000'000;
  after.links.push_back({"storage", 1'250'000'000, 0});
  PolicyDiff d = diffPolicies(base(), after);
  ASSERT_EQ(d.tenants.size(), 3u);
  EXPECT_EQ(d.tenants[0].kind, ChangeKind::kUnchanged);
  EXPECT_EQ(d.tenants[1].name, "tenant-c");
  EXPECT_EQ(d.tenants[1].kind, ChangeKind::kAdded);
  EXPECT_EQ(d.tenants[1].details,
            std::vector<std::string>{
                "link fabric, guarantee 10Gbps, limit 20Gbps, weight 1, serviceLevel 3, dscp 10"});
  EXPECT_EQ(d.tenants[2].name, "tenant-b");
  EXPECT_EQ(d.tenants[2].kind, ChangeKind::kRemoved);
  ASSERT_EQ(d.links.size(), 2u);
  EXPECT_EQ(d.links[0].details, std::vector<std::string>{"capacity: 100Gbps -> 200Gbps"});
  EXPECT_EQ(d.links[1].kind, ChangeKind::kAdded);
  EXPECT_EQ(changeKindName(ChangeKind::kRemoved), "removed");
}

TEST(PolicyDiff, FromNothing) {
  PolicyDiff d = diffPolicies(PolicySpec{}, base());
  EXPECT_TRUE(d.hasChanges());
  for (const auto& c : d.tenants) EXPECT_EQ(c.kind, ChangeKind::kAdded);
  EXPECT_FALSE(diffPolicies(PolicySpec{}, PolicySpec{}).hasChanges());
}

}  // namespace
}  // namespace tq::policy
