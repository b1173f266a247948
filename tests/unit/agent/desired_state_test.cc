#include "agent/desired_state.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace tq::agent {
namespace {

using testing::samplePolicy;
using testing::tenant;

const DeviceExistsFn kAllExist = [](const std::string&) { return true; };

TEST(DesiredStateTest, PolicyIntersectNode) {
  auto d = computeDesired(samplePolicy(4), {{"eth0", "fabric"}}, kAllExist);
  ASSERT_TRUE(d.ok()) << d.status().toString();
  EXPECT_EQ(d->version, 4u);
  ASSERT_EQ(d->devices.size(), 1u);
  EXPECT_EQ(d->devices[0].device, "eth0");
  EXPECT_EQ(d->devices[0].link, "fabric");
  EXPECT_EQ(d->devices[0].capacity_bytes_per_second, 1'250'000'000u);
  ASSERT_EQ(d->devices[0].tenants.size(), 2u);
  EXPECT_EQ(d->devices[0].tenants[0].name, "tenant-a");
  EXPECT_EQ(d->devices[0].tenants[1].name, "tenant-b");
  EXPECT_EQ(d->tenants.size(), 2u);  // tenant-s is on storage, not on this node
  EXPECT_EQ(d->tenants.count("tenant-s"), 0u);
  EXPECT_EQ(d->links.size(), 1u);
  EXPECT_TRUE(d->unmanaged_devices.empty());
  EXPECT_TRUE(d->warnings.empty());
}

TEST(DesiredStateTest, TwoDevicesTwoLinks) {
  auto d = computeDesired(samplePolicy(1), {{"eth0", "fabric"}, {"eth1", "storage"}}, kAllExist);
  ASSERT_TRUE(d.ok()) << d.status().toString();
  ASSERT_EQ(d->devices.size(), 2u);
  EXPECT_EQ(d->devices[1].device, "eth1");
  ASSERT_EQ(d->devices[1].tenants.size(), 1u);
  EXPECT_EQ(d->devices[1].tenants[0].name, "tenant-s");
  EXPECT_EQ(d->tenants.size(), 3u);
}

TEST(DesiredStateTest, TwoDevicesSameLinkBothCarryItsTenants) {
  auto d = computeDesired(samplePolicy(1), {{"eth0", "fabric"}, {"eth1", "fabric"}}, kAllExist);
  ASSERT_TRUE(d.ok());
  ASSERT_EQ(d->devices.size(), 2u);
  EXPECT_EQ(d->devices[0].tenants, d->devices[1].tenants);
  EXPECT_EQ(d->tenants.size(), 2u);
}

TEST(DesiredStateTest, LinkNotInPolicyLeavesDeviceUnmanaged) {
  auto d = computeDesired(samplePolicy(2), {{"eth0", "fabric"}, {"ib0", "infiniband"}}, kAllExist);
  ASSERT_TRUE(d.ok()) << d.status().toString();
  EXPECT_EQ(d->devices.size(), 1u);
  ASSERT_EQ(d->unmanaged_devices.size(), 1u);
  EXPECT_EQ(d->unmanaged_devices[0], "ib0");
  ASSERT_EQ(d->warnings.size(), 1u);
  EXPECT_NE(d->warnings[0].find("\"infiniband\" is not defined by policy v2"), std::string::npos);
}

TEST(DesiredStateTest, UnknownDeviceIsAnError) {
  auto exists = [](const std::string& dev) { return dev != "ghost0"; };
  auto d = computeDesired(samplePolicy(5), {{"eth0", "fabric"}, {"ghost0", "storage"}}, exists);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kNotFound);
  EXPECT_NE(d.status().message().find("device ghost0 (link storage) does not exist"),
            std::string::npos)
      << d.status().message();
  // ...but a missing device whose link the policy does not define is only unmanaged.
  VersionedPolicy p = samplePolicy(6);
  p.policy.links.pop_back();
  p.policy.tenants.pop_back();
  auto ok = computeDesired(p, {{"eth0", "fabric"}, {"ghost0", "storage"}}, exists);
  EXPECT_TRUE(ok.ok()) << ok.status().toString();
}

TEST(DesiredStateTest, TenantErrors) {
  struct Case {
    const char* what;
    void (*mutate)(PolicySpec&);
    const char* needle;
  };
  const Case cases[] = {
      {"unknown link", [](PolicySpec& p) { p.tenants[0].link = "nowhere"; },
       "names link \"nowhere\""},
      {"bad name", [](PolicySpec& p) { p.tenants[0].name = "Tenant_A"; }, "DNS-1123"},
      {"duplicate", [](PolicySpec& p) { p.tenants[1].name = p.tenants[0].name; }, "twice"},
      {"limit below guarantee", [](PolicySpec& p) { p.tenants[0].limit_bytes_per_second = 1; },
       "below its guarantee"},
      {"too many traffic classes",
       [](PolicySpec& p) { p.tenants[0].traffic_classes = {1, 2, 3, 4, 5, 6, 7, 8, 9}; },
       "traffic classes"},
      {"dscp out of range", [](PolicySpec& p) { p.tenants[0].dscp = 64; }, "out of range"},
      {"guarantee above capacity",
       [](PolicySpec& p) {
         p.tenants[0].guarantee_bytes_per_second = 2'000'000'000;
         p.tenants[0].limit_bytes_per_second = 2'000'000'000;
       },
       "exceeds link fabric capacity"},
  };
  for (const Case& c : cases) {
    VersionedPolicy p = samplePolicy(9);
    c.mutate(p.policy);
    auto d = computeDesired(p, {{"eth0", "fabric"}}, kAllExist);
    ASSERT_FALSE(d.ok()) << c.what;
    EXPECT_NE(d.status().message().find(c.needle), std::string::npos)
        << c.what << ": " << d.status().message();
    EXPECT_NE(d.status().message().find("policy v9"), std::string::npos) << c.what;
  }
}

TEST(DesiredStateTest, OtherNodesTenantsAreNotValidatedHere) {
  // A tenant on a link this node does not carry is another node's business.
  VersionedPolicy p = samplePolicy(1);
  p.policy.tenants[2].traffic_classes = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  EXPECT_TRUE(computeDesired(p, {{"eth0", "fabric"}}, kAllExist).ok());
}

TEST(DesiredStateTest, EmptyPolicy) {
  VersionedPolicy p;
  p.version = 1;
  auto d = computeDesired(p, {{"eth0", "fabric"}}, kAllExist);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->devices.empty());
  EXPECT_TRUE(d->tenants.empty());
  EXPECT_EQ(d->unmanaged_devices, std::vector<std::string>{"eth0"});
}

}  // namespace
}  // namespace tq::agent
