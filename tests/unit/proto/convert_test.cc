#include "proto/convert.h"

#include <gtest/gtest.h>

namespace tq::proto {
namespace {

TEST(Convert, RoundTripKeepsEveryField) {
  PolicySpec p;
  p.links.push_back({"fabric", 12'500'000'000, 5});
  TenantSpec a;
  a.name = "tenant-a";
  a.link = "fabric";
  a.guarantee_bytes_per_second = 5'000'000'000;
  a.limit_bytes_per_second = 7'500'000'000;
  a.weight = 2;
  a.service_level = 1;
  a.dscp = 26;
  a.traffic_classes = {1, 3};
  a.share_class = true;
  // The topology: optional values keep "absent" apart from 0 (an absent value is the tenant's
  // own, common/topology.h), and an absent rail from rail 0.
  a.shared_links.push_back({"leaf-uplink", 0, std::nullopt, 3});
  a.shared_links.push_back({"rail0", std::nullopt, 1'000'000, std::nullopt});
  p.tenants.push_back(a);
  p.shared_links.push_back(
      {"leaf-uplink", 125'000'000, 5, std::nullopt, {{"leaf1", {"node1", "node2"}, 0}}});
  p.shared_links.push_back({"rail0", 0, 0, 0, {{"r0", {"node1"}, 250'000'000}}});
  EXPECT_EQ(fromProto(toProto(p)), p);
  // And through the wire encoding.
  std::string bytes;
  ASSERT_TRUE(toProto(p).SerializeToString(&bytes));
  tenantqos::v1::Policy parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  EXPECT_EQ(fromProto(parsed), p);
}

TEST(Convert, SnapshotToVersionedPolicy) {
  PolicySpec p;
  p.links.push_back({"fabric", 12'500'000'000, 5});
  tenantqos::v1::PolicySnapshot s;
  s.set_version(42);
  *s.mutable_policy() = toProto(p);
  s.set_source_yaml("ignored");
  VersionedPolicy v = fromSnapshot(s);
  EXPECT_EQ(v.version, 42u);
  EXPECT_EQ(v.policy, p);
}

TEST(Convert, UsageRoundTrip) {
  NodeUsageReport r;
  r.node = "node1";
  r.policy_version = 7;
  r.timestamp_unix_ms = 1700000000123;
  TenantUsageReport u;
  u.tenant = "tenant-a";
  u.transmit_bytes_total = 1ull << 40;
  u.receive_bytes_total = 12345;
  u.transmit_rate_bytes_per_second = 4'900'000'000;
  u.allocated_rate_bytes_per_second = 5'000'000'000;
  u.guarantee_bytes_per_second = 5'000'000'000;
  u.limit_bytes_per_second = 7'500'000'000;
  u.throttled_seconds_total = 1.25;
  u.processes = 8;
  r.tenants.push_back(u);
  r.errors.push_back("replace class 1:12 on dev eth0: RTNETLINK: Invalid argument");
  EXPECT_EQ(fromReportUsageRequest(toReportUsageRequest(r)), r);
  auto n = toNodeUsage(r, 1700000000999);
  EXPECT_EQ(n.last_report_unix_ms(), 1700000000999);
  NodeUsageReport back = fromNodeUsage(n);
  EXPECT_EQ(back.tenants, r.tenants);
  EXPECT_EQ(back.errors, r.errors);
  EXPECT_EQ(back.timestamp_unix_ms, 1700000000999);
}

}  // namespace
}  // namespace tq::proto
