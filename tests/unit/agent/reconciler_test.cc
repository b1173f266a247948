// The reconcile logic against a fake TcApplier and a FakeClock: real tenant memory and the real
// attach server in a temporary run directory, no kernel objects, no sleeping (only a bounded
// wait for the attach thread to see a process leave).
#include "agent/reconciler.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "agent/reconcile_loop.h"
#include "common/attach_protocol.h"
#include "common/file_util.h"
#include "test_util.h"
#include "tests/support/fake_sysfs.h"
#include "tests/support/test_agent.h"

namespace tq::agent {
namespace {

using testing::FakeTc;
using testing::samplePolicy;
using testing::TempDir;

bool fileExists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

std::string readWholeFileOr(const std::string& path) {
  return readFile(path, 1 << 20).valueOr("(unreadable)");
}

std::string socketOf(const std::string& run_dir, const std::string& tenant) {
  return attach::tenantSocketPath(run_dir, tenant);
}

class ReconcilerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    AttachServer::Options ao;
    ao.run_dir = dir_.path();
    auto s = AttachServer::start(ao);
    ASSERT_TRUE(s.ok()) << s.status().toString();
    attach_ = std::move(s).value();
  }
  ReconcilerOptions options(TcMode mode = TcMode::kHtb) {
    ReconcilerOptions o;
    o.attach = attach_.get();
    o.node = "node1";
    o.devices = {{"eth0", "fabric"}, {"eth1", "storage"}};
    o.run_dir = dir_.path();
    o.tc_mode = mode;
    o.device_exists = [](const std::string&) { return true; };
    o.backoff_seed = 1234;
    return o;
  }
  std::unique_ptr<Reconciler> make(TcMode mode = TcMode::kHtb) {
    return std::make_unique<Reconciler>(options(mode), &tc_, clock_, &board_);
  }
  // What a process attached to `tenant` reads.
  TenantParams readParams(const std::string& tenant, uint64_t* seq = nullptr) {
    auto p = tq::testing::attachAs(socketOf(dir_.path(), tenant), tenant);
    EXPECT_TRUE(p.ok()) << p.status().toString();
    return p.ok() ? p->view->readParams(seq).value_or(TenantParams{}) : TenantParams{};
  }
  // Waits (real time, bounded) until the attach thread has seen `n` processes attached.
  bool attachedCount(size_t n) {
    for (int i = 0; i < 2000; ++i) {
      if (attach_->attachments().size() == n) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return false;
  }

  TempDir dir_;
  std::unique_ptr<AttachServer> attach_;
  FakeTc tc_;
  FakeClock clock_;
  StateBoard board_;
};

TEST_F(ReconcilerTest, AppliesTcTreesAndShmFiles) {
  auto r = make();
  EXPECT_FALSE(r->ready());
  r->onPolicy(samplePolicy(1), PolicySource::kPolicyd);
  ASSERT_TRUE(r->ready());
  EXPECT_EQ(r->appliedVersion(), 1u);
  EXPECT_TRUE(r->unresolvedErrors().empty());
  ASSERT_EQ(tc_.trees.size(), 2u);
  EXPECT_EQ(tc_.trees["eth0"].tenants.size(), 2u);
  EXPECT_EQ(tc_.trees["eth1"].tenants.size(), 1u);
  EXPECT_EQ(r->activeTenants(), (std::vector<std::string>{"tenant-a", "tenant-b", "tenant-s"}));

  TenantParams a = readParams("tenant-a");
  EXPECT_EQ(a.policy_version, 1u);
  EXPECT_EQ(a.guarantee_bytes_per_second, 500'000'000u);
  EXPECT_EQ(a.limit_bytes_per_second, 750'000'000u);
  // One tx and one rx bucket on its link's device (eth0), each at the guarantee to start with.
  ASSERT_EQ(a.buckets.size(), 2u);
  for (const BucketSpec& b : a.buckets) {
    EXPECT_EQ(b.scope, shm::kScopeDevice);
    EXPECT_EQ(b.name, "eth0");
    EXPECT_EQ(b.index, 0u);
    EXPECT_EQ(b.rate_bytes_per_second, 500'000'000u) << "a new tenant starts at its guarantee";
    EXPECT_EQ(b.depth_bytes, 500'000u) << "1 ms at the rate";
    EXPECT_EQ(b.guarantee_bytes_per_second, 500'000'000u);
    EXPECT_EQ(b.limit_bytes_per_second, 750'000'000u);
  }
  EXPECT_EQ(a.buckets[0].direction, shm::kTx);
  EXPECT_EQ(a.buckets[1].direction, shm::kRx);
  EXPECT_EQ(a.weight, 2u);
  EXPECT_EQ(a.dscp, 26u);
  EXPECT_EQ(a.service_level, 26u % 16);
  EXPECT_EQ(a.traffic_classes, std::vector<int32_t>{26});
  EXPECT_TRUE(a.paced);
  EXPECT_FALSE(a.deleted);
}

TEST_F(ReconcilerTest, ReapplyingTheSamePolicyTouchesNothing) {
  auto r = make();
  r->onPolicy(samplePolicy(1), PolicySource::kPersisted);
  const int applies = tc_.applies, writes = tc_.writes;
  uint64_t seq_before = 0;
  readParams("tenant-a", &seq_before);
  r->onPolicy(samplePolicy(1), PolicySource::kPolicyd);
  EXPECT_EQ(tc_.applies, applies);
  uint64_t seq_after = 0;
  readParams("tenant-a", &seq_after);
  EXPECT_EQ(seq_before, seq_after) << "shm params rewritten for an identical policy";
  // A new Reconciler (agent restart) on the same kernel: the executor finds no difference.
  auto r2 = std::make_unique<Reconciler>(options(), &tc_, clock_, &board_);
  r2->onPolicy(samplePolicy(1), PolicySource::kPersisted);
  EXPECT_EQ(tc_.writes, writes);
  EXPECT_EQ(r2->lastTcWrites(), 0);
  readParams("tenant-a", &seq_after);
  EXPECT_EQ(seq_before, seq_after) << "restart rewrote unchanged params";
}

TEST_F(ReconcilerTest, OneTenantChangeUpdatesOnlyThatTenant) {
  auto r = make();
  r->onPolicy(samplePolicy(1), PolicySource::kPolicyd);
  uint64_t seq_a = 0, seq_b = 0;
  readParams("tenant-a", &seq_a);
  readParams("tenant-b", &seq_b);
  VersionedPolicy v2 = samplePolicy(2);
  v2.policy.tenants[1].limit_bytes_per_second = 600'000'000;
  r->onPolicy(v2, PolicySource::kPolicyd);
  EXPECT_EQ(r->appliedVersion(), 2u);
  EXPECT_EQ(tc_.trees["eth0"].tenants[1].limit_bytes_per_second, 600'000'000u);
  uint64_t seq_a2 = 0, seq_b2 = 0;
  TenantParams b = readParams("tenant-b", &seq_b2);
  readParams("tenant-a", &seq_a2);
  EXPECT_EQ(b.limit_bytes_per_second, 600'000'000u);
  EXPECT_EQ(b.policy_version, 2u);
  EXPECT_NE(seq_b, seq_b2);
  // tenant-a's parameters only changed by the version number.
  EXPECT_EQ(readParams("tenant-a").policy_version, 2u);
}

TEST_F(ReconcilerTest, LoweredLimitClampsTheRateAtOnce) {
  auto r = make();
  r->onPolicy(samplePolicy(1), PolicySource::kPolicyd);
  VersionedPolicy v2 = samplePolicy(2);
  v2.policy.tenants[0].limit_bytes_per_second = 500'000'000;
  r->onPolicy(v2, PolicySource::kPolicyd);
  const TenantParams a = readParams("tenant-a");
  for (const BucketSpec& b : a.buckets) EXPECT_LE(b.rate_bytes_per_second, 500'000'000u);
}

TEST_F(ReconcilerTest, DeletedTenantFileGoesWhenUnused) {
  auto r = make();
  r->onPolicy(samplePolicy(1), PolicySource::kPolicyd);
  const std::string path_b = socketOf(dir_.path(), "tenant-b");
  const std::string path_s = socketOf(dir_.path(), "tenant-s");
  // A live "plugin" process of tenant-b (same process, its own connection and slot).
  auto reader = tq::testing::attachAs(path_b, "tenant-b");
  ASSERT_TRUE(reader.ok()) << reader.status().toString();
  ASSERT_NE(reader->view->slot(), nullptr);

  VersionedPolicy v2 = samplePolicy(2);
  v2.policy.tenants.erase(v2.policy.tenants.begin() + 1);  // tenant-b
  v2.policy.tenants.pop_back();                            // tenant-s
  r->onPolicy(v2, PolicySource::kPolicyd);
  EXPECT_FALSE(fileExists(path_s)) << "a deleted tenant's socket goes at once";
  EXPECT_FALSE(fileExists(path_b));
  EXPECT_TRUE(reader->view->readParams()->deleted) << "attached processes see it";
  EXPECT_EQ(r->retiringTenants(), std::vector<std::string>{"tenant-b"});
  EXPECT_TRUE(r->tenantShm("tenant-s") == nullptr) << "nobody attached: released at once";
  EXPECT_EQ(tc_.trees["eth0"].tenants.size(), 1u);

  r->tick();
  EXPECT_EQ(r->retiringTenants(), std::vector<std::string>{"tenant-b"});
  reader = Status(internalError("gone"));  // the process exits: its connection closes
  ASSERT_TRUE(attachedCount(0));
  clock_.advanceNs(20'000'000);
  r->tick();
  EXPECT_TRUE(r->retiringTenants().empty());
}

TEST_F(ReconcilerTest, TenantComingBackReusesItsFile) {
  auto r = make();
  r->onPolicy(samplePolicy(1), PolicySource::kPolicyd);
  auto reader = tq::testing::attachAs(socketOf(dir_.path(), "tenant-b"), "tenant-b");
  ASSERT_TRUE(reader.ok()) << reader.status().toString();
  VersionedPolicy v2 = samplePolicy(2);
  v2.policy.tenants.erase(v2.policy.tenants.begin() + 1);
  r->onPolicy(v2, PolicySource::kPolicyd);
  EXPECT_TRUE(reader->view->readParams()->deleted);
  r->onPolicy(samplePolicy(3), PolicySource::kPolicyd);
  TenantParams b = *reader->view->readParams();  // the attached process sees it come back
  EXPECT_FALSE(b.deleted);
  EXPECT_EQ(b.policy_version, 3u);
  EXPECT_TRUE(r->retiringTenants().empty());
}

TEST_F(ReconcilerTest, FailureKeepsLastGoodStateAndRetriesWithBackoff) {
  auto r = make();
  r->onPolicy(samplePolicy(1), PolicySource::kPolicyd);
  const auto good_eth0 = tc_.trees["eth0"];
  const auto good_eth1 = tc_.trees["eth1"];

  VersionedPolicy v2 = samplePolicy(2);
  v2.policy.tenants[0].limit_bytes_per_second = 700'000'000;  // eth0 changes
  v2.policy.tenants[2].limit_bytes_per_second = 90'000'000;   // eth1 changes, and fails
  tc_.fail_devices = {"eth1"};
  r->onPolicy(v2, PolicySource::kPolicyd);
  EXPECT_EQ(r->appliedVersion(), 1u);
  EXPECT_TRUE(r->ready());
  EXPECT_EQ(r->reconcileErrorsTotal(), 1u);
  ASSERT_EQ(r->unresolvedErrors().size(), 1u);
  EXPECT_NE(r->unresolvedErrors()[0].find("apply policy v2: add class 1:10 on dev eth1"),
            std::string::npos)
      << r->unresolvedErrors()[0];
  EXPECT_EQ(tc_.trees["eth0"], good_eth0) << "eth0 must be rolled back to v1";
  EXPECT_EQ(tc_.trees["eth1"], good_eth1);
  EXPECT_EQ(readParams("tenant-a").limit_bytes_per_second, 750'000'000u) << "shm half-applied";
  EXPECT_EQ(readParams("tenant-a").policy_version, 1u);

  // Retries follow the backoff: ~100 ms, ~200 ms, ~400 ms (±20 %), and nothing before.
  int64_t expected = 100'000'000;
  for (int i = 0; i < 3; ++i) {
    const int64_t now = clock_.nowNs();
    const int64_t due = r->retryDueNs();
    EXPECT_GE(due - now, expected * 8 / 10) << "retry " << i;
    EXPECT_LE(due - now, expected * 12 / 10) << "retry " << i;
    EXPECT_LE(r->nextDueNs(), due);
    const uint64_t errors = r->reconcileErrorsTotal();
    clock_.setNs(due - 1);
    r->tick();
    EXPECT_EQ(r->reconcileErrorsTotal(), errors) << "retried early";
    clock_.setNs(due);
    r->tick();
    EXPECT_EQ(r->reconcileErrorsTotal(), errors + 1) << "no retry when due";
    expected *= 2;
  }
  // The device is fixed: the next retry applies v2 and clears the error.
  tc_.fail_devices.clear();
  clock_.setNs(r->retryDueNs());
  r->tick();
  EXPECT_EQ(r->appliedVersion(), 2u);
  EXPECT_TRUE(r->unresolvedErrors().empty());
  EXPECT_FALSE(r->pendingPolicy().has_value());
  EXPECT_EQ(readParams("tenant-a").limit_bytes_per_second, 700'000'000u);
  EXPECT_EQ(r->reconcileErrorsTotal(), 4u);
}

TEST_F(ReconcilerTest, NewPolicyWhileFailingReplacesThePendingOne) {
  auto r = make();
  r->onPolicy(samplePolicy(1), PolicySource::kPolicyd);
  tc_.fail_devices = {"eth0"};
  VersionedPolicy v2 = samplePolicy(2);
  v2.policy.tenants[0].weight = 5;
  r->onPolicy(v2, PolicySource::kPolicyd);
  EXPECT_EQ(r->pendingPolicy()->version, 2u);
  // policyd rolls back to v1's content as v3; the fake still fails only for changed trees.
  tc_.fail_devices.clear();
  r->onPolicy(samplePolicy(3), PolicySource::kPolicyd);
  EXPECT_EQ(r->appliedVersion(), 3u);
  EXPECT_FALSE(r->pendingPolicy().has_value());
  EXPECT_TRUE(r->unresolvedErrors().empty());
}

TEST_F(ReconcilerTest, FirstPolicyFailingLeavesAgentNotReady) {
  ReconcilerOptions o = options();
  o.device_exists = [](const std::string& d) { return d != "eth1"; };
  Reconciler r2(o, &tc_, clock_, &board_);
  r2.onPolicy(samplePolicy(1), PolicySource::kPersisted);
  EXPECT_FALSE(r2.ready());
  r2.tick();
  AgentState s = board_.snapshot();
  EXPECT_FALSE(s.ready);
  EXPECT_NE(s.not_ready_reason.find("device eth1 (link storage) does not exist"), std::string::npos)
      << s.not_ready_reason;
  EXPECT_EQ(s.reconcile_errors_total, 1u);
  EXPECT_EQ(s.latest_seen_version, 1u);
  EXPECT_TRUE(tc_.trees.empty()) << "nothing may be applied";
  EXPECT_FALSE(fileExists(dir_.path() + "/tenants/tenant-a")) << "nothing for an unapplied policy";
}

TEST_F(ReconcilerTest, AllocationPassHeartbeatsReclaimsAndPublishes) {
  auto r = make();
  r->onPolicy(samplePolicy(1), PolicySource::kPolicyd);
  // A plugin process that sends 1000 bytes and dies without cleaning up.
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto rd = tq::testing::attachAs(socketOf(dir_.path(), "tenant-a"), "tenant-a");
    if (!rd.ok()) _exit(1);
    if (rd->view->counters(0) == nullptr) _exit(2);
    rd->view->counters(0)->bytes.store(1000);  // tx on eth0
    rd->view->counters(1)->bytes.store(500);   // rx on eth0
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_EQ(WEXITSTATUS(status), 0);
  ASSERT_TRUE(attachedCount(0)) << "the attach thread sees the process's socket close";

  clock_.advanceNs(10'000'000);
  r->tick();
  AgentState s = board_.snapshot();
  ASSERT_EQ(s.tenants.size(), 3u);
  EXPECT_EQ(s.tenants[0].name, "tenant-a");
  EXPECT_EQ(s.tenants[0].transmit_bytes, 1000u) << "a gone process's counters must be kept";
  EXPECT_EQ(s.tenants[0].receive_bytes, 500u);
  EXPECT_EQ(s.tenants[0].processes, 0u) << "the slot is released when the socket closes";
  EXPECT_EQ(s.tenants[0].allocated_bytes_per_second, 500'000'000u) << "idle: bucket at guarantee";
  EXPECT_EQ(s.node, "node1");
  EXPECT_EQ(s.policy_version, 1u);
  EXPECT_TRUE(s.ready);
  EXPECT_GE(s.allocation_duration.count(), 1u);
  EXPECT_EQ(s.reconcile_duration.count(), 1u);
  EXPECT_TRUE(fileExists(socketOf(dir_.path(), "tenant-a")));
  // Class counters from tc (fake: link class + one per tenant on each device).
  EXPECT_EQ(s.classes.size(), 2u + 3u);
}

TEST_F(ReconcilerTest, AllocationRunsEveryPeriod) {
  auto r = make();
  r->onPolicy(samplePolicy(1), PolicySource::kPolicyd);
  r->tick();
  const uint64_t n0 = board_.snapshot().allocation_duration.count();
  for (int i = 0; i < 50; ++i) {
    clock_.setNs(r->nextDueNs());
    r->tick();
  }
  clock_.advanceNs(100'000'000);
  r->tick();
  const uint64_t n1 = board_.snapshot().allocation_duration.count();
  // 50 due-time ticks cover >= 40 periods of 10 ms whatever else was due in between.
  EXPECT_GE(n1 - n0, 40u);
  EXPECT_LE(r->nextDueNs() - clock_.nowNs(), 10'000'000);
}

// A plugin process of `tenant` in this process (its own connection and slot). `slot`: its
// counters of bucket 0 (tx on the tenant's first device); counters(b) for the others.
struct FakeProcess {
  std::unique_ptr<tq::testing::AttachedProcess> reader;
  shm::Counters* slot = nullptr;
  shm::Counters* counters(uint32_t b) { return reader->view->counters(b); }
};
FakeProcess attachProcess(const std::string& run_dir, const std::string& tenant) {
  FakeProcess p;
  auto r = tq::testing::attachAs(socketOf(run_dir, tenant), tenant);
  EXPECT_TRUE(r.ok()) << r.status().toString();
  if (!r.ok()) return p;
  p.reader = std::make_unique<tq::testing::AttachedProcess>(std::move(r).value());
  p.slot = p.reader->view->counters(0);
  EXPECT_NE(p.slot, nullptr);
  return p;
}

TEST_F(ReconcilerTest, AllocatorSplitsEachLinkByDemandGuaranteeWeightAndLimit) {
  auto r = make();
  r->onPolicy(samplePolicy(1),
              PolicySource::kPolicyd);  // fabric 1.25 GB/s: a 500/750 w2, b 250/500 w1
  auto rate = [&](const std::string& t) {
    return r->tenantParams(t)->buckets[0].rate_bytes_per_second;
  };
  auto period = [&](int n = 1) {
    for (int i = 0; i < n; ++i) {
      clock_.advanceNs(10'000'000);
      r->tick();
    }
  };
  period();
  EXPECT_EQ(rate("tenant-a"), 500'000'000u) << "no process: bucket at the guarantee";
  EXPECT_EQ(rate("tenant-b"), 250'000'000u);

  // Both backlogged (throttled the whole period): guarantees, then spare 2:1 up to the limits,
  // out of the allocatable capacity 1.25 GB/s x (1 - 5 % headroom) = 1.1875 GB/s: a reaches
  // its limit (750), b gets the rest (437.5, under its 500 limit).
  FakeProcess a = attachProcess(dir_.path(), "tenant-a");
  FakeProcess b = attachProcess(dir_.path(), "tenant-b");
  a.slot->throttled_since_ns.store(clock_.nowNs());
  b.slot->throttled_since_ns.store(clock_.nowNs());
  period(2);
  EXPECT_EQ(rate("tenant-a"), 750'000'000u);
  EXPECT_EQ(rate("tenant-b"), 437'500'000u);

  // tenant-b drops to a steady 100 MB/s (1 MB per 10 ms, never throttled): its allocation
  // follows its demand, its bucket stays at its guarantee, tenant-a takes the rest (limit 750).
  b.slot->throttled_since_ns.store(0);
  for (int i = 0; i < 3; ++i) {
    b.slot->bytes.fetch_add(1'000'000);
    period();
  }
  EXPECT_EQ(rate("tenant-b"), 250'000'000u);
  EXPECT_EQ(rate("tenant-a"), 750'000'000u);
  AgentState st = board_.snapshot();
  EXPECT_EQ(st.tenants[1].allocated_bytes_per_second, 250'000'000u);

  // tenant-s is alone on its link: backlogged, it gets its limit.
  FakeProcess s = attachProcess(dir_.path(), "tenant-s");
  s.slot->throttled_since_ns.store(clock_.nowNs());
  period(2);
  EXPECT_EQ(rate("tenant-s"), 100'000'000u);
  // tenant-a's processes exit: back to its guarantee, ready for the next job.
  a.reader.reset();
  ASSERT_TRUE(attachedCount(2));
  period();
  EXPECT_EQ(rate("tenant-a"), 500'000'000u);
}

// Ingress is allocated as egress is, from the receive buckets' own counters: receives waiting
// for tokens (throttled, backlog) are demand at this end, whatever the sends do.
TEST_F(ReconcilerTest, IngressIsAllocatedLikeEgressFromTheReceiveBuckets) {
  auto r = make();
  r->onPolicy(samplePolicy(1), PolicySource::kPolicyd);
  auto rate = [&](const std::string& t, uint32_t b) {
    return r->tenantParams(t)->buckets[b].rate_bytes_per_second;
  };
  FakeProcess a = attachProcess(dir_.path(), "tenant-a");
  FakeProcess b = attachProcess(dir_.path(), "tenant-b");
  a.counters(1)->throttled_since_ns.store(clock_.nowNs());  // receives wait for tokens
  b.counters(1)->throttled_since_ns.store(clock_.nowNs());
  b.counters(1)->backlog_bytes.store(4 << 20);
  for (int i = 0; i < 2; ++i) {
    clock_.advanceNs(10'000'000);
    r->tick();
  }
  EXPECT_EQ(rate("tenant-a", 1), 750'000'000u);  // guarantees, then spare 2:1 up to the limits
  EXPECT_EQ(rate("tenant-b", 1), 437'500'000u);
  EXPECT_EQ(rate("tenant-a", 0), 500'000'000u) << "no send demand: tx at the guarantee";
  EXPECT_EQ(rate("tenant-b", 0), 250'000'000u);
  AgentState st = r->buildState();
  ASSERT_EQ(st.tenants[1].buckets.size(), 2u);
  EXPECT_TRUE(st.tenants[1].buckets[1].receive);
  EXPECT_EQ(st.tenants[1].buckets[1].device, "eth0");
  EXPECT_EQ(st.tenants[1].buckets[1].backlog_bytes, 4u << 20);
  EXPECT_EQ(st.tenants[1].buckets[1].allocated_bytes_per_second, 437'500'000u);
  EXPECT_EQ(st.tenants[1].buckets[1].demand_bytes_per_second, kUnboundedDemand);
  // A tenant posting huge receives (a huge backlog) gets at most its limit and takes nobody's
  // guarantee.
  a.counters(1)->backlog_bytes.store(uint64_t{1} << 39);
  clock_.advanceNs(10'000'000);
  r->tick();
  EXPECT_EQ(rate("tenant-a", 1), 750'000'000u);
  EXPECT_GE(rate("tenant-b", 1), 250'000'000u);
}

// Issue 23 item 9. Each process of a tenant gets its own bucket's rate: the tenant's split
// among its processes by their demand (agent/process_shares.h), so they stay within it together
// whatever one of them writes into the shared words.
TEST_F(ReconcilerTest, EachProcessGetsItsShareOfItsTenantsBuckets) {
  auto r = make();
  r->onPolicy(samplePolicy(1), PolicySource::kPolicyd);
  FakeProcess busy = attachProcess(dir_.path(), "tenant-b");
  FakeProcess idle = attachProcess(dir_.path(), "tenant-b");
  FakeProcess other = attachProcess(dir_.path(), "tenant-b");
  for (int i = 0; i < 3; ++i) {
    busy.slot->throttled_ns.fetch_add(10'000'000);  // waits for tokens all the time
    other.slot->throttled_ns.fetch_add(10'000'000);
    clock_.advanceNs(10'000'000);
    r->tick();
  }
  const uint64_t tenant_rate = r->tenantParams("tenant-b")->buckets[0].rate_bytes_per_second;
  auto own = [](FakeProcess& p) { return p.reader->view->readParams()->process_rates.at(0); };
  EXPECT_EQ(own(busy) + own(other), tenant_rate) << "the two that want more share the rate";
  EXPECT_EQ(own(busy), own(other));
  EXPECT_EQ(own(idle), tenant_rate / 3) << "the idle one keeps its equal share in its bucket";
}

// Issue 23 item 9. A tenant whose processes count more than its buckets allowed (a process reset
// the shared words, or skipped its own bucket), or whose class the kernel counts over it (htb,
// a process that skipped the plugin marked with its DSCP), pays the excess back: its rate is
// lowered (fenced) until it has, and the overrun is counted.
TEST_F(ReconcilerTest, ATenantThatUsedMoreThanItWasAllowedIsFencedUntilItPaysItBack) {
  auto r = make();
  r->onPolicy(samplePolicy(1), PolicySource::kPolicyd);
  auto rate = [&](const std::string& t) {
    return r->tenantParams(t)->buckets[0].rate_bytes_per_second;
  };
  FakeProcess a = attachProcess(dir_.path(), "tenant-a");
  FakeProcess b = attachProcess(dir_.path(), "tenant-b");
  clock_.advanceNs(10'000'000);
  r->tick();
  const uint64_t allocated_a = rate("tenant-a");
  const uint64_t allocated_b = rate("tenant-b");
  // 2.2 s: tenant-a's processes count twice what its bucket allows; tenant-b's count what they
  // may, but the kernel counts twice that in its class (read once a second).
  // Meanwhile tenant-a's receives complete as whole messages: 3 s of its rx rate counted at
  // once, once a second. Receive buckets are not fenced (a receive is counted when it completes).
  const uint64_t allocated_a_rx = r->tenantParams("tenant-a")->buckets[1].rate_bytes_per_second;
  uint64_t class_b = 0;
  for (int i = 0; i < 220; ++i) {
    if (i % 100 == 50) a.counters(1)->bytes.fetch_add(3 * allocated_a_rx);
    a.slot->bytes.fetch_add(2 * rate("tenant-a") / 100);
    b.slot->bytes.fetch_add(rate("tenant-b") / 100);
    class_b += 2 * rate("tenant-b") / 100;
    tc_.class_bytes["tenant-b"] = class_b;
    clock_.advanceNs(10'000'000);
    r->tick();
  }
  EXPECT_LT(rate("tenant-a"), allocated_a) << "tenant-a was not fenced";
  EXPECT_GE(rate("tenant-a"), allocated_a / 4);
  EXPECT_LT(rate("tenant-b"), allocated_b) << "tenant-b was not fenced";
  AgentState st = r->buildState();
  ASSERT_EQ(st.tenants[0].name, "tenant-a");
  EXPECT_TRUE(st.tenants[0].buckets[0].fenced);
  EXPECT_GT(st.tenants[0].buckets[0].overrun_bytes, allocated_a / 2);
  EXPECT_TRUE(st.tenants[1].buckets[0].fenced);
  ASSERT_EQ(st.tenants[0].buckets[1].receive, true);
  EXPECT_FALSE(st.tenants[0].buckets[1].fenced) << "a receive bucket was fenced";
  EXPECT_EQ(st.tenants[0].buckets[1].overrun_bytes, 0u);
  // Honest again (the kernel's count follows the counters): fenced no more within 3 windows (the
  // allocator may give them more again meanwhile: they report demand).
  for (int i = 0; i < 300; ++i) {
    a.slot->bytes.fetch_add(rate("tenant-a") / 100);
    b.slot->bytes.fetch_add(rate("tenant-b") / 100);
    class_b += rate("tenant-b") / 100;
    tc_.class_bytes["tenant-b"] = class_b;
    clock_.advanceNs(10'000'000);
    r->tick();
  }
  EXPECT_GE(rate("tenant-a"), allocated_a);
  EXPECT_GE(rate("tenant-b"), allocated_b);
  st = r->buildState();
  EXPECT_FALSE(st.tenants[0].buckets[0].fenced);
  EXPECT_FALSE(st.tenants[1].buckets[0].fenced);
}

// Both ends stay work-conserving: tenant-a's receiver lets in 400 of the 500 MB/s its sender
// could send (the receiver's pacing holds its TCP window closed: its sends are in flight the
// whole time, waiting for the peer). That is no demand at the sender: the spare reaches
// tenant-b there within two periods (20 ms). A sender held back by the network instead (busy,
// not waiting for its peer) still takes its guarantee back.
TEST_F(ReconcilerTest, SpareReachesOthersAtTheSenderWhenTheReceiverPaces) {
  auto r = make();
  VersionedPolicy v = samplePolicy(1);
  v.policy.tenants[1].limit_bytes_per_second = 1'000'000'000;  // b could use all the spare
  r->onPolicy(v, PolicySource::kPolicyd);
  auto rate = [&](const std::string& t) {
    return r->tenantParams(t)->buckets[0].rate_bytes_per_second;
  };
  FakeProcess a = attachProcess(dir_.path(), "tenant-a");
  FakeProcess b = attachProcess(dir_.path(), "tenant-b");
  b.slot->throttled_since_ns.store(clock_.nowNs());  // b is backlogged at the sender
  clock_.advanceNs(10'000'000);
  r->tick();
  for (bool peer_waits : {true, false}) {
    for (int i = 0; i < 2; ++i) {  // 20 ms
      // a: 4 MB per 10 ms (400 MB/s, below its 500 MB/s guarantee), sends in flight all along.
      a.slot->bytes.fetch_add(4'000'000);
      a.slot->busy_ns.fetch_add(10'000'000);
      if (peer_waits) a.slot->peer_wait_ns.fetch_add(10'000'000);
      clock_.advanceNs(10'000'000);
      r->tick();
    }
    if (peer_waits) {
      // a's demand is what its receiver lets through (+5 % headroom): 420; b gets the rest of
      // 1187.5, a's bucket stays at its guarantee.
      EXPECT_EQ(rate("tenant-b"), 767'500'000u);
      EXPECT_EQ(rate("tenant-a"), 500'000'000u);
      EXPECT_EQ(r->buildState().tenants[0].buckets[0].demand_bytes_per_second, 420'000'000u);
    } else {
      // Starved by the network below its guarantee: a is backlogged again, spare by weight.
      EXPECT_EQ(rate("tenant-a"), 750'000'000u);
      EXPECT_EQ(rate("tenant-b"), 437'500'000u);
    }
  }
}

// Rails: each device of a link is allocated on its own. tenant-a crowds rail 0 (eth0) and takes
// its limit there, tenant-b keeps its guarantee on rail 0 and gets its limit on rail 1 (eth2),
// where tenant-a keeps its guarantee.
TEST_F(ReconcilerTest, EachRailIsAllocatedOnItsOwn) {
  ReconcilerOptions o = options();
  o.devices = {{"eth0", "fabric"}, {"eth1", "storage"}, {"eth2", "fabric"}};
  Reconciler r(o, &tc_, clock_, &board_);
  r.onPolicy(samplePolicy(1), PolicySource::kPolicyd);
  const TenantParams p = *r.tenantParams("tenant-a");
  ASSERT_EQ(p.buckets.size(), 4u);  // tx/rx on eth0, tx/rx on eth2
  EXPECT_EQ(p.buckets[2].name, "eth2");
  EXPECT_EQ(p.buckets[2].index, 1u);
  EXPECT_EQ(p.buckets[3].direction, shm::kRx);
  auto rate = [&](const std::string& t, uint32_t b) {
    return r.tenantParams(t)->buckets[b].rate_bytes_per_second;
  };
  FakeProcess a = attachProcess(dir_.path(), "tenant-a");
  FakeProcess b = attachProcess(dir_.path(), "tenant-b");
  a.counters(0)->throttled_since_ns.store(clock_.nowNs());  // a: backlogged on eth0
  b.counters(0)->bytes.store(0);                            // b: a little on eth0 ...
  b.counters(2)->throttled_since_ns.store(clock_.nowNs());  // ... backlogged on eth2
  for (int i = 0; i < 3; ++i) {
    b.counters(0)->bytes.fetch_add(1'000'000);  // 100 MB/s, below its guarantee
    clock_.advanceNs(10'000'000);
    r.tick();
  }
  EXPECT_EQ(rate("tenant-a", 0), 750'000'000u) << "a's limit on eth0";
  EXPECT_EQ(rate("tenant-b", 0), 250'000'000u) << "b's guarantee on eth0 stays in its bucket";
  EXPECT_EQ(rate("tenant-b", 2), 500'000'000u) << "b's limit on eth2, untouched by eth0";
  EXPECT_EQ(rate("tenant-a", 2), 500'000'000u) << "a's guarantee on eth2";
  AgentState st = r.buildState();
  EXPECT_EQ(st.tenants[0].allocated_bytes_per_second, 1'250'000'000u) << "tx summed over rails";
}

TEST_F(ReconcilerTest, RatesArePublishedOnlyWhenTheyChange) {
  auto r = make();
  r->onPolicy(samplePolicy(1), PolicySource::kPolicyd);
  FakeProcess a = attachProcess(dir_.path(), "tenant-a");
  a.slot->throttled_since_ns.store(clock_.nowNs());
  for (int i = 0; i < 3; ++i) {
    clock_.advanceNs(10'000'000);
    r->tick();
  }
  uint64_t seq = 0;
  a.reader->view->readParams(&seq);
  for (int i = 0; i < 20; ++i) {
    clock_.advanceNs(10'000'000);
    r->tick();
  }
  EXPECT_FALSE(a.reader->view->paramsChanged(seq)) << "steady allocation rewrote the params";
}

TEST_F(ReconcilerTest, StaleEntriesOfAPreviousRunAreRemoved) {
  ASSERT_EQ(::mkdir((dir_.path() + "/tenants").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((dir_.path() + "/tenants/gone-tenant").c_str(), 0750), 0);
  ASSERT_TRUE(writeFileAtomic(dir_.path() + "/tenants/gone-tenant/agent.sock", "").ok());
  ASSERT_TRUE(writeFileAtomic(dir_.path() + "/tenants/old-v1-file", "NQTQSHM1").ok());
  auto r = make();
  r->onPolicy(samplePolicy(1), PolicySource::kPersisted);
  EXPECT_FALSE(fileExists(dir_.path() + "/tenants/gone-tenant"));
  EXPECT_FALSE(fileExists(dir_.path() + "/tenants/old-v1-file"));
  EXPECT_TRUE(fileExists(socketOf(dir_.path(), "tenant-a")));
}

// The tenant's directory: root-owned, its unixGroup, 0750; without one, 0700. The node-wide
// socket is everyone's; the traffic-classes file is readable.
TEST_F(ReconcilerTest, TenantDirectoriesTakeTheirUnixGroup) {
  auto r = make();
  VersionedPolicy v = samplePolicy(1);
  v.policy.tenants[0].unix_group = "2001";
  r->onPolicy(v, PolicySource::kPolicyd);
  ASSERT_TRUE(r->ready()) << (r->unresolvedErrors().empty() ? "" : r->unresolvedErrors()[0]);
  struct stat st {};
  ASSERT_EQ(::stat((dir_.path() + "/tenants/tenant-a").c_str(), &st), 0);
  EXPECT_EQ(st.st_gid, 2001u);
  EXPECT_EQ(st.st_mode & 07777, 0750u);
  ASSERT_EQ(::stat((dir_.path() + "/tenants/tenant-b").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  ASSERT_EQ(::stat(socketOf(dir_.path(), "tenant-a").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  ASSERT_EQ(::stat(attach::nodeSocketPath(dir_.path()).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0666u);
  // Two tenants whose groups are one gid on this node: the second is not served.
  v = samplePolicy(2);
  v.policy.tenants[0].unix_group = "2001";
  v.policy.tenants[1].unix_group = "2001";
  r->onPolicy(v, PolicySource::kPolicyd);
  ASSERT_EQ(r->unresolvedErrors().size(), 1u);
  EXPECT_NE(r->unresolvedErrors()[0].find("tenant-a's too"), std::string::npos)
      << r->unresolvedErrors()[0];
}

TEST_F(ReconcilerTest, NodeWideSocketGivesTheDefaultTenant) {
  auto r = make();
  r->onPolicy(samplePolicy(1), PolicySource::kPolicyd);
  // No tenant "default" in the policy: the built-in one at the conservative rate.
  auto p = tq::testing::attachAs(attach::nodeSocketPath(dir_.path()), "nosuchtenant");
  ASSERT_TRUE(p.ok()) << p.status().toString();
  EXPECT_EQ(p->view->tenant(), "default");
  const TenantParams d = p->view->readParams().value();
  for (const BucketSpec& b : d.buckets) {
    EXPECT_EQ(b.rate_bytes_per_second, kConservativeRateBytesPerSecond);
  }
  // Attached processes are published as the kernel named them (the ungoverned-QP scan checks
  // QP owners against them).
  ASSERT_TRUE(attachedCount(1));
  clock_.advanceNs(10'000'000);
  r->tick();
  EXPECT_EQ(board_.snapshot().attached,
            (std::vector<AttachedProcess>{{static_cast<int32_t>(::getpid()), "default"}}));
  // With one in the policy, that one.
  VersionedPolicy v = samplePolicy(2);
  v.policy.tenants[2].name = "default";
  r->onPolicy(v, PolicySource::kPolicyd);
  auto q = tq::testing::attachAs(attach::nodeSocketPath(dir_.path()), "");
  ASSERT_TRUE(q.ok()) << q.status().toString();
  EXPECT_EQ(q->view->tenant(), "default");
  EXPECT_EQ(q->view->readParams()->limit_bytes_per_second, 100'000'000u);
  EXPECT_EQ(attach::tenantForTrafficClass(dir_.path(), 26), "tenant-a");
  EXPECT_EQ(attach::tenantForTrafficClass(dir_.path(), 5), std::nullopt);
}

// The node-wide socket gives each uid a share of the default tenant of its own (issue 23 item
// 6): the tenant's memory is its group's, every uid's usage is counted as the tenant's, and the
// tenant's rate is split among them (agent/default_tenant.h; default_tenant_test.cc).
TEST_F(ReconcilerTest, EachUidGetsItsOwnShareOfTheDefaultTenantCountedAsTheTenants) {
  auto r = make();
  VersionedPolicy v = samplePolicy(1);
  v.policy.tenants[1].is_default = true;  // tenant-b
  r->onPolicy(v, PolicySource::kPolicyd);
  ASSERT_TRUE(r->defaultTenant());
  EXPECT_EQ(r->defaultTenant()->tenant(), "tenant-b");
  EXPECT_EQ(r->defaultTenant()->group(), r->tenantShm("tenant-b"));
  auto p = tq::testing::attachAs(attach::nodeSocketPath(dir_.path()), "");
  ASSERT_TRUE(p.ok()) << p.status().toString();
  EXPECT_EQ(p->view->tenant(), "tenant-b");
  ASSERT_EQ(r->defaultTenant()->shards(), 1u);
  EXPECT_NE(p->view.get(), nullptr);
  const std::shared_ptr<TenantShm> mine = r->defaultTenant()->shardOf(::getuid());
  ASSERT_TRUE(mine);
  EXPECT_NE(mine, r->tenantShm("tenant-b")) << "a uid's memory is not the tenant's group's";
  ASSERT_TRUE(attachedCount(1));
  // What this uid's process sends is the tenant's.
  p->view->counters(0)->bytes.store(5'000'000);
  for (int i = 0; i < 3; ++i) {
    clock_.advanceNs(10'000'000);
    r->tick();
  }
  AgentState st = board_.snapshot();
  bool found = false;
  for (const TenantStatus& t : st.tenants) {
    if (t.name != "tenant-b") continue;
    found = true;
    EXPECT_EQ(t.transmit_bytes, 5'000'000u);
    EXPECT_EQ(t.processes, 1u);
    // A share of the tenant's bucket, never more.
    const TenantParams tp = r->tenantParams("tenant-b").value();
    EXPECT_LE(mine->published().buckets[0].rate_bytes_per_second,
              tp.buckets[0].rate_bytes_per_second);
    EXPECT_GT(mine->published().buckets[0].rate_bytes_per_second, 0u);
  }
  EXPECT_TRUE(found);
  // Another default: the uid's memory is marked deleted, tenant-b has its whole rate back.
  v = samplePolicy(2);
  v.policy.tenants[0].is_default = true;
  r->onPolicy(v, PolicySource::kPolicyd);
  EXPECT_EQ(r->defaultTenant()->tenant(), "tenant-a");
  EXPECT_TRUE(p->view->readParams()->deleted);
  EXPECT_EQ(r->tenantShm("tenant-b")->published(), r->tenantParams("tenant-b").value());
}

TEST_F(ReconcilerTest, NoneModeProgramsOnlyTheLinkShaper) {
  auto r = make(TcMode::kNone);
  r->onPolicy(samplePolicy(1), PolicySource::kPolicyd);
  EXPECT_TRUE(r->ready());
  ASSERT_EQ(tc_.trees.size(), 2u);
  EXPECT_FALSE(tc_.trees["eth0"].tenant_classes) << "no per-tenant classes in none mode";
  EXPECT_EQ(tc_.trees["eth0"].capacity_bytes_per_second, 1'250'000'000u);
  EXPECT_TRUE(fileExists(socketOf(dir_.path(), "tenant-a")));
  EXPECT_EQ(readParams("tenant-a").dscp, 26u) << "the plugin still tags";
  // A tenant's limit change touches no tc object in none mode.
  const int writes = tc_.writes;
  VersionedPolicy v2 = samplePolicy(2);
  v2.policy.tenants[0].limit_bytes_per_second = 600'000'000;
  r->onPolicy(v2, PolicySource::kPolicyd);
  EXPECT_EQ(tc_.writes, writes);
  EXPECT_EQ(readParams("tenant-a").limit_bytes_per_second, 600'000'000u);
  clock_.advanceNs(2'000'000'000);
  r->tick();
  EXPECT_EQ(board_.snapshot().classes.size(), 2u) << "only the link classes";
}

TEST_F(ReconcilerTest, ResyncRepairsDrift) {
  auto r = make();
  r->onPolicy(samplePolicy(1), PolicySource::kPolicyd);
  tc_.trees.erase("eth0");  // someone ran `tc qdisc del dev eth0 root`
  clock_.advanceNs(31'000'000'000);
  r->tick();
  ASSERT_EQ(tc_.trees.count("eth0"), 1u);
  EXPECT_EQ(tc_.trees["eth0"].tenants.size(), 2u);
}

TEST_F(ReconcilerTest, LinkDroppedFromPolicyRemovesThatTree) {
  auto r = make();
  r->onPolicy(samplePolicy(1), PolicySource::kPolicyd);
  VersionedPolicy v2 = samplePolicy(2);
  v2.policy.links.pop_back();    // storage
  v2.policy.tenants.pop_back();  // tenant-s
  r->onPolicy(v2, PolicySource::kPolicyd);
  EXPECT_EQ(r->appliedVersion(), 2u);
  EXPECT_EQ(tc_.trees.count("eth1"), 0u);
  EXPECT_EQ(tc_.trees.count("eth0"), 1u);
}

// RDMA port counters ride on the ~1 s stats tick, with or without a policy; empty sysfs_root
// (the other tests) reads nothing.
TEST_F(ReconcilerTest, RdmaPortCountersAtTheStatsCadence) {
  tq::testing::FakeSysfs sysfs;
  sysfs.rxe0();
  ReconcilerOptions o = options();
  o.sysfs_root = sysfs.root();
  Reconciler r(o, &tc_, clock_, &board_);
  r.tick();
  ASSERT_EQ(board_.snapshot().rdma_ports.size(), 1u);
  EXPECT_FALSE(r.ready());
  EXPECT_EQ(board_.snapshot().rdma_ports[0].transmit_packets, 12345u);
  sysfs.hwCounter("rxe0", 1, "sent_pkts", 13000);
  clock_.advanceNs(500'000'000);
  r.tick();
  EXPECT_EQ(board_.snapshot().rdma_ports[0].transmit_packets, 12345u) << "before the next tick";
  clock_.advanceNs(500'000'000);
  r.tick();
  EXPECT_EQ(board_.snapshot().rdma_ports[0].transmit_packets, 13000u);
  EXPECT_LE(r.nextDueNs(), clock_.nowNs() + 1'000'000'000);

  auto without = make();
  without->tick();
  EXPECT_TRUE(board_.snapshot().rdma_ports.empty());
}

TEST(ReconcileLoopTest, RunsPostedWorkInOrderOnItsThreadAndStopsCleanly) {
  TempDir dir;
  FakeTc tc;
  StateBoard board;
  ReconcilerOptions o;
  o.node = "n";
  o.devices = {{"eth0", "fabric"}};
  o.run_dir = dir.path();
  o.device_exists = [](const std::string&) { return true; };
  FakeClock clock;
  Reconciler r(o, &tc, clock, &board);
  ReconcileLoop loop(r);
  loop.start();
  ASSERT_TRUE(loop.postPolicy(samplePolicy(1), PolicySource::kPersisted));
  ASSERT_TRUE(loop.postPolicy(samplePolicy(2), PolicySource::kPolicyd));
  uint64_t version = 0;
  std::thread::id where;
  ASSERT_TRUE(loop.runSync([&](Reconciler& rr) {
    version = rr.appliedVersion();
    where = std::this_thread::get_id();
  }));
  EXPECT_EQ(version, 2u) << "posted snapshots run in order before later work";
  EXPECT_NE(where, std::this_thread::get_id());
  // The loop ticks when the Reconciler's clock reaches its next due time, on its own.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (board.snapshot().allocation_duration.count() < 5 &&
         std::chrono::steady_clock::now() < deadline) {
    const int64_t t = loop.worker().sleepingUntilNs();
    if (t > clock.nowNs()) clock.setNs(t);
    std::this_thread::yield();
  }
  EXPECT_GE(board.snapshot().allocation_duration.count(), 5u);
  // Without the clock moving, it does not tick.
  ASSERT_TRUE(loop.runSync([](Reconciler&) {}));
  const uint64_t ticks = board.snapshot().allocation_duration.count();
  ASSERT_TRUE(loop.runSync([](Reconciler&) {}));
  EXPECT_EQ(board.snapshot().allocation_duration.count(), ticks);
  EXPECT_TRUE(board.snapshot().ready);
  loop.stop();
  EXPECT_FALSE(loop.postPolicy(samplePolicy(3), PolicySource::kPolicyd));
  EXPECT_FALSE(loop.runSync([](Reconciler&) {}));
  loop.stop();  // idempotent
}

// The shared fabric links this node is behind (docs/fabric.md): every tenant gets a tx and an
// rx bucket per link, at the static split until the cluster allocator's caps come, then at the
// caps, back to the static split once they are older than their hold time; the peers file
// tells the plugin which peers are in the node's group; the caps' mode is published.
TEST_F(ReconcilerTest, SharedLinkBucketsEnforceTheAllocatorsCapsThenTheStaticSplit) {
  auto r = make();
  VersionedPolicy p = samplePolicy(1);
  SharedLinkSpec leaf;
  leaf.name = "leaf-uplink";
  leaf.capacity_bytes_per_second = 1'000'000'000;
  leaf.groups = {{"leaf-1", {"node1", "node2"}, 0}, {"leaf-2", {"node3"}, 0}};
  p.policy.shared_links = {leaf};
  r->onPolicy(p, PolicySource::kPolicyd);
  r->tick();
  auto linkRates = [&](const std::string& tenant) {
    std::vector<std::pair<shm::Direction, uint64_t>> out;
    const std::optional<TenantParams> params = r->tenantParams(tenant);
    for (const BucketSpec& b : params->buckets) {
      if (b.scope != shm::kScopeFabricLink) continue;
      EXPECT_EQ(b.name, "leaf-uplink");
      EXPECT_EQ(b.index, 0u);
      out.emplace_back(b.direction, b.rate_bytes_per_second);
    }
    return out;
  };
  using Rates = std::vector<std::pair<shm::Direction, uint64_t>>;
  // No caps yet: each tenant's guarantee over the group's two nodes (a 500 MB/s, b 250 MB/s).
  EXPECT_EQ(linkRates("tenant-a"), (Rates{{shm::kTx, 250'000'000}, {shm::kRx, 250'000'000}}));
  EXPECT_EQ(linkRates("tenant-b"), (Rates{{shm::kTx, 125'000'000}, {shm::kRx, 125'000'000}}));
  // The device buckets are the node's allocation as before (two per device of the link).
  EXPECT_EQ(r->tenantParams("tenant-a")->buckets.size(), 4u);
  EXPECT_EQ(readWholeFileOr(attach::fabricPeersPath(dir_.path())),
            "tenantqos-fabric-peers 1\nlink 0 leaf-uplink leaf-1 all\n");

  FabricCapsMessage m;
  m.node = "node1";
  m.term = 3;
  m.hold_ns = 3'000'000'000;
  m.caps = {{"tenant-a", "leaf-uplink", "leaf-1", 600'000'000, 400'000'000, 1, 2}};
  m.peers = std::vector<FabricGroupPeers>{{"leaf-uplink", "leaf-1", {"10.0.0.2"}}};
  r->onFabricConnected(true);
  r->onFabricCaps(m);
  EXPECT_EQ(linkRates("tenant-a"), (Rates{{shm::kTx, 600'000'000}, {shm::kRx, 400'000'000}}));
  EXPECT_EQ(linkRates("tenant-b"), (Rates{{shm::kTx, 125'000'000}, {shm::kRx, 125'000'000}}));
  EXPECT_NE(readWholeFileOr(attach::fabricPeersPath(dir_.path())).find("peer 0 10.0.0.2\n"),
            std::string::npos);
  r->tick();
  AgentState s = r->buildState();
  EXPECT_EQ(s.fabric.mode, FabricMode::kAllocator);
  EXPECT_EQ(s.fabric.term, 3u);
  // Another node's caps, or an older term's, are not taken.
  m.term = 2;
  m.caps[0].tx = 1;
  r->onFabricCaps(m);
  EXPECT_EQ(linkRates("tenant-a")[0].second, 600'000'000u);

  // The stream is lost; past the hold time the static split with the last round's counts:
  // tenant-a on 1 node of 2 pairs: 500 + (1000 - 800 guarantees) / 2 = 600 MB/s both ways.
  r->onFabricConnected(false);
  r->tick();
  EXPECT_EQ(r->buildState().fabric.mode, FabricMode::kHeld);
  clock_.advanceNs(3'000'000'000);
  r->tick();
  s = r->buildState();
  EXPECT_EQ(s.fabric.mode, FabricMode::kStatic);
  EXPECT_EQ(linkRates("tenant-a"), (Rates{{shm::kTx, 600'000'000}, {shm::kRx, 600'000'000}}));
  // Link buckets are shown apart from the devices' (metrics label them by link).
  size_t links = 0;
  for (const TenantStatus& t : s.tenants)
    for (const BucketStatus& b : t.buckets) links += b.fabric_link;
  EXPECT_EQ(links, 6u);  // tx and rx for each of the three tenants
  // Recovery: a restarted allocator's caps (any term, nothing of the old one is enforced).
  m.term = 1;
  m.caps[0].tx = 700'000'000;
  r->onFabricConnected(true);
  r->onFabricCaps(m);
  r->tick();
  EXPECT_EQ(r->buildState().fabric.mode, FabricMode::kAllocator);
  EXPECT_EQ(linkRates("tenant-a"), (Rates{{shm::kTx, 700'000'000}, {shm::kRx, 400'000'000}}));
  // The board has the node's demand for the stream (no process attached: no entries).
  ASSERT_TRUE(board_.fabricDemand().has_value());
  EXPECT_TRUE(board_.fabricDemand()->entries.empty());

  // A policy without shared links: no link buckets, no peers file, no demand.
  VersionedPolicy plain = samplePolicy(2);
  r->onPolicy(plain, PolicySource::kPolicyd);
  r->tick();
  EXPECT_TRUE(linkRates("tenant-a").empty());
  EXPECT_FALSE(fileExists(attach::fabricPeersPath(dir_.path())));
  EXPECT_FALSE(board_.fabricDemand().has_value());
}

// A device the agent was told the rail of (--device DEV=LINK,rail=N) is in the peers map, so
// the plugin charges a rail's link class only for connections on that rail's devices.
TEST_F(ReconcilerTest, DeviceRailsReachThePeersMap) {
  ReconcilerOptions o = options();
  o.devices = {{"eth0", "fabric", 3u}, {"eth1", "storage"}};
  Reconciler r(o, &tc_, clock_, &board_);
  VersionedPolicy p = samplePolicy(1);
  SharedLinkSpec rail;
  rail.name = "rail-3";
  rail.rail = 3;
  rail.capacity_bytes_per_second = 1'000'000'000;
  rail.groups = {{"pod-1", {"node1", "node2"}, 0}, {"pod-2", {"node3"}, 0}};
  p.policy.shared_links = {rail};
  r.onPolicy(p, PolicySource::kPolicyd);
  r.tick();
  EXPECT_EQ(readWholeFileOr(attach::fabricPeersPath(dir_.path())),
            "tenantqos-fabric-peers 2\nlink 0 rail-3 pod-1 3\ndevice eth0 3\n");
}

}  // namespace
}  // namespace tq::agent
