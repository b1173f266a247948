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

TEST(FabricClientTest, StreamsTheBoardsDemandAndTakesItsNodesCaps) {
  auto store = policy::makeMemoryStore();
  policy::PolicyCore core(*store, realClock());
  policy::ApplyRequest apply;
  apply.yaml =
      readFile(std::string(TQ_SOURCE_DIR) + "/examples/fabric-policy.yaml", 1 << 20).valueOr("");
  ASSERT_TRUE(core.apply(apply).ok());
  policy::AllocatorOptions ao;
  ao.period_ns = 20'000'000;
  policy::AllocatorService allocator(realClock(), nullptr, nullptr, ao);
  policy::GrpcServiceOptions go;
  go.insecure = true;
  policy::PolicyGrpcService service(core, nullptr, go, &allocator);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_GT(port, 0);
  auto election = policy::makeSoleElection(realClock(), "test");
  allocator.start(*election);

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
      rpc::makeChannelRing({"127.0.0.1:" + std::to_string(port)}, o.backoff,
                           grpc::InsecureChannelCredentials()),
      o, board,
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
  allocator.stop();
  EXPECT_TRUE(waitFor([&] { return downs.load() >= 1; }));
  client.stop();
  server->Shutdown(std::chrono::system_clock::now());
}

}  // namespace
}  // namespace tq::agent
