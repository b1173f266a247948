// The version-neutral plugin layer over the real socket transport on loopback: the status
// mapping and exception firewall, tenant binding of comms (traffic class, adoption of the
// sender's tenant), marking, pacing through isend, and the agent-visible counters.
#include "nccl-plugin/plugin.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <stdexcept>

#include "common/tenant_shm.h"
#include "nccl-plugin/api.h"
#include "nccl-plugin/oob/tcp.h"
#include "nccl-plugin/socket/socket_transport.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_agent.h"

namespace tq::plugin {
namespace {

TEST(StatusMapping, OnePlaceMapsEveryCode) {
  EXPECT_EQ(toNcclResult(okStatus()), ncclSuccess);
  EXPECT_EQ(toNcclResult(invalidArgument("x")), ncclInvalidArgument);
  EXPECT_EQ(toNcclResult(outOfRange("x")), ncclInvalidUsage);
  EXPECT_EQ(toNcclResult(failedPrecondition("x")), ncclInternalError);
  EXPECT_EQ(toNcclResult(unimplemented("x")), ncclInternalError);
  EXPECT_EQ(toNcclResult(internalError("x")), ncclInternalError);
  EXPECT_EQ(toNcclResult(aborted("x")), ncclRemoteError);
  EXPECT_EQ(toNcclResult(unavailable("x")), ncclSystemError);
  EXPECT_EQ(toNcclResult(deadlineExceeded("x")), ncclSystemError);
  EXPECT_EQ(toNcclResult(resourceExhausted("x")), ncclSystemError);
  EXPECT_EQ(toNcclResult(notFound("x")), ncclSystemError);
  EXPECT_EQ(toNcclResult(permissionDenied("x")), ncclSystemError);
}

TEST(Firewall, ExceptionsNeverCrossTheBoundary) {
  EXPECT_EQ(firewall("t", []() -> Status { throw std::runtime_error("boom"); }), ncclInternalError);
  EXPECT_EQ(firewall("t", []() -> Status { throw 42; }), ncclInternalError);
  EXPECT_EQ(firewall("t",
                     []() -> Status {
                       std::vector<int> v;
                       return v.at(3) == 0 ? okStatus() : okStatus();
                     }),
            ncclInternalError);
  EXPECT_EQ(firewall("t", [] { return outOfRange("too big"); }), ncclInvalidUsage);
  EXPECT_EQ(firewall("t", [] { return okStatus(); }), ncclSuccess);
}

TEST(Api, CallsBeforeInitFailCleanly) {
  int n = -1;
  // The api layer is process-global; this binary never calls init, so every call must report
  // the missing init instead of crashing.
  EXPECT_EQ(api::devices(&n), ncclInternalError);
  void* req = nullptr;
  EXPECT_EQ(api::isend(nullptr, nullptr, 0, 0, nullptr, nullptr, &req), ncclInternalError);
}

class PluginTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(temp_.ok()) << temp_.error(); }
  void TearDown() override {
    plugin_.reset();
    writers_.clear();
    agent_.reset();
  }

  TenantShm* agent(const std::string& tenant, int tc, uint32_t dscp, uint32_t sl, uint64_t rate,
                   uint64_t burst = 1 << 20) {
    if (!agent_) agent_ = std::make_unique<tq::testing::TestAgent>(dir_);
    TenantParams p;
    p.policy_version = 1;
    p.buckets = nodeBuckets(rate, burst);
    p.dscp = dscp;
    p.service_level = sl;
    p.traffic_classes = {tc};
    writers_.push_back(agent_->tenant(tenant, p));
    return writers_.back();
  }

  void start(const std::string& env_tenant = "") {
    PluginParams p;
    p.tenant = env_tenant;
    p.default_tenant = "default";
    p.run_dir = dir_;
    p.burst = 256 * 1024;
    p.transport = "auto";
    p.socket_ifname = "lo";
    p.nsocks = 2;
    p.socket_nthreads = 1;
    p.socket_inline = 4096;
    p.socket_min_chunk = 4096;
    p.handshake_timeout_ms = 5000;
    p.shm_recheck_ms = 1000;
    p.log_level = "info";
    auto made = Plugin::create(p, realClock());
    ASSERT_TRUE(made.ok()) << made.status().toString();
    plugin_ = std::move(made).value();
  }

  void pair(NetContext* sctx, NetContext* rctx, void** send, void** recv, void** listen) {
    char handle[kHandleBytes];
    ASSERT_TRUE(plugin_->listen(rctx, 0, handle, listen).ok());
    *send = *recv = nullptr;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while ((*send == nullptr || *recv == nullptr) && std::chrono::steady_clock::now() < until) {
      if (*send == nullptr) {
        ASSERT_TRUE(plugin_->connect(sctx, sctx->traffic_class, 0, handle, send).ok());
      }
      if (*recv == nullptr) {
        ASSERT_TRUE(plugin_->accept(*listen, recv).ok());
      }
    }
    ASSERT_TRUE(*send && *recv);
  }

  // One message; returns false if isend was refused `max_refusals` times in a row.
  void transfer(void* send, void* recv, size_t n) {
    std::string out(n, 'q'), in(n, '\0');
    void* data[1] = {in.data()};
    size_t sizes[1] = {n};
    int tags[1] = {0};
    void *rreq = nullptr, *sreq = nullptr;
    ASSERT_TRUE(plugin_->irecv(recv, 1, data, sizes, tags, nullptr, &rreq).ok());
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (sreq == nullptr && std::chrono::steady_clock::now() < until) {
      ASSERT_TRUE(plugin_->isend(send, out.data(), n, 0, nullptr, &sreq).ok());
    }
    ASSERT_NE(sreq, nullptr);
    int sd = 0, rd = 0, got = 0;
    while ((!sd || !rd) && std::chrono::steady_clock::now() < until) {
      if (!sd) {
        ASSERT_TRUE(plugin_->test(sreq, &sd, nullptr).ok());
      }
      if (!rd) {
        ASSERT_TRUE(plugin_->test(rreq, &rd, &got).ok());
      }
    }
    ASSERT_TRUE(sd && rd);
    ASSERT_EQ(got, static_cast<int>(n));
    ASSERT_EQ(in, out);
  }

  tq::testing::TempDir temp_{"tqplg-plugin"};
  const std::string& dir_ = temp_.path();
  std::unique_ptr<tq::testing::TestAgent> agent_;
  std::vector<TenantShm*> writers_;
  std::unique_ptr<Plugin> plugin_;
};

TEST_F(PluginTest, TrafficClassSelectsTenantMarkingAndCounters) {
  TenantShm* a = agent("team-a", 1, 10, 2, 10'000'000'000);
  TenantShm* b = agent("team-b", 2, 20, 3, 10'000'000'000);
  start();
  auto ca = plugin_->newContext(1, 1);
  auto cb = plugin_->newContext(1, 2);
  ASSERT_TRUE(ca.ok() && cb.ok());
  EXPECT_EQ((*ca)->tenant->tenant(), "team-a");
  EXPECT_EQ((*ca)->source, TenantSource::kTrafficClass);
  void *send, *recv, *listen;
  pair(*ca, *cb, &send, &recv, &listen);
  for (int fd : socket::socketFdsOf(Plugin::sendCommOf(send))) {
    auto m = oob::readMarking(fd);
    ASSERT_TRUE(m.ok());
    EXPECT_EQ(m->tos, 10 << 2);
    EXPECT_EQ(m->priority, 2);
  }
  for (int fd : socket::socketFdsOf(Plugin::recvCommOf(recv))) {
    auto m = oob::readMarking(fd);
    ASSERT_TRUE(m.ok());
    EXPECT_EQ(m->tos, 10 << 2) << "the receiver adopts the sender's marking";
  }
  transfer(send, recv, 100000);
  transfer(send, recv, 10);
  EXPECT_EQ(a->collect(0, 0).tx_bytes, 100010u);
  EXPECT_EQ(b->collect(0, 0).rx_bytes, 100010u);  // the receiving communicator's tenant
  ASSERT_TRUE(plugin_->closeSend(send).ok());
  ASSERT_TRUE(plugin_->closeRecv(recv).ok());
  ASSERT_TRUE(plugin_->closeListen(listen).ok());
  ASSERT_TRUE(plugin_->finalize(*ca).ok());
  ASSERT_TRUE(plugin_->finalize(*cb).ok());
}

TEST_F(PluginTest, ADefaultListenerAccountsReceivesToTheSendersTenant) {
  agent("team-a", 1, 10, 2, 10'000'000'000);
  TenantShm* d = agent("default", 9, 0, 0, 10'000'000'000);
  start();
  auto ca = plugin_->newContext(1, 1);
  auto cd = plugin_->newContext(1, -1);  // like v10: listen knows no traffic class
  void *send, *recv, *listen;
  pair(*ca, *cd, &send, &recv, &listen);
  ASSERT_NE(Plugin::tenantOf(recv), nullptr);
  EXPECT_EQ(Plugin::tenantOf(recv)->tenant(), "team-a");
  transfer(send, recv, 5000);
  EXPECT_EQ(d->collect(0, 0).rx_bytes, 0u);
  EXPECT_EQ(writers_[0]->collect(0, 0).rx_bytes, 5000u);
  ASSERT_TRUE(plugin_->closeSend(send).ok());
  ASSERT_TRUE(plugin_->closeRecv(recv).ok());
  ASSERT_TRUE(plugin_->closeListen(listen).ok());
  ASSERT_TRUE(plugin_->finalize(*ca).ok());
  ASSERT_TRUE(plugin_->finalize(*cd).ok());
}

TEST_F(PluginTest, EnvTenantWinsOverTrafficClass) {
  agent("team-a", 1, 10, 2, 10'000'000'000);
  agent("pinned", 7, 30, 1, 10'000'000'000);
  start("pinned");
  auto c = plugin_->newContext(1, 1);
  EXPECT_EQ((*c)->tenant->tenant(), "pinned");
  EXPECT_EQ((*c)->source, TenantSource::kEnv);
  EXPECT_EQ((*c)->tenant->qos().dscp, 30);
  ASSERT_TRUE(plugin_->finalize(*c).ok());
}

TEST_F(PluginTest, IsendReturnsNoRequestWhenTheBucketIsEmpty) {
  TenantShm* a = agent("team-a", 1, 10, 2, /*rate=*/1000, /*burst=*/4096);
  start();
  auto c = plugin_->newContext(1, 1);
  void *send, *recv, *listen;
  pair(*c, *c, &send, &recv, &listen);
  std::string buf(4096, 'x');
  void* req = nullptr;
  ASSERT_TRUE(plugin_->isend(send, buf.data(), 4096, 0, nullptr, &req).ok());
  EXPECT_NE(req, nullptr);  // the burst
  void* refused = reinterpret_cast<void*>(1);
  ASSERT_TRUE(plugin_->isend(send, buf.data(), 4096, 0, nullptr, &refused).ok());
  EXPECT_EQ(refused, nullptr) << "paced isend must return a NULL request, not block";
  TenantUsage u = a->collect(realClock().nowNs(), 0);
  EXPECT_EQ(u.backlog_bytes, 4096u);
  EXPECT_EQ(u.throttled_processes, 1u);
  EXPECT_GE(Plugin::tenantOf(send)->counters().throttle_events.load(), 1u);
  // Closing the comm withdraws its backlog (the demand signal must not outlive it).
  ASSERT_TRUE(plugin_->closeSend(send).ok());
  EXPECT_EQ(a->collect(realClock().nowNs(), 0).backlog_bytes, 0u);
  ASSERT_TRUE(plugin_->closeRecv(recv).ok());
  ASSERT_TRUE(plugin_->closeListen(listen).ok());
  ASSERT_TRUE(plugin_->finalize(*c).ok());
}

TEST_F(PluginTest, StaleAndForeignPointersAreRejected) {
  start();
  auto c = plugin_->newContext(1, -1);
  void *send, *recv, *listen;
  pair(*c, *c, &send, &recv, &listen);
  void* req = nullptr;
  char b = 0;
  EXPECT_EQ(plugin_->isend(recv, &b, 1, 0, nullptr, &req).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(plugin_->closeRecv(send).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(plugin_->closeSend(send).ok());
  ASSERT_TRUE(plugin_->closeRecv(recv).ok());
  ASSERT_TRUE(plugin_->closeListen(listen).ok());
  EXPECT_EQ(plugin_->finalize(nullptr).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(plugin_->finalize(*c).ok());
}

// A transport whose send comm paces itself (like ib): the plugin layer must hand it the
// tenant's Pacing and take no tokens itself; tokens, counters and backlog then follow what
// the comm admits.
class ChunkingSendComm final : public SendComm {
 public:
  Status regMr(void*, size_t, MemType, MemRegion**) override { return okStatus(); }
  Status deregMr(MemRegion*) override { return okStatus(); }
  bool pacesItself() const override { return true; }
  void setPacing(Pacing* p) override { admission = p->newAdmission(); }
  Status isend(void* /*data*/, size_t /*size*/, int /*tag*/, MemRegion* /*mr*/,
               Request** req) override {
    ++isends;
    *req = nullptr;
    return okStatus();
  }
  std::string describe() const override { return "chunking test comm"; }
  Admission* admission = nullptr;
  int isends = 0;
};

class ChunkingTransport final : public Transport {
 public:
  const char* name() const override { return "chunking"; }
  int deviceCount() const override { return 1; }
  Status properties(int, DeviceProperties* /*out*/) const override { return okStatus(); }
  Status listen(int, const TrafficQos&, void* /*handle*/,
                std::unique_ptr<ListenComm>* /*out*/) override {
    return unimplemented("listen");
  }
  Status connect(int, const TrafficQos&, void*, std::unique_ptr<SendComm>* out) override {
    auto c = std::make_unique<ChunkingSendComm>();
    last = c.get();
    *out = std::move(c);
    return okStatus();
  }
  Status accept(ListenComm*, std::unique_ptr<RecvComm>*) override {
    return unimplemented("accept");
  }
  ChunkingSendComm* last = nullptr;
};

TEST_F(PluginTest, ChunkPacingCommsAdmitThroughTheirAdmission) {
  TenantShm* a = agent("team-a", 1, 10, 2, /*rate=*/125'000'000, /*burst=*/256 * 1024);
  PluginParams p;
  p.default_tenant = "default";
  p.run_dir = dir_;
  p.burst = 256 * 1024;
  p.pace_chunk_us = 1000;
  p.shm_recheck_ms = 1000;
  auto owned = std::make_unique<ChunkingTransport>();
  ChunkingTransport* t = owned.get();
  Plugin plugin(p, std::move(owned), realClock());
  auto c = plugin.newContext(1, 1);
  ASSERT_TRUE(c.ok());
  char handle[kHandleBytes] = {};
  void* send = nullptr;
  ASSERT_TRUE(plugin.connect(*c, 1, 0, handle, &send).ok());
  ASSERT_NE(send, nullptr);
  ChunkingSendComm* comm = t->last;
  ASSERT_NE(comm->admission, nullptr) << "a chunk-pacing comm gets its Admission at connect";
  // rate x 1 ms = 125000 bytes, rounded down to 4 KiB; below the burst.
  EXPECT_EQ(comm->admission->chunkBytes(), 122880u);
  EXPECT_EQ(comm->admission->rateBytesPerSecond(), 125'000'000u);
  // isend of a message far larger than the bucket reaches the comm: the plugin layer took no
  // tokens for it (whole-message admission would have refused it and counted a throttle).
  std::string big(1 << 20, 'x');
  void* req = reinterpret_cast<void*>(1);
  ASSERT_TRUE(plugin.isend(send, big.data(), big.size(), 0, nullptr, &req).ok());
  EXPECT_EQ(comm->isends, 1);
  EXPECT_EQ(a->collect(realClock().nowNs(), 0).tx_bytes, 0u);
  // The comm admits chunks: the bucket's 256 KiB burst lets two chunks through, then refuses
  // and the backlog shows what is still waiting.
  EXPECT_TRUE(comm->admission->tryAdmit(122880, 1 << 20));
  EXPECT_TRUE(comm->admission->tryAdmit(122880, (1 << 20) - 122880));
  EXPECT_FALSE(comm->admission->tryAdmit(122880, (1 << 20) - 2 * 122880));
  TenantUsage u = a->collect(realClock().nowNs(), 0);
  EXPECT_EQ(u.tx_bytes, 2u * 122880);
  EXPECT_EQ(u.backlog_bytes, (1u << 20) - 2 * 122880);
  ASSERT_TRUE(plugin.closeSend(send).ok());
  EXPECT_EQ(a->collect(realClock().nowNs(), 0).backlog_bytes, 0u) << "closing withdraws the demand";
  ASSERT_TRUE(plugin.finalize(*c).ok());
}

TEST(PluginCreate, BadParametersFailWithTheVariableName) {
  PluginParams p;
  p.default_tenant = "default";
  p.transport = "ib";
  p.socket_ifname = "lo";
  p.log_level = "info";
  auto r = Plugin::create(p, realClock());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("TENANTQOS_TRANSPORT=ib"), std::string::npos);
  p.transport = "socket";
  p.tenant = "Not_A_Label";
  r = Plugin::create(p, realClock());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("TENANTQOS_TENANT"), std::string::npos);
  p.tenant = "";
  p.socket_ifname = "=tqplg-no-such-if";
  r = Plugin::create(p, realClock());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tqplg-no-such-if"), std::string::npos);
}

}  // namespace
}  // namespace tq::plugin
