// The watch loop and the usage reporter against an in-process fake PolicyService on port 0
// (real gRPC, loopback). Their waits (backoff, report interval) run on a FakeClock that the
// tests move to the deadline the thread waits for: no test sleeps through one. The real
// policyd is exercised by tests/functional/.
#include "agent/policy_watcher.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "agent/usage_reporter.h"
#include "proto/convert.h"
#include "tenantqos/v1/policy.grpc.pb.h"
#include "test_util.h"

namespace tq::agent {
namespace {

using testing::samplePolicy;
using testing::TempDir;
namespace v1 = tenantqos::v1;

constexpr char kEpochA[] = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
constexpr char kEpochB[] = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

class FakePolicyService final : public v1::PolicyService::Service {
 public:
  grpc::Status WatchPolicy(grpc::ServerContext* ctx, const v1::WatchPolicyRequest* req,
                           grpc::ServerWriter<v1::PolicySnapshot>* writer) override {
    std::unique_lock<std::mutex> lock(mu_);
    watch_requests.push_back(*req);
    size_t next = 0;
    // Like policyd: send the latest at once if newer than known, then every later version; all
    // of them to a watcher of another store, or when told to offer older versions.
    const bool other_store = !req->known_store_epoch().empty() && req->known_store_epoch() != epoch;
    while (!other_store && !offer_older && next < snapshots_.size() &&
           snapshots_[next].version() <= req->known_version()) {
      ++next;
    }
    while (!ctx->IsCancelled() && !closed_) {
      if (next < snapshots_.size()) {
        v1::PolicySnapshot s = snapshots_[next++];
        lock.unlock();
        writer->Write(s);
        lock.lock();
        continue;
      }
      cv_.wait_for(lock, std::chrono::milliseconds(10));
    }
    return grpc::Status::CANCELLED;
  }
  grpc::Status ReportUsage(grpc::ServerContext*, const v1::ReportUsageRequest* req,
                           v1::ReportUsageResponse*) override {
    std::lock_guard<std::mutex> lock(mu_);
    reports.push_back(*req);
    return grpc::Status::OK;
  }
  void publish(const VersionedPolicy& p) {
    v1::PolicySnapshot s;
    s.set_version(p.version);
    s.set_store_epoch(epoch);
    *s.mutable_policy() = proto::toProto(p.policy);
    std::lock_guard<std::mutex> lock(mu_);
    snapshots_.push_back(s);
    cv_.notify_all();
  }
  void closeStreams() {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  template <typename F>
  auto locked(F f) {
    std::lock_guard<std::mutex> lock(mu_);
    return f();
  }

  std::vector<v1::WatchPolicyRequest> watch_requests;
  std::vector<v1::ReportUsageRequest> reports;
  std::string epoch = kEpochA;  // set before publishing
  bool offer_older = false;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<v1::PolicySnapshot> snapshots_;
  bool closed_ = false;
};

struct FakeServer {
  explicit FakeServer(int port = 0) {
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:" + std::to_string(port), grpc::InsecureServerCredentials(),
                       &this->port);
    b.RegisterService(&service);
    server = b.BuildAndStart();
  }
  ~FakeServer() { stop(); }
  void stop() {
    if (!server) return;
    service.closeStreams();
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
    server.reset();
  }
  FakePolicyService service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

template <typename Pred>
bool waitFor(Pred pred, int timeout_ms = 10000) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return pred();
}

// Moves `clock` to each deadline `worker` waits for, until `done()` (bounded in real time).
template <typename Pred>
bool driveUntil(FakeClock& clock, const Worker& worker, Pred done, int timeout_ms = 10000) {
  return waitFor(
      [&] {
        if (done()) return true;
        const int64_t t = worker.sleepingUntilNs();
        if (t > clock.nowNs()) clock.setNs(t);
        return done();
      },
      timeout_ms);
}

class PolicyWatcherTest : public ::testing::Test {
 protected:
  std::unique_ptr<PolicyWatcher> makeWatcher(int port, uint64_t known,
                                             std::vector<int> more_ports = {},
                                             std::string known_epoch = "") {
    PolicyWatcher::Options o;
    o.node = "node-x";
    o.known_version = known;
    o.known_store_epoch = std::move(known_epoch);
    o.backoff = {20'000'000, 200'000'000, 2.0, 0.2};
    o.seed = 5;
    std::vector<std::string> targets{"127.0.0.1:" + std::to_string(port)};
    for (int p : more_ports) targets.push_back("127.0.0.1:" + std::to_string(p));
    return std::make_unique<PolicyWatcher>(
        makePolicydEndpoints(targets, o.backoff, grpc::InsecureChannelCredentials()), o, &store_,
        &board_,
        [this](VersionedPolicy p) {
          // Persisted BEFORE it reaches the reconciler.
          auto on_disk = store_.load();
          std::lock_guard<std::mutex> lock(mu_);
          persisted_first_.push_back(on_disk.ok() && on_disk->has_value() &&
                                     (*on_disk)->version == p.version);
          received_.push_back(std::move(p));
        },
        clock_);
  }
  size_t received() {
    std::lock_guard<std::mutex> lock(mu_);
    return received_.size();
  }

  FakeClock clock_;
  TempDir dir_;
  SnapshotStore store_{dir_.path()};
  StateBoard board_;
  std::mutex mu_;
  std::vector<VersionedPolicy> received_;
  std::vector<bool> persisted_first_;
};

TEST_F(PolicyWatcherTest, ReceivesPersistsThenDelivers) {
  FakeServer server;
  server.service.publish(samplePolicy(3));
  server.service.publish(samplePolicy(4));
  auto w = makeWatcher(server.port, 3);
  w->start();
  ASSERT_TRUE(waitFor([&] { return received() == 1; }));
  EXPECT_TRUE(waitFor([&] { return board_.policydConnected(); }));
  server.service.publish(samplePolicy(5));
  ASSERT_TRUE(waitFor([&] { return received() == 2; }));
  w->stop();
  EXPECT_FALSE(board_.policydConnected());
  std::lock_guard<std::mutex> lock(mu_);
  VersionedPolicy expect = samplePolicy(4);
  expect.store_epoch = kEpochA;
  EXPECT_EQ(received_[0], expect);
  EXPECT_EQ(received_[1].version, 5u);
  EXPECT_EQ(persisted_first_, (std::vector<bool>{true, true}));
  EXPECT_EQ((*store_.load())->version, 5u);
  auto reqs = server.service.locked([&] { return server.service.watch_requests; });
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].node(), "node-x");
  EXPECT_EQ(reqs[0].known_version(), 3u);
}

TEST_F(PolicyWatcherTest, ReconnectsAfterPolicydRestartWithKnownVersion) {
  auto server = std::make_unique<FakeServer>();
  const int port = server->port;
  server->service.publish(samplePolicy(1));
  auto w = makeWatcher(port, 0);
  w->start();
  ASSERT_TRUE(waitFor([&] { return received() == 1; }));
  ASSERT_TRUE(waitFor([&] { return board_.policydConnected(); }));

  server->stop();  // policyd dies
  ASSERT_TRUE(waitFor([&] { return !board_.policydConnected(); }, 5000));
  const uint64_t b0 = w->backoffs();
  ASSERT_TRUE(driveUntil(clock_, w->worker(), [&] { return w->backoffs() >= b0 + 3; }))
      << "a few failed attempts";
  EXPECT_FALSE(board_.policydConnected());

  server = std::make_unique<FakeServer>(port);  // policyd comes back on the same address
  ASSERT_TRUE(server->server) << "port " << port << " was taken meanwhile";
  server->service.publish(samplePolicy(1));
  server->service.publish(samplePolicy(2));
  ASSERT_TRUE(driveUntil(clock_, w->worker(), [&] { return received() == 2; }));
  EXPECT_TRUE(board_.policydConnected());
  auto reqs = server->service.locked([&] { return server->service.watch_requests; });
  ASSERT_GE(reqs.size(), 1u);
  EXPECT_EQ(reqs.back().known_version(), 1u) << "the reconnect must send the known version";
  w->stop();
}

TEST(JudgeSnapshot, EpochsAndVersions) {
  using V = SnapshotVerdict;
  EXPECT_EQ(judgeSnapshot("", 0, kEpochA, 1), V::kTake);
  EXPECT_EQ(judgeSnapshot(kEpochA, 4, kEpochA, 5), V::kTake);
  EXPECT_EQ(judgeSnapshot(kEpochA, 4, kEpochA, 2), V::kKeepOlder);
  EXPECT_EQ(judgeSnapshot(kEpochA, 4, kEpochB, 1), V::kTakeNewStore);
  // A snapshot from before epochs, or a server that sends none: versions decide.
  EXPECT_EQ(judgeSnapshot("", 4, kEpochA, 4), V::kTake);
  EXPECT_EQ(judgeSnapshot("", 4, kEpochA, 3), V::kKeepOlder);
  EXPECT_EQ(judgeSnapshot(kEpochA, 4, "", 3), V::kKeepOlder);
}

TEST_F(PolicyWatcherTest, AdoptsANewStoreWhateverItsVersionAndSaysSo) {
  FakeServer server;
  server.service.epoch = kEpochB;  // policyd lost its data dir; v1 re-applied
  server.service.publish(samplePolicy(1));
  auto w = makeWatcher(server.port, 4, {}, kEpochA);
  w->start();
  ASSERT_TRUE(waitFor([&] { return received() == 1; }));
  w->stop();
  EXPECT_EQ(board_.watchStatus().store_epoch_changes, 1u);
  EXPECT_EQ((*store_.load())->store_epoch, kEpochB);
  EXPECT_EQ((*store_.load())->version, 1u);
  auto reqs = server.service.locked([&] { return server.service.watch_requests; });
  EXPECT_EQ(reqs.at(0).known_store_epoch(), kEpochA);
}

TEST_F(PolicyWatcherTest, AnOlderVersionOfTheSameStoreIsReportedNeverTaken) {
  FakeServer server;
  server.service.offer_older = true;  // policyd restored from an old backup: v2 is its latest
  server.service.publish(samplePolicy(2));
  auto w = makeWatcher(server.port, 4, {}, kEpochA);
  w->start();
  ASSERT_TRUE(waitFor([&] { return board_.watchStatus().older_versions_offered == 1; }));
  EXPECT_EQ(received(), 0u);
  EXPECT_NE(board_.watchStatus().store_notice.find("older than the enforced v4"), std::string::npos)
      << board_.watchStatus().store_notice;
  EXPECT_FALSE(store_.load()->has_value());  // not persisted either
  server.service.publish(samplePolicy(5));   // the operator applies again
  ASSERT_TRUE(waitFor([&] { return received() == 1; }));
  EXPECT_TRUE(board_.watchStatus().store_notice.empty());
  w->stop();
}

TEST_F(PolicyWatcherTest, FailsOverToTheNextReplicaAndResumesFromTheHeldVersion) {
  auto a = std::make_unique<FakeServer>();
  FakeServer b;
  a->service.publish(samplePolicy(1));
  b.service.publish(samplePolicy(1));
  auto w = makeWatcher(a->port, 0, {b.port});
  w->start();
  ASSERT_TRUE(waitFor([&] { return received() == 1; }));
  a->stop();  // replica A dies
  b.service.publish(samplePolicy(2));
  ASSERT_TRUE(driveUntil(clock_, w->worker(), [&] { return received() == 2; }));
  w->stop();
  std::lock_guard<std::mutex> lock(mu_);
  EXPECT_EQ(received_[1].version, 2u);  // v1 was not delivered twice
  auto reqs = b.service.locked([&] { return b.service.watch_requests; });
  ASSERT_GE(reqs.size(), 1u);
  EXPECT_EQ(reqs.back().known_version(), 1u);
  EXPECT_EQ(reqs.back().known_store_epoch(), kEpochA);
}

TEST_F(PolicyWatcherTest, StopIsPromptWhilePolicydIsUnreachable) {
  int port = 0;
  {
    FakeServer probe;  // find a free port, then free it
    port = probe.port;
  }
  auto w = makeWatcher(port, 0);
  w->start();
  ASSERT_TRUE(waitFor([&] { return w->backoffs() >= 1; }));  // waiting out a backoff
  const auto t0 = std::chrono::steady_clock::now();
  w->stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(200));
  EXPECT_FALSE(board_.policydConnected());
  EXPECT_EQ(received(), 0u);
}

TEST(UsageReportTest, BuildsTotalsRatesAndErrors) {
  AgentState prev, now;
  prev.node = now.node = "n1";
  prev.published_at_ns = 1'000'000'000;
  now.published_at_ns = 3'000'000'000;  // 2 s later
  now.policy_version = 9;
  TenantStatus a;
  a.name = "tenant-a";
  a.transmit_bytes = 1000;
  prev.tenants.push_back(a);
  a.transmit_bytes = 5000;
  a.receive_bytes = 7;
  a.allocated_bytes_per_second = 11;
  a.guarantee_bytes_per_second = 12;
  a.limit_bytes_per_second = 13;
  a.throttled_ns = 2'500'000'000;
  a.processes = 4;
  now.tenants.push_back(a);
  TenantStatus b;  // new since the last report: no rate yet
  b.name = "tenant-b";
  b.transmit_bytes = 100;
  now.tenants.push_back(b);
  now.errors = {"apply policy v10: device ghost0 (link x) does not exist on this node"};

  NodeUsageReport r = buildUsageReport(now, &prev, 1234);
  EXPECT_EQ(r.node, "n1");
  EXPECT_EQ(r.policy_version, 9u);
  EXPECT_EQ(r.timestamp_unix_ms, 1234);
  ASSERT_EQ(r.tenants.size(), 2u);
  const TenantUsageReport& ta = r.tenants[0];
  EXPECT_EQ(ta.tenant, "tenant-a");
  EXPECT_EQ(ta.transmit_bytes_total, 5000u);
  EXPECT_EQ(ta.transmit_rate_bytes_per_second, 2000u);
  EXPECT_EQ(ta.receive_bytes_total, 7u);
  EXPECT_EQ(ta.allocated_rate_bytes_per_second, 11u);
  EXPECT_EQ(ta.guarantee_bytes_per_second, 12u);
  EXPECT_EQ(ta.limit_bytes_per_second, 13u);
  EXPECT_DOUBLE_EQ(ta.throttled_seconds_total, 2.5);
  EXPECT_EQ(ta.processes, 4u);
  EXPECT_EQ(r.tenants[1].transmit_rate_bytes_per_second, 0u);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_NE(r.errors[0].find("ghost0"), std::string::npos);

  // A counter going backwards (tenant file recreated) gives rate 0, not a huge number.
  prev.tenants[0].transmit_bytes = 1'000'000;
  EXPECT_EQ(buildUsageReport(now, &prev, 0).tenants[0].transmit_rate_bytes_per_second, 0u);
  EXPECT_EQ(buildUsageReport(now, nullptr, 0).tenants[0].transmit_rate_bytes_per_second, 0u);
}

TEST(UsageReporterTest, SendsPeriodicallyAndSurvivesPolicydOutage) {
  StateBoard board;
  AgentState s;
  s.node = "n1";
  s.published_at_ns = 1;
  s.policy_version = 2;
  board.publish(s);
  auto server = std::make_unique<FakeServer>();
  const int port = server->port;
  auto eps = makePolicydEndpoints({"127.0.0.1:" + std::to_string(port)},
                                  BackoffOptions{20'000'000, 100'000'000},
                                  grpc::InsecureChannelCredentials());
  FakeClock clock;
  UsageReporter reporter(eps, board, 50'000'000, clock);
  reporter.start();
  auto reports = [&] {
    return server->service.locked([&] { return server->service.reports.size(); });
  };
  // Nothing is due before the first interval has passed on the clock.
  ASSERT_TRUE(waitFor([&] { return reporter.worker().sleepingUntilNs() > 0; }));
  EXPECT_EQ(reporter.reportsAttempted(), 0u);
  ASSERT_TRUE(driveUntil(clock, reporter.worker(), [&] { return reports() >= 2; }));
  server->stop();
  const uint64_t a0 = reporter.reportsAttempted();
  ASSERT_TRUE(driveUntil(clock, reporter.worker(), [&] {
    return reporter.reportsAttempted() >= a0 + 3;  // failed reports, no crash
  }));
  server = std::make_unique<FakeServer>(port);
  ASSERT_TRUE(server->server);
  ASSERT_TRUE(driveUntil(clock, reporter.worker(), [&] { return reports() >= 1; }));
  reporter.stop();
  auto sent = server->service.locked([&] { return server->service.reports; });
  EXPECT_EQ(sent[0].node(), "n1");
  EXPECT_EQ(sent[0].policy_version(), 2u);
  EXPECT_LE(sent[0].timestamp_unix_ms(), clock.wallNs() / 1'000'000) << "stamped by our clock";
}

}  // namespace
}  // namespace tq::agent
