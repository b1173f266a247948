// Pacing, end to end: tenantqos-perf processes load the real plugin and stream over loopback
// while this test plays the agent (TenantShmWriter). The achieved rate, measured at the
// receiver over >= 2 s of 100 ms intervals after a 0.5 s warm-up, must be within
// [0.97, 1.01] of the allocated rate.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <thread>

#include "common/tenant_shm.h"
#include "common/units.h"
#include "tests/functional/plugin_proc_util.h"

namespace tq::plugin::testing {
namespace {


class PluginPacingTest : public ::testing::Test {
 protected:
  std::unique_ptr<TenantShmWriter> agent(const std::string& tenant, uint64_t rate) {
    auto w = TenantShmWriter::openOrCreate(dir_.path(), tenant);
    EXPECT_TRUE(w.ok()) << w.status().toString();
    TenantParams p;
    p.policy_version = 1;
    p.rate_bytes_per_second = rate;
    p.burst_bytes = 256 * 1024;
    p.dscp = 26;
    (*w)->publish(p);
    return std::move(w).value();
  }

  std::vector<std::string> perf(double seconds, const std::string& size, const std::string& tenant) {
    return {TQ_PERF_BIN, "sendrecv", "--local", "2", "--unidirectional", "--duration",
            std::to_string(seconds), "--size", size, "--report-interval", "100", "--json",
            "--plugin", TQ_PLUGIN_SO, "--tenant", tenant, "--timeout", "20"};
  }
  std::map<std::string, std::string> env(std::map<std::string, std::string> extra = {}) {
    extra["TENANTQOS_RUN_DIR"] = dir_.path();
    extra["TENANTQOS_SOCKET_IFNAME"] = "lo";
    extra["NCCL_DEBUG"] = "INFO";  // the plugin's mode lines are INFO
    return extra;
  }

  // Unpaced capacity of this machine right now (other work shares the cores).
  double unpacedRate() {
    ProcResult r = run(perf(2.5, "1M", "tqplg-free"), env(), 60);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return receiverWindow(r.out, 1).rate();
  }

  void expectPaced(uint64_t rate, const std::string& size) {
    const std::string tenant = "tqplg-pace";
    auto w = agent(tenant, rate);
    ProcResult r = run(perf(3.0, size, tenant), env(), 60);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const RateWindow win = receiverWindow(r.out, 1);
    ASSERT_GE(win.seconds, 2.0) << r.out;
    const double ratio = win.rate() / static_cast<double>(rate);
    std::printf("pacing at %s with %s messages: achieved %s over %.2f s, ratio %.4f\n",
                formatRate(rate).c_str(), size.c_str(),
                formatRate(static_cast<uint64_t>(win.rate())).c_str(), win.seconds, ratio);
    if (ratio < 0.97) {
      const double capacity = unpacedRate();
      if (capacity < 1.15 * static_cast<double>(rate)) {
        GTEST_SKIP() << "this machine moves only " << formatRate(static_cast<uint64_t>(capacity))
                     << " unpaced right now (other load); cannot test pacing at "
                     << formatRate(rate);
      }
    }
    EXPECT_GE(ratio, 0.97);
    EXPECT_LE(ratio, 1.01);
    // The agent sees the demand and the traffic in the slots.
    TenantUsage u = w->usage(0);
    EXPECT_GT(u.tx_bytes + u.rx_bytes, 0u);
  }

  TempDir dir_;
};

TEST_F(PluginPacingTest, AgentRate100Mbit) { expectPaced(100'000'000 / 8, "64K"); }
TEST_F(PluginPacingTest, AgentRate1Gbit) { expectPaced(1'000'000'000 / 8, "256K"); }
TEST_F(PluginPacingTest, AgentRate5Gbit) { expectPaced(5'000'000'000 / 8, "1M"); }

TEST_F(PluginPacingTest, EnvRateWithoutAgentFile) {
  const uint64_t rate = 1'000'000'000 / 8;
  ProcResult r = run(perf(3.0, "256K", "tqplg-env"), env({{"TENANTQOS_RATE", "1Gbps"}}), 60);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("pacing at TENANTQOS_RATE 1Gbps"), std::string::npos) << r.err;
  const RateWindow win = receiverWindow(r.out, 1);
  ASSERT_GE(win.seconds, 2.0);
  const double ratio = win.rate() / static_cast<double>(rate);
  std::printf("TENANTQOS_RATE=1Gbps: ratio %.4f\n", ratio);
  EXPECT_GE(ratio, 0.97);
  EXPECT_LE(ratio, 1.01);
}

// Two jobs of one tenant on one node share one bucket: together they get the rate.
TEST_F(PluginPacingTest, TwoProcessesOfATenantShareOneBucket) {
  const uint64_t rate = 1'000'000'000 / 8;
  auto w = agent("tqplg-shared", rate);
  Proc a(perf(3.5, "256K", "tqplg-shared"), env());
  Proc b(perf(3.5, "256K", "tqplg-shared"), env());
  ProcResult ra = a.wait(60), rb = b.wait(60);
  ASSERT_EQ(ra.exit_code, 0) << ra.err;
  ASSERT_EQ(rb.exit_code, 0) << rb.err;
  // The common window of both runs (wall clock), minus warm-up and the tail.
  auto span = [](const std::string& out) {
    double first = 1e300, last = 0;
    for (const std::string& l : jsonLines(out, "interval")) {
      const double end = jsonNumber(l, "wall_ns").value_or(0) / 1e9;
      first = std::min(first, end - jsonNumber(l, "interval_s").value_or(0));
      last = std::max(last, end);
    }
    return std::make_pair(first, last);
  };
  const auto [a0, a1] = span(ra.out);
  const auto [b0, b1] = span(rb.out);
  const double from = std::max(a0, b0) + kRateWarmupS, to = std::min(a1, b1) - 0.2;
  ASSERT_GT(to - from, 1.5) << "the two runs barely overlapped";
  const RateWindow wa = receiverWindow(ra.out, 1, from, to);
  const RateWindow wb = receiverWindow(rb.out, 1, from, to);
  const double sum = wa.rate() + wb.rate();
  std::printf("shared bucket at 1Gbps: job A %s, job B %s, sum ratio %.4f over %.2f s\n",
              formatRate(static_cast<uint64_t>(wa.rate())).c_str(),
              formatRate(static_cast<uint64_t>(wb.rate())).c_str(), sum / rate, to - from);
  EXPECT_LE(sum / static_cast<double>(rate), 1.01);
  EXPECT_GE(sum / static_cast<double>(rate), 0.97);
  EXPECT_GT(wa.rate(), 0.2 * rate);
  EXPECT_GT(wb.rate(), 0.2 * rate);
  // Four processes (two per job) attached; all exited, so the agent reclaims four slots.
  EXPECT_EQ(w->reclaimDeadSlots(), 4);
  EXPECT_EQ(w->usage(0).processes, 0u);
}

// A job started before the agent is unpaced, then governed once the file appears.
TEST_F(PluginPacingTest, JobStartedBeforeTheAgentBecomesGoverned) {
  const uint64_t rate = 200'000'000 / 8;
  Proc p(perf(4.0, "64K", "tqplg-late"), env({{"TENANTQOS_SHM_RECHECK_MS", "100"}}));
  const double start = monotonicSeconds();
  while (monotonicSeconds() - start < 1.5) {
    ASSERT_TRUE(p.poll()) << p.err();
    ::usleep(20'000);
  }
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  const double created = static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
  auto w = agent("tqplg-late", rate);
  ProcResult r = p.wait(60);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("UNPACED"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("appeared"), std::string::npos) << r.err;
  const RateWindow before = receiverWindow(r.out, 1, 0, created);
  const RateWindow after = receiverWindow(r.out, 1, created + 0.5);
  ASSERT_GT(before.seconds, 0.5);
  ASSERT_GT(after.seconds, 1.5);
  std::printf("before the agent: %s, after: %s (allocated %s)\n",
              formatRate(static_cast<uint64_t>(before.rate())).c_str(),
              formatRate(static_cast<uint64_t>(after.rate())).c_str(), formatRate(rate).c_str());
  EXPECT_GT(before.rate(), 2.0 * rate);
  EXPECT_NEAR(after.rate() / rate, 1.0, 0.03);
}

}  // namespace
}  // namespace tq::plugin::testing
