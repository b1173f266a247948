// The QP attributes are the whole tagging contract with the NIC: SL in ah_attr.sl, DSCP << 2 in
// grh.traffic_class on RoCE. These tests pin them without a device.
#include "ib/rc_qp.h"

#include <gtest/gtest.h>

namespace tq::ib {
namespace {

QpEndpoint remoteRoce() {
  QpEndpoint e;
  e.qpn = 0x12;
  e.psn = 0xabcde;
  e.gid = *parseGid("::ffff:10.77.0.2");
  e.mtu_bytes = 4096;
  return e;
}

TEST(RcQpTest, DscpEncoding) {
  EXPECT_EQ(trafficClassForDscp(0), 0);
  EXPECT_EQ(trafficClassForDscp(26), 104);  // AF31 -> TOS 0x68
  EXPECT_EQ(trafficClassForDscp(46), 184);  // EF -> TOS 0xb8
  EXPECT_EQ(trafficClassForDscp(63), 252);
  EXPECT_EQ(dscpOfTrafficClass(104), 26);
  EXPECT_EQ(dscpOfTrafficClass(105), 26);  // ECN bits ignored
}

TEST(RcQpTest, InitAttributes) {
  RcQpOptions o;
  o.port = 1;
  o.pkey_index = 0;
  o.access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
  auto t = initTransition(o);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->attr.qp_state, IBV_QPS_INIT);
  EXPECT_EQ(t->attr.port_num, 1);
  EXPECT_EQ(t->attr.qp_access_flags, unsigned(IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE));
  EXPECT_EQ(t->mask, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  o.port = 0;
  EXPECT_FALSE(initTransition(o).ok());
}

TEST(RcQpTest, RtrOnRoceCarriesSlAndTrafficClass) {
  RcQpOptions o;
  o.service_level = 5;
  o.traffic_class = trafficClassForDscp(46);
  o.sgid_index = 1;
  auto t = rtrTransition(o, remoteRoce(), 1024);
  ASSERT_TRUE(t.ok()) << t.status().toString();
  const ibv_qp_attr& a = t->attr;
  EXPECT_EQ(a.qp_state, IBV_QPS_RTR);
  EXPECT_EQ(a.path_mtu, IBV_MTU_1024);  // min(local 1024, remote 4096)
  EXPECT_EQ(a.dest_qp_num, 0x12u);
  EXPECT_EQ(a.rq_psn, 0xabcdeu);
  EXPECT_EQ(a.ah_attr.sl, 5);
  EXPECT_EQ(a.ah_attr.is_global, 1);
  EXPECT_EQ(a.ah_attr.grh.traffic_class, 184);
  EXPECT_EQ(a.ah_attr.grh.sgid_index, 1);
  EXPECT_EQ(a.ah_attr.grh.hop_limit, 255);
  EXPECT_EQ(fromIbvGid(a.ah_attr.grh.dgid).toString(), "::ffff:10.77.0.2");
  EXPECT_EQ(a.ah_attr.port_num, 1);
  EXPECT_EQ(t->mask, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                         IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

TEST(RcQpTest, RtrOnInfinibandUsesLidAndNoGrh) {
  RcQpOptions o;
  o.roce = false;
  o.service_level = 3;
  o.traffic_class = 104;  // ignored without a GRH
  QpEndpoint r = remoteRoce();
  r.gid = Gid{};
  r.lid = 7;
  auto t = rtrTransition(o, r, 4096);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->attr.ah_attr.is_global, 0);
  EXPECT_EQ(t->attr.ah_attr.dlid, 7);
  EXPECT_EQ(t->attr.ah_attr.sl, 3);
  EXPECT_EQ(t->attr.ah_attr.grh.traffic_class, 0);
  EXPECT_EQ(t->attr.path_mtu, IBV_MTU_4096);
}

TEST(RcQpTest, RtrRejectsBadInput) {
  RcQpOptions o;
  o.service_level = 16;
  EXPECT_FALSE(rtrTransition(o, remoteRoce(), 1024).ok());
  o.service_level = 0;
  QpEndpoint r = remoteRoce();
  r.gid = Gid{};
  auto t = rtrTransition(o, r, 1024);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("remote GID"), std::string::npos);
  r = remoteRoce();
  r.qpn = 1u << 24;
  EXPECT_FALSE(rtrTransition(o, r, 1024).ok());
  r = remoteRoce();
  r.mtu_bytes = 1500;
  EXPECT_FALSE(rtrTransition(o, r, 1024).ok());
  r = remoteRoce();
  EXPECT_FALSE(rtrTransition(o, r, 0).ok());
  o.roce = false;
  EXPECT_FALSE(rtrTransition(o, remoteRoce(), 1024).ok());  // LID 0
}

TEST(RcQpTest, RtsAttributes) {
  RcQpOptions o;
  o.timeout = 18;
  o.retry_cnt = 6;
  auto t = rtsTransition(o, 0x1abcdef);
  EXPECT_EQ(t.attr.qp_state, IBV_QPS_RTS);
  EXPECT_EQ(t.attr.timeout, 18);
  EXPECT_EQ(t.attr.retry_cnt, 6);
  EXPECT_EQ(t.attr.rnr_retry, 7);
  EXPECT_EQ(t.attr.sq_psn, 0xabcdefu);  // 24 bits
  EXPECT_EQ(t.attr.max_rd_atomic, 1);
}

TEST(RcQpTest, MtuConversions) {
  EXPECT_EQ(mtuFromBytes(4096), IBV_MTU_4096);
  EXPECT_EQ(mtuFromBytes(1024), IBV_MTU_1024);
  EXPECT_EQ(mtuFromBytes(1500), 0);
  EXPECT_EQ(mtuBytes(IBV_MTU_2048), 2048);
}

}  // namespace
}  // namespace tq::ib
