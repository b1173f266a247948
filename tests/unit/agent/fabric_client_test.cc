// The agent's stream to the cluster allocator (agent/fabric_client.h) against the real policyd
// service in this process (PolicyGrpcService + AllocatorService, the sole election, a memory
// store) over gRPC on 127.0.0.1 port 0: the node's demand goes out from the StateBoard, its
// caps come back and follow the demand, and the stream's end is said. The wire translation is
// checked on its own.
#include "agent/fabric_client.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <thread>

#include "common/file_util.h"
#include "common/thread_annotations.h"
#include "policy/allocator_election.h"
#include "policy/allocator_service.h"
#include "policy/grpc_service.h"
#include "policy/service.h"

namespace tq::agent {
namespace {

namespace v1 = tenantqos::v1;
constexpr uint64_t kGbps = 125'000'000;

template <typename Pred>
bool waitFor(Pred pred) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

TEST(FabricWire, DemandAndCapsTranslate) {
  FabricDemand d{3, {{"a", "leaf", 10, kUnboundedDemand}}};
  v1::DemandReport r = toDemandReport("node1", d, {"10.0.0.1"}, 9);
  EXPECT_EQ(r.node(), "node1");
  EXPECT_EQ(r.policy_version(), 3u);
  EXPECT_EQ(r.sequence(), 9u);
  ASSERT_EQ(r.demands_size(), 1);
  EXPECT_EQ(r.demands(0).receive_bytes_per_second(), UINT64_MAX);  // backlogged, as sent
  EXPECT_EQ(r.addresses(0), "10.0.0.1");
  v1::NodeCaps c;
  c.set_node("node1");
  c.set_term(4);
  c.set_hold_ms(3000);
  v1::LinkCap* cap = c.add_caps();
  cap->set_tenant("a");
  cap->set_link("leaf");
  cap->set_transmit_cap_bytes_per_second(5);
  cap->set_tenant_nodes(2);
  FabricCapsMessage m = fromNodeCaps(c);
  EXPECT_EQ(m.term, 4u);
  EXPECT_EQ(m.hold_ns, 3'000'000'000);
  ASSERT_EQ(m.caps.size(), 1u);
  EXPECT_EQ(m.caps[0].tx, 5u);
  EXPECT_EQ(m.caps[0].tenant_nodes, 2u);
  EXPECT_FALSE(m.peers.has_value());
  c.set_has_peers(true);
  EXPECT_TRUE(fromNodeCaps(c).peers.has_value());  // an empty map is a map
}

// Reports between refreshes only when the demand moved: past the deadband, to or from zero or
// backlogged, or another set of entries or policy version.
TEST(FabricWire, DemandMovesPastTheDeadbandOnly) {
  const FabricDemand sent{3, {{"a", "leaf", 1'000'000, 0}, {"b", "leaf", 0, 500}}};
  FabricDemand d = sent;
  EXPECT_FALSE(demandMoved(sent, d, 0.01));
  d.entries[0].tx = 1'009'000;  // 0.9 %
  EXPECT_FALSE(demandMoved(sent, d, 0.01));
  d.entries[0].tx = 1'011'000;  // 1.1 %
  EXPECT_TRUE(demandMoved(sent, d, 0.01));
  d = sent;
  d.entries[0].tx = 990'000;  // 1 % of the larger
  EXPECT_FALSE(demandMoved(sent, d, 0.01));
  d.entries[0].tx = kUnboundedDemand;
  EXPECT_TRUE(demandMoved(sent, d, 0.01));
  d = sent;
  d.entries[1].tx = 1;  // from zero
  EXPECT_TRUE(demandMoved(sent, d, 0.01));
  d = sent;
  d.entries.pop_back();
  EXPECT_TRUE(demandMoved(sent, d, 0.01));
  d = sent;
  d.policy_version = 4;
  EXPECT_TRUE(demandMoved(sent, d, 0.01));
  d = sent;
  d.entries[1].tenant = "c";
  EXPECT_TRUE(demandMoved(sent, d, 0.01));
}

TEST(FabricWire, AnEdgeIsAStartAStopOrALargeStep) {
  const FabricDemand before{3, {{"a", "leaf", 100, 0}}};
  FabricDemand d = before;
  d.entries[0].tx = 120;  // 17 %: past the deadband, not an edge
  EXPECT_TRUE(demandMoved(before, d, 0.01));
  EXPECT_FALSE(demandEdge(before, d));
  d.entries[0].tx = 130;  // 23 % of the larger
  EXPECT_FALSE(demandEdge(before, d));
  d.entries[0].tx = 140;  // 29 %
  EXPECT_TRUE(demandEdge(before, d));
  d = before;
  d.entries[0].tx = 0;  // stopped
  EXPECT_TRUE(demandEdge(before, d));
  d = before;
  d.entries[0].rx = 5;  // started receiving
  EXPECT_TRUE(demandEdge(before, d));
  d = before;
  d.entries[0].tx = kUnboundedDemand;  // backlogged
  EXPECT_TRUE(demandEdge(before, d));
  d = before;
  d.entries.push_back({"b", "leaf", 0, 0});  // a tenant's processes attached
  EXPECT_TRUE(demandEdge(before, d));
  EXPECT_FALSE(demandEdge(before, before));
}

TEST(FabricWire, ThePacerSendsEdgesAtOnceButRateLimitedMovesPerIntervalElseAHeartbeat) {
  constexpr int64_t kMs = 1'000'000;
  DemandReportPacer pacer({100 * kMs, 1000 * kMs, 30 * kMs, 0.01, 0.25});
  const FabricDemand idle{1, {{"a", "leaf", 0, 0}}};
  const int64_t t0 = 5'000 * kMs;
  EXPECT_EQ(pacer.dueNs(idle, t0), t0);  // nothing sent yet: now
  pacer.sent(idle, t0);
  EXPECT_EQ(pacer.dueNs(idle, t0 + 10 * kMs), t0 + 1000 * kMs);  // unchanged: the heartbeat
  // The tenant starts 50 ms later: due at once.
  const FabricDemand on{1, {{"a", "leaf", kUnboundedDemand, 0}}};
  EXPECT_EQ(pacer.dueNs(on, t0 + 50 * kMs), t0 + 30 * kMs);
  pacer.sent(on, t0 + 50 * kMs);
  // It stops 10 ms after that report: not within 30 ms of it.
  EXPECT_EQ(pacer.dueNs(idle, t0 + 60 * kMs), t0 + 80 * kMs);
  pacer.sent(idle, t0 + 80 * kMs);
  // A small move (5 %) waits for the interval after the last report.
  const FabricDemand some{1, {{"a", "leaf", 1000, 0}}};
  pacer.sent(some, t0 + 100 * kMs);
  const FabricDemand more{1, {{"a", "leaf", 1050, 0}}};
  EXPECT_EQ(pacer.dueNs(more, t0 + 110 * kMs), t0 + 200 * kMs);
  EXPECT_EQ(pacer.dueNs(some, t0 + 110 * kMs), t0 + 1100 * kMs);
}

// The real policyd service (a memory store with examples/fabric-policy.yaml, the allocator
// under the sole election) over gRPC on 127.0.0.1, port 0.
struct LocalPolicyd {
  LocalPolicyd() {
    policy::ApplyRequest apply;
    apply.yaml =
        readFile(std::string(TQ_SOURCE_DIR) + "/examples/fabric-policy.yaml", 1 << 20).valueOr("");
    EXPECT_TRUE(core.apply(apply).ok());
    policy::GrpcServiceOptions go;
    go.insecure = true;
    service = std::make_unique<policy::PolicyGrpcService>(core, nullptr, go, &allocator);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service.get());
    server = builder.BuildAndStart();
    EXPECT_GT(port, 0);
    allocator.start(*election);
  }
  ~LocalPolicyd() {
    allocator.stop();
    server->Shutdown(std::chrono::system_clock::now());
  }
  static policy::AllocatorOptions options() {
    policy::AllocatorOptions ao;
    ao.period_ns = 20'000'000;
    return ao;
  }
  std::shared_ptr<rpc::ChannelRing> ring(const BackoffOptions& backoff) const {
    return rpc::makeChannelRing({"127.0.0.1:" + std::to_string(port)}, backoff,
                                grpc::InsecureChannelCredentials());
  }

  std::unique_ptr<policy::PolicyStore> store = policy::makeMemoryStore();
  policy::PolicyCore core{*store, realClock()};
  policy::AllocatorService allocator{realClock(), nullptr, nullptr, options()};
  std::unique_ptr<policy::PolicyGrpcService> service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<policy::AllocatorElection> election =
      policy::makeSoleElection(realClock(), "test");
  int port = 0;
};

TEST(FabricClientTest, StreamsTheBoardsDemandAndTakesItsNodesCaps) {
  LocalPolicyd policyd;
  StateBoard board;
  board.publishFabricDemand(FabricDemand{1, {{"tenant-a", "leaf-uplink", 10 * kGbps, 0}}});
  Mutex mu;
  std::vector<FabricCapsMessage> got;
  std::atomic<int> ups{0}, downs{0};
  FabricClient::Options o;
  o.node = "node-1";
  o.interval_ns = 30'000'000;
  o.backoff = {20'000'000, 200'000'000, 2.0, 0.2};
  o.seed = 1;
  o.addresses = [] { return std::vector<std::string>{"10.0.0.1"}; };
  FabricClient client(
      policyd.ring(o.backoff), o, board,
      [&](FabricCapsMessage m) {
        MutexLock lock(mu);
        got.push_back(std::move(m));
      },
      [&](bool up) { (up ? ups : downs)++; }, realClock());
  client.start();
  auto capOfA = [&]() -> uint64_t {
    MutexLock lock(mu);
    for (auto it = got.rbegin(); it != got.rend(); ++it) {
      for (const FabricCap& c : it->caps)
        if (c.tenant == "tenant-a") return c.tx;
    }
    return 0;
  };
  // 10 Gbit/s of demand, alone on leaf-1: its demand plus the rest of its 40 Gbit/s guarantee.
  ASSERT_TRUE(waitFor([&] { return capOfA() == 40 * kGbps; })) << capOfA();
  {
    MutexLock lock(mu);
    EXPECT_EQ(got.front().node, "node-1");
    EXPECT_TRUE(got.front().peers.has_value());
    EXPECT_EQ(got.front().hold_ns, 3'000'000'000);
    EXPECT_GT(got.front().term, 0u);
  }
  EXPECT_EQ(ups.load(), 1);
  // Backlogged: up to its limit on the link, 60 Gbit/s.
  board.publishFabricDemand(FabricDemand{1, {{"tenant-a", "leaf-uplink", kUnboundedDemand, 0}}});
  ASSERT_TRUE(waitFor([&] { return capOfA() == 60 * kGbps; })) << capOfA();
  EXPECT_GT(client.reportsSent(), 1u);
  // The allocator goes away: the stream ends and the client says so.
  policyd.allocator.stop();
  EXPECT_TRUE(waitFor([&] { return downs.load() >= 1; }));
  client.stop();
}

// The writer's clock is a FakeClock that the test moves only by the 30 ms rate limit: an edge
// the reconcile thread tells the board of goes out without the 100 ms interval passing.
TEST(FabricClientTest, AnEdgeIsReportedAtOnceWithoutWaitingForTheInterval) {
  LocalPolicyd policyd;
  FakeClock clock{1'000'000'000'000};
  StateBoard board;
  board.publishFabricDemand(FabricDemand{1, {{"tenant-a", "leaf-uplink", 10 * kGbps, 0}}});
  FabricClient::Options o;
  o.node = "node-1";  // interval 100 ms, min gap 30 ms: the defaults
  o.backoff = {20'000'000, 200'000'000, 2.0, 0.2};
  o.seed = 1;
  FabricClient client(policyd.ring(o.backoff), o, board, {}, {}, clock);
  client.start();
  ASSERT_TRUE(waitFor([&] { return client.reportsSent() == 1; }));  // the stream's first
  clock.advanceNs(o.min_gap_ns);
  // tenant-b starts: an edge, reported with the clock still 70 ms short of the interval.
  board.publishFabricDemand(FabricDemand{1,
                                         {{"tenant-a", "leaf-uplink", 10 * kGbps, 0},
                                          {"tenant-b", "leaf-uplink", kUnboundedDemand, 0}}},
                            /*edge=*/true);
  EXPECT_TRUE(waitFor([&] { return client.reportsSent() == 2; })) << client.reportsSent();
  client.stop();
}

}  // namespace
}  // namespace tq::agent
