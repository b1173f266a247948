// Several tenantqos-policyd replicas on one real 3-member etcd (label `etcd`), a bounded
// Jepsen-style loop: two writers with expected_version on different replicas, kill -9 of a
// random replica and of one etcd member during the loop (and restarts), agents' watches
// (agent/policy_watcher.h, the agent's own code) failing over between replicas. Then:
// every acknowledged version is present with its exact content on every replica; no version
// number has two contents; exactly one of two concurrent applies with the same expected_version
// succeeds; every watcher ends on the latest version and never went backwards. And losing
// quorum: applies fail UNAVAILABLE with a clear message while watchers keep what they hold.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <barrier>
#include <iostream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "agent/policy_watcher.h"
#include "common/thread_annotations.h"
#include "tenantqos/v1/policy.grpc.pb.h"
#include "tests/functional/etcd_cluster.h"
#include "tests/functional/subprocess.h"

namespace tq::test {
namespace {

namespace v1 = tenantqos::v1;
using namespace std::chrono_literals;

const std::string kPolicyd = TQ_POLICYD_BIN;
const std::string kCtl = TQ_CTL_BIN;
const std::string kExample = std::string(TQ_SOURCE_DIR) + "/examples/policy.yaml";
constexpr int kReplicas = 3;
constexpr int kApplies = 300;
constexpr int kWatchers = 4;

// A distinct valid policy per n: tenant-a's limit is (40001 + n) Mbit/s.
std::string policyNumber(int n) {
  std::string s = readWholeFile(kExample);
  s.replace(s.find("limit: 60Gbps"), 13, "limit: " + std::to_string(40001 + n) + "Mbps");
  return s;
}

class EtcdHaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = EtcdCluster::start(3);
    if (!cluster_) GTEST_SKIP() << "no etcd: " << EtcdCluster::error();
    prefix_ = "/tq-ha-" + std::to_string(getpid()) + "/";
    for (int i = 0; i < kReplicas; ++i) {
      addrs_.push_back("127.0.0.1:" + std::to_string(freeLoopbackPort()));
      procs_.emplace_back();
      startReplica(i);
    }
    for (int i = 0; i < kReplicas; ++i) ASSERT_TRUE(waitServing(i)) << log(i);
  }
  void TearDown() override {
    procs_.clear();
    if (HasFailure() && cluster_) {
      for (int i = 0; i < kReplicas; ++i) std::cerr << "--- policyd " << i << ":\n" << log(i);
    }
    cluster_.reset();
  }

  std::string log(int i) {
    return readWholeFile(cluster_->dir() + "/policyd" + std::to_string(i) + ".log");
  }
  void startReplica(int i) {
    procs_[i] = std::make_unique<ChildProcess>(
        // Plaintext: this test is about etcd and failover; mutual TLS has its own tests
        // (policyd_test.cc, agent_test.cc).
        std::vector<std::string>{kPolicyd, "--listen", addrs_[i], "--store", "etcd",
                                 "--etcd-endpoints", cluster_->endpointList(), "--etcd-prefix",
                                 prefix_, "--retain-versions", "1000", "--insecure", "--audit-log",
                                 cluster_->dir() + "/audit" + std::to_string(i) + ".jsonl"},
        cluster_->dir() + "/policyd" + std::to_string(i) + ".log");
  }
  void killReplica(int i) {
    procs_[i]->signal(SIGKILL);
    procs_[i]->wait(5s);
  }
  std::unique_ptr<v1::PolicyService::Stub> stub(int i) {
    return v1::PolicyService::NewStub(
        grpc::CreateChannel(addrs_[i], grpc::InsecureChannelCredentials()));
  }
  bool waitServing(int i) {
    auto s = stub(i);
    return pollUntil(
        [&] {
          grpc::ClientContext c;
          c.set_deadline(std::chrono::system_clock::now() + 500ms);
          v1::ListVersionsResponse r;
          return s->ListVersions(&c, v1::ListVersionsRequest(), &r).ok();
        },
        30s);
  }
  // Latest version through replica i (0 if none yet), or nullopt if it did not answer.
  std::optional<uint64_t> latest(v1::PolicyService::Stub& s) {
    grpc::ClientContext c;
    c.set_deadline(std::chrono::system_clock::now() + 5s);
    v1::ListVersionsResponse r;
    if (!s.ListVersions(&c, v1::ListVersionsRequest(), &r).ok()) return std::nullopt;
    return r.versions().empty() ? 0 : r.versions(0).version();
  }
  grpc::Status apply(v1::PolicyService::Stub& s, const std::string& yaml, uint64_t expected,
                     v1::ApplyPolicyResponse* resp) {
    grpc::ClientContext c;
    c.set_deadline(std::chrono::system_clock::now() + 10s);
    v1::ApplyPolicyRequest req;
    req.set_policy_yaml(yaml);
    req.set_expected_version(expected);
    return s.ApplyPolicy(&c, req, resp);
  }

  std::unique_ptr<EtcdCluster> cluster_;
  std::string prefix_;
  std::vector<std::string> addrs_;
  std::vector<std::unique_ptr<ChildProcess>> procs_;
};

// An agent's watch (the agent's PolicyWatcher over every replica), recording what it got.
struct AgentWatch {
  AgentWatch(const std::vector<std::string>& replicas, const std::string& dir, int i)
      : store(dir + "/agent" + std::to_string(i)) {
    agent::PolicyWatcher::Options o;
    o.node = "node-" + std::to_string(i);
    o.backoff = {20'000'000, 300'000'000, 2.0, 0.2};
    // Each agent starts on another replica, as a DNS round robin would spread them.
    std::vector<std::string> order;
    for (size_t k = 0; k < replicas.size(); ++k) {
      order.push_back(replicas[(k + static_cast<size_t>(i)) % replicas.size()]);
    }
    watcher = std::make_unique<agent::PolicyWatcher>(
        rpc::makeChannelRing(order, o.backoff, grpc::InsecureChannelCredentials()), o, &store,
        &board,
        [this](VersionedPolicy p) {
          MutexLock lock(mu);
          versions.push_back(p.version);
        },
        realClock());
    watcher->start();
  }
  ~AgentWatch() { watcher->stop(); }
  uint64_t last() {
    MutexLock lock(mu);
    return versions.empty() ? 0 : versions.back();
  }
  agent::SnapshotStore store;
  agent::StateBoard board;
  std::unique_ptr<agent::PolicyWatcher> watcher;
  Mutex mu;
  std::vector<uint64_t> versions TQ_GUARDED_BY(mu);
};

TEST_F(EtcdHaTest, JepsenLoopWithReplicaAndMemberKills) {
  std::vector<std::unique_ptr<AgentWatch>> agents;
  for (int i = 0; i < kWatchers; ++i) {
    agents.push_back(std::make_unique<AgentWatch>(addrs_, cluster_->dir(), i));
  }

  Mutex mu;
  std::map<uint64_t, std::string> acked;  // version -> the YAML acknowledged for it
  int double_acks = 0;
  std::atomic<int> attempts{0}, conflicts{0}, unavailable{0}, other{0};
  std::string other_errors;

  // Two writers, each on its own replica (moving to the next when it does not answer).
  auto writer = [&](int w) {
    int replica = w;
    auto s = stub(replica);
    for (;;) {
      const int n = attempts.fetch_add(1);
      if (n >= kApplies) return;
      auto v = latest(*s);
      if (!v) {
        replica = (replica + 1) % kReplicas;
        s = stub(replica);
        unavailable++;
        continue;
      }
      const std::string yaml = policyNumber(n);
      v1::ApplyPolicyResponse resp;
      grpc::Status st = apply(*s, yaml, *v, &resp);
      if (st.ok()) {
        MutexLock lock(mu);
        if (!acked.emplace(resp.version(), yaml).second) double_acks++;
      } else if (st.error_code() == grpc::StatusCode::FAILED_PRECONDITION ||
                 st.error_code() == grpc::StatusCode::ABORTED) {
        conflicts++;  // the other writer got there first: expected
      } else if (st.error_code() == grpc::StatusCode::UNAVAILABLE ||
                 st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
        unavailable++;  // not acknowledged: may or may not exist
        replica = (replica + 1) % kReplicas;
        s = stub(replica);
      } else {
        other++;
        MutexLock lock(mu);
        other_errors += st.error_message() + "\n";
      }
    }
  };

  // Chaos: kill -9 a random replica at a third of the loop, one etcd member at two thirds.
  std::mt19937 rng(static_cast<unsigned>(getpid()));
  const int victim = static_cast<int>(rng() % kReplicas);
  const int member = static_cast<int>(rng() % 3);
  std::thread chaos([&] {
    pollUntil([&] { return attempts.load() >= kApplies / 3; }, 60s);
    killReplica(victim);
    std::this_thread::sleep_for(500ms);
    startReplica(victim);
    pollUntil([&] { return attempts.load() >= 2 * kApplies / 3; }, 60s);
    cluster_->kill(member);
    std::this_thread::sleep_for(500ms);
    cluster_->restart(member);
  });
  std::thread w0(writer, 0), w1(writer, 1);
  w0.join();
  w1.join();
  chaos.join();
  ASSERT_TRUE(waitServing(victim)) << log(victim);
  ASSERT_TRUE(cluster_->waitQuorum(member, 30s));

  // Exactly one of two concurrent applies with the same expected_version succeeds.
  int both = 0, neither = 0;
  for (int round = 0; round < 10; ++round) {
    auto s0 = stub(0), s1 = stub(1);
    auto v = latest(*s0);
    ASSERT_TRUE(v.has_value());
    ASSERT_TRUE(pollUntil([&] { return latest(*s1) == v; }, 10s));
    std::barrier sync(2);
    grpc::Status r0, r1;
    v1::ApplyPolicyResponse a0, a1;
    std::thread t0([&] {
      sync.arrive_and_wait();
      r0 = apply(*s0, policyNumber(10000 + 2 * round), *v, &a0);
    });
    std::thread t1([&] {
      sync.arrive_and_wait();
      r1 = apply(*s1, policyNumber(10001 + 2 * round), *v, &a1);
    });
    t0.join();
    t1.join();
    both += r0.ok() && r1.ok();
    neither += !r0.ok() && !r1.ok();
    MutexLock lock(mu);
    if (r0.ok()) acked.emplace(a0.version(), policyNumber(10000 + 2 * round));
    if (r1.ok()) acked.emplace(a1.version(), policyNumber(10001 + 2 * round));
    for (const grpc::Status* r : {&r0, &r1}) {
      if (!r->ok()) {
        EXPECT_EQ(r->error_code(), grpc::StatusCode::FAILED_PRECONDITION) << r->error_message();
      }
    }
  }
  EXPECT_EQ(both, 0);
  EXPECT_EQ(neither, 0);

  // Every acknowledged version is present with its exact content, on every replica alike.
  EXPECT_EQ(double_acks, 0) << "two applies were acknowledged with the same version";
  EXPECT_EQ(other.load(), 0) << other_errors;
  EXPECT_GE(acked.size(), size_t{kApplies / 6}) << "too few applies succeeded to mean anything";
  uint64_t newest = 0;
  for (int i = 0; i < kReplicas; ++i) {
    auto s = stub(i);
    ASSERT_TRUE(pollUntil([&] { return latest(*s) >= acked.rbegin()->first; }, 10s));
    v1::ListVersionsResponse list;
    grpc::ClientContext c;
    ASSERT_TRUE(s->ListVersions(&c, v1::ListVersionsRequest(), &list).ok());
    newest = std::max<uint64_t>(newest, list.versions(0).version());
    for (const auto& [version, yaml] : acked) {
      grpc::ClientContext g;
      v1::GetPolicyRequest req;
      req.set_version(version);
      v1::PolicySnapshot snap;
      grpc::Status st = s->GetPolicy(&g, req, &snap);
      ASSERT_TRUE(st.ok()) << "replica " << i << " version " << version << ": "
                           << st.error_message();
      EXPECT_EQ(snap.source_yaml(), yaml) << "replica " << i << " version " << version;
    }
  }
  // No version number has two contents: every replica serves the same bytes for each.
  for (uint64_t version = 1; version <= newest; ++version) {
    std::set<std::string> contents;
    for (int i = 0; i < kReplicas; ++i) {
      grpc::ClientContext g;
      v1::GetPolicyRequest req;
      req.set_version(version);
      v1::PolicySnapshot snap;
      if (stub(i)->GetPolicy(&g, req, &snap).ok()) contents.insert(snap.SerializeAsString());
    }
    EXPECT_EQ(contents.size(), 1u) << "version " << version;
  }
  // Every agent ends on the latest and never went backwards.
  for (int i = 0; i < kWatchers; ++i) {
    EXPECT_TRUE(pollUntil([&] { return agents[i]->last() == newest; }, 30s))
        << "agent " << i << " holds " << agents[i]->last() << ", latest " << newest;
    MutexLock lock(agents[i]->mu);
    for (size_t k = 1; k < agents[i]->versions.size(); ++k) {
      EXPECT_LT(agents[i]->versions[k - 1], agents[i]->versions[k]) << "agent " << i;
    }
  }
  std::cerr << "jepsen loop: " << acked.size() << " acknowledged, " << conflicts.load()
            << " conflicts, " << unavailable.load() << " unavailable; killed replica " << victim
            << " and etcd member " << member << "; latest " << newest << "\n";
}

// Usage is replica-local: `tenantqosctl --server A,B,C top` merges every replica's nodes, keeps
// a node's newest report when it reported to two replicas, sums the totals over the merged
// nodes, and names a replica that does not answer.
TEST_F(EtcdHaTest, TopMergesUsageOverEveryReplica) {
  auto report = [&](int replica, const std::string& node, uint64_t rate) {
    grpc::ClientContext c;
    c.set_deadline(std::chrono::system_clock::now() + 5s);
    v1::ReportUsageRequest req;
    req.set_node(node);
    req.set_timestamp_unix_ms(1);
    auto* t = req.add_tenants();
    t->set_tenant("tenant-a");
    t->set_transmit_rate_bytes_per_second(rate);
    v1::ReportUsageResponse resp;
    return stub(replica)->ReportUsage(&c, req, &resp);
  };
  ASSERT_TRUE(report(0, "node-a", 125'000'000).ok());  // 1 Gbit/s, then moved to replica 1:
  // policyd stamps reports on receipt in ms; the second must be strictly newer.
  std::this_thread::sleep_for(5ms);
  ASSERT_TRUE(report(1, "node-a", 250'000'000).ok());  // 2 Gbit/s, the newest
  ASSERT_TRUE(report(2, "node-b", 500'000'000).ok());  // 4 Gbit/s
  const std::string all = addrs_[0] + "," + addrs_[1] + "," + addrs_[2];
  auto top = runProcess({kCtl, "--server", all, "--insecure", "top"});
  ASSERT_EQ(top.exit_code, 0) << top.err;
  EXPECT_NE(top.out.find("2 nodes reporting"), std::string::npos) << top.out;
  EXPECT_EQ(top.out.find(" 1Gbps"), std::string::npos) << "node-a's older report\n" << top.out;
  EXPECT_NE(top.out.find(" 6Gbps"), std::string::npos) << "the total over both\n" << top.out;
  // One replica gone: the others still print, and its nodes are said to be missing.
  killReplica(2);
  top = runProcess({kCtl, "--server", all, "--insecure", "--timeout", "3", "top"});
  ASSERT_EQ(top.exit_code, 0) << top.err;
  EXPECT_NE(top.out.find("replica " + addrs_[2]), std::string::npos) << top.out;
  EXPECT_NE(top.out.find("1 node reporting"), std::string::npos) << top.out;
  // Only one --server: that replica's view alone.
  top = runProcess({kCtl, "--server", addrs_[0], "--insecure", "top"});
  ASSERT_EQ(top.exit_code, 0) << top.err;
  EXPECT_NE(top.out.find(" 1Gbps"), std::string::npos) << top.out;
}

// The cluster allocator's election (policy/allocator_election.h) under faults: kill -9 of the
// active replica, SIGSTOP of it for longer than its lease, SIGTERM, and the loss of the etcd
// leader. Every replica logs when it became active and until when (CLOCK_MONOTONIC, the clock
// of this test too); a replica killed -9 was active at most until the kill. Then: no two
// replicas were ever active at the same time, every new term is larger than the one before,
// and after the active one dies a standby takes over within the lease TTL plus etcd's expiry
// tick (2 s + 0.5 s: under 3 s).
TEST_F(EtcdHaTest, OneActiveAllocatorThroughKillsPausesAndTheLossOfTheEtcdLeader) {
  using Clock = std::chrono::steady_clock;
  auto mono = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
        .count();
  };
  // Whether replica i's log says it is active now: its current process (after its last
  // "cluster allocator:" line) logged "active" after any "standby (term".
  auto lastState = [&](int i) {
    const std::string l = log(i);
    const size_t start = l.rfind("cluster allocator:");
    const size_t a = l.rfind("allocator: active (term");
    const size_t s = l.rfind("allocator: standby (term");
    return start != std::string::npos && a != std::string::npos && a > start &&
           (s == std::string::npos || s < a);
  };
  std::vector<std::vector<int64_t>> kills(kReplicas);  // monotonic ns of each kill -9
  auto activeReplicas = [&] {
    std::vector<int> out;
    for (int i = 0; i < kReplicas; ++i)
      if (procs_[i] && procs_[i]->running() && lastState(i)) out.push_back(i);
    return out;
  };
  auto waitOneActive = [&](int not_this, std::chrono::milliseconds timeout) {
    int found = -1;
    pollUntil(
        [&] {
          for (int i : activeReplicas()) {
            if (i != not_this) found = i;
          }
          return found >= 0;
        },
        timeout);
    return found;
  };
  int active = waitOneActive(-1, 20s);
  ASSERT_GE(active, 0) << log(0) << log(1) << log(2);
  std::vector<double> takeovers_s;
  for (int round = 0; round < 6; ++round) {
    active = waitOneActive(-1, 20s);
    ASSERT_GE(active, 0);
    const int fault = round % 4;
    if (fault == 0) {  // kill -9 the active replica
      const int64_t t = mono();
      procs_[active]->signal(SIGKILL);
      procs_[active]->wait(5s);
      kills[active].push_back(t);
      const int next = waitOneActive(active, 10s);
      ASSERT_GE(next, 0) << "no standby took over after kill -9 of replica " << active;
      takeovers_s.push_back(static_cast<double>(mono() - t) / 1e9);
      startReplica(active);
      ASSERT_TRUE(waitServing(active)) << log(active);
    } else if (fault == 1) {  // pause it for longer than its lease, then let it go on
      procs_[active]->signal(SIGSTOP);
      const int next = waitOneActive(active, 10s);
      std::this_thread::sleep_for(500ms);
      procs_[active]->signal(SIGCONT);
      ASSERT_GE(next, 0) << "no standby took over from the paused replica " << active;
      // The paused one finds its lease deadline passed and says so.
      const int paused = active;
      EXPECT_TRUE(pollUntil([&] { return !lastState(paused); }, 10s)) << log(paused);
    } else if (fault == 2) {  // the etcd leader dies
      const int leader = cluster_->leader();
      ASSERT_GE(leader, 0);
      cluster_->kill(leader);
      std::this_thread::sleep_for(1500ms);
      cluster_->restart(leader);
      ASSERT_TRUE(cluster_->waitQuorum(leader, 30s));
    } else {  // SIGTERM: a clean stop resigns, a standby takes over at once
      const int64_t t = mono();
      procs_[active]->signal(SIGTERM);
      ASSERT_TRUE(procs_[active]->wait(10s).has_value());
      const int next = waitOneActive(active, 10s);
      ASSERT_GE(next, 0);
      takeovers_s.push_back(static_cast<double>(mono() - t) / 1e9);
      EXPECT_LT(takeovers_s.back(), 1.5) << "a resignation is taken over within a watch";
      startReplica(active);
      ASSERT_TRUE(waitServing(active)) << log(active);
    }
  }
  ASSERT_GE(waitOneActive(-1, 20s), 0);

  // Every replica's active intervals, from its log.
  struct Interval {
    int replica;
    uint64_t term;
    int64_t from, until;
  };
  std::vector<Interval> all;
  for (int i = 0; i < kReplicas; ++i) {
    std::istringstream in(log(i));
    std::string line;
    std::optional<Interval> open;
    size_t killed = 0;
    while (std::getline(in, line)) {
      unsigned long long term = 0;
      long long at = 0;
      if (line.find("cluster allocator:") != std::string::npos && open) {
        // A new process: the previous one was killed while active.
        ASSERT_LT(killed, kills[i].size()) << "replica " << i << " restarted while active\n"
                                           << log(i);
        open->until = kills[i][killed++];
        all.push_back(*open);
        open.reset();
      }
      size_t p = line.find("allocator: active (term ");
      if (p != std::string::npos &&
          std::sscanf(line.c_str() + p, "allocator: active (term %llu", &term) == 1) {
        const size_t f = line.find("from monotonic ");
        ASSERT_NE(f, std::string::npos) << line;
        at = std::atoll(line.c_str() + f + 15);
        EXPECT_FALSE(open.has_value()) << line;
        open = Interval{i, term, at, INT64_MAX};
        continue;
      }
      p = line.find("allocator: standby (term ");
      if (p != std::string::npos && open) {
        const size_t u = line.find("active until monotonic ");
        ASSERT_NE(u, std::string::npos) << line;
        open->until = std::atoll(line.c_str() + u + 23);
        all.push_back(*open);
        open.reset();
      }
    }
    if (open) all.push_back(*open);
  }
  std::sort(all.begin(), all.end(),
            [](const Interval& a, const Interval& b) { return a.from < b.from; });
  ASSERT_GE(all.size(), 5u) << "too few terms to mean anything";
  for (size_t k = 1; k < all.size(); ++k) {
    EXPECT_LE(all[k - 1].until, all[k].from)
        << "replica " << all[k - 1].replica << " (term " << all[k - 1].term
        << ") was still active when replica " << all[k].replica << " (term " << all[k].term
        << ") became active";
    EXPECT_GT(all[k].term, all[k - 1].term);
  }
  for (double t : takeovers_s) EXPECT_LT(t, 3.0) << "a standby took over after " << t << " s";
  std::cerr << "allocator election: " << all.size() << " terms, takeovers (s):";
  for (double t : takeovers_s) std::cerr << " " << t;
  std::cerr << "\n";
}

TEST_F(EtcdHaTest, LosingQuorumFailsAppliesUnavailableAndAgentsKeepEnforcing) {
  auto agent = std::make_unique<AgentWatch>(addrs_, cluster_->dir(), 0);
  auto s = stub(0);
  v1::ApplyPolicyResponse resp;
  ASSERT_TRUE(apply(*s, policyNumber(1), 0, &resp).ok());
  ASSERT_TRUE(pollUntil([&] { return agent->last() == 1; }, 10s));
  cluster_->kill(1);
  cluster_->kill(2);
  grpc::ClientContext c;
  c.set_deadline(std::chrono::system_clock::now() + 20s);
  v1::ApplyPolicyRequest req;
  req.set_policy_yaml(policyNumber(2));
  grpc::Status st = s->ApplyPolicy(&c, req, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
  EXPECT_NE(st.error_message().find("quorum"), std::string::npos) << st.error_message();
  EXPECT_EQ(agent->last(), 1u);  // still enforcing what it holds
  // Reads are still served from the replica's view.
  EXPECT_EQ(latest(*s), 1u);
  cluster_->restart(1);
  cluster_->restart(2);
  ASSERT_TRUE(cluster_->waitQuorum(0, 30s));
  ASSERT_TRUE(pollUntil(
      [&] {
        v1::ApplyPolicyResponse r;
        return apply(*s, policyNumber(3), *latest(*s), &r).ok();
      },
      30s));
  auto v = latest(*s);
  EXPECT_TRUE(pollUntil([&] { return agent->last() == *v; }, 10s));
}

}  // namespace
}  // namespace tq::test
