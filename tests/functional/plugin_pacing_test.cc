// Pacing, end to end: tenantqos-perf processes load the real plugin and stream over loopback
// while this test plays the agent (tests/support/test_agent.h: the agent's attach server and
// tenant memory). The achieved rate, measured at the receiver over >= 2 s of 100 ms intervals
// after a 0.5 s warm-up, must be within [0.97, 1.01] of the allocated rate (a rate short of it
// is measured a second time: doneTrying()). Fail closed: a process that cannot attach to the
// tenant it names is paced at the default tenant's rate.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <thread>

#include "common/tenant_shm.h"
#include "common/units.h"
#include "tests/functional/plugin_proc_util.h"
#include "tests/support/test_agent.h"

namespace tq::plugin::testing {
namespace {

class PluginPacingTest : public ::testing::Test {
 protected:
  // The agent's run directory exists once agent() started the agent: before, the node is
  // not governed.
  std::string runDir() const { return dir_.path() + "/run"; }
  // `rate` paces what the tenant sends; what it receives gets 10 x that unless `rx_rate` (the
  // receiving rank's rx bucket, measured at the receiver like the sender's).
  TenantShm* agent(const std::string& tenant, uint64_t rate,
                   std::optional<gid_t> group = std::nullopt, uint64_t rx_rate = 0) {
    if (!agent_) agent_ = std::make_unique<tq::testing::TestAgent>(runDir(), kDefaultRate);
    EXPECT_EQ(agent_->failure(), "");
    TenantParams p;
    p.policy_version = 1;
    // The agent's default depth (1 ms at the rate); no limit: late retries may catch up
    // (plugin.md).
    auto depth = [](uint64_t r) { return bucketDepthBytes(r, kDefaultBucketDepthNs, 4096); };
    p.buckets = nodeBuckets(rate, depth(rate));
    p.buckets[1].rate_bytes_per_second = rx_rate != 0 ? rx_rate : 10 * rate;
    p.buckets[1].depth_bytes = depth(p.buckets[1].rate_bytes_per_second);
    p.dscp = 26;
    return agent_->tenant(tenant, p, group);
  }
  // Waits (bounded) until no process is attached any more.
  bool allDetached() {
    for (int i = 0; i < 200 && !agent_->server().attachments().empty(); ++i) ::usleep(10'000);
    return agent_->server().attachments().empty();
  }
  static constexpr uint64_t kDefaultRate = 200'000'000 / 8;  // the default tenant here

  std::vector<std::string> perf(double seconds, const std::string& size,
                                const std::string& tenant) {
    return perfArgv({.bin = TQ_PERF_BIN,
                     .plugin = TQ_PLUGIN_SO,
                     .seconds = seconds,
                     .size = size,
                     .tenant = tenant,
                     .timeout_s = 20});
  }
  std::map<std::string, std::string> env(std::map<std::string, std::string> extra = {}) {
    if (extra.count("TENANTQOS_RUN_DIR") == 0) extra["TENANTQOS_RUN_DIR"] = runDir();
    extra["TENANTQOS_SOCKET_IFNAME"] = "lo";
    extra["NCCL_DEBUG"] = "INFO";  // the plugin's mode lines are INFO
    return extra;
  }

  // Unpaced capacity of this machine right now (other work shares the cores).
  double unpacedRate() {
    ProcResult r = run(perf(2.5, "1M", "tqplg-free"),
                       env({{"TENANTQOS_RUN_DIR", dir_.path() + "/no-agent"}}), 60);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return receiverWindow(r.out, 1).rate();
  }

  // Whether the unpaced transport moves comfortably more than `rate` on this machine now: a
  // rate below the floor says nothing about pacing when the CPU cannot carry the rate (load,
  // or the sanitizer build at -O0). Prints the unpaced figure.
  bool machineCanMove(uint64_t rate) {
    const double capacity = unpacedRate();
    std::printf("unpaced right now: %s\n", formatRate(static_cast<uint64_t>(capacity)).c_str());
    return capacity >= 1.15 * static_cast<double>(rate);
  }

  // Runs `cmd` (with `extra_env`) and expects the receiver at `rate`, within [0.97, 1.01];
  // *err: its log. Above the rate fails at once; below it, doneTrying() (plugin_proc_util.h).
  void expectRate(const std::vector<std::string>& cmd, uint64_t rate, const std::string& size,
                  std::string* err = nullptr, std::map<std::string, std::string> extra_env = {}) {
    for (int attempt = 1;; ++attempt) {
      ProcResult r = run(cmd, env(extra_env), 60);
      if (err != nullptr) *err = r.err;
      ASSERT_EQ(r.exit_code, 0) << r.err;
      const RateWindow win = receiverWindow(r.out, 1);
      EXPECT_GE(win.seconds, 2.0) << r.out;
      const double ratio = win.rate() / static_cast<double>(rate);
      std::printf("pacing at %s with %s messages (try %d): achieved %s over %.2f s, ratio %.4f\n",
                  formatRate(rate).c_str(), size.c_str(), attempt,
                  formatRate(static_cast<uint64_t>(win.rate())).c_str(), win.seconds, ratio);
      EXPECT_LE(ratio, 1.01);
      if (ratio < 0.97 && !machineCanMove(rate)) {
        GTEST_SKIP() << "this machine cannot move " << formatRate(rate)
                     << " unpaced right now (other load, or a sanitizer build)";
      }
      if (doneTrying(attempt, ratio)) return;
    }
  }
  void expectPaced(uint64_t rate, const std::string& size) {
    const std::string tenant = "tqplg-pace";
    TenantShm* w = agent(tenant, rate);
    expectRate(perf(3.0, size, tenant), rate, size);
    // The agent sees the traffic in the slots.
    EXPECT_TRUE(allDetached());
    TenantUsage u = w->collect(0, rate);
    EXPECT_GT(u.tx_bytes + u.rx_bytes, 0u);
  }
  // The receiver's rx bucket at `rate`, sends paced at 10 x that: what arrives is what the
  // receiver let in (its helper reads no faster; TCP holds the sender).
  void expectIngressPaced(uint64_t rate, const std::string& size) {
    const std::string tenant = "tqplg-rx";
    TenantShm* w = agent(tenant, 10 * rate, std::nullopt, rate);
    expectRate(perf(3.0, size, tenant), rate, size);
    // The agent sees the traffic in the slots.
    EXPECT_TRUE(allDetached());
    TenantUsage u = w->collect(0, rate);
    EXPECT_GT(u.tx_bytes + u.rx_bytes, 0u);
  }

  TempDir dir_;
  std::unique_ptr<tq::testing::TestAgent> agent_;
};

TEST_F(PluginPacingTest, AgentRate100Mbit) { expectPaced(100'000'000 / 8, "64K"); }
TEST_F(PluginPacingTest, AgentRate1Gbit) { expectPaced(1'000'000'000 / 8, "256K"); }
TEST_F(PluginPacingTest, AgentRate5Gbit) { expectPaced(5'000'000'000 / 8, "1M"); }
// Ingress: the receiver paces what it reads, whatever the sender could send.
TEST_F(PluginPacingTest, IngressRate100Mbit) { expectIngressPaced(100'000'000 / 8, "64K"); }
TEST_F(PluginPacingTest, IngressRate1Gbit) { expectIngressPaced(1'000'000'000 / 8, "256K"); }

TEST_F(PluginPacingTest, EnvRateWithoutAgentFile) {
  std::string err;
  expectRate(perf(3.0, "256K", "tqplg-env"), 1'000'000'000 / 8, "256K", &err,
             {{"TENANTQOS_RATE", "1Gbps"}});
  EXPECT_NE(err.find("pacing sends at TENANTQOS_RATE 1Gbps"), std::string::npos) << err;
}

// Two jobs of one tenant on one node share one bucket: together they get the rate.
TEST_F(PluginPacingTest, TwoProcessesOfATenantShareOneBucket) {
  const uint64_t rate = 1'000'000'000 / 8;
  TenantShm* w = agent("tqplg-shared", rate);
  for (int attempt = 1;; ++attempt) {
    Proc a(perf(3.5, "256K", "tqplg-shared"), env());
    Proc b(perf(3.5, "256K", "tqplg-shared"), env());
    ProcResult ra = a.wait(60), rb = b.wait(60);
    ASSERT_EQ(ra.exit_code, 0) << ra.err;
    ASSERT_EQ(rb.exit_code, 0) << rb.err;
    // The common window of both runs (wall clock), minus warm-up and the tail.
    const TogetherWindows t = togetherWindows({&ra.out, &rb.out});
    ASSERT_GT(t.span_s, 1.5) << "the two runs barely overlapped";
    const RateWindow& wa = t.windows[0];
    const RateWindow& wb = t.windows[1];
    const double ratio = (wa.rate() + wb.rate()) / static_cast<double>(rate);
    std::printf("shared bucket at 1Gbps (try %d): job A %s, job B %s, sum ratio %.4f over %.2f s\n",
                attempt, formatRate(static_cast<uint64_t>(wa.rate())).c_str(),
                formatRate(static_cast<uint64_t>(wb.rate())).c_str(), ratio, t.span_s);
    EXPECT_LE(ratio, 1.01);
    EXPECT_GT(wa.rate(), 0.2 * rate);
    EXPECT_GT(wb.rate(), 0.2 * rate);
    // Four processes (two per job) attached; all exited: their sockets closed, slots released.
    EXPECT_TRUE(allDetached());
    EXPECT_EQ(w->collect(0, rate).processes, 0u);
    if (doneTrying(attempt, ratio)) break;
  }
}

// Issue 23 item 10: a tenant at 1 Mbit/s holds its rate whatever the message size (a 32 MiB
// message costs 268 s there). What its sender admitted (its slot's tx count, counted as chunks
// are admitted onto the socket) is read while it runs, for 6 s per size: at most the rate over
// the time since the job started plus one depth, and the rate within [0.9, 1.05] from its first
// bytes on. Before the socket transport admitted chunks (5265e3d), a whole message was
// charged at once with its cost capped at 10 s: 3.6 Mbit/s with 4 MiB, 27.3 with 32 MiB.
TEST_F(PluginPacingTest, OneMbitHoldsForAnyMessageSize) {
  constexpr uint64_t kRate = 1'000'000 / 8;
  constexpr double kSeconds = 6.0;
  for (const std::string size : {"256K", "4M", "32M"}) {
    const std::string tenant = "tqplg-low-" + std::string(size == "256K" ? "a"
                                                          : size == "4M" ? "b"
                                                                         : "c");
    TenantShm* w = agent(tenant, kRate);
    const double started = monotonicSeconds();
    Proc p(perf(600, size, tenant), env());
    auto sample = [&] { return w->collect(SteadyClock().nowNs(), 10 * kRate); };
    // The first bytes admitted (the ranks set up their buffers first): measured from there.
    double t0 = 0;
    uint64_t b0 = 0;
    while (monotonicSeconds() - started < 10) {
      ASSERT_TRUE(p.poll()) << p.err();
      const TenantUsage u = sample();
      if (u.tx_bytes > 0) {
        t0 = monotonicSeconds();
        b0 = u.tx_bytes;
        break;
      }
      ::usleep(10'000);
    }
    ASSERT_GT(t0, 0) << "nothing was sent within 10 s: " << p.err();
    uint64_t most_over = 0;  // the most the count was above the rate since the start, bytes
    TenantUsage u;
    while (monotonicSeconds() - t0 < kSeconds) {
      ASSERT_TRUE(p.poll()) << p.err();
      u = sample();
      const auto allowed = static_cast<uint64_t>(kRate * (monotonicSeconds() - started));
      most_over = std::max(most_over, u.tx_bytes > allowed ? u.tx_bytes - allowed : 0);
      ::usleep(50'000);
    }
    const double rate = static_cast<double>(u.tx_bytes - b0) / (monotonicSeconds() - t0);
    p.kill(SIGTERM);
    p.wait(10);
    std::printf(
        "%s messages at 1 Mbit/s: %.3f Mbit/s admitted over %.1f s, at most %llu B over "
        "the rate since the start\n",
        size.c_str(), rate * 8e-6, kSeconds, static_cast<unsigned long long>(most_over));
    const uint64_t depth = bucketDepthBytes(kRate, kDefaultBucketDepthNs, 4096);
    EXPECT_LE(most_over, depth) << size;
    EXPECT_GE(rate / kRate, 0.9) << size;
    EXPECT_LE(rate / kRate, 1.05) << size;
    EXPECT_TRUE(allDetached());
  }
}

// A job started before the agent is unpaced, then governed once the file appears. Short of the
// rate, the whole scenario runs a second time, from a node without an agent again (as
// expectRate() measures again).
TEST_F(PluginPacingTest, JobStartedBeforeTheAgentBecomesGoverned) {
  const uint64_t rate = 200'000'000 / 8;
  for (int attempt = 1; attempt <= 2; ++attempt) {
    if (attempt > 1) {
      agent_.reset();
      std::filesystem::remove_all(runDir());
    }
    const std::string tenant = "tqplg-late" + std::to_string(attempt);
    Proc p(perf(4.0, "64K", tenant), env({{"TENANTQOS_SHM_RECHECK_MS", "100"}}));
    const double start = monotonicSeconds();
    while (monotonicSeconds() - start < 1.5) {
      ASSERT_TRUE(p.poll()) << p.err();
      ::usleep(20'000);
    }
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    const double created = static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
    agent(tenant, rate);
    ProcResult r = p.wait(60);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("UNPACED"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("appeared"), std::string::npos) << r.err;
    const RateWindow before = receiverWindow(r.out, 1, 0, created);
    const RateWindow after = receiverWindow(r.out, 1, created + 0.5);
    ASSERT_GT(before.seconds, 0.5);
    ASSERT_GT(after.seconds, 1.5);
    const double ratio = after.rate() / static_cast<double>(rate);
    std::printf("try %d: before the agent: %s, after: %s (allocated %s, ratio %.4f)\n", attempt,
                formatRate(static_cast<uint64_t>(before.rate())).c_str(),
                formatRate(static_cast<uint64_t>(after.rate())).c_str(), formatRate(rate).c_str(),
                ratio);
    EXPECT_GT(before.rate(), 2.0 * rate);
    EXPECT_LE(ratio, 1.03);
    if (doneTrying(attempt, ratio)) return;
  }
}

// Fail closed. A tenant the agent does not know: the default tenant's rate, measured.
TEST_F(PluginPacingTest, UnknownTenantIsPacedAtTheDefaultTenantsRate) {
  agent("tqplg-a", 1'000'000'000 / 8);
  std::string err;
  expectRate(perf(3.0, "64K", "nosuchtenant"), kDefaultRate, "64K", &err);
  EXPECT_NE(err.find("attached as tenant default"), std::string::npos) << err;
}

// A tenant whose directory the process's groups cannot enter (another tenant's): the default
// tenant, measured; as a real other uid and gid (setpriv), not root.
TEST_F(PluginPacingTest, AnotherGroupsTenantIsPacedAtTheDefaultTenantsRate) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run the job as another uid (setpriv)";
  if (::access("/usr/bin/setpriv", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/setpriv";
  ASSERT_EQ(::chmod(dir_.path().c_str(), 0755), 0);
  agent("tqplg-a", 1'000'000'000 / 8, /*group=*/41001);
  std::vector<std::string> cmd = {"/usr/bin/setpriv", "--reuid=41002", "--regid=41002",
                                  "--clear-groups"};
  for (const std::string& a : perf(3.0, "64K", "tqplg-a")) cmd.push_back(a);
  std::string err;
  expectRate(cmd, kDefaultRate, "64K", &err);
  EXPECT_NE(err.find("attached as tenant default"), std::string::npos) << err;
  EXPECT_NE(err.find("Permission denied"), std::string::npos) << err;
}

// A governed node (the run directory exists) where no agent answers: the conservative rate.
TEST_F(PluginPacingTest, GovernedNodeWithoutAnAgentIsPacedConservatively) {
  ASSERT_EQ(::mkdir(runDir().c_str(), 0755), 0);
  std::string err;
  expectRate(perf(3.0, "64K", "tqplg-a"), kConservativeRateBytesPerSecond, "64K", &err);
  EXPECT_NE(err.find("conservative"), std::string::npos) << err;
}

}  // namespace
}  // namespace tq::plugin::testing
