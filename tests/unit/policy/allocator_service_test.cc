// The cluster allocator as policyd runs it (policy/allocator_service.h), without gRPC: a fake
// election, fake caps sinks, the real round (fabric/) on examples/fabric-policy.yaml, a real
// audit log, and a FakeClock driving the round thread. The Allocate stream over real gRPC with
// mutual TLS is in tests/functional/policyd_test.cc; the etcd election in etcd_ha_test.cc.
#include "policy/allocator_service.h"
#include "common/thread_annotations.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <thread>

#include "common/file_util.h"
#include "policy/audit_log.h"
#include "policy/metrics.h"
#include "policy/policy_file.h"
#include "tests/support/temp_dir.h"

namespace tq::policy {
namespace {

namespace v1 = tenantqos::v1;
constexpr int64_t kMs = 1'000'000;
constexpr uint64_t kGbps = 125'000'000;  // bytes/s

template <typename Pred>
bool waitFor(Pred pred) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

class FakeElection final : public AllocatorElection {
 public:
  bool activeAt(int64_t) const override { return active_.load(); }
  uint64_t term() const override { return 7; }
  std::string holder() const override { return "replica-a"; }
  std::string describe() const override { return "fake"; }
  void start(OnChange on_change) override {
    on_change_ = std::move(on_change);
    on_change_(true, 7);
  }
  void stop() override {}
  void lose() {
    active_ = false;
    on_change_(false, 7);
  }
  std::atomic<bool> active_{true};
  OnChange on_change_;
};

class FakeSink final : public CapsSink {
 public:
  void sendCaps(std::shared_ptr<const v1::NodeCaps> caps) override {
    MutexLock lock(mu_);
    caps_.push_back(std::move(caps));
  }
  void close(const Status& status) override {
    MutexLock lock(mu_);
    if (!closed_) closed_ = status;
  }
  size_t count() {
    MutexLock lock(mu_);
    return caps_.size();
  }
  std::shared_ptr<const v1::NodeCaps> last() {
    MutexLock lock(mu_);
    return caps_.empty() ? nullptr : caps_.back();
  }
  std::optional<Status> closed() {
    MutexLock lock(mu_);
    return closed_;
  }

 private:
  Mutex mu_;
  std::vector<std::shared_ptr<const v1::NodeCaps>> caps_ TQ_GUARDED_BY(mu_);
  std::optional<Status> closed_ TQ_GUARDED_BY(mu_);
};

Caller agent(const std::string& node) { return Caller{node, {"tenantqos:agents"}, true, false}; }

v1::DemandReport demand(const std::string& node,
                        std::vector<std::tuple<std::string, std::string, uint64_t>> entries,
                        uint64_t version = 1, std::vector<std::string> addresses = {}) {
  v1::DemandReport r;
  r.set_node(node);
  r.set_policy_version(version);
  for (const auto& [tenant, link, bytes] : entries) {
    v1::LinkDemand* d = r.add_demands();
    d->set_tenant(tenant);
    d->set_link(link);
    d->set_transmit_bytes_per_second(bytes);
    d->set_receive_bytes_per_second(bytes / 2);
  }
  for (const std::string& a : addresses) r.add_addresses(a);
  return r;
}

const v1::LinkCap* capOf(const v1::NodeCaps& caps, const std::string& tenant,
                         const std::string& link) {
  for (const v1::LinkCap& c : caps.caps())
    if (c.tenant() == tenant && c.link() == link) return &c;
  return nullptr;
}

class AllocatorServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(temp_.ok()) << temp_.error();
    auto audit = AuditLog::open(dir_ + "/audit.jsonl");
    ASSERT_TRUE(audit.ok());
    audit_ = std::move(*audit);
    auto file = readFile(std::string(TQ_SOURCE_DIR) + "/examples/fabric-policy.yaml", 1 << 20);
    ASSERT_TRUE(file.ok());
    ParsedPolicy p = parsePolicyYaml(*file, "fabric-policy.yaml");
    ASSERT_TRUE(p.ok()) << p.status().toString();
    record_ = std::make_shared<PolicyRecord>();
    record_->version = 1;
    record_->policy = p.policy;
    svc_ = std::make_unique<AllocatorService>(clock_, &metrics_, audit_.get(), options_);
    svc_->onPolicy(record_);
    svc_->start(election_);
  }
  void TearDown() override { svc_.reset(); }

  // One period of the round thread: moves the clock to its next round and waits for it.
  void step() {
    ASSERT_TRUE(waitFor([&] { return svc_->worker().sleepingUntilNs() >= 0; }));
    const int64_t next = svc_->worker().sleepingUntilNs();
    clock_.setNs(std::max(next, clock_.nowNs()));
    ASSERT_TRUE(waitFor([&] { return svc_->worker().sleepingUntilNs() > next; }));
  }

  std::shared_ptr<FakeSink> open(const std::string& node) {
    auto sink = std::make_shared<FakeSink>();
    Status st = svc_->attach(agent(node), node, sink);
    EXPECT_TRUE(st.ok()) << st.toString();
    return sink;
  }

  std::string audit() { return readFile(dir_ + "/audit.jsonl").valueOr(""); }

  tq::testing::TempDir temp_{"tqalloc"};
  const std::string& dir_ = temp_.path();
  FakeClock clock_{1'000'000'000'000};
  PolicydMetrics metrics_;
  std::unique_ptr<AuditLog> audit_;
  FakeElection election_;
  AllocatorOptions options_;
  std::shared_ptr<PolicyRecord> record_;
  std::unique_ptr<AllocatorService> svc_;
};

TEST_F(AllocatorServiceTest, EachNodeGetsItsOwnCapsAfterARound) {
  auto n1 = open("node-1");
  auto n3 = open("node-3");
  // tenant-a on node-1 and node-3 (different leaves, one pod), both backlogged on the leaf
  // uplinks: each alone on its leaf's uplink; tenant-b on node-1 only.
  ASSERT_TRUE(svc_->report(agent("node-1"), n1.get(),
                           demand("node-1", {{"tenant-a", "leaf-uplink", UINT64_MAX},
                                             {"tenant-b", "leaf-uplink", UINT64_MAX}}))
                  .ok());
  ASSERT_TRUE(svc_->report(agent("node-3"), n3.get(),
                           demand("node-3", {{"tenant-a", "leaf-uplink", 10 * kGbps}}))
                  .ok());
  step();
  ASSERT_EQ(n1->count(), 1u);
  ASSERT_EQ(n3->count(), 1u);
  const v1::NodeCaps& c1 = *n1->last();
  EXPECT_EQ(c1.node(), "node-1");
  EXPECT_EQ(c1.term(), 7u);
  EXPECT_EQ(c1.policy_version(), 1u);
  EXPECT_EQ(c1.hold_ms(), 3000u);
  EXPECT_EQ(c1.allocator(), "replica-a");
  ASSERT_EQ(c1.caps_size(), 2);  // only its own (tenant, link) pairs
  // leaf-1's uplink: 95 Gbit/s allocatable; a (weight 2) 40/60 and b (weight 1) 20/40 both
  // backlogged: a 60 (its limit), b the rest 35.
  const v1::LinkCap* a = capOf(c1, "tenant-a", "leaf-uplink");
  const v1::LinkCap* b = capOf(c1, "tenant-b", "leaf-uplink");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(a->group(), "leaf-1");
  EXPECT_EQ(a->transmit_cap_bytes_per_second(), 60 * kGbps);
  EXPECT_EQ(b->transmit_cap_bytes_per_second(), 35 * kGbps);
  EXPECT_EQ(a->tenant_nodes(), 1u);
  EXPECT_EQ(a->link_pairs(), 2u);
  // Receive demand was half of unbounded (still unbounded-ish): clamped to the limit.
  EXPECT_EQ(a->receive_cap_bytes_per_second(), 60 * kGbps);
  const v1::LinkCap* a3 = capOf(*n3->last(), "tenant-a", "leaf-uplink");
  ASSERT_NE(a3, nullptr);
  // node-3 alone on leaf-2 with 10 Gbit/s of demand: rate 10 plus the unused guarantee 30.
  EXPECT_EQ(a3->transmit_cap_bytes_per_second(), 40 * kGbps);
  EXPECT_EQ(a3->receive_cap_bytes_per_second(), 40 * kGbps);
}

TEST_F(AllocatorServiceTest, UnchangedCapsAreResentOnlyAsAKeepalive) {
  auto n1 = open("node-1");
  ASSERT_TRUE(svc_->report(agent("node-1"), n1.get(),
                           demand("node-1", {{"tenant-a", "leaf-uplink", kGbps}}))
                  .ok());
  step();
  ASSERT_EQ(n1->count(), 1u);
  EXPECT_TRUE(n1->last()->has_peers());  // the first message carries the peers
  for (int i = 0; i < 5; ++i) step();    // 500 ms, nothing changed
  EXPECT_EQ(n1->count(), 1u);
  for (int i = 0; i < 6; ++i) step();  // past the 1 s keepalive
  ASSERT_EQ(n1->count(), 2u);
  EXPECT_FALSE(n1->last()->has_peers());
  clock_.advanceNs(20 * kMs);
  ASSERT_TRUE(svc_->report(agent("node-1"), n1.get(),
                           demand("node-1", {{"tenant-a", "leaf-uplink", 50 * kGbps}}))
                  .ok());
  step();  // changed demand: at once
  ASSERT_EQ(n1->count(), 3u);
  EXPECT_EQ(capOf(*n1->last(), "tenant-a", "leaf-uplink")->transmit_cap_bytes_per_second(),
            50 * kGbps);
}

// A report that is an edge of a node's demand (new entries, a jump) asks for a round 5 ms
// later (coalescing the other nodes' reports of the same edge), never within 20 ms of the last
// round; a small move asks for none; the period's round runs whatever happens.
TEST_F(AllocatorServiceTest, AnEdgeOfDemandAsksForACoalescedRoundSoonAfterIt) {
  auto n1 = open("node-1");
  auto n2 = open("node-2");
  auto n3 = open("node-3");
  const int64_t t0 = clock_.nowNs();
  const int64_t period_round = t0 + options_.period_ns;
  auto sleepsUntil = [&](int64_t at) {
    return waitFor([&] { return svc_->worker().sleepingUntilNs() == at; });
  };
  auto report = [&](const std::string& node, const std::shared_ptr<FakeSink>& sink, uint64_t d) {
    Status st =
        svc_->report(agent(node), sink.get(), demand(node, {{"tenant-a", "leaf-uplink", d}}));
    ASSERT_TRUE(st.ok()) << st.toString();
  };
  ASSERT_TRUE(sleepsUntil(period_round));
  report("node-1", n1, kGbps);
  ASSERT_TRUE(sleepsUntil(t0 + 5 * kMs)) << svc_->worker().sleepingUntilNs() - t0;
  clock_.setNs(t0 + 2 * kMs);
  report("node-3", n3, kGbps);  // the same edge on another node: joins that round
  ASSERT_TRUE(sleepsUntil(t0 + 5 * kMs));
  clock_.setNs(t0 + 5 * kMs);
  ASSERT_TRUE(waitFor([&] { return svc_->rounds() == 1 && n1->count() == 1 && n3->count() == 1; }));
  ASSERT_TRUE(sleepsUntil(period_round));
  // node-2 1 ms after that round: not before 20 ms after it.
  clock_.setNs(t0 + 6 * kMs);
  report("node-2", n2, kGbps);
  ASSERT_TRUE(sleepsUntil(t0 + 25 * kMs)) << svc_->worker().sleepingUntilNs() - t0;
  clock_.setNs(t0 + 25 * kMs);
  ASSERT_TRUE(waitFor([&] { return svc_->rounds() == 2 && n2->count() == 2; }));
  ASSERT_TRUE(sleepsUntil(period_round));
  // A move of 10 % is no edge and asks for nothing (the period's round takes it): by t0 + 60 ms
  // no round ran, and a jump then makes the third.
  clock_.setNs(t0 + 30 * kMs);
  report("node-1", n1, kGbps * 11 / 10);
  clock_.setNs(t0 + 60 * kMs);
  report("node-1", n1, 2 * kGbps);
  ASSERT_TRUE(sleepsUntil(t0 + 65 * kMs)) << svc_->worker().sleepingUntilNs() - t0;
  clock_.setNs(t0 + 65 * kMs);
  ASSERT_TRUE(waitFor([&] { return svc_->rounds() >= 3; }));
  EXPECT_EQ(svc_->rounds(), 3u);
  // The period's round runs too.
  ASSERT_TRUE(sleepsUntil(period_round));
  clock_.setNs(period_round);
  ASSERT_TRUE(waitFor([&] { return svc_->rounds() == 4; }));
}

TEST_F(AllocatorServiceTest, AnotherNodesReportIsRefusedAndAudited) {
  auto n1 = open("node-1");
  Status st = svc_->report(agent("node-1"), n1.get(),
                           demand("node-2", {{"tenant-a", "leaf-uplink", kGbps}}));
  EXPECT_EQ(st.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(st.message().find("only for node \"node-1\", not for \"node-2\""), std::string::npos)
      << st.message();
  // Opening a stream for another node is refused before it can replace that node's stream.
  auto n2 = std::make_shared<FakeSink>();
  EXPECT_EQ(svc_->attach(agent("node-1"), "node-2", n2).code(), StatusCode::kPermissionDenied);
  const std::string log = audit();
  EXPECT_NE(log.find("\"action\":\"refused\",\"method\":\"Allocate\",\"identity\":\"node-1\","
                     "\"groups\":[\"tenantqos:agents\"],\"node\":\"node-2\""),
            std::string::npos)
      << log;
  // The second refusal within a second is counted, not written; the next line says so.
  EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 1);
  clock_.advanceNs(1'100 * kMs);
  EXPECT_FALSE(svc_->attach(agent("node-1"), "node-4", n2).ok());
  EXPECT_NE(audit().find("\"suppressed\":1}"), std::string::npos) << audit();
  // Admins may report for any node.
  EXPECT_TRUE(svc_->attach(Caller{"ops", {"tenantqos:admins"}, true, false}, "node-2", n2).ok());
}

TEST_F(AllocatorServiceTest, ATenantTheNodeDoesNotHostIsRefusedUnlessVersionsDiffer) {
  auto n1 = open("node-1");
  // Not in the policy.
  Status st = svc_->report(agent("node-1"), n1.get(),
                           demand("node-1", {{"tenant-x", "leaf-uplink", kGbps}}));
  EXPECT_EQ(st.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(st.message().find("tenant \"tenant-x\" is not in the policy"), std::string::npos)
      << st.message();
  EXPECT_NE(audit().find("which it does not host"), std::string::npos);
  // Not a shared link.
  st = svc_->report(agent("node-1"), n1.get(), demand("node-1", {{"tenant-a", "fabric", kGbps}}));
  EXPECT_EQ(st.code(), StatusCode::kPermissionDenied);
  // A node in no group of the topology.
  auto n9 = open("node-9");
  st = svc_->report(agent("node-9"), n9.get(),
                    demand("node-9", {{"tenant-a", "leaf-uplink", kGbps}}));
  EXPECT_EQ(st.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(st.message().find("the node is in no group of shared link \"leaf-uplink\""),
            std::string::npos)
      << st.message();
  // An agent on another policy version (a rollout): unknown entries skipped, the rest kept.
  st = svc_->report(
      agent("node-1"), n1.get(),
      demand("node-1", {{"tenant-new", "leaf-uplink", kGbps}, {"tenant-a", "leaf-uplink", kGbps}},
             /*version=*/2));
  EXPECT_TRUE(st.ok()) << st.toString();
  step();
  ASSERT_EQ(n1->count(), 1u);
  EXPECT_EQ(n1->last()->caps_size(), 1);
  EXPECT_NE(metrics_.serialize().find("tenantqos_policyd_allocator_skipped_entries_total 1"),
            std::string::npos);
}

TEST_F(AllocatorServiceTest, HostileReportsAreBounded) {
  auto n1 = open("node-1");
  v1::DemandReport r = demand("node-1", {{"tenant-a", "leaf-uplink", kGbps}});
  for (int i = 0; i < 17; ++i) r.add_addresses("10.0.0." + std::to_string(i));
  EXPECT_EQ(svc_->report(agent("node-1"), n1.get(), r).code(), StatusCode::kInvalidArgument);
  r = demand("node-1", {{"tenant-a", "leaf-uplink", kGbps}}, 1, {"10.0.0.1; rm -rf /"});
  EXPECT_EQ(svc_->report(agent("node-1"), n1.get(), r).code(), StatusCode::kInvalidArgument);
  r = demand("node-1", {{"tenant-a", "leaf-uplink", kGbps}, {"tenant-a", "leaf-uplink", kGbps}});
  EXPECT_EQ(svc_->report(agent("node-1"), n1.get(), r).code(), StatusCode::kInvalidArgument);
  r = demand(std::string(300, 'n'), {});
  EXPECT_EQ(svc_->report(agent("node-1"), n1.get(), r).code(), StatusCode::kInvalidArgument);
  // A flood: reports closer than 20 ms to the last taken are read and wait, the newest
  // replacing the one waiting; the table keeps the last taken until 20 ms after it.
  const int64_t t0 = clock_.nowNs();
  ASSERT_TRUE(svc_->report(agent("node-1"), n1.get(),
                           demand("node-1", {{"tenant-a", "leaf-uplink", 5 * kGbps}}))
                  .ok());
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(svc_->report(agent("node-1"), n1.get(),
                             demand("node-1", {{"tenant-a", "leaf-uplink", UINT64_MAX}}))
                    .ok());
  }
  EXPECT_NE(metrics_.serialize().find(
                "tenantqos_policyd_allocator_demand_reports_total{result=\"too_frequent\"} 1000"),
            std::string::npos);
  ASSERT_TRUE(waitFor([&] { return svc_->worker().sleepingUntilNs() == t0 + 5 * kMs; }));
  step();  // 5 ms after the first: the flood waits
  EXPECT_EQ(capOf(*n1->last(), "tenant-a", "leaf-uplink")->transmit_cap_bytes_per_second(),
            40 * kGbps);  // 5 of demand plus the unused guarantee 35
  // 20 ms after the first the flood's newest is due; the round 20 ms after the last takes it.
  ASSERT_TRUE(waitFor([&] { return svc_->worker().sleepingUntilNs() == t0 + 25 * kMs; }));
  step();
  // Unbounded demand: clamped to the tenant's limit on the link.
  EXPECT_EQ(capOf(*n1->last(), "tenant-a", "leaf-uplink")->transmit_cap_bytes_per_second(),
            60 * kGbps);
}

TEST_F(AllocatorServiceTest, SilentNodesAndEndedStreamsLeaveTheirDemand) {
  auto n1 = open("node-1");
  auto n2 = open("node-2");
  ASSERT_TRUE(svc_->report(agent("node-1"), n1.get(),
                           demand("node-1", {{"tenant-a", "leaf-uplink", UINT64_MAX}}))
                  .ok());
  ASSERT_TRUE(svc_->report(agent("node-2"), n2.get(),
                           demand("node-2", {{"tenant-a", "leaf-uplink", UINT64_MAX}}))
                  .ok());
  step();
  // Both on leaf-1: tenant-a's 60 split by demand.
  EXPECT_EQ(capOf(*n1->last(), "tenant-a", "leaf-uplink")->transmit_cap_bytes_per_second(),
            30 * kGbps);
  EXPECT_EQ(capOf(*n1->last(), "tenant-a", "leaf-uplink")->tenant_nodes(), 2u);
  svc_->detach("node-2", n2.get());
  EXPECT_EQ(svc_->streams(), 1u);
  step();
  EXPECT_EQ(capOf(*n1->last(), "tenant-a", "leaf-uplink")->transmit_cap_bytes_per_second(),
            60 * kGbps);
  // node-1 goes silent for longer than stale_after: no demand, no caps (its stream stays).
  for (int i = 0; i < 25; ++i) step();
  EXPECT_EQ(svc_->nodesWithDemand(), 0u);
  EXPECT_EQ(n1->last()->caps_size(), 0);
}

TEST_F(AllocatorServiceTest, ANewerStreamOfANodeReplacesTheOlder) {
  auto first = open("node-1");
  auto second = open("node-1");
  ASSERT_TRUE(first->closed().has_value());
  EXPECT_EQ(first->closed()->code(), StatusCode::kAborted);
  EXPECT_FALSE(second->closed().has_value());
  EXPECT_EQ(svc_->report(agent("node-1"), first.get(), demand("node-1", {})).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_TRUE(svc_->report(agent("node-1"), second.get(), demand("node-1", {})).ok());
  svc_->detach("node-1", first.get());  // the old stream's end does not drop the new one
  EXPECT_EQ(svc_->streams(), 1u);
}

TEST_F(AllocatorServiceTest, PeersAreTheOtherMembersOfEachGroupAndDoubleClaimsAreInNone) {
  auto n1 = open("node-1");
  auto n2 = open("node-2");
  auto n3 = open("node-3");
  ASSERT_TRUE(
      svc_->report(agent("node-1"), n1.get(), demand("node-1", {}, 1, {"10.0.0.1", "fd00::1"}))
          .ok());
  ASSERT_TRUE(svc_->report(agent("node-2"), n2.get(), demand("node-2", {}, 1, {"10.0.0.2"})).ok());
  // node-3 claims node-2's address too: that address is in nobody's map.
  ASSERT_TRUE(
      svc_->report(agent("node-3"), n3.get(), demand("node-3", {}, 1, {"10.0.0.3", "10.0.0.2"}))
          .ok());
  step();
  const v1::NodeCaps& c1 = *n1->last();
  ASSERT_TRUE(c1.has_peers());
  ASSERT_EQ(c1.peers_size(), 2);  // leaf-uplink and pod-uplink
  EXPECT_EQ(c1.peers(0).link(), "leaf-uplink");
  EXPECT_EQ(c1.peers(0).group(), "leaf-1");
  EXPECT_EQ(c1.peers(0).addresses_size(), 0);  // node-2's only address is claimed twice
  EXPECT_EQ(c1.peers(1).group(), "pod-1");
  ASSERT_EQ(c1.peers(1).addresses_size(), 1);
  EXPECT_EQ(c1.peers(1).addresses(0), "10.0.0.3");
  const v1::NodeCaps& c3 = *n3->last();
  ASSERT_EQ(c3.peers(1).addresses_size(), 2);
  EXPECT_EQ(c3.peers(1).addresses(0), "10.0.0.1");
  EXPECT_EQ(c3.peers(1).addresses(1), "fd00::1");
  // node-3 drops its false claim: the maps change and go out again.
  clock_.advanceNs(30 * kMs);
  ASSERT_TRUE(svc_->report(agent("node-3"), n3.get(), demand("node-3", {}, 1, {"10.0.0.3"})).ok());
  step();
  ASSERT_TRUE(n1->last()->has_peers());
  ASSERT_EQ(n1->last()->peers(0).addresses_size(), 1);
  EXPECT_EQ(n1->last()->peers(0).addresses(0), "10.0.0.2");
}

TEST_F(AllocatorServiceTest, AStandbyRefusesAndSteppingDownEndsEveryStream) {
  auto n1 = open("node-1");
  election_.lose();
  ASSERT_TRUE(n1->closed().has_value());
  EXPECT_EQ(n1->closed()->code(), StatusCode::kUnavailable);
  EXPECT_NE(n1->closed()->message().find("stepped down"), std::string::npos);
  EXPECT_EQ(svc_->streams(), 0u);
  auto n2 = std::make_shared<FakeSink>();
  Status st = svc_->attach(agent("node-2"), "node-2", n2);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("standby cluster allocator (the active one: replica-a)"),
            std::string::npos)
      << st.message();
  EXPECT_EQ(svc_->runRound(), 0u);  // and it computes nothing
}

TEST_F(AllocatorServiceTest, ANewPolicyVersionIsTheModelOfTheNextRound) {
  auto n1 = open("node-1");
  ASSERT_TRUE(svc_->report(agent("node-1"), n1.get(),
                           demand("node-1", {{"tenant-a", "leaf-uplink", UINT64_MAX}}))
                  .ok());
  step();
  EXPECT_EQ(capOf(*n1->last(), "tenant-a", "leaf-uplink")->transmit_cap_bytes_per_second(),
            60 * kGbps);
  auto v2 = std::make_shared<PolicyRecord>(*record_);
  v2->version = 2;
  v2->policy.tenants[0].shared_links.push_back({"leaf-uplink", std::nullopt, 50 * kGbps, {}});
  svc_->onPolicy(v2);
  svc_->onPolicy(record_);  // an older version delivered late changes nothing
  step();
  EXPECT_EQ(n1->last()->policy_version(), 2u);
  EXPECT_EQ(capOf(*n1->last(), "tenant-a", "leaf-uplink")->transmit_cap_bytes_per_second(),
            50 * kGbps);
}

}  // namespace
}  // namespace tq::policy
