// The plugin's ib transport on a real RDMA stack: Soft-RoCE rxe0 (rxeveth0, 10.77.0.1) and rxe1
// (rxeveth1, 10.77.0.2) inside the rxe VM. Registered with tq_verbs_test(): runs only there.
//
// Covers what the C ABI test (plugin_abi_ib.*, same VM) does not:
//  * tagging: every QP of a comm carries the sender's traffic class (DSCP << 2) read back with
//    ibv_query_qp, the receiver adopts it (or TENANTQOS_IB_CTS_DSCP), several QPs per connection;
//    the DSCP counted on the wire by u32 filters on the veths; the SL at the verbs call through a
//    forwarding libibverbs (TENANTQOS_IBVERBS_LIB; rxe drops the SL, no VLAN/PCP);
//  * pacing accuracy over rxe (100 ms windows at the receiver; 10 ms windows on the wire);
//  * isolation of two tenants: an agent-style HTB tree (tc/ plan + executor) on rxeveth0 that
//    classifies by DSCP, and pacing alone;
//  * bad input: wrong magic in either direction, a silent peer, an unknown QP number, a GID that
//    does not route, a peer killed mid-transfer. Each must fail with context within a deadline,
//    leak no QP/CQ/MR (`rdma resource show`) and leave the next connect working.
// Everything runs under qemu TCG (10-20x slower than native): deadlines are generous.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <sstream>
#include <thread>

#include "common/tenant_shm.h"
#include "common/units.h"
#include "ib/rc_qp.h"
#include "ib/verbs.h"
#include "nccl-plugin/ib/ib_transport.h"
#include "nccl-plugin/ib/ib_wire.h"
#include "nccl-plugin/plugin.h"
#include "tc/executor.h"
#include "tc/plan.h"
#include "tests/functional/plugin_proc_util.h"
#include "tests/support/test_agent.h"

namespace tq::plugin::testing {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kRxe0 = 0;  // device indexes when both ports are used
constexpr int kRxe1 = 1;

std::string sh(const std::string& cmd) {
  std::string out;
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  pclose(f);
  return out;
}

// `rdma resource show` for one device: {"pd": 1, "cq": 2, "qp": 1, "mr": 3, ...}.
std::map<std::string, int> rdmaResources(const std::string& dev) {
  std::map<std::string, int> m;
  std::istringstream in(sh("rdma resource show 2>/dev/null"));
  std::string line;
  while (std::getline(in, line)) {
    const size_t at = line.find(" " + dev + ": ");
    if (at == std::string::npos) continue;
    std::istringstream kv(line.substr(at + dev.size() + 3));
    std::string k;
    int v;
    while (kv >> k >> v) m[k] = v;
  }
  return m;
}

std::string resText(const std::map<std::string, int>& m) {
  std::string s;
  for (const auto& [k, v] : m) s += k + " " + std::to_string(v) + " ";
  return s;
}

// What a comm owns: QPs, CQs, MRs (contexts and PDs belong to the process's devices).
std::string commResources(const std::string& dev) {
  auto m = rdmaResources(dev);
  return "qp " + std::to_string(m["qp"]) + " cq " + std::to_string(m["cq"]) + " mr " +
         std::to_string(m["mr"]);
}

EnvLookup envOf(std::map<std::string, std::string> m) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(m));
  return [shared](const char* name) -> const char* {
    auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

uint64_t netStat(const std::string& dev, const std::string& stat) {
  std::ifstream f("/sys/class/net/" + dev + "/statistics/" + stat);
  uint64_t v = 0;
  f >> v;
  return v;
}

// ---- u32 counters on the egress of a veth (clsact + gact pass, as ib_verbs_rxe_test) -----------

class WireCounters {
 public:
  explicit WireCounters(std::string dev) : dev_(std::move(dev)) {
    (void)sh("tc qdisc del dev " + dev_ + " clsact 2>/dev/null");
    ok_ = system(("tc qdisc add dev " + dev_ + " clsact").c_str()) == 0;
  }
  ~WireCounters() { (void)sh("tc qdisc del dev " + dev_ + " clsact 2>/dev/null"); }
  bool ok() const { return ok_; }
  // Counts RoCEv2 packets (UDP 4791) with this DSCP under filter preference `pref`.
  bool countDscp(int pref, int dscp) {
    char tos[8];
    snprintf(tos, sizeof tos, "0x%02x", dscp << 2);
    const std::string cmd = "tc filter add dev " + dev_ + " egress protocol ip pref " +
                            std::to_string(pref) + " u32 match ip protocol 17 0xff" +
                            " match ip dport 4791 0xffff match ip tos " + tos + " 0xfc action pass";
    return system(cmd.c_str()) == 0;
  }
  uint64_t packets(int pref) {
    const std::string out =
        sh("tc -s filter show dev " + dev_ + " egress pref " + std::to_string(pref));
    const size_t at = out.find("Sent ");
    unsigned long long bytes = 0, pkts = 0;
    if (at == std::string::npos ||
        sscanf(out.c_str() + at, "Sent %llu bytes %llu pkt", &bytes, &pkts) != 2) {
      return 0;
    }
    return pkts;
  }

 private:
  std::string dev_;
  bool ok_ = false;
};

// ---- the fixture: in-process plugins over the real transport ----------------------------------

class PluginIbTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto v = tq::ib::sharedVerbs();
    ASSERT_TRUE(v.ok()) << v.status().toString();
    auto names = (*v)->deviceNames();
    ASSERT_TRUE(names.ok() && names->size() >= 2)
        << "needs rxe0 and rxe1: run through tests/rxe/rxe-vm (ctest -R rxe_verbs_suite)";
  }

  std::map<std::string, std::string> baseEnv() {
    return {{"TENANTQOS_TRANSPORT", "ib"},
            {"TENANTQOS_SOCKET_IFNAME", "lo"},
            {"TENANTQOS_RUN_DIR", dir_.path() + "/run"},
            {"TENANTQOS_HANDSHAKE_TIMEOUT_MS", "10000"},
            {"TENANTQOS_IB_TIMEOUT", "16"}};  // ~270 ms per try under TCG
  }

  std::unique_ptr<Plugin> makePlugin(std::map<std::string, std::string> extra = {}) {
    auto env = baseEnv();
    for (auto& [k, v] : extra) env[k] = v;
    auto params = loadParams(envOf(env));
    EXPECT_TRUE(params.ok()) << params.status().toString();
    if (!params.ok()) return nullptr;
    auto p = Plugin::create(*params, realClock());
    EXPECT_TRUE(p.ok()) << p.status().toString();
    if (!p.ok()) return nullptr;
    EXPECT_STREQ((*p)->transport().name(), "ib");
    return std::move(p).value();
  }

  // The agent (its attach server and tenant memory) over <dir>/run: before the first call the
  // run directory does not exist, so the plugin runs as on a node without an agent.
  // `rate` paces what the tenant sends; what it receives gets `rx_rate` (0: 10 x rate, so a
  // test of sending measures the sender).
  TenantShm* agent(const std::string& tenant, uint64_t rate, int dscp, int sl, int tc,
                   bool paced = true, uint64_t rx_rate = 0) {
    if (!agent_) agent_ = std::make_unique<tq::testing::TestAgent>(dir_.path() + "/run");
    EXPECT_EQ(agent_->failure(), "");
    TenantParams p;
    p.policy_version = 1;
    p.buckets = nodeBuckets(rate, 256 * 1024);
    p.buckets[1].rate_bytes_per_second = rx_rate != 0 ? rx_rate : 10 * rate;
    p.dscp = static_cast<uint32_t>(dscp);
    p.service_level = static_cast<uint32_t>(sl);
    p.paced = paced;
    if (tc >= 0) p.traffic_classes = {tc};
    return agent_->tenant(tenant, p);
  }
  std::unique_ptr<tq::testing::TestAgent> agent_;

  struct Pair {
    void* send = nullptr;
    void* recv = nullptr;
    void* listen = nullptr;
  };

  // Listen on rxe1 in `rctx`, connect from rxe0 in `sctx`, polled in one thread.
  Pair connectPair(Plugin& sp, NetContext* sctx, Plugin& rp, NetContext* rctx) {
    Pair pr;
    uint8_t handle[kHandleBytes];
    Status l = rp.listen(rctx, kRxe1, handle, &pr.listen);
    EXPECT_TRUE(l.ok()) << l.toString();
    const auto until = Clock::now() + std::chrono::seconds(30);
    while ((pr.send == nullptr || pr.recv == nullptr) && Clock::now() < until) {
      if (pr.send == nullptr) {
        Status s = sp.connect(sctx, sctx->traffic_class, kRxe0, handle, &pr.send);
        EXPECT_TRUE(s.ok()) << s.toString();
        if (!s.ok()) break;
      }
      if (pr.recv == nullptr) {
        Status s = rp.accept(pr.listen, &pr.recv);
        EXPECT_TRUE(s.ok()) << s.toString();
        if (!s.ok()) break;
      }
    }
    EXPECT_TRUE(pr.send != nullptr && pr.recv != nullptr) << "connect/accept did not complete";
    return pr;
  }

  void closePair(Plugin& sp, Plugin& rp, Pair& pr) {
    if (pr.send != nullptr) {
      EXPECT_TRUE(sp.closeSend(pr.send).ok());
    }
    if (pr.recv != nullptr) {
      EXPECT_TRUE(rp.closeRecv(pr.recv).ok());
    }
    if (pr.listen != nullptr) {
      EXPECT_TRUE(rp.closeListen(pr.listen).ok());
    }
    pr = Pair{};
  }

  // One message (or n messages into one multi-receive), byte-checked.
  void transfer(Plugin& sp, Plugin& rp, const Pair& pr, std::vector<size_t> sizes, unsigned seed) {
    const int n = static_cast<int>(sizes.size());
    std::vector<std::vector<uint8_t>> out(sizes.size()), in(sizes.size());
    void* data[kMaxRecvs];
    size_t cap[kMaxRecvs];
    int tags[kMaxRecvs];
    void* rmr[kMaxRecvs];
    for (int i = 0; i < n; ++i) {
      out[i].resize(std::max<size_t>(sizes[i], 1));
      for (size_t b = 0; b < sizes[i]; ++b) out[i][b] = static_cast<uint8_t>(b * 131 + seed + i);
      in[i].assign(sizes[i] + 64, 0x5a);
      data[i] = in[i].data();
      cap[i] = in[i].size();
      tags[i] = 40 + i;
      ASSERT_TRUE(rp.regMr(pr.recv, data[i], cap[i], NCCL_PTR_HOST, &rmr[i]).ok());
    }
    void* rreq = nullptr;
    const auto until = Clock::now() + std::chrono::seconds(60);
    while (rreq == nullptr) {
      Status s = rp.irecv(pr.recv, n, data, cap, tags, rmr, &rreq);
      ASSERT_TRUE(s.ok()) << s.toString();
      ASSERT_LT(Clock::now(), until);
    }
    std::vector<void*> sreq(sizes.size(), nullptr), smr(sizes.size(), nullptr);
    for (int i = n - 1; i >= 0; --i) {
      ASSERT_TRUE(sp.regMr(pr.send, out[i].data(), out[i].size(), NCCL_PTR_HOST, &smr[i]).ok());
      while (sreq[i] == nullptr) {
        Status s = sp.isend(pr.send, out[i].data(), sizes[i], 40 + i, smr[i], &sreq[i]);
        ASSERT_TRUE(s.ok()) << s.toString();
        ASSERT_LT(Clock::now(), until) << "isend never got a clear-to-send";
      }
    }
    int rdone = 0;
    int got[kMaxRecvs];
    std::vector<int> sdone(sizes.size(), 0);
    while (!rdone || std::count(sdone.begin(), sdone.end(), 0) > 0) {
      for (int i = 0; i < n; ++i) {
        if (!sdone[i]) {
          Status s = sp.test(sreq[i], &sdone[i], nullptr);
          ASSERT_TRUE(s.ok()) << s.toString();
        }
      }
      if (!rdone) {
        Status s = rp.test(rreq, &rdone, got);
        ASSERT_TRUE(s.ok()) << s.toString();
      }
      ASSERT_LT(Clock::now(), until) << "transfer did not complete";
    }
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(got[i], static_cast<int>(sizes[i])) << "buffer " << i;
      EXPECT_EQ(std::memcmp(in[i].data(), out[i].data(), sizes[i]), 0) << "buffer " << i;
      EXPECT_EQ(in[i][sizes[i]], 0x5a) << "written past message " << i;
      EXPECT_TRUE(sp.deregMr(pr.send, smr[i]).ok());
      EXPECT_TRUE(rp.deregMr(pr.recv, rmr[i]).ok());
    }
  }

  TempDir dir_;
};

// ---- tagging ------------------------------------------------------------------------------------

struct QpAv {
  int state = -1;
  int is_global = -1;
  int traffic_class = -1;
  int sgid_index = -1;
  int sl = -1;
};

std::vector<QpAv> queryQps(const std::vector<ibv_qp*>& qps) {
  std::vector<QpAv> v;
  const tq::ib::Verbs* verbs = *tq::ib::sharedVerbs();
  for (ibv_qp* qp : qps) {
    auto q = verbs->queryQp(qp, IBV_QP_AV | IBV_QP_STATE);
    EXPECT_TRUE(q.ok()) << q.status().toString();
    if (!q.ok()) continue;
    v.push_back({q->attr.qp_state, q->attr.ah_attr.is_global, q->attr.ah_attr.grh.traffic_class,
                 q->attr.ah_attr.grh.sgid_index, q->attr.ah_attr.sl});
  }
  return v;
}

TEST_F(PluginIbTest, EveryQpCarriesTheSendersMarkingAndTheReceiverAdoptsIt) {
  agent("tqrxe-tag", 0, 46, 5, 3, /*paced=*/false);
  auto plugin = makePlugin({{"TENANTQOS_IB_QPS_PER_CONN", "3"}});
  ASSERT_NE(plugin, nullptr);
  auto sctx = plugin->newContext(1, 3);   // trafficClass 3 -> tenant tqrxe-tag
  auto rctx = plugin->newContext(1, -1);  // the receiver's own tenant: default, DSCP 0
  ASSERT_TRUE(sctx.ok() && rctx.ok());
  Pair pr = connectPair(*plugin, *sctx, *plugin, *rctx);
  ASSERT_TRUE(pr.send && pr.recv);
  const auto s = queryQps(ib::ibQpsOf(Plugin::sendCommOf(pr.send)));
  const auto r = queryQps(ib::ibQpsOf(Plugin::recvCommOf(pr.recv)));
  ASSERT_EQ(s.size(), 3u);
  ASSERT_EQ(r.size(), 3u);
  for (const auto* side : {&s, &r}) {
    for (const QpAv& q : *side) {
      EXPECT_EQ(q.state, IBV_QPS_RTS);
      EXPECT_EQ(q.is_global, 1);
      EXPECT_EQ(q.traffic_class, 46 << 2);
      EXPECT_EQ(q.sgid_index, 1);
    }
  }
  std::printf(
      "sender QPs: traffic_class %d (DSCP 46); receiver QPs adopt %d; ah_attr.sl reads "
      "back %d (set 5; rxe does not keep the SL)\n",
      s[0].traffic_class, r[0].traffic_class, s[0].sl);
  EXPECT_EQ(Plugin::recvCommOf(pr.recv)->peerQos().dscp, 46);
  EXPECT_EQ(Plugin::recvCommOf(pr.recv)->peerQos().service_level, 5);
  EXPECT_EQ(Plugin::tenantOf(pr.recv)->tenant(), "tqrxe-tag") << "receive accounted to sender";
  // Three QPs: messages rotate over them, a multi-receive too.
  for (unsigned k = 0; k < 7; ++k) transfer(*plugin, *plugin, pr, {100000 + k * 4099}, k);
  transfer(*plugin, *plugin, pr, {5000, 0, 70000, 1}, 9);
  transfer(*plugin, *plugin, pr, {0}, 10);
  closePair(*plugin, *plugin, pr);

  // TENANTQOS_IB_CTS_DSCP: the receiver's QPs (CTS writes, ACKs) use their own DSCP.
  auto cts = makePlugin({{"TENANTQOS_IB_CTS_DSCP", "10"}});
  ASSERT_NE(cts, nullptr);
  auto c1 = cts->newContext(1, 3), c2 = cts->newContext(1, -1);
  Pair p2 = connectPair(*cts, *c1, *cts, *c2);
  ASSERT_TRUE(p2.send && p2.recv);
  EXPECT_EQ(queryQps(ib::ibQpsOf(Plugin::sendCommOf(p2.send)))[0].traffic_class, 46 << 2);
  EXPECT_EQ(queryQps(ib::ibQpsOf(Plugin::recvCommOf(p2.recv)))[0].traffic_class, 10 << 2);
  closePair(*cts, *cts, p2);
  for (auto* c : {*sctx, *rctx, *c1, *c2}) {
    Plugin& owner = (c == *c1 || c == *c2) ? *cts : *plugin;
    EXPECT_TRUE(owner.finalize(c).ok());
  }
}

TEST_F(PluginIbTest, DscpIsCountedOnTheWireInBothDirections) {
  agent("tqrxe-wire", 0, 46, 5, 4, /*paced=*/false);
  WireCounters tx("rxeveth0"), rx("rxeveth1");
  ASSERT_TRUE(tx.ok() && rx.ok());
  ASSERT_TRUE(tx.countDscp(1, 46) && tx.countDscp(2, 0) && tx.countDscp(3, 10));
  ASSERT_TRUE(rx.countDscp(1, 46) && rx.countDscp(2, 0) && rx.countDscp(3, 10));
  {
    auto plugin = makePlugin();
    ASSERT_NE(plugin, nullptr);
    auto sctx = plugin->newContext(1, 4), rctx = plugin->newContext(1, -1);
    Pair pr = connectPair(*plugin, *sctx, *plugin, *rctx);
    ASSERT_TRUE(pr.send && pr.recv);
    for (unsigned k = 0; k < 4; ++k) transfer(*plugin, *plugin, pr, {2u << 20}, k);
    closePair(*plugin, *plugin, pr);
    EXPECT_TRUE(plugin->finalize(*sctx).ok());
    EXPECT_TRUE(plugin->finalize(*rctx).ok());
  }
  const uint64_t data46 = tx.packets(1), data0 = tx.packets(2);
  const uint64_t back46 = rx.packets(1), back0 = rx.packets(2);
  std::printf(
      "rxeveth0 (data): %llu packets DSCP 46, %llu DSCP 0; rxeveth1 (CTS writes, ACKs): "
      "%llu DSCP 46, %llu DSCP 0\n",
      (unsigned long long)data46, (unsigned long long)data0, (unsigned long long)back46,
      (unsigned long long)back0);
  EXPECT_GE(data46, (8u << 20) / 4096) << "8 MiB in <= 4096-byte packets";
  EXPECT_EQ(data0, 0u) << "every packet of the connection is marked";
  EXPECT_GE(back46, 4u) << "the receiver adopts the sender's DSCP for its CTS writes and ACKs";
  EXPECT_EQ(back0, 0u);

  // With TENANTQOS_IB_CTS_DSCP the receiver's packets carry that DSCP instead.
  const uint64_t before10 = rx.packets(3), before46 = rx.packets(1);
  {
    auto plugin = makePlugin({{"TENANTQOS_IB_CTS_DSCP", "10"}});
    ASSERT_NE(plugin, nullptr);
    auto sctx = plugin->newContext(1, 4), rctx = plugin->newContext(1, -1);
    Pair pr = connectPair(*plugin, *sctx, *plugin, *rctx);
    ASSERT_TRUE(pr.send && pr.recv);
    transfer(*plugin, *plugin, pr, {1u << 20}, 3);
    closePair(*plugin, *plugin, pr);
    EXPECT_TRUE(plugin->finalize(*sctx).ok());
    EXPECT_TRUE(plugin->finalize(*rctx).ok());
  }
  std::printf("with TENANTQOS_IB_CTS_DSCP=10: rxeveth1 %llu packets DSCP 10, %llu more DSCP 46\n",
              (unsigned long long)(rx.packets(3) - before10),
              (unsigned long long)(rx.packets(1) - before46));
  EXPECT_GE(rx.packets(3) - before10, 1u);
  EXPECT_EQ(rx.packets(1) - before46, 0u);
  EXPECT_EQ(tx.packets(3), 0u) << "the sender's data keeps the tenant's DSCP";
}

// The SL cannot be seen on rxe (dropped; no VLAN), so it is checked where the plugin hands it to
// the verbs API: a forwarding libibverbs records every ibv_modify_qp of both processes of a
// tenantqos-perf run that loads the shipped .so like NCCL does.
TEST_F(PluginIbTest, ServiceLevelReachesEveryModifyQpOfBothSides) {
  const std::string record = dir_.path() + "/modify_qp.log";
  ProcResult r = run({TQ_PERF_BIN,
                      "sendrecv",
                      "--local",
                      "2",
                      "--unidirectional",
                      "-b",
                      "1M",
                      "-e",
                      "1M",
                      "-n",
                      "5",
                      "-w",
                      "1",
                      "--plugin",
                      TQ_PLUGIN_SO,
                      "--timeout",
                      "60",
                      "--env",
                      "TENANTQOS_TRANSPORT=ib",
                      "--env",
                      "TENANTQOS_SOCKET_IFNAME=lo",
                      "--env",
                      "TENANTQOS_RUN_DIR=" + dir_.path() + "/run",
                      "--env",
                      "TENANTQOS_SL=6",
                      "--env",
                      "TENANTQOS_DSCP=34",
                      "--env",
                      std::string("TENANTQOS_IBVERBS_LIB=") + TQ_VERBS_RECORDER,
                      "--env",
                      "TQ_VERBS_RECORD=" + record,
                      "--env",
                      "TENANTQOS_IB_QPS_PER_CONN=2",
                      "--rank-env",
                      "0:TENANTQOS_IB_HCA==rxe0",
                      "--rank-env",
                      "1:TENANTQOS_IB_HCA==rxe1"},
                     {}, 120);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream f(record);
  std::string line;
  std::map<int, int> rtr_by_pid;
  const std::regex re(
      "modify_qp pid=(\\d+) qpn=0x[0-9a-f]+ mask=0x([0-9a-f]+) state=(\\d+) sl=(\\d+) "
      "is_global=(\\d) tclass=(\\d+) sgid_index=(\\d+) rc=(-?\\d+)");
  int lines = 0;
  while (std::getline(f, line)) {
    std::smatch m;
    ASSERT_TRUE(std::regex_search(line, m, re)) << line;
    ++lines;
    const unsigned mask = std::stoul(m[2].str(), nullptr, 16);
    if ((mask & IBV_QP_AV) == 0) continue;  // INIT and RTS carry no address vector
    ++rtr_by_pid[std::stoi(m[1].str())];
    EXPECT_EQ(std::stoi(m[3].str()), IBV_QPS_RTR) << line;
    EXPECT_EQ(std::stoi(m[4].str()), 6) << "SL handed to the verbs call: " << line;
    EXPECT_EQ(std::stoi(m[5].str()), 1) << line;
    EXPECT_EQ(std::stoi(m[6].str()), 34 << 2) << line;
    EXPECT_EQ(std::stoi(m[7].str()), 1) << line;
    EXPECT_EQ(std::stoi(m[8].str()), 0) << line;
  }
  std::printf("%d modify_qp calls recorded; RTR with sl 6 / tclass 136 per process:", lines);
  for (const auto& [pid, n] : rtr_by_pid) std::printf(" pid %d: %d", pid, n);
  std::printf("\n");
  ASSERT_EQ(rtr_by_pid.size(), 2u) << "sender and receiver processes";
  for (const auto& [pid, n] : rtr_by_pid) EXPECT_EQ(n, 2) << "two QPs per connection end";
}

// ---- pacing -------------------------------------------------------------------------------------

// Samples a netdev's tx_bytes every ~10 ms while alive.
class WireSampler {
 public:
  explicit WireSampler(std::string dev) : dev_(std::move(dev)) {
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        samples_.push_back({monotonicSeconds(), netStat(dev_, "tx_bytes")});
        ::usleep(10'000);
      }
    });
  }
  ~WireSampler() { stop(); }
  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  struct Sample {
    double t;
    uint64_t bytes;
  };
  const std::vector<Sample>& samples() const { return samples_; }

 private:
  std::string dev_;
  std::atomic<bool> stop_{false};
  std::vector<Sample> samples_;
  std::thread thread_;
};

class PluginIbPacingTest : public PluginIbTest {
 protected:
  std::vector<std::string> perf(double seconds, const std::string& size, const std::string& tenant,
                                std::vector<std::string> extra = {}) {
    extra.insert(extra.begin(), {"--rank-env", "0:TENANTQOS_IB_HCA==rxe0", "--rank-env",
                                 "1:TENANTQOS_IB_HCA==rxe1"});
    return perfArgv({.bin = TQ_PERF_BIN,
                     .plugin = TQ_PLUGIN_SO,
                     .seconds = seconds,
                     .size = size,
                     .tenant = tenant,
                     .extra = std::move(extra)});
  }
  // TENANTQOS_CATCHUP_MS 100: under TCG on a busy 2-core host a rank can be off the CPU for
  // tens of milliseconds; the default 20 ms of make-up time then loses allocated tokens (A at
  // 120 Mbit/s measured 0.94 of its rate once). Catch-up never exceeds the rate, it only bounds
  // how late a retry may come and still use tokens nobody took.
  std::map<std::string, std::string> perfEnv() {
    return {{"TENANTQOS_TRANSPORT", "ib"},
            {"TENANTQOS_SOCKET_IFNAME", "lo"},
            {"TENANTQOS_RUN_DIR", dir_.path() + "/run"},
            {"TENANTQOS_CATCHUP_MS", "100"},
            {"NCCL_DEBUG", "INFO"}};
  }

  // `size`: large enough to be cut into many chunks (chunk = rate x 1 ms), small enough that
  // whole-message completions at the receiver quantise a 100 ms-window sum by < 1 %.
  // A rate short of 0.97 is measured a second time (doneTrying(), plugin_proc_util.h).
  void expectPaced(uint64_t rate, const std::string& size) {
    const std::string tenant = "tqrxe-pace";
    auto w = agent(tenant, rate, 26, 2, -1);
    int attempt = 1;
    while (!expectPacedOnce(rate, size, tenant, attempt)) ++attempt;
    TenantUsage u = w->collect(0, 0);
    EXPECT_GT(u.tx_bytes, 0u);
  }
  // One run of expectPaced(); true when done (doneTrying()).
  bool expectPacedOnce(uint64_t rate, const std::string& size, const std::string& tenant,
                       int attempt) {
    WireSampler wire("rxeveth0");
    ProcResult r = run(perf(4.0, size, tenant), perfEnv(), 90);
    wire.stop();
    EXPECT_EQ(r.exit_code, 0) << r.err;
    if (r.exit_code != 0) return true;
    EXPECT_NE(r.err.find("transport ib"), std::string::npos) << r.err;
    const RateWindow win = receiverWindow(r.out, 1);
    EXPECT_GE(win.seconds, 2.0) << r.out;
    if (win.seconds < 2.0) return true;
    const double ratio = win.rate() / static_cast<double>(rate);
    // ~10 ms windows on the wire, over the steady middle of the stream (between 20 % and 80 %
    // of the bytes the run put on rxeveth0).
    std::vector<double> rates;
    const auto& s = wire.samples();
    EXPECT_GE(s.size(), 2u);
    if (s.size() < 2) return true;
    const double total = static_cast<double>(s.back().bytes - s.front().bytes);
    const double lo = static_cast<double>(s.front().bytes) + 0.2 * total;
    const double hi = static_cast<double>(s.front().bytes) + 0.8 * total;
    std::string series;
    for (size_t i = 1; i < s.size(); ++i) {
      const double dt = s[i].t - s[i - 1].t;
      if (static_cast<double>(s[i - 1].bytes) < lo || static_cast<double>(s[i].bytes) > hi ||
          dt <= 0) {
        continue;
      }
      rates.push_back(static_cast<double>(s[i].bytes - s[i - 1].bytes) / dt);
      if (rates.size() <= 40) {
        series += std::to_string(static_cast<int>(rates.back() * 8 / 1e6)) + " ";
      }
    }
    EXPECT_GE(rates.size(), 20u);
    if (rates.size() < 20) return true;
    double mean = 0, var = 0;
    for (double x : rates) mean += x;
    mean /= static_cast<double>(rates.size());
    for (double x : rates) var += (x - mean) * (x - mean);
    const double cv = std::sqrt(var / static_cast<double>(rates.size())) / mean;
    std::vector<double> sorted = rates;
    std::sort(sorted.begin(), sorted.end());
    const double p10 = sorted[sorted.size() / 10] / mean,
                 p90 = sorted[sorted.size() * 9 / 10] / mean;
    std::printf(
        "ib pacing at %s, %s messages (try %d): achieved %s over %.2f s of 100 ms windows, "
        "ratio %.4f; wire (headers included) over %zu ~10 ms windows: mean %s, cv %.3f, "
        "p10 %.2f, p90 %.2f of the mean\n",
        formatRate(rate).c_str(), size.c_str(), attempt,
        formatRate(static_cast<uint64_t>(win.rate())).c_str(), win.seconds, ratio, rates.size(),
        formatRate(static_cast<uint64_t>(mean)).c_str(), cv, p10, p90);
    std::printf("first 10 ms windows (Mbit/s): %s\n", series.c_str());
    EXPECT_LE(ratio, 1.01);
    // Whole messages would make 10 ms windows either empty or one message (cv > 1 at these
    // rates); chunks of rate x 1 ms keep every window near the rate.
    EXPECT_LT(cv, 0.35);
    EXPECT_GT(p10, 0.5);
    EXPECT_LT(p90, 1.5);
    return doneTrying(attempt, ratio);
  }
};

TEST_F(PluginIbPacingTest, Rate100MbitIsHeldAt100msAnd10msScales) {
  expectPaced(100'000'000 / 8, "256K");
}
TEST_F(PluginIbPacingTest, Rate200MbitIsHeldAt100msAnd10msScales) {
  expectPaced(200'000'000 / 8, "512K");
}

// ---- isolation ----------------------------------------------------------------------------------

class PluginIbIsolationTest : public PluginIbPacingTest {
 protected:
  // Well below what the rig moves with two jobs under TCG (~0.6 Gbit/s when the host is busy).
  static constexpr uint64_t kCapacity = 200'000'000 / 8;
  static constexpr uint64_t kGuaranteeA = 120'000'000 / 8;
  static constexpr uint64_t kGuaranteeB = 40'000'000 / 8;

  // Two jobs (tenants A and B) streaming rxe0 -> rxe1 at the same time; their receivers' rates
  // over the common window. `extra` goes to both (e.g. message size and window).
  std::pair<double, double> runBoth(std::vector<std::string> env_a, std::vector<std::string> env_b,
                                    const std::string& size,
                                    const std::vector<std::string>& extra = {}) {
    std::vector<std::string> ea = extra, eb = extra;
    for (auto& e : env_a) ea.insert(ea.end(), {"--env", e});
    for (auto& e : env_b) eb.insert(eb.end(), {"--env", e});
    Proc a(perf(4.0, size, "tqrxe-a", ea), perfEnv());
    Proc b(perf(4.0, size, "tqrxe-b", eb), perfEnv());
    ProcResult ra = a.wait(90), rb = b.wait(90);
    EXPECT_EQ(ra.exit_code, 0) << ra.err;
    EXPECT_EQ(rb.exit_code, 0) << rb.err;
    const TogetherWindows t = togetherWindows({&ra.out, &rb.out});
    EXPECT_GT(t.span_s, 1.5) << "the two jobs barely overlapped";
    return {t.windows[0].rate(), t.windows[1].rate()};
  }
  void report(const char* mode, std::pair<double, double> r) {
    std::printf(
        "%s: tenant A %s (guarantee %s, attainment %.3f), tenant B %s (guarantee %s, "
        "attainment %.3f)\n",
        mode, formatRate(static_cast<uint64_t>(r.first)).c_str(), formatRate(kGuaranteeA).c_str(),
        r.first / kGuaranteeA, formatRate(static_cast<uint64_t>(r.second)).c_str(),
        formatRate(kGuaranteeB).c_str(), r.second / kGuaranteeB);
  }
  // run() (runBoth() with the case's arguments), reported under `mode`, once more while the
  // lesser of the two attainments (received / (guarantee x `share`)) is short of 0.97
  // (doneTrying(), plugin_proc_util.h). Returns the last try's rates.
  std::pair<double, double> runBothTried(const char* mode,
                                         const std::function<std::pair<double, double>()>& run,
                                         double share = 1.0) {
    for (int attempt = 1;; ++attempt) {
      const auto r = run();
      report(mode, r);
      const double least =
          std::min(r.first / (kGuaranteeA * share), r.second / (kGuaranteeB * share));
      if (doneTrying(attempt, least)) return r;
    }
  }
};

// The agent's tc tree (tc/ plan and executor, as tenantqos-agent builds it) on the rxe netdev:
// HTB classes at the guarantees, u32 filters on the DSCP the plugin puts in the GRH. The jobs
// are not paced by the plugin: tc alone isolates them.
//
// Two concessions to the rig, both measured:
//  * A qdisc on a veth lets packets of one QP leave from whichever CPU dequeues them, and veth
//    hands each packet to the receiving CPU's backlog (netif_rx): packets of one RC flow get
//    re-ordered, rxe answers with sequence NAKs and go-back-N retransmissions (hw_counters
//    out_of_seq_request, duplicate_request, completer_retry_err), and throughput collapses or
//    a job stalls for good. Steering both veths' receive processing to one CPU (RPS) restores
//    ordering. A real NIC keeps a flow in order (one transmit queue under the HTB root, RSS on
//    receive), so this is the veth's artefact, not a property of the tc tree.
//  * Under qemu TCG on a busy host HTB's watchdog and the softirqs that release throttled
//    packets run milliseconds late: buckets of 1 ms at the class rate (the plan's sizing for real
//    NICs) empty long before the next release. The test deepens every bucket to 1 MiB (~40 ms at
//    200 Mbit/s) and keeps 32 x 1 MiB messages in flight per job so the queues never run dry.
TEST_F(PluginIbIsolationTest, HtbTreeOnTheRxeNetdevGivesEachTenantItsGuarantee) {
  struct Rps {
    std::map<std::string, std::string> saved;
    Rps() {
      for (const char* dev : {"rxeveth0", "rxeveth1"}) {
        const std::string path = std::string("/sys/class/net/") + dev + "/queues/rx-0/rps_cpus";
        std::ifstream in(path);
        std::getline(in, saved[path]);
        std::ofstream(path) << "1\n";
      }
    }
    ~Rps() {
      for (const auto& [path, v] : saved) std::ofstream(path) << (v.empty() ? "0" : v) << "\n";
    }
  } rps;
  tq::tc::DevicePolicy policy;
  policy.device = "rxeveth0";
  policy.capacity = kCapacity;
  tq::tc::TenantClassSpec a, b;
  a.name = "tqrxe-a";
  a.guarantee = kGuaranteeA;
  a.limit = kCapacity;
  a.dscp = 10;
  b.name = "tqrxe-b";
  b.guarantee = kGuaranteeB;
  b.limit = kCapacity;
  b.dscp = 20;
  policy.tenants = {a, b};
  auto plan = tq::tc::makeDevicePlan(policy);
  ASSERT_TRUE(plan.ok()) << plan.status().toString();
  for (auto& c : plan->classes) {
    c.htb.burst = std::max<uint32_t>(c.htb.burst, 1u << 20);
    c.htb.cburst = std::max<uint32_t>(c.htb.cburst, 1u << 20);
  }
  auto nl = tq::tc::openTcNetlink();
  ASSERT_TRUE(nl.ok()) << nl.status().toString();
  tq::tc::Executor exec(**nl);
  struct Cleanup {
    tq::tc::Executor& e;
    ~Cleanup() { (void)e.removeAll("rxeveth0"); }
  } cleanup{exec};
  auto applied = exec.apply(*plan);
  ASSERT_TRUE(applied.ok()) << applied.status().toString();

  // HTB meters link bytes; the receivers count payload. A 4096-byte RoCEv2 payload travels in a
  // 4154-byte frame (Ethernet 14, IPv4 20, UDP 8, BTH 12, ICRC 4, and a 16-byte RETH on a
  // message's first packet), so a class at exactly its rate delivers 4096/4154 of it as payload.
  constexpr double kPayloadShare = 4096.0 / 4154.0;
  const auto r = runBothTried(
      "agent HTB tree on rxeveth0 (200 Mbit/s link), unpaced",
      [&] {
        return runBoth({"TENANTQOS_DSCP=10"}, {"TENANTQOS_DSCP=20"}, "1M", {"--window", "32"});
      },
      kPayloadShare);
  std::printf("%s", sh("tc -s class show dev rxeveth0 | grep -E 'class htb|Sent'").c_str());
  // Upper bound: the link class's deepened 1 MiB bucket is sent on top of the rate once (about
  // 0.6 % of a ~7 s run at 200 Mbit/s; measured 1.0106 on a quiet host), so 1.02, not 1.01.
  EXPECT_LE((r.first + r.second) / (kCapacity * kPayloadShare), 1.02) << "the link shaper holds";
}

// No tc at all: the plugin paces each tenant at the rate the agent allocated (here exactly the
// guarantees, on a link that could carry more), so each gets its guarantee and no more.
TEST_F(PluginIbIsolationTest, PacingAloneGivesEachTenantItsAllocation) {
  agent("tqrxe-a", kGuaranteeA, 10, 1, -1);
  agent("tqrxe-b", kGuaranteeB, 20, 2, -1);
  const auto r = runBothTried("pacing alone (agent files at the guarantees), no tc",
                              [&] { return runBoth({}, {}, "256K"); });
  EXPECT_LE(r.first / kGuaranteeA, 1.01);
  EXPECT_LE(r.second / kGuaranteeB, 1.01);
}

// Ingress pacing: both tenants send as fast as they like (tx buckets at 10 x the link) into one
// receiver (rxe1), whose rx buckets hold each at its guarantee: a clear-to-send goes out only
// when the receiver's bucket has the posted bytes, so what arrives is what the receiver let in.
TEST_F(PluginIbIsolationTest, ReceiverPacingGivesEachTenantItsIngressAllocation) {
  agent("tqrxe-a", 10 * kCapacity, 10, 1, -1, true, kGuaranteeA);
  agent("tqrxe-b", 10 * kCapacity, 20, 2, -1, true, kGuaranteeB);
  const auto r = runBothTried("receiver pacing alone (rx buckets at the guarantees), no tc",
                              [&] { return runBoth({}, {}, "256K"); });
  EXPECT_LE(r.first / kGuaranteeA, 1.01);
  EXPECT_LE(r.second / kGuaranteeB, 1.01);
}

// ---- bad input ----------------------------------------------------------------------------------

// A blocking TCP client/server for fake peers (loopback; every read bounded by SO_RCVTIMEO).
int tcpConnect(const oob::SocketAddress& to) {
  const int fd = ::socket(to.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&to.storage), to.len) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool readAll(int fd, uint8_t* buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::recv(fd, buf + got, n - got, 0);
    if (r <= 0) return false;
    got += static_cast<size_t>(r);
  }
  return true;
}

class PluginIbBadInputTest : public PluginIbTest {
 protected:
  void SetUp() override {
    PluginIbTest::SetUp();
    plugin_ = makePlugin({{"TENANTQOS_IB_TIMEOUT", "14"}, {"TENANTQOS_IB_RETRY_CNT", "2"}});
    ASSERT_NE(plugin_, nullptr);
    auto c = plugin_->newContext(1, -1);
    ASSERT_TRUE(c.ok());
    ctx_ = *c;
    base0_ = rdmaResources("rxe0");
    base1_ = rdmaResources("rxe1");
    base0_comm_ = commResources("rxe0");
    ASSERT_GT(base0_.count("qp"), 0u) << sh("rdma resource show");
  }
  void TearDown() override {
    if (ctx_ != nullptr) {
      EXPECT_TRUE(plugin_->finalize(ctx_).ok());
    }
  }

  // Listens on rxe1; the handle's TCP address is where a fake connector goes.
  oob::SocketAddress listenAddr(void** listen) {
    uint8_t handle[kHandleBytes];
    EXPECT_TRUE(plugin_->listen(ctx_, kRxe1, handle, listen).ok());
    auto h = ib::parseIbHandle(handle, sizeof handle);
    EXPECT_TRUE(h.ok());
    nonce_ = h->nonce;
    return h->addr;
  }

  // Polls accept until it fails or returns a comm; the error (if any) and the time it took.
  Status acceptUntil(void* listen, void** recv, double limit_s, double* took) {
    const double t0 = monotonicSeconds();
    *recv = nullptr;
    while (*recv == nullptr && monotonicSeconds() - t0 < limit_s) {
      Status s = plugin_->accept(listen, recv);
      if (!s.ok()) {
        *took = monotonicSeconds() - t0;
        return s;
      }
    }
    *took = monotonicSeconds() - t0;
    return okStatus();
  }

  ib::IbHello fakeHello(const std::string& gid, uint32_t qpn) {
    ib::IbHello h;
    h.nonce = nonce_;
    h.conn_id = 0x7e57;
    h.tenant = "tqrxe-fake";
    h.ep.link_layer = ib::LinkLayerCode::kEthernet;
    h.ep.port = 1;
    h.ep.mtu_bytes = 4096;
    h.ep.gid = *tq::ib::parseGid(gid);
    h.ep.psn = 1;
    h.ep.nqps = 1;
    h.ep.qpn[0] = qpn;
    h.ep.device = "fake0";
    h.cts_addr = 0x10000;
    h.cts_rkey = 1;
    return h;
  }

  // After every failure: nothing of it is left on either device, and a real pair still works.
  void expectNoLeakAndReconnect() {
    EXPECT_EQ(resText(rdmaResources("rxe0")), resText(base0_)) << "resources leaked on rxe0";
    EXPECT_EQ(resText(rdmaResources("rxe1")), resText(base1_)) << "resources leaked on rxe1";
    Pair pr = connectPair(*plugin_, ctx_, *plugin_, ctx_);
    ASSERT_TRUE(pr.send && pr.recv);
    transfer(*plugin_, *plugin_, pr, {1u << 20}, 7);
    closePair(*plugin_, *plugin_, pr);
    EXPECT_EQ(resText(rdmaResources("rxe0")), resText(base0_));
    EXPECT_EQ(resText(rdmaResources("rxe1")), resText(base1_));
  }

  std::unique_ptr<Plugin> plugin_;
  NetContext* ctx_ = nullptr;
  uint64_t nonce_ = 0;
  std::map<std::string, int> base0_, base1_;
  std::string base0_comm_;
};

TEST_F(PluginIbBadInputTest, HelloWithAWrongMagicIsRejectedWithTheReason) {
  void* listen = nullptr;
  const oob::SocketAddress addr = listenAddr(&listen);
  const int fd = tcpConnect(addr);
  ASSERT_GE(fd, 0);
  uint8_t junk[ib::kIbHelloBytes];
  std::memset(junk, 0x42, sizeof junk);
  std::memcpy(junk, "TQHELLO1", 8);  // a socket transport's hello magic
  ASSERT_EQ(::send(fd, junk, sizeof junk, MSG_NOSIGNAL), static_cast<ssize_t>(sizeof junk));
  void* recv = nullptr;
  double took = 0;
  Status s = acceptUntil(listen, &recv, 20, &took);
  ASSERT_FALSE(s.ok()) << "accept took a peer with a wrong magic";
  std::printf("accept: %s (after %.3f s)\n", s.message().c_str(), took);
  EXPECT_NE(s.message().find("bad magic"), std::string::npos);
  EXPECT_NE(s.message().find("127.0.0.1"), std::string::npos) << "names the peer";
  // The fake peer is told why.
  uint8_t reply[ib::kIbReplyBytes];
  ASSERT_TRUE(readAll(fd, reply, sizeof reply));
  auto rep = ib::parseIbReply(reply, sizeof reply);
  ASSERT_TRUE(rep.ok()) << rep.status().toString();
  EXPECT_EQ(rep->status, ib::IbReplyStatus::kBadHello);
  EXPECT_NE(rep->reason.find("bad magic"), std::string::npos);
  ::close(fd);
  EXPECT_TRUE(plugin_->closeListen(listen).ok());
  expectNoLeakAndReconnect();
}

TEST_F(PluginIbBadInputTest, ReplyWithAWrongMagicOrNoReplyFailsConnect) {
  // A fake acceptor on loopback: it reads the hello, then answers garbage (round 0) or nothing
  // (round 1, against a short handshake deadline).
  for (int round = 0; round < 2; ++round) {
    auto plugin = round == 0 ? nullptr : makePlugin({{"TENANTQOS_HANDSHAKE_TIMEOUT_MS", "1500"}});
    Plugin& p = round == 0 ? *plugin_ : *plugin;
    NetContext* ctx = round == 0 ? ctx_ : *p.newContext(1, -1);
    const int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ASSERT_EQ(::listen(lfd, 4), 0);
    socklen_t len = sizeof a;
    ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len);
    ib::IbHandle h;
    std::memcpy(&h.addr.storage, &a, sizeof a);
    h.addr.len = sizeof a;
    h.nonce = 5;
    uint8_t handle[kHandleBytes] = {};
    ib::encodeIbHandle(h, handle);
    std::thread fake([lfd, round] {
      const int fd = ::accept(lfd, nullptr, nullptr);
      if (fd < 0) return;
      uint8_t hello[ib::kIbHelloBytes];
      if (readAll(fd, hello, sizeof hello) && round == 0) {
        uint8_t junk[ib::kIbReplyBytes];
        std::memset(junk, 0x42, sizeof junk);
        (void)!::send(fd, junk, sizeof junk, MSG_NOSIGNAL);
      }
      ::usleep(round == 0 ? 300'000 : 2'500'000);  // round 1: open past the deadline
      ::close(fd);
    });
    void* send = nullptr;
    Status s;
    const double t0 = monotonicSeconds();
    while (s.ok() && send == nullptr && monotonicSeconds() - t0 < 20) {
      s = p.connect(ctx, -1, kRxe0, handle, &send);
    }
    const double took = monotonicSeconds() - t0;
    fake.join();
    ::close(lfd);
    ASSERT_FALSE(s.ok());
    std::printf("connect (%s): %s (after %.3f s)\n", round == 0 ? "garbage reply" : "no reply",
                s.message().c_str(), took);
    if (round == 0) {
      EXPECT_NE(s.message().find("bad magic"), std::string::npos);
    } else {
      EXPECT_NE(s.message().find("no handshake reply"), std::string::npos);
      EXPECT_LT(took, 5.0);
      EXPECT_TRUE(p.finalize(ctx).ok());
    }
    EXPECT_NE(s.message().find("rxe0:1"), std::string::npos) << "names the local port";
  }
  expectNoLeakAndReconnect();
}

TEST_F(PluginIbBadInputTest, UnknownQpNumberFailsTheFirstTransferWithTheCompletionStatus) {
  void* listen = nullptr;
  const oob::SocketAddress addr = listenAddr(&listen);
  const int fd = tcpConnect(addr);
  ASSERT_GE(fd, 0);
  uint8_t buf[ib::kIbHelloBytes];
  ib::encodeIbHello(fakeHello("::ffff:10.77.0.1", 0xabcde), buf);  // rxe0 has no such QP
  ASSERT_EQ(::send(fd, buf, sizeof buf, MSG_NOSIGNAL), static_cast<ssize_t>(sizeof buf));
  std::thread fake([fd] {
    uint8_t reply[ib::kIbReplyBytes];
    if (!readAll(fd, reply, sizeof reply)) return;
    ib::IbReady ready;
    ready.conn_id = 0x7e57;
    uint8_t r[ib::kIbReadyBytes];
    ib::encodeIbReady(ready, r);
    (void)!::send(fd, r, sizeof r, MSG_NOSIGNAL);
  });
  void* recv = nullptr;
  double took = 0;
  Status s = acceptUntil(listen, &recv, 20, &took);
  fake.join();
  ASSERT_TRUE(s.ok()) << s.toString();
  ASSERT_NE(recv, nullptr) << "the handshake itself was valid";
  // The first receive writes its clear-to-send to QP 0xabcde: nobody answers, the retries run
  // out (TENANTQOS_IB_TIMEOUT 14 ~ 67 ms x 3 tries), and the receive fails saying so.
  std::vector<char> b(4096);
  void* data[1] = {b.data()};
  size_t sizes[1] = {b.size()};
  int tags[1] = {0};
  void* req = nullptr;
  ASSERT_TRUE(plugin_->irecv(recv, 1, data, sizes, tags, nullptr, &req).ok());
  ASSERT_NE(req, nullptr);
  const double t0 = monotonicSeconds();
  int done = 0;
  while (s.ok() && !done && monotonicSeconds() - t0 < 30) s = plugin_->test(req, &done, nullptr);
  took = monotonicSeconds() - t0;
  ASSERT_FALSE(s.ok()) << "a clear-to-send to an unknown QP did not fail";
  std::printf("receive: %s (after %.3f s)\n", s.message().c_str(), took);
  EXPECT_NE(s.message().find("rxe1 QP 0x"), std::string::npos);
  EXPECT_NE(s.message().find("QP 0xabcde"), std::string::npos);
  EXPECT_NE(s.message().find("retry"), std::string::npos) << "the completion status text";
  EXPECT_EQ(toNcclResult(s), ncclSystemError);
  EXPECT_LT(took, 10.0);
  ::close(fd);
  EXPECT_TRUE(plugin_->closeRecv(recv).ok());
  EXPECT_TRUE(plugin_->closeListen(listen).ok());
  expectNoLeakAndReconnect();
}

TEST_F(PluginIbBadInputTest, GidThatDoesNotRouteFailsWithTheGidInTheMessage) {
  void* listen = nullptr;
  const oob::SocketAddress addr = listenAddr(&listen);
  const int fd = tcpConnect(addr);
  ASSERT_GE(fd, 0);
  uint8_t buf[ib::kIbHelloBytes];
  ib::encodeIbHello(fakeHello("::ffff:10.99.0.1", 0x11), buf);  // no route to 10.99.0.0/16
  ASSERT_EQ(::send(fd, buf, sizeof buf, MSG_NOSIGNAL), static_cast<ssize_t>(sizeof buf));
  std::atomic<int> reply_status{-1};
  std::string reason;
  std::thread fake([&] {
    uint8_t reply[ib::kIbReplyBytes];
    if (!readAll(fd, reply, sizeof reply)) return;
    auto r = ib::parseIbReply(reply, sizeof reply);
    if (!r.ok()) return;
    reason = r->reason;
    reply_status = static_cast<int>(r->status);
    if (r->status == ib::IbReplyStatus::kAccepted) {
      ib::IbReady ready;
      ready.conn_id = 0x7e57;
      uint8_t rb[ib::kIbReadyBytes];
      ib::encodeIbReady(ready, rb);
      (void)!::send(fd, rb, sizeof rb, MSG_NOSIGNAL);
    }
  });
  void* recv = nullptr;
  double took = 0;
  Status s = acceptUntil(listen, &recv, 20, &took);
  fake.join();
  if (s.ok() && recv != nullptr) {
    // The kernel accepted the address vector; then the first transfer must fail.
    std::vector<char> b(4096);
    void* data[1] = {b.data()};
    size_t sizes[1] = {b.size()};
    int tags[1] = {0};
    void* req = nullptr;
    s = plugin_->irecv(recv, 1, data, sizes, tags, nullptr, &req);
    const double t0 = monotonicSeconds();
    int done = 0;
    while (s.ok() && !done && monotonicSeconds() - t0 < 30) s = plugin_->test(req, &done, nullptr);
    took += monotonicSeconds() - t0;
    EXPECT_TRUE(plugin_->closeRecv(recv).ok());
  }
  ASSERT_FALSE(s.ok()) << "an unroutable GID was accepted and worked";
  std::printf("unroutable GID: %s (after %.3f s); the fake peer was told: status %d \"%s\"\n",
              s.message().c_str(), took, reply_status.load(), reason.c_str());
  EXPECT_NE(s.message().find("rxe1"), std::string::npos);
  EXPECT_LT(took, 15.0);
  if (reply_status == static_cast<int>(ib::IbReplyStatus::kSetupFailed)) {
    EXPECT_NE(s.message().find("10.99.0.1"), std::string::npos);
    EXPECT_FALSE(reason.empty());
  }
  ::close(fd);
  EXPECT_TRUE(plugin_->closeListen(listen).ok());
  expectNoLeakAndReconnect();
}

// A receiving process killed while a paced 64 MiB message is on its way (it takes ~5 s at
// 100 Mbit/s): the sender's request fails within a deadline naming the peer; the sender's
// resources go with its comm; the next connect works.
TEST_F(PluginIbBadInputTest, PeerKilledMidTransferFailsTheSendWithinADeadline) {
  auto sender = makePlugin({{"TENANTQOS_RATE", "100Mbps"}, {"TENANTQOS_IB_HCA", "=rxe0"}});
  ASSERT_NE(sender, nullptr);
  auto sctx = sender->newContext(1, -1);
  const size_t size = 64u << 20;
  std::map<std::string, std::string> env = baseEnv();
  env["TENANTQOS_IB_HCA"] = "=rxe1";
  for (int round = 0; round < 2; ++round) {
    Proc peer({TQ_IB_PEER_BIN, "recv", "0", std::to_string(size)}, env);
    std::string handle_hex;
    const double t0 = monotonicSeconds();
    while (monotonicSeconds() - t0 < 30) {
      ASSERT_TRUE(peer.poll()) << "peer exited: " << peer.err() << peer.out();
      const size_t at = peer.out().find("handle ");
      if (at != std::string::npos && peer.out().find('\n', at) != std::string::npos) {
        handle_hex = peer.out().substr(at + 7, 2 * kHandleBytes);
        break;
      }
      ::usleep(10'000);
    }
    ASSERT_EQ(handle_hex.size(), 2 * kHandleBytes) << peer.out() << peer.err();
    uint8_t handle[kHandleBytes];
    for (size_t i = 0; i < kHandleBytes; ++i) {
      handle[i] = static_cast<uint8_t>(std::stoi(handle_hex.substr(2 * i, 2), nullptr, 16));
    }
    void* send = nullptr;
    while (send == nullptr) {
      Status s = sender->connect(*sctx, -1, 0, handle, &send);
      ASSERT_TRUE(s.ok()) << s.toString();
      ASSERT_LT(monotonicSeconds() - t0, 30);
    }
    std::vector<char> buf(size, 'p');
    void* mr = nullptr;
    ASSERT_TRUE(sender->regMr(send, buf.data(), size, NCCL_PTR_HOST, &mr).ok());
    void* req = nullptr;
    Status s;
    while (s.ok() && req == nullptr && monotonicSeconds() - t0 < 30) {
      s = sender->isend(send, buf.data(), size, 0, mr, &req);
    }
    ASSERT_TRUE(s.ok() && req != nullptr) << s.toString();
    int done = 0;
    double killed_at = 0;
    const double started = monotonicSeconds();
    while (s.ok() && !done && monotonicSeconds() - started < 40) {
      s = sender->test(req, &done, nullptr);
      if (round == 0 && killed_at == 0 && monotonicSeconds() - started > 1.0) {
        peer.kill(SIGKILL);
        killed_at = monotonicSeconds();
      }
    }
    if (round == 0) {
      ASSERT_FALSE(s.ok()) << "the send to a killed peer " << (done ? "completed" : "hung");
      const double took = monotonicSeconds() - killed_at;
      std::printf("peer killed 1 s into a paced 64 MiB send: %s (%.3f s after the kill)\n",
                  s.message().c_str(), took);
      EXPECT_LT(took, 5.0);
      EXPECT_EQ(toNcclResult(s), ncclSystemError);
      EXPECT_NE(s.message().find("rxe0"), std::string::npos);
      EXPECT_NE(s.message().find("rxe1"), std::string::npos) << "names the peer's device";
    } else {
      ASSERT_TRUE(s.ok() && done) << s.toString();
      ProcResult pr = peer.wait(30);
      EXPECT_EQ(pr.exit_code, 0) << pr.out << pr.err;
      EXPECT_NE(pr.out.find("done " + std::to_string(size)), std::string::npos) << pr.out;
    }
    EXPECT_TRUE(sender->deregMr(send, mr).ok());
    EXPECT_TRUE(sender->closeSend(send).ok());
    EXPECT_EQ(commResources("rxe0"), base0_comm_)
        << "round " << round << ": the sender's QPs/CQ/MRs went with its comm";
  }
  EXPECT_TRUE(sender->finalize(*sctx).ok());
  sender.reset();
  expectNoLeakAndReconnect();
}

}  // namespace
}  // namespace tq::plugin::testing
