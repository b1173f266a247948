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
  p.tenants.push_back(a);
  EXPECT_EQ(fromProto(toProto(p)), p);
  // And through the wire encoding.
  std::string bytes;
  ASSERT_TRUE(toProto(p).SerializeToString(&bytes));
  tenantqos::v1::Policy parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  EXPECT_EQ(fromProto(parsed), p);
}

}  // namespace
}  // namespace tq::proto
