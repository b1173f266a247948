// rpc::PolicyFollower (and the StreamFollower loop under it) against an in-process fake
// PolicyService on port 0 (real gRPC, loopback): what it sends, what it takes, how it
// reconnects and fails over. Backoff waits run on a FakeClock that the tests move to the
// deadline the thread waits for; no test sleeps through one.
#include "rpc/policy_follower.h"
#include "common/thread_annotations.h"

#include <gtest/gtest.h>

#include "proto/snapshot_codec.h"
#include "tests/unit/rpc/fake_policyd.h"

namespace tq::rpc {
namespace {

using testing::driveUntil;
using testing::FakeServer;
using testing::kEpochA;
using testing::kEpochB;
using testing::waitFor;

VersionedPolicy policyV(uint64_t version) {
  VersionedPolicy p;
  p.version = version;
  p.policy.links = {{"fabric", 1'250'000'000, 5}};
  TenantSpec t;
  t.name = "tenant-a";
  t.link = "fabric";
  t.guarantee_bytes_per_second = 100'000'000 * version;
  t.dscp = 26;
  p.policy.tenants = {t};
  return p;
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

class PolicyFollowerTest : public ::testing::Test {
 protected:
  struct Taken {
    VersionedPolicy policy;
    SnapshotVerdict verdict;
    HeldPolicy replaced;
  };

  std::unique_ptr<PolicyFollower> follow(std::vector<int> ports, uint64_t known,
                                         std::string known_epoch = "") {
    PolicyFollower::Options o;
    o.node = "follower-x";
    o.known_version = known;
    o.known_store_epoch = std::move(known_epoch);
    o.backoff = {20'000'000, 200'000'000, 2.0, 0.2};
    o.seed = 5;
    std::vector<std::string> targets;
    for (int p : ports) targets.push_back("127.0.0.1:" + std::to_string(p));
    PolicyFollower::Handlers h;
    h.on_policy = [this](VersionedPolicy p, SnapshotVerdict v, const HeldPolicy& replaced) {
      MutexLock lock(mu_);
      taken_.push_back({std::move(p), v, replaced});
    };
    h.on_older = [this](const VersionedPolicy& offered, const std::string& notice) {
      MutexLock lock(mu_);
      older_.push_back(notice + " [v" + std::to_string(offered.version) + "]");
    };
    h.on_connected = [this](bool up) { connected_ = up; };
    return std::make_unique<PolicyFollower>(
        makeChannelRing(targets, o.backoff, grpc::InsecureChannelCredentials()), o, h, clock_);
  }
  size_t taken() {
    MutexLock lock(mu_);
    return taken_.size();
  }

  FakeClock clock_;
  Mutex mu_;
  std::vector<Taken> taken_ TQ_GUARDED_BY(mu_);
  std::vector<std::string> older_ TQ_GUARDED_BY(mu_);
  std::atomic<bool> connected_{false};
};

TEST_F(PolicyFollowerTest, SendsWhatItHoldsAndTakesWhatIsNewer) {
  FakeServer server;
  server.service.publish(policyV(3));
  server.service.publish(policyV(4));
  auto f = follow({server.port}, 3, kEpochA);
  f->start();
  ASSERT_TRUE(waitFor([&] { return taken() == 1; }));
  EXPECT_TRUE(waitFor([&] { return connected_.load(); }));
  server.service.publish(policyV(5));
  ASSERT_TRUE(waitFor([&] { return taken() == 2; }));
  EXPECT_EQ(f->known().version, 5u);
  EXPECT_EQ(f->known().store_epoch, kEpochA);
  f->stop();
  EXPECT_FALSE(connected_.load());
  MutexLock lock(mu_);
  VersionedPolicy expect = policyV(4);
  expect.store_epoch = kEpochA;
  EXPECT_EQ(taken_[0].policy, expect);
  EXPECT_EQ(taken_[0].verdict, SnapshotVerdict::kTake);
  auto reqs = server.service.locked([&] { return server.service.watch_requests; });
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].node(), "follower-x");
  EXPECT_EQ(reqs[0].known_version(), 3u);
  EXPECT_EQ(reqs[0].known_store_epoch(), kEpochA);
}

// Deflated snapshots (proto/snapshot_codec.h): asked for, taken as the plain one; one that does
// not inflate ends the stream without being taken, and the follower reconnects (after its
// backoff) still holding the last good one.
TEST_F(PolicyFollowerTest, TakesDeflatedSnapshotsAndEndsTheStreamOnABadOne) {
  FakeServer server;
  auto deflated = proto::deflateSnapshot(server.service.snapshotOf(policyV(4)));
  ASSERT_TRUE(deflated.ok()) << deflated.status().message();
  server.service.publishRaw(*deflated);
  auto f = follow({server.port}, 0);
  f->start();
  ASSERT_TRUE(waitFor([&] { return taken() == 1; }));
  {
    MutexLock lock(mu_);
    VersionedPolicy expect = policyV(4);
    expect.store_epoch = kEpochA;
    EXPECT_EQ(taken_[0].policy, expect);
  }
  auto reqs = server.service.locked([&] { return server.service.watch_requests; });
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_TRUE(reqs[0].accept_deflated());

  tenantqos::v1::PolicySnapshot bad;  // v5 that is not a zlib stream
  bad.set_version(5);
  bad.set_store_epoch(kEpochA);
  bad.set_deflated("not zlib at all");
  server.service.publishRaw(bad);
  server.service.publish(policyV(6));
  // The stream ends at v5 and the follower reconnects after a backoff, saying it holds v4;
  // the fake sends it v5 again, so it never gets past it and never takes it.
  ASSERT_TRUE(driveUntil(clock_, f->stream().worker(), [&] {
    return server.service.locked([&] { return server.service.watch_requests.size(); }) >= 3;
  }));
  f->stop();
  reqs = server.service.locked([&] { return server.service.watch_requests; });
  EXPECT_EQ(reqs.back().known_version(), 4u);
  MutexLock lock(mu_);
  ASSERT_EQ(taken_.size(), 1u);
  EXPECT_EQ(f->known().version, 4u);
}

// The webhook's bug (issue 22): a follower that sends no store epoch is answered by version
// numbers alone and never hears of a re-created store. This one sends it, and adopts.
TEST_F(PolicyFollowerTest, AdoptsARecreatedStoreWhateverItsVersion) {
  FakeServer server;
  server.service.epoch = kEpochB;  // the store was re-created: versions start again at 1
  server.service.publish(policyV(1));
  auto f = follow({server.port}, 7, kEpochA);
  f->start();
  ASSERT_TRUE(waitFor([&] { return taken() == 1; }));
  f->stop();
  MutexLock lock(mu_);
  EXPECT_EQ(taken_[0].verdict, SnapshotVerdict::kTakeNewStore);
  EXPECT_EQ(taken_[0].policy.version, 1u);
  EXPECT_EQ(taken_[0].replaced.version, 7u);
  EXPECT_EQ(taken_[0].replaced.store_epoch, kEpochA);
  EXPECT_EQ(f->known().store_epoch, kEpochB);
  auto reqs = server.service.locked([&] { return server.service.watch_requests; });
  EXPECT_EQ(reqs.at(0).known_store_epoch(), kEpochA);
}

TEST_F(PolicyFollowerTest, AnOlderVersionOfTheSameStoreIsNeverTaken) {
  FakeServer server;
  server.service.offer_older = true;  // policyd restored from an old backup: v2 is its latest
  server.service.publish(policyV(2));
  auto f = follow({server.port}, 4, kEpochA);
  f->start();
  ASSERT_TRUE(waitFor([&] {
    MutexLock lock(mu_);
    return older_.size() == 1;
  }));
  EXPECT_EQ(taken(), 0u);
  EXPECT_EQ(f->known().version, 4u);
  {
    MutexLock lock(mu_);
    EXPECT_NE(older_[0].find("older than the v4 held"), std::string::npos) << older_[0];
  }
  server.service.publish(policyV(5));  // the operator applies again
  ASSERT_TRUE(waitFor([&] { return taken() == 1; }));
  f->stop();
}

TEST_F(PolicyFollowerTest, ReconnectsWithBackoffAndTheHeldVersion) {
  auto server = std::make_unique<FakeServer>();
  const int port = server->port;
  server->service.publish(policyV(1));
  auto f = follow({port}, 0);
  f->start();
  ASSERT_TRUE(waitFor([&] { return taken() == 1; }));
  server->stop();  // policyd dies
  ASSERT_TRUE(waitFor([&] { return !connected_.load(); }, 5000));
  const uint64_t b0 = f->stream().backoffs();
  ASSERT_TRUE(driveUntil(clock_, f->stream().worker(), [&] {
    return f->stream().backoffs() >= b0 + 3;
  })) << "a few failed attempts, each waiting out a backoff on the clock";
  server = std::make_unique<FakeServer>(port);  // back on the same address
  ASSERT_TRUE(server->server) << "port " << port << " was taken meanwhile";
  server->service.publish(policyV(1));
  server->service.publish(policyV(2));
  ASSERT_TRUE(driveUntil(clock_, f->stream().worker(), [&] { return taken() == 2; }));
  EXPECT_TRUE(connected_.load());
  auto reqs = server->service.locked([&] { return server->service.watch_requests; });
  ASSERT_GE(reqs.size(), 1u);
  EXPECT_EQ(reqs.back().known_version(), 1u) << "the reconnect must send the held version";
  EXPECT_EQ(reqs.back().known_store_epoch(), kEpochA) << "and the held store";
  f->stop();
}

TEST_F(PolicyFollowerTest, FailsOverToTheNextReplicaAndResumesFromTheHeldVersion) {
  auto a = std::make_unique<FakeServer>();
  FakeServer b;
  a->service.publish(policyV(1));
  b.service.publish(policyV(1));
  auto f = follow({a->port, b.port}, 0);
  f->start();
  ASSERT_TRUE(waitFor([&] { return taken() == 1; }));
  a->stop();  // replica A dies
  b.service.publish(policyV(2));
  ASSERT_TRUE(driveUntil(clock_, f->stream().worker(), [&] { return taken() == 2; }));
  EXPECT_EQ(f->stream().currentTarget(), "127.0.0.1:" + std::to_string(b.port));
  f->stop();
  MutexLock lock(mu_);
  EXPECT_EQ(taken_[1].policy.version, 2u);  // v1 was not delivered twice
  auto reqs = b.service.locked([&] { return b.service.watch_requests; });
  ASSERT_GE(reqs.size(), 1u);
  EXPECT_EQ(reqs.back().known_version(), 1u);
  EXPECT_EQ(reqs.back().known_store_epoch(), kEpochA);
}

TEST_F(PolicyFollowerTest, StopIsPromptWhileUnreachable) {
  int port = 0;
  {
    FakeServer probe;  // a free port, then freed
    port = probe.port;
  }
  auto f = follow({port}, 0);
  f->start();
  ASSERT_TRUE(waitFor([&] { return f->stream().backoffs() >= 1; }));  // waiting out a backoff
  const auto t0 = std::chrono::steady_clock::now();
  f->stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(200));
  EXPECT_EQ(taken(), 0u);
}

}  // namespace
}  // namespace tq::rpc
