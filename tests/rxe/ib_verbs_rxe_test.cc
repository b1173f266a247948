// ib/ against a real RDMA stack: Soft-RoCE devices rxe0 and rxe1 inside the rxe VM
// (tests/rxe/rxe-vm; rxe0 on rxeveth0 = 10.77.0.1, rxe1 on rxeveth1 = 10.77.0.2, traffic between
// them crosses the veth pair). Registered with tq_verbs_test(): never run by the host's ctest.
//
// Covers: loading libibverbs through ib::Verbs, sysfs discovery of the live devices (default GID
// index), RC QPs connected rxe0 <-> rxe1 with ah_attr.sl and grh.traffic_class = DSCP << 2,
// RDMA WRITE and WRITE_WITH_IMM of several sizes (data, immediate and byte count checked),
// traffic_class read back with ibv_query_qp, the DSCP counted on the wire by a u32 filter on
// rxeveth0, and connect failures (bad GID index, unknown remote QPN) followed by a clean second
// connect with no QP leaked. Soft-RoCE drops the SL (no VLAN/PCP): SL is checked at the verbs
// call only. Timeouts are generous: everything runs under qemu TCG, 10-20x slower than native.
#include <arpa/inet.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ib/rc_qp.h"
#include "ib/sysfs.h"
#include "ib/verbs.h"

namespace tq::ib {
namespace {

constexpr int kDscp = 46;  // EF: TOS byte 0xb8 on the wire
constexpr uint8_t kServiceLevel = 5;
constexpr size_t kBufBytes = 1 << 20;
constexpr auto kCompletionDeadline = std::chrono::seconds(60);

std::string envOr(const char* name, const char* fallback) {
  const char* v = getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

// Runs a shell command and returns its stdout (the VM has the host's iproute2).
std::string run(const std::string& cmd) {
  std::string out;
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  pclose(f);
  return out;
}

// QPs currently allocated on `dev` according to `rdma resource show` (includes rxe's own QP1).
int qpCount(const std::string& dev) {
  std::string out = run("rdma resource show 2>/dev/null");
  size_t at = out.find(" " + dev + ": ");
  if (at == std::string::npos) return -1;
  size_t qp = out.find(" qp ", at);
  if (qp == std::string::npos) return -1;
  return atoi(out.c_str() + qp + 4);
}

struct Side {
  std::string name;
  ContextPtr ctx;
  PdPtr pd;
  CqPtr cq;
  MrPtr mr;
  std::vector<uint8_t> buf;
  ibv_mtu mtu = IBV_MTU_1024;
  int gid_index = -1;
  Gid gid;
};

struct Connection {
  QpPtr qp;
  QpEndpoint local;
};

class RxeVerbsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto v = Verbs::load(envOr("TENANTQOS_IBVERBS_LIB", kDefaultVerbsLibrary));
    ASSERT_TRUE(v.ok()) << v.status().toString();
    verbs_ = std::move(*v);
    auto names = verbs_->deviceNames();
    ASSERT_TRUE(names.ok()) << names.status().toString();
    ASSERT_GE(names->size(), 2u)
        << "this test needs the Soft-RoCE devices rxe0 and rxe1: run it through "
           "tests/rxe/rxe-vm (ctest -R rxe_verbs_suite), not on the host";
    openSide("rxe0", &a_);
    openSide("rxe1", &b_);
  }

  void openSide(const std::string& name, Side* s) {
    s->name = name;
    auto ctx = verbs_->openDevice(name);
    ASSERT_TRUE(ctx.ok()) << ctx.status().toString();
    s->ctx = std::move(*ctx);
    auto port = verbs_->queryPort(s->ctx.get(), 1);
    ASSERT_TRUE(port.ok()) << port.status().toString();
    ASSERT_EQ(port->state, IBV_PORT_ACTIVE) << name;
    ASSERT_EQ(port->link_layer, IBV_LINK_LAYER_ETHERNET) << name;
    s->mtu = port->active_mtu;
    // The GID index comes from sysfs discovery, exactly as the agent/plugin will choose it.
    auto dev = readDevice("/sys", name);
    ASSERT_TRUE(dev.ok()) << dev.status().toString();
    ASSERT_FALSE(dev->ports.empty());
    auto idx = defaultGidIndex(*dev, dev->ports[0]);
    ASSERT_TRUE(idx.ok()) << idx.status().toString();
    s->gid_index = *idx;
    EXPECT_EQ(s->gid_index, 1) << "the rig's GID 1 is the IPv4-mapped RoCEv2 GID";
    auto gid = verbs_->queryGid(s->ctx.get(), 1, s->gid_index);
    ASSERT_TRUE(gid.ok()) << gid.status().toString();
    s->gid = fromIbvGid(*gid);
    EXPECT_EQ(s->gid, dev->ports[0].gids[static_cast<size_t>(s->gid_index)].gid)
        << "verbs and sysfs disagree on GID " << s->gid_index << " of " << name;
    auto pd = verbs_->allocPd(s->ctx.get());
    ASSERT_TRUE(pd.ok()) << pd.status().toString();
    s->pd = std::move(*pd);
    auto cq = verbs_->createCq(s->ctx.get(), 64);
    ASSERT_TRUE(cq.ok()) << cq.status().toString();
    s->cq = std::move(*cq);
    s->buf.assign(kBufBytes, 0);
    auto mr = verbs_->regMr(s->pd.get(), s->buf.data(), s->buf.size(),
                            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    ASSERT_TRUE(mr.ok()) << mr.status().toString();
    s->mr = std::move(*mr);
  }

  RcQpOptions options(const Side& s) const {
    RcQpOptions o;
    o.port = 1;
    o.roce = true;
    o.sgid_index = static_cast<uint8_t>(s.gid_index);
    o.service_level = kServiceLevel;
    o.traffic_class = trafficClassForDscp(kDscp);
    o.timeout = 18;  // 4.096 us * 2^18 ~ 1.07 s per try: TCG can stall for hundreds of ms
    o.retry_cnt = 7;
    o.rnr_retry = 7;
    o.access_flags = IBV_ACCESS_REMOTE_WRITE;
    return o;
  }

  Connection makeQp(const Side& s, uint32_t psn) {
    Connection c;
    auto qp = createRcQp(*verbs_, s.pd.get(), s.cq.get(), 32, 32);
    EXPECT_TRUE(qp.ok()) << qp.status().toString();
    if (!qp.ok()) return c;
    c.qp = std::move(*qp);
    c.local.qpn = c.qp->qp_num;
    c.local.psn = psn;
    c.local.gid = s.gid;
    c.local.mtu_bytes = mtuBytes(s.mtu);
    return c;
  }

  // Connects a fresh QP on each side to the other.
  void connectPair(Connection* ca, Connection* cb) {
    *ca = makeQp(a_, 0x100);
    *cb = makeQp(b_, 0x200);
    ASSERT_TRUE(ca->qp && cb->qp);
    Status sa = connectRcQp(*verbs_, ca->qp.get(), options(a_), ca->local, cb->local);
    ASSERT_TRUE(sa.ok()) << sa.toString();
    Status sb = connectRcQp(*verbs_, cb->qp.get(), options(b_), cb->local, ca->local);
    ASSERT_TRUE(sb.ok()) << sb.toString();
  }

  // Polls `cq` for one completion until the deadline.
  Result<ibv_wc> pollOne(ibv_cq* cq) {
    auto deadline = std::chrono::steady_clock::now() + kCompletionDeadline;
    while (std::chrono::steady_clock::now() < deadline) {
      ibv_wc wc;
      int n = ibv_poll_cq(cq, 1, &wc);
      if (n < 0) return internalError("ibv_poll_cq failed: " + std::to_string(n));
      if (n == 1) return wc;
      usleep(50);
    }
    return deadlineExceeded("no completion within 60 s");
  }

  Status postWrite(ibv_qp* qp, const Side& from, const Side& to, size_t offset, size_t len,
                   bool with_imm, uint32_t imm) {
    ibv_sge sge;
    sge.addr = reinterpret_cast<uintptr_t>(from.buf.data()) + offset;
    sge.length = static_cast<uint32_t>(len);
    sge.lkey = from.mr->lkey;
    ibv_send_wr wr;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = len;
    wr.sg_list = len > 0 ? &sge : nullptr;
    wr.num_sge = len > 0 ? 1 : 0;
    wr.opcode = with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = htonl(imm);
    wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(to.buf.data()) + offset;
    wr.wr.rdma.rkey = to.mr->rkey;
    ibv_send_wr* bad = nullptr;
    int rc = ibv_post_send(qp, &wr, &bad);
    if (rc != 0) return errnoStatus(rc, "post RDMA write on " + qpName(qp));
    return okStatus();
  }

  Status postRecv(ibv_qp* qp, uint64_t id) {
    ibv_recv_wr wr;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = id;
    wr.sg_list = nullptr;  // WRITE_WITH_IMM consumes a receive but places no data through it
    wr.num_sge = 0;
    ibv_recv_wr* bad = nullptr;
    int rc = ibv_post_recv(qp, &wr, &bad);
    if (rc != 0) return errnoStatus(rc, "post receive on " + qpName(qp));
    return okStatus();
  }

  void fill(Side* s, size_t offset, size_t len, uint8_t seed) {
    for (size_t i = 0; i < len; ++i) s->buf[offset + i] = static_cast<uint8_t>(seed + i * 7);
  }

  std::unique_ptr<Verbs> verbs_;
  Side a_;
  Side b_;
};

TEST_F(RxeVerbsTest, RdmaWriteAndWriteWithImmCarryDataAndTags) {
  Connection ca, cb;
  ASSERT_NO_FATAL_FAILURE(connectPair(&ca, &cb));

  // The QPs report the traffic class we set (rxe keeps the GRH; it drops the SL).
  for (Connection* c : {&ca, &cb}) {
    auto q = verbs_->queryQp(c->qp.get(), IBV_QP_AV | IBV_QP_STATE);
    ASSERT_TRUE(q.ok()) << q.status().toString();
    EXPECT_EQ(q->attr.qp_state, IBV_QPS_RTS);
    EXPECT_EQ(q->attr.ah_attr.is_global, 1);
    EXPECT_EQ(q->attr.ah_attr.grh.traffic_class, trafficClassForDscp(kDscp));
    EXPECT_EQ(q->attr.ah_attr.grh.sgid_index, 1);
    printf("%s: ah_attr.sl read back as %d (set %d; rxe does not keep the SL)\n",
           qpName(c->qp.get()).c_str(), q->attr.ah_attr.sl, kServiceLevel);
  }

  const size_t sizes[] = {1, 4096, 65536 + 3, kBufBytes};
  uint8_t seed = 1;
  for (size_t len : sizes) {
    SCOPED_TRACE("RDMA WRITE of " + std::to_string(len) + " bytes");
    fill(&a_, 0, len, seed);
    memset(b_.buf.data(), 0, len);
    ASSERT_TRUE(postWrite(ca.qp.get(), a_, b_, 0, len, false, 0).ok());
    auto wc = pollOne(a_.cq.get());
    ASSERT_TRUE(wc.ok()) << wc.status().toString();
    ASSERT_EQ(wc->status, IBV_WC_SUCCESS) << verbs_->wcStatusStr(wc->status);
    EXPECT_EQ(wc->opcode, IBV_WC_RDMA_WRITE);
    EXPECT_EQ(memcmp(a_.buf.data(), b_.buf.data(), len), 0);
    ++seed;
  }

  const size_t imm_sizes[] = {0, 7, 8192, 300000};
  for (size_t len : imm_sizes) {
    SCOPED_TRACE("RDMA WRITE_WITH_IMM of " + std::to_string(len) + " bytes");
    fill(&a_, 0, len, seed);
    memset(b_.buf.data(), 0, len + 1);
    ASSERT_TRUE(postRecv(cb.qp.get(), 1000 + len).ok());
    ASSERT_TRUE(postWrite(ca.qp.get(), a_, b_, 0, len, true, static_cast<uint32_t>(len)).ok());
    auto send = pollOne(a_.cq.get());
    ASSERT_TRUE(send.ok()) << send.status().toString();
    ASSERT_EQ(send->status, IBV_WC_SUCCESS) << verbs_->wcStatusStr(send->status);
    auto recv = pollOne(b_.cq.get());
    ASSERT_TRUE(recv.ok()) << recv.status().toString();
    ASSERT_EQ(recv->status, IBV_WC_SUCCESS) << verbs_->wcStatusStr(recv->status);
    EXPECT_EQ(recv->opcode, IBV_WC_RECV_RDMA_WITH_IMM);
    EXPECT_TRUE(recv->wc_flags & IBV_WC_WITH_IMM);
    EXPECT_EQ(ntohl(recv->imm_data), len);
    EXPECT_EQ(recv->wr_id, 1000 + len);
    EXPECT_EQ(recv->byte_len, len);
    EXPECT_EQ(memcmp(a_.buf.data(), b_.buf.data(), len), 0);
    EXPECT_EQ(b_.buf[len], 0) << "wrote past the end";
    ++seed;
  }

  // The responder's QP can write back the other way (both QPs are fully connected).
  fill(&b_, 0, 4096, 99);
  ASSERT_TRUE(postWrite(cb.qp.get(), b_, a_, 0, 4096, false, 0).ok());
  auto back = pollOne(b_.cq.get());
  ASSERT_TRUE(back.ok()) << back.status().toString();
  ASSERT_EQ(back->status, IBV_WC_SUCCESS) << verbs_->wcStatusStr(back->status);
  EXPECT_EQ(memcmp(a_.buf.data(), b_.buf.data(), 4096), 0);
}

// Counts RoCEv2 packets (UDP 4791) with our DSCP leaving rxeveth0 with a u32 filter on a clsact
// egress hook, while sending a known amount of data rxe0 -> rxe1.
TEST_F(RxeVerbsTest, DscpIsOnTheWire) {
  const std::string dev = "rxeveth0";
  ASSERT_EQ(system(("tc qdisc add dev " + dev + " clsact").c_str()), 0);
  struct Cleanup {
    std::string dev;
    ~Cleanup() { (void)!system(("tc qdisc del dev " + dev + " clsact 2>/dev/null").c_str()); }
  } cleanup{dev};
  char tos[8];
  snprintf(tos, sizeof(tos), "0x%02x", trafficClassForDscp(kDscp));
  std::string filter = "tc filter add dev " + dev +
                       " egress protocol ip prio 1 u32 match ip protocol 17 0xff"
                       " match ip dport 4791 0xffff match ip tos " +
                       tos + " 0xfc action pass";
  ASSERT_EQ(system(filter.c_str()), 0) << filter;

  Connection ca, cb;
  ASSERT_NO_FATAL_FAILURE(connectPair(&ca, &cb));
  const size_t len = 256 * 1024;
  fill(&a_, 0, len, 3);
  ASSERT_TRUE(postWrite(ca.qp.get(), a_, b_, 0, len, false, 0).ok());
  auto wc = pollOne(a_.cq.get());
  ASSERT_TRUE(wc.ok()) << wc.status().toString();
  ASSERT_EQ(wc->status, IBV_WC_SUCCESS) << verbs_->wcStatusStr(wc->status);

  std::string stats = run("tc -s filter show dev " + dev + " egress");
  // "Sent <bytes> bytes <packets> pkt" of the gact action.
  size_t at = stats.find("Sent ");
  ASSERT_NE(at, std::string::npos) << stats;
  unsigned long long bytes = 0, pkts = 0;
  ASSERT_EQ(sscanf(stats.c_str() + at, "Sent %llu bytes %llu pkt", &bytes, &pkts), 2) << stats;
  // At least len / MTU data packets must have matched (MTU 1024..4096 payload per packet).
  size_t min_pkts = len / static_cast<size_t>(mtuBytes(a_.mtu));
  printf("u32 on %s egress, UDP 4791 with TOS %s: %llu packets, %llu bytes for a %zu-byte write\n",
         dev.c_str(), tos, pkts, bytes, len);
  EXPECT_GE(pkts, min_pkts) << stats;
  EXPECT_GE(bytes, len) << stats;
}

TEST_F(RxeVerbsTest, FailedConnectsLeakNothingAndReconnectWorks) {
  const int qps_before_a = qpCount("rxe0");
  const int qps_before_b = qpCount("rxe1");
  ASSERT_GE(qps_before_a, 0) << run("rdma resource show");

  {
    // 1. A GID index that does not exist: the RTR transition fails and says so.
    Connection ca = makeQp(a_, 1);
    Connection cb = makeQp(b_, 2);
    ASSERT_TRUE(ca.qp && cb.qp);
    RcQpOptions bad = options(a_);
    bad.sgid_index = 200;
    Status s = connectRcQp(*verbs_, ca.qp.get(), bad, ca.local, cb.local);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("to RTR"), std::string::npos) << s.toString();
    EXPECT_NE(s.message().find("sgid_index 200"), std::string::npos) << s.toString();
    EXPECT_NE(s.message().find("rxe0 QP"), std::string::npos) << s.toString();
    EXPECT_EQ(qpCount("rxe0"), qps_before_a + 1);
  }  // both QPs destroyed here
  EXPECT_EQ(qpCount("rxe0"), qps_before_a);

  {
    // 2. A peer QP number that does not exist: the connect succeeds locally (RC setup needs no
    // peer), the first write exhausts its retries and completes in error.
    Connection ca = makeQp(a_, 1);
    Connection cb = makeQp(b_, 2);
    ASSERT_TRUE(ca.qp && cb.qp);
    QpEndpoint ghost = cb.local;
    ghost.qpn = cb.local.qpn + 1000;
    RcQpOptions fast = options(a_);
    fast.timeout = 12;  // ~17 ms per try
    fast.retry_cnt = 1;
    Status s = connectRcQp(*verbs_, ca.qp.get(), fast, ca.local, ghost);
    ASSERT_TRUE(s.ok()) << s.toString();
    fill(&a_, 0, 1024, 5);
    ASSERT_TRUE(postWrite(ca.qp.get(), a_, b_, 0, 1024, false, 0).ok());
    auto wc = pollOne(a_.cq.get());
    ASSERT_TRUE(wc.ok()) << wc.status().toString();
    EXPECT_EQ(wc->status, IBV_WC_RETRY_EXC_ERR) << verbs_->wcStatusStr(wc->status);
    auto q = verbs_->queryQp(ca.qp.get(), IBV_QP_STATE);
    ASSERT_TRUE(q.ok());
    EXPECT_EQ(q->attr.qp_state, IBV_QPS_ERR);
  }
  EXPECT_EQ(qpCount("rxe0"), qps_before_a);
  EXPECT_EQ(qpCount("rxe1"), qps_before_b);

  // 3. A second, correct connect on the same devices, PDs, CQs and MRs works.
  {
    Connection ca, cb;
    ASSERT_NO_FATAL_FAILURE(connectPair(&ca, &cb));
    EXPECT_EQ(qpCount("rxe0"), qps_before_a + 1);
    fill(&a_, 0, 8192, 11);
    ASSERT_TRUE(postRecv(cb.qp.get(), 7).ok());
    ASSERT_TRUE(postWrite(ca.qp.get(), a_, b_, 0, 8192, true, 8192).ok());
    auto send = pollOne(a_.cq.get());
    ASSERT_TRUE(send.ok()) << send.status().toString();
    EXPECT_EQ(send->status, IBV_WC_SUCCESS) << verbs_->wcStatusStr(send->status);
    auto recv = pollOne(b_.cq.get());
    ASSERT_TRUE(recv.ok()) << recv.status().toString();
    EXPECT_EQ(recv->status, IBV_WC_SUCCESS) << verbs_->wcStatusStr(recv->status);
    EXPECT_EQ(ntohl(recv->imm_data), 8192u);
    EXPECT_EQ(memcmp(a_.buf.data(), b_.buf.data(), 8192), 0);
  }
  EXPECT_EQ(qpCount("rxe0"), qps_before_a);
  EXPECT_EQ(qpCount("rxe1"), qps_before_b);
}

// sysfs discovery against the live kernel agrees with verbs, and port counters move.
TEST_F(RxeVerbsTest, SysfsDiscoveryMatchesVerbsAndCountersMove) {
  auto devs = discoverDevices("/sys");
  ASSERT_TRUE(devs.ok()) << devs.status().toString();
  std::vector<std::string> skipped;
  auto ports = selectPorts(*devs, *parseHcaFilter("=rxe0,rxe1"), -1, &skipped);
  ASSERT_EQ(ports.size(), 2u) << (skipped.empty() ? "" : skipped[0]);
  for (const auto& [choice, side] : {std::pair{ports[0], &a_}, std::pair{ports[1], &b_}}) {
    EXPECT_EQ(choice.device, side->name);
    EXPECT_EQ(choice.link_layer, LinkLayer::kEthernet);
    EXPECT_EQ(choice.gid_index, 1);
    EXPECT_EQ(choice.gid, side->gid);
    EXPECT_EQ(choice.netdev, side->name == "rxe0" ? "rxeveth0" : "rxeveth1");
    EXPECT_EQ(choice.active_mtu, mtuBytes(side->mtu)) << "sysfs-derived MTU vs ibv_query_port";
  }
  auto before = readPortCounters("/sys", "rxe0", 1);
  ASSERT_TRUE(before.ok()) << before.status().toString();
  ASSERT_TRUE(before->transmitPackets().has_value());

  Connection ca, cb;
  ASSERT_NO_FATAL_FAILURE(connectPair(&ca, &cb));
  const size_t len = 128 * 1024;
  ASSERT_TRUE(postWrite(ca.qp.get(), a_, b_, 0, len, false, 0).ok());
  auto wc = pollOne(a_.cq.get());
  ASSERT_TRUE(wc.ok()) << wc.status().toString();
  ASSERT_EQ(wc->status, IBV_WC_SUCCESS) << verbs_->wcStatusStr(wc->status);
  auto after = readPortCounters("/sys", "rxe0", 1);
  ASSERT_TRUE(after.ok());
  // hw_counters are refreshed at most every `lifespan` ms (12 ms on rxe): poll briefly.
  for (int i = 0; i < 200 && *after->transmitPackets() == *before->transmitPackets(); ++i) {
    usleep(10000);
    after = readPortCounters("/sys", "rxe0", 1);
    ASSERT_TRUE(after.ok());
  }
  EXPECT_GE(*after->transmitPackets() - *before->transmitPackets(),
            len / static_cast<size_t>(mtuBytes(a_.mtu)));
}

TEST_F(RxeVerbsTest, DeviceCapsAndRateLimitReportHonestly) {
  auto caps = verbs_->queryDevice(a_.ctx.get());
  ASSERT_TRUE(caps.ok()) << caps.status().toString();
  EXPECT_GT(caps->attr.max_qp, 0);
  printf("rxe0: max_qp %d, max_qp_wr %d, query_device_ex %s, packet pacing RC %s (%u-%u kbit/s)\n",
         caps->attr.max_qp, caps->attr.max_qp_wr, caps->has_ex ? "yes" : "no",
         caps->packet_pacing.rc_qp_supported ? "yes" : "no", caps->packet_pacing.min_rate_kbps,
         caps->packet_pacing.max_rate_kbps);
  Connection ca, cb;
  ASSERT_NO_FATAL_FAILURE(connectPair(&ca, &cb));
  ibv_qp_rate_limit_attr rl;
  memset(&rl, 0, sizeof(rl));
  rl.rate_limit = 100000;  // kbit/s
  Status s = verbs_->modifyQpRateLimit(ca.qp.get(), rl);
  if (caps->packet_pacing.rc_qp_supported) {
    EXPECT_TRUE(s.ok()) << s.toString();
  } else {
    // rxe has no packet pacing: the wrapper must say "unimplemented", not fail obscurely.
    EXPECT_EQ(s.code(), StatusCode::kUnimplemented) << s.toString();
  }
  // A healthy device has no fatal async event pending. (Informational ones such as a GID change
  // may legitimately arrive while addresses settle after boot: print them.)
  for (int i = 0; i < 64; ++i) {
    auto ev = verbs_->pollAsyncEvent(a_.ctx.get(), 0);
    ASSERT_TRUE(ev.ok()) << ev.status().toString();
    if (!ev->has_value()) break;
    printf("async event: %s%s\n", (*ev)->description.c_str(), (*ev)->fatal ? " (fatal)" : "");
    EXPECT_FALSE((*ev)->fatal) << (*ev)->description;
  }
}

}  // namespace
}  // namespace tq::ib
