// QoS plan renderings against hand-checked files in testdata/. How every number was computed:
//
// Link 100 Gbit/s = 12.5e9 bytes/s in all cases; "G" below means Gbit/s.
//
// roce_basic.dcb / ib_basic.* (basicTenants): tenant-a DSCP 26 SL 1 guarantee 40G limit 60G,
//   tenant-b DSCP 18 SL 2 guarantee 30G limit 100G, tenant-c DSCP 10 SL 3 guarantee 12.5G
//   limit 20G, tenant-d DSCP 34 SL 4 guarantee 0 limit 5G.
//   Rank by guarantee: a, b, c, d -> TC/VL 1, 2, 3, 4 (4 groups fit in 7 TCs / 7 VLs).
//   Shares = ceil(100 * guarantee / capacity), at least 1: a 40, b 30, c ceil(12.5) = 13,
//   d max(1, 0) = 1; sum 84, so class 0 (default) gets 100 - 84 = 16.
//   Max rates: a 60G; b's limit equals the link -> no cap (0bit); c 20G; d 5G; TC 0 never
//   capped; unused TCs 5-7 get share 0 and no cap. DSCP -> priority = the tenant's TC.
//   IB, MTU 4096: one packet = 4096/64 = 64 credits; an entry holds at most floor(255/64) = 3
//   packets = 192 credits. Packets per round = share: VL0 16, VL1 40, VL2 30, VL3 13, VL4 1.
//   Passes over VLs 0..4, each taking min(left, 3) packets:
//     pass 1: 0:192 1:192 2:192 3:192 4:64      (VL4 done: 1 packet)
//     pass 2-4: 0:192 1:192 2:192 3:192          (VL0 left 4, VL1 28, VL2 18, VL3 1)
//     pass 5: 0:192 1:192 2:192 3:64             (VL3 done; VL0 left 1)
//     pass 6: 0:64 1:192 2:192                   (VL0 done)
//     pass 7-10: 1:192 2:192                     (VL2 done after 10 passes of 3)
//     pass 11-13: 1:192; pass 14: 1:64           (VL1: 13 * 3 + 1 = 40)
//   36 entries (<= 64). SL2VL: SL n -> VL n for n = 1..4, all other SLs -> VL 0.
//
// roce_overflow.dcb (overflowTenants): ten tenants; juliet uses DSCP 0 and joins TC 0; hotel
//   and india share DSCP 40 and so form one group (guarantee 5 + 5 = 10G, limit 20G). That leaves
//   8 groups for 7 tenant TCs: groups ranked by total guarantee (stable on tenant rank):
//   alpha 20, bravo 15, charlie 10, delta 10, hotel+india 10, echo 8, foxtrot 6, golf 5.
//   The first 6 get TC 1-6, foxtrot and golf share TC 7 (guarantee 11G, limit 10 + 10 = 20G).
//   Shares: 20, 15, 10, 10, 10, 8, 11 = 84 -> TC 0 gets 16. echo's limit is the link -> no cap.
//
// ib_4vls.* (basicTenants, max_vls 4, MTU 2048): 3 tenant VLs for 4 groups: a VL 1, b VL 2,
//   c and d share VL 3 (SL 3 and 4 -> VL 3). Shares 40, 30, ceil(12.5) = 13 -> VL 0 gets 17.
//   MTU 2048: one packet = 32 credits, an entry holds floor(255/32) = 7 packets = 224 credits.
//   VL0 17 = 7+7+3, VL1 40 = 5*7+5, VL2 30 = 4*7+2, VL3 13 = 7+6:
//     pass 1: 0:224 1:224 2:224 3:224; pass 2: 0:224 1:224 2:224 3:192 (6 packets);
//     pass 3: 0:96 1:224 2:224; pass 4: 1:224 2:224; pass 5: 1:224 2:64; pass 6: 1:160.
#include "ib/qos_plan.h"

#include <gtest/gtest.h>

#include "common/file_util.h"

namespace tq::ib {
namespace {

constexpr uint64_t kGbit = 125000000;  // bytes/s in 1 Gbit/s

std::string expected(const std::string& name) {
  auto r = readFile(std::string(TQ_IB_TESTDATA_DIR) + "/" + name);
  EXPECT_TRUE(r.ok()) << r.status().toString();
  return r.ok() ? *r : "";
}

QosTenant tenant(const char* name, int sl, int dscp, uint64_t g, uint64_t l) {
  QosTenant t;
  t.name = name;
  t.service_level = sl;
  t.dscp = dscp;
  t.guarantee = g;
  t.limit = l;
  return t;
}

QosPlanInput basicTenants() {
  QosPlanInput in;
  in.capacity = 100 * kGbit;
  // Deliberately not in rank order.
  in.tenants = {tenant("tenant-c", 3, 10, 12500000000ull / 8, 20 * kGbit),
                tenant("tenant-a", 1, 26, 40 * kGbit, 60 * kGbit),
                tenant("tenant-d", 4, 34, 0, 5 * kGbit),
                tenant("tenant-b", 2, 18, 30 * kGbit, 100 * kGbit)};
  return in;
}

QosPlanInput overflowTenants() {
  QosPlanInput in;
  in.capacity = 100 * kGbit;
  in.tenants = {tenant("india", 9, 40, 5 * kGbit, 10 * kGbit),
                tenant("alpha", 1, 8, 20 * kGbit, 40 * kGbit),
                tenant("bravo", 2, 10, 15 * kGbit, 30 * kGbit),
                tenant("charlie", 3, 12, 10 * kGbit, 20 * kGbit),
                tenant("delta", 4, 14, 10 * kGbit, 20 * kGbit),
                tenant("echo", 5, 16, 8 * kGbit, 100 * kGbit),
                tenant("foxtrot", 6, 18, 6 * kGbit, 10 * kGbit),
                tenant("golf", 7, 20, 5 * kGbit, 10 * kGbit),
                tenant("hotel", 8, 40, 5 * kGbit, 10 * kGbit),
                tenant("juliet", 10, 0, 1 * kGbit, 10 * kGbit)};
  return in;
}

TEST(QosPlanTest, RoceBasic) {
  auto plan = planRoceQos(basicTenants());
  ASSERT_TRUE(plan.ok()) << plan.status().toString();
  EXPECT_EQ(renderDcbScript(*plan, "eth2"), expected("roce_basic.dcb"));
  // The argv form is what the agent executes; spot-check it matches the script.
  auto cmds = dcbCommands(*plan, "eth2");
  ASSERT_EQ(cmds.size(), 4u);
  EXPECT_EQ(cmds[3], (std::vector<std::string>{"dcb", "app", "replace", "dev", "eth2", "dscp-prio",
                                               "10:3", "18:2", "26:1", "34:4"}));
}

TEST(QosPlanTest, RoceOverflowSharesTheLastClass) {
  auto plan = planRoceQos(overflowTenants());
  ASSERT_TRUE(plan.ok()) << plan.status().toString();
  EXPECT_EQ(renderDcbScript(*plan, "eth3"), expected("roce_overflow.dcb"));
  ASSERT_EQ(plan->classes.size(), 8u);
  EXPECT_TRUE(plan->classes[7].shared);
  EXPECT_FALSE(plan->classes[5].shared);  // hotel+india share a DSCP by policy, not by overflow
}

TEST(QosPlanTest, IbBasic) {
  auto plan = planIbQos(basicTenants());
  ASSERT_TRUE(plan.ok()) << plan.status().toString();
  EXPECT_EQ(renderOpenSmOptions(*plan), expected("ib_basic.opensm.conf"));
  EXPECT_EQ(renderOpenSmQosPolicy(*plan), expected("ib_basic.qos-policy.conf"));
}

TEST(QosPlanTest, IbFewerVlsThanTenants) {
  IbQosOptions opts;
  opts.max_vls = 4;
  opts.mtu = 2048;
  auto plan = planIbQos(basicTenants(), opts);
  ASSERT_TRUE(plan.ok()) << plan.status().toString();
  EXPECT_EQ(renderOpenSmOptions(*plan), expected("ib_4vls.opensm.conf"));
  EXPECT_EQ(renderOpenSmQosPolicy(*plan), expected("ib_4vls.qos-policy.conf"));
}

TEST(QosPlanTest, SingleVlPutsEveryoneInTheDefaultClass) {
  IbQosOptions opts;
  opts.max_vls = 1;
  auto plan = planIbQos(basicTenants(), opts);
  ASSERT_TRUE(plan.ok()) << plan.status().toString();
  ASSERT_EQ(plan->classes.size(), 1u);
  EXPECT_EQ(plan->classes[0].share_percent, 100);
  EXPECT_EQ(plan->classes[0].tenants.size(), 4u);
  for (int vl : plan->sl_to_vl) EXPECT_EQ(vl, 0);
}

// Guarantees filling the whole link: ceil would give 34 + 34 + 34 > 99, so shares are rounded
// by largest remainder: exact 33.4 / 33.3 / 33.3 / 0 -> floors 33, 33, 33, 0 (99), the one
// leftover point goes to the largest remainder (.4, TC 1) -> 34; then TC 0 needs its minimum 1,
// taken from the class with the most share above its guarantee: TC 1 (34 - 33.4 = 0.6).
TEST(QosPlanTest, FullLinkFallsBackToLargestRemainder) {
  QosPlanInput in;
  in.capacity = 100 * kGbit;
  in.tenants = {tenant("x", 1, 8, 4175000000ull, 4175000000ull),
                tenant("y", 2, 10, 4162500000ull, 4162500000ull),
                tenant("z", 3, 12, 4162500000ull, 4162500000ull)};
  auto plan = planRoceQos(in);
  ASSERT_TRUE(plan.ok()) << plan.status().toString();
  std::vector<int> shares;
  for (const auto& c : plan->classes) shares.push_back(c.share_percent);
  EXPECT_EQ(shares, (std::vector<int>{1, 33, 33, 33}));
}

TEST(QosPlanTest, RejectsBadInput) {
  auto check = [](QosPlanInput in, const char* needle) {
    auto r = planRoceQos(in);
    ASSERT_FALSE(r.ok()) << needle;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  };
  QosPlanInput in = basicTenants();
  in.tenants[1].guarantee = 90 * kGbit;  // 90 + 30 + 12.5 > 100
  in.tenants[1].limit = 90 * kGbit;
  check(in, "more than the link capacity 100Gbps");
  in = basicTenants();
  in.tenants[0].limit = kGbit;
  check(in, "\"tenant-c\": limit 1Gbps must be > 0 and >= guarantee 12.5Gbps");
  in = basicTenants();
  in.tenants[0].service_level = 16;
  check(in, "service level 16");
  in = basicTenants();
  in.tenants[0].dscp = 64;
  check(in, "DSCP 64");
  in = basicTenants();
  in.tenants[0].name = "tenant-a";
  check(in, "listed twice");
  in = basicTenants();
  in.tenants[0].name = "DEFAULT";
  check(in, "not DEFAULT");
  in = basicTenants();
  in.capacity = 0;
  check(in, "capacity is 0");
  IbQosOptions bad;
  bad.max_vls = 16;
  EXPECT_FALSE(planIbQos(basicTenants(), bad).ok());
  bad.max_vls = 8;
  bad.mtu = 1500;
  EXPECT_FALSE(planIbQos(basicTenants(), bad).ok());
}

TEST(QosPlanTest, NoTenants) {
  QosPlanInput in;
  in.capacity = 10 * kGbit;
  auto plan = planRoceQos(in);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->classes.size(), 1u);
  EXPECT_EQ(plan->classes[0].share_percent, 100);
  EXPECT_EQ(dcbCommands(*plan, "eth0").size(), 3u);  // no dcb app command
}

}  // namespace
}  // namespace tq::ib
