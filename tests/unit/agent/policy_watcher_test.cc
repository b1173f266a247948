// The agent's policy watch (agent/policy_watcher.h) against an in-process fake PolicyService on
// port 0 (real gRPC, loopback): what the agent adds to rpc::PolicyFollower (persisted before
// delivered, the state board's connection and store-identity reports). The follower's own
// reconnect, backoff and failover are tested in tests/unit/rpc/policy_follower_test.cc; the real
// policyd in tests/functional/.
#include "agent/policy_watcher.h"

#include <gtest/gtest.h>

#include "common/thread_annotations.h"
#include "test_util.h"
#include "tests/unit/rpc/fake_policyd.h"

namespace tq::agent {
namespace {

using testing::samplePolicy;
using testing::TempDir;
using tq::testing::FakeServer;
using tq::testing::kEpochA;
using tq::testing::kEpochB;
using tq::testing::waitFor;

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
        rpc::makeChannelRing(targets, o.backoff, grpc::InsecureChannelCredentials()), o, &store_,
        &board_,
        [this](VersionedPolicy p) {
          // Persisted BEFORE it reaches the reconciler.
          auto on_disk = store_.load();
          MutexLock lock(mu_);
          persisted_first_.push_back(on_disk.ok() && on_disk->has_value() &&
                                     (*on_disk)->version == p.version);
          received_.push_back(std::move(p));
        },
        clock_);
  }
  size_t received() {
    MutexLock lock(mu_);
    return received_.size();
  }

  FakeClock clock_;
  TempDir dir_;
  SnapshotStore store_{dir_.path()};
  StateBoard board_;
  Mutex mu_;
  std::vector<VersionedPolicy> received_ TQ_GUARDED_BY(mu_);
  std::vector<bool> persisted_first_ TQ_GUARDED_BY(mu_);
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
  MutexLock lock(mu_);
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
  EXPECT_NE(board_.watchStatus().store_notice.find("older than the v4 held"), std::string::npos)
      << board_.watchStatus().store_notice;
  EXPECT_FALSE(store_.load()->has_value());  // not persisted either
  server.service.publish(samplePolicy(5));   // the operator applies again
  ASSERT_TRUE(waitFor([&] { return received() == 1; }));
  EXPECT_TRUE(board_.watchStatus().store_notice.empty());
  w->stop();
}

}  // namespace
}  // namespace tq::agent
