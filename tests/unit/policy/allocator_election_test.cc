// The lease arithmetic of the allocator election (policy/allocator_election.h) and the file
// store's sole election. The etcd election itself runs against a real etcd cluster in
// tests/functional/etcd_ha_test.cc.
#include "policy/allocator_election.h"

#include <gtest/gtest.h>

namespace tq::policy {
namespace {

constexpr int64_t kSec = 1'000'000'000;

TEST(LeaseDeadline, ActiveFromTheSendTimeOfTheLastAcknowledgementLessTheMargin) {
  LeaseDeadline d(250'000'000);
  EXPECT_FALSE(d.activeAt(0));  // nothing acknowledged yet
  // A grant sent at t=10 s, answered with a TTL of 2 s: active until 11.75 s, whenever the
  // answer arrived (etcd started the TTL after it received the request, later than 10 s).
  d.acknowledged(10 * kSec, 2);
  EXPECT_TRUE(d.activeAt(10 * kSec));
  EXPECT_TRUE(d.activeAt(11'749'999'999));
  EXPECT_FALSE(d.activeAt(11'750'000'000));
  // A keepalive sent at 11 s extends it to 12.75 s.
  d.acknowledged(11 * kSec, 2);
  EXPECT_TRUE(d.activeAt(12 * kSec));
  EXPECT_EQ(d.deadlineNs(), 12'750'000'000);
  // An acknowledgement of an older keepalive (answers in another order) never moves it back.
  d.acknowledged(10'500'000'000, 2);
  EXPECT_EQ(d.deadlineNs(), 12'750'000'000);
}

TEST(LeaseDeadline, AnExpiredLeaseOrAResignationEndsItAndNothingButANewLeaseRestartsIt) {
  LeaseDeadline d(0);
  d.acknowledged(0, 3);
  d.acknowledged(kSec, 0);  // etcd: TTL 0, the lease is gone
  EXPECT_FALSE(d.activeAt(kSec));
  EXPECT_TRUE(d.activeAt(kSec - 1));  // it was active until then
  d.end(kSec / 2);                    // end() only moves the deadline earlier
  EXPECT_EQ(d.deadlineNs(), kSec / 2);
  d.end(2 * kSec);
  EXPECT_EQ(d.deadlineNs(), kSec / 2);
  d.reset();
  EXPECT_FALSE(d.activeAt(0));
  d.acknowledged(5 * kSec, 1);
  EXPECT_TRUE(d.activeAt(5 * kSec));
}

TEST(SoleElection, ActiveFromStartUntilStopWithATermThatGrows) {
  FakeClock clock(1'000'000'000'000);
  auto e = makeSoleElection(clock, "me");
  std::vector<std::pair<bool, uint64_t>> changes;
  EXPECT_FALSE(e->activeAt(clock.nowNs()));
  e->start([&](bool active, uint64_t term) { changes.emplace_back(active, term); });
  EXPECT_TRUE(e->activeAt(clock.nowNs()));
  EXPECT_EQ(e->term(), 1'000'000u);  // the start's wall-clock milliseconds
  EXPECT_EQ(e->holder(), "me");
  e->stop();
  e->stop();  // idempotent
  EXPECT_FALSE(e->activeAt(clock.nowNs()));
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(changes[0], std::make_pair(true, uint64_t{1'000'000}));
  EXPECT_EQ(changes[1], std::make_pair(false, uint64_t{1'000'000}));
}

TEST(EtcdElection, BadOptionsAreRefused) {
  FakeClock clock;
  EtcdElectionOptions o;
  EXPECT_EQ(makeEtcdElection(o, clock).status().code(), StatusCode::kInvalidArgument);
  o.etcd.endpoints = {"127.0.0.1:1"};
  o.ttl_s = 0;
  EXPECT_EQ(makeEtcdElection(o, clock).status().code(), StatusCode::kInvalidArgument);
  o.ttl_s = 1;
  o.margin = std::chrono::milliseconds(1000);
  EXPECT_EQ(makeEtcdElection(o, clock).status().code(), StatusCode::kInvalidArgument);
  o.margin = std::chrono::milliseconds(100);
  EXPECT_TRUE(makeEtcdElection(o, clock).ok());
  EXPECT_EQ(allocatorElectionKey("/tq/"), "/tq/allocator");
}

}  // namespace
}  // namespace tq::policy
