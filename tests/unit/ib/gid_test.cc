#include "ib/gid.h"

#include <gtest/gtest.h>

namespace tq::ib {
namespace {

TEST(GidTest, ParsesSysfsAndShortForms) {
  auto sysfs = parseGid("0000:0000:0000:0000:0000:ffff:0a4d:0001\n");
  ASSERT_TRUE(sysfs.ok()) << sysfs.status().toString();
  EXPECT_EQ(sysfs->toString(), "::ffff:10.77.0.1");
  EXPECT_TRUE(sysfs->isIpv4Mapped());
  EXPECT_FALSE(sysfs->isLinkLocal());
  auto shortform = parseGid("::ffff:10.77.0.1");
  ASSERT_TRUE(shortform.ok());
  EXPECT_EQ(*sysfs, *shortform);
}

TEST(GidTest, Classifies) {
  auto ll = parseGid("fe80:0000:0000:0000:d478:75ff:fed2:9ccf");
  ASSERT_TRUE(ll.ok());
  EXPECT_TRUE(ll->isLinkLocal());
  EXPECT_FALSE(ll->isIpv4Mapped());
  EXPECT_EQ(ll->toString(), "fe80::d478:75ff:fed2:9ccf");
  auto zero = parseGid("0000:0000:0000:0000:0000:0000:0000:0000");
  ASSERT_TRUE(zero.ok());
  EXPECT_TRUE(zero->isZero());
  auto global = parseGid("2001:db8::7");
  ASSERT_TRUE(global.ok());
  EXPECT_FALSE(global->isLinkLocal() || global->isIpv4Mapped() || global->isZero());
}

TEST(GidTest, RejectsGarbage) {
  for (const char* bad : {"", "10.77.0.1", "fe80::zz", "::ffff:10.77.0.1 x"}) {
    auto r = parseGid(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace tq::ib
