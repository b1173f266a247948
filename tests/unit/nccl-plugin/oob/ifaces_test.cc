#include "nccl-plugin/oob/ifaces.h"

#include <gtest/gtest.h>

namespace tq::plugin::oob {
namespace {

TEST(IfnameFilter, PrefixExactAndExcludeLikeNcclSocketIfname) {
  auto f = IfnameFilter::parse("eth,ens");
  EXPECT_TRUE(f.matches("eth0"));
  EXPECT_TRUE(f.matches("ens5f1"));
  EXPECT_FALSE(f.matches("lo"));
  auto exact = IfnameFilter::parse("=eth0");
  EXPECT_TRUE(exact.matches("eth0"));
  EXPECT_FALSE(exact.matches("eth01"));
  auto ex = IfnameFilter::parse("^docker,lo");
  EXPECT_TRUE(ex.matches("eth0"));
  EXPECT_FALSE(ex.matches("docker0"));
  EXPECT_FALSE(ex.matches("lo"));
  auto exex = IfnameFilter::parse("^=eth0");
  EXPECT_FALSE(exex.matches("eth0"));
  EXPECT_TRUE(exex.matches("eth01"));
  auto empty = IfnameFilter::parse("");
  EXPECT_FALSE(empty.matches("eth0"));
  auto trailing = IfnameFilter::parse("eth,");
  EXPECT_TRUE(trailing.matches("eth1"));
}

TEST(FindInterfaces, LoopbackByName) {
  auto devs = findInterfaces("lo", "");
  ASSERT_TRUE(devs.ok()) << devs.status().toString();
  ASSERT_EQ(devs->size(), 1u);
  EXPECT_EQ((*devs)[0].name, "lo");
  EXPECT_EQ((*devs)[0].addr.toString(), "127.0.0.1:0");
  EXPECT_GT((*devs)[0].speed_mbps, 0);
}

TEST(FindInterfaces, NoMatchListsWhatExists) {
  auto devs = findInterfaces("=tqplg-none", "");
  ASSERT_FALSE(devs.ok());
  EXPECT_NE(devs.status().message().find("tqplg-none"), std::string::npos);
  EXPECT_NE(devs.status().message().find("lo"), std::string::npos) << devs.status().message();
}

TEST(FindInterfaces, DefaultSelectionIsNeverEmpty) {
  auto devs = findInterfaces("", "");
  ASSERT_TRUE(devs.ok()) << devs.status().toString();
  EXPECT_FALSE(devs->empty());
}

TEST(FindInterfaces, RejectsUnknownFamily) { EXPECT_FALSE(findInterfaces("lo", "AF_UNIX").ok()); }

}  // namespace
}  // namespace tq::plugin::oob
