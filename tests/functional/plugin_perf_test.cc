// tenantqos-perf over the real plugin: every mode runs and verifies its data; a rank that dies
// makes the others fail with a message within a deadline; the agent reclaims the slots of
// killed processes (the shared-memory contract from the plugin's side).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/tenant_shm.h"
#include "tests/functional/plugin_proc_util.h"
#include "tests/support/test_agent.h"

namespace tq::plugin::testing {
namespace {

// `run_dir`: the agent's; a directory that does not exist is a node without an agent.
std::map<std::string, std::string> baseEnv(const std::string& run_dir) {
  return {{"TENANTQOS_RUN_DIR", run_dir}, {"TENANTQOS_SOCKET_IFNAME", "lo"}};
}

std::vector<std::string> perf(std::vector<std::string> args) {
  args.insert(args.begin(), TQ_PERF_BIN);
  args.push_back("--plugin");
  args.push_back(TQ_PLUGIN_SO);
  return args;
}

TEST(PluginPerf, SendRecvSweepVerifiesData) {
  TempDir dir;
  ProcResult r = run(perf({"sendrecv", "--local", "2", "-b", "1", "-e", "8M", "-f", "8", "-n", "4",
                           "-w", "1", "--check-all", "--json"}),
                     baseEnv(dir.path() + "/run"), 120);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto results = jsonLines(r.out, "result");
  ASSERT_EQ(results.size(), 8u) << r.out;  // 1, 8, 64, ... 2M (16M > 8M)
  for (const auto& l : results) {
    EXPECT_EQ(jsonNumber(l, "wrong").value_or(-1), 0) << l;
    EXPECT_GT(jsonNumber(l, "time_us").value_or(0), 0) << l;
  }
  ASSERT_EQ(jsonLines(r.out, "config").size(), 1u);
  EXPECT_EQ(jsonNumber(jsonLines(r.out, "config")[0], "abi").value_or(0), 11);
}

TEST(PluginPerf, AllReduceOverThreeRanksIsCorrect) {
  TempDir dir;
  ProcResult r = run(perf({"allreduce", "--local", "3", "-b", "4", "-e", "4M", "-f", "16", "-n",
                           "3", "-w", "1", "--json"}),
                     baseEnv(dir.path() + "/run"), 120);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto results = jsonLines(r.out, "result");
  ASSERT_EQ(results.size(), 6u) << r.out;
  for (const auto& l : results) {
    EXPECT_EQ(jsonNumber(l, "wrong").value_or(-1), 0) << l;
    const double alg = jsonNumber(l, "algbw_GBps").value_or(0);
    const double bus = jsonNumber(l, "busbw_GBps").value_or(0);
    EXPECT_NEAR(bus, alg * 2.0 * 2 / 3, 1e-3 + alg * 1e-3) << l;  // nccl-tests: 2(n-1)/n
  }
}

TEST(PluginPerf, PingPongAndTheV10Abi) {
  TempDir dir;
  ProcResult r = run(perf({"pingpong", "--local", "2", "-b", "8", "-e", "64K", "-f", "64", "-n",
                           "50", "-w", "5", "--abi", "10", "--trafficclass", "3"}),
                     baseEnv(dir.path() + "/run"), 60);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("ABI v10"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rtt(us)"), std::string::npos) << r.out;
}

TEST(PluginPerf, ReportIntervalLinesInText) {
  TempDir dir;
  ProcResult r = run(perf({"sendrecv", "--local", "2", "--duration", "0.5", "--size", "64K",
                           "--report-interval", "100"}),
                     baseEnv(dir.path() + "/run"), 60);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  int lines = 0;
  for (size_t p = r.out.find("\ninterval "); p != std::string::npos;
       p = r.out.find("\ninterval ", p + 1))
    ++lines;
  EXPECT_GE(lines, 8) << r.out;  // 2 ranks x ~5 intervals
  EXPECT_NE(r.out.find("summary rank 0"), std::string::npos);
  EXPECT_NE(r.out.find("summary rank 1"), std::string::npos);
}

TEST(PluginPerf, StreamingAllReduceIsPipelinedCorrectAndEndsCleanly) {
  TempDir dir;
  // Three ranks stop on their own clocks: the end markers must drain every in-flight chunk.
  ProcResult r =
      run(perf({"allreduce", "--local", "3", "--duration", "1", "--size", "3M", "--chunk", "64K",
                "--window", "8", "--report-interval", "200", "--on-off", "400:100", "--json"}),
          baseEnv(dir.path() + "/run"), 60);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto summaries = jsonLines(r.out, "summary");
  ASSERT_EQ(summaries.size(), 3u) << r.out;
  for (const auto& l : summaries) {
    EXPECT_EQ(jsonNumber(l, "wrong").value_or(-1), 0) << l;
    EXPECT_GT(jsonNumber(l, "iterations").value_or(0), 1) << l;
    const double alg = jsonNumber(l, "algbw_GBps").value_or(0);
    EXPECT_NEAR(jsonNumber(l, "busbw_GBps").value_or(0), alg * 4 / 3, 1e-3 + alg * 1e-3) << l;
  }
  EXPECT_GE(jsonLines(r.out, "interval").size(), 9u) << r.out;  // 3 ranks x ~5 intervals
}

TEST(PluginPerf, TrainingStepsPrintOneIterationLineEachComputeApart) {
  TempDir dir;
  // 200 ms of compute after every allreduce, on a wall-clock on/off schedule.
  ProcResult r =
      run(perf({"allreduce", "--local", "2", "--duration", "1.2", "--size", "256K", "--chunk",
                "64K", "--compute-ms", "200", "--on-off", "900:100:50", "--json"}),
          baseEnv(dir.path()), 60);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<double> walls;
    for (const auto& l : jsonLines(r.out, "iteration")) {
      if (jsonNumber(l, "rank").value_or(-1) == rank) walls.push_back(*jsonNumber(l, "wall_ns"));
    }
    ASSERT_GE(walls.size(), 3u) << r.out;
    ASSERT_LE(walls.size(), 6u) << r.out;  // 1.2 s at >= 200 ms per step
    for (size_t i = 1; i < walls.size(); ++i) EXPECT_GE(walls[i] - walls[i - 1], 199e6) << r.out;
  }
  for (const auto& l : jsonLines(r.out, "summary")) EXPECT_EQ(jsonNumber(l, "wrong"), 0) << l;
}

TEST(PluginPerf, AllToAllSweepOverFourRanksVerifiesEveryByte) {
  TempDir dir;
  // One connection per ordered pair (12), blocks of size/4 cut in 64 KiB chunks: the last
  // chunk of a block arrives smaller than the receive posted (as NCCL posts its slots).
  ProcResult r = run(perf({"alltoall", "--local", "4", "-b", "4K", "-e", "1M", "-f", "16", "-n",
                           "3", "-w", "1", "--chunk", "48K", "--check-all", "--json"}),
                     baseEnv(dir.path() + "/run"), 120);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const auto results = jsonLines(r.out, "result");
  ASSERT_EQ(results.size(), 3u) << r.out;  // 4K, 64K, 1M
  for (const auto& l : results) {
    EXPECT_EQ(jsonNumber(l, "wrong").value_or(-1), 0) << l;
    const double alg = jsonNumber(l, "algbw_GBps").value_or(0);
    EXPECT_GT(alg, 0) << l;
    EXPECT_NEAR(jsonNumber(l, "busbw_GBps").value_or(0), alg * 3 / 4, 1e-3 + alg * 1e-3) << l;
  }
}

TEST(PluginPerf, StreamingAllToAllAndIncastEndCleanlyWithEveryByteChecked) {
  TempDir dir;
  // alltoall: each of 3 ranks streams to both others; ranks stop on their own clocks and the
  // end markers of every connection drain the rest.
  ProcResult r = run(perf({"alltoall", "--local", "3", "--duration", "1", "--size", "768K",
                           "--chunk", "64K", "--window", "4", "--report-interval", "200",
                           "--on-off", "300:100", "--check-all", "--json"}),
                     baseEnv(dir.path() + "/run"), 60);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  auto summaries = jsonLines(r.out, "summary");
  ASSERT_EQ(summaries.size(), 3u) << r.out;
  for (const auto& l : summaries) {
    EXPECT_EQ(jsonNumber(l, "wrong").value_or(-1), 0) << l;
    EXPECT_GT(jsonNumber(l, "iterations").value_or(0), 1) << l;
    EXPECT_GT(jsonNumber(l, "tx_bytes").value_or(0), 0) << l;
    EXPECT_GT(jsonNumber(l, "rx_bytes").value_or(0), 0) << l;
  }
  // incast: ranks 1..3 into rank 0, which receives what the three send; the senders receive
  // nothing.
  r = run(perf({"incast", "--local", "4", "--duration", "1", "--size", "256K", "--chunk", "64K",
                "--report-interval", "200", "--check-all", "--json"}),
          baseEnv(dir.path() + "/run"), 60);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  summaries = jsonLines(r.out, "summary");
  ASSERT_EQ(summaries.size(), 4u) << r.out;
  double sent = 0, received = 0;
  for (const auto& l : summaries) {
    EXPECT_EQ(jsonNumber(l, "wrong").value_or(-1), 0) << l;
    if (jsonNumber(l, "rank").value_or(-1) == 0) {
      received = jsonNumber(l, "rx_bytes").value_or(0);
      EXPECT_EQ(jsonNumber(l, "tx_bytes").value_or(-1), 0) << l;
      EXPECT_EQ(jsonNumber(l, "size").value_or(0), 3 * 256 * 1024) << l;  // per iteration
      EXPECT_GT(jsonNumber(l, "iterations").value_or(0), 1) << l;
    } else {
      sent += jsonNumber(l, "tx_bytes").value_or(0);
      EXPECT_EQ(jsonNumber(l, "rx_bytes").value_or(-1), 0) << l;
    }
  }
  EXPECT_GT(received, 0);
  EXPECT_EQ(received, sent);  // everything sent arrived (completed sends, drained receives)
}

TEST(PluginPerf, BadOptionsAreRejected) {
  ProcResult r = run({TQ_PERF_BIN, "sendrecv", "--local", "2", "--window", "33"}, {}, 10);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--window"), std::string::npos) << r.err;
  for (const char* bad : {"5", "5:", "5:1:", "5:1:-2", "5:1:2:3", "0:1"}) {
    r = run({TQ_PERF_BIN, "allreduce", "--local", "2", "--duration", "1", "--on-off", bad}, {}, 10);
    EXPECT_EQ(r.exit_code, 2) << bad;
    EXPECT_NE(r.err.find("ON_MS:OFF_MS[:PHASE_MS]"), std::string::npos) << bad << ": " << r.err;
  }
  r = run({TQ_PERF_BIN, "sendrecv", "--local", "2", "--compute-ms", "5"}, {}, 10);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--compute-ms"), std::string::npos) << r.err;
  r = run({TQ_PERF_BIN, "incast", "--local", "1"}, {}, 10);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("incast needs at least 2 ranks"), std::string::npos) << r.err;
  r = run({TQ_PERF_BIN, "sendrecv", "--local", "2", "--duration", "1", "--on-off", "5:5"}, {}, 10);
  EXPECT_EQ(r.exit_code, 2);
  r = run({TQ_PERF_BIN, "pingpong", "--local", "3"}, {}, 10);
  EXPECT_EQ(r.exit_code, 2);
  r = run({TQ_PERF_BIN, "sendrecv", "--local", "2", "--plugin", "/nonexistent/tqplg.so"}, {}, 30);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("cannot load net plugin"), std::string::npos) << r.err;
}

// Two ranks started separately; rank 1 is killed mid-run. Rank 0 must fail, with a message,
// well within the no-progress timeout; the agent then reclaims both processes' slots.
TEST(PluginPerf, ARankThatDiesFailsTheOthersAndItsSlotIsReclaimed) {
  TempDir dir;
  tq::testing::TestAgent agent(dir.path() + "/run");
  TenantParams p;
  p.buckets = nodeBuckets(10'000'000'000ull, 10'000'000);
  TenantShm* w = agent.tenant("tqplg-kill", p);
  const std::string rv = "127.0.0.1:" + std::to_string(freePort());
  auto rank = [&](int r) {
    return perf({"sendrecv", "--rank", std::to_string(r), "--nranks", "2", "--rendezvous", rv,
                 "--unidirectional", "--duration", "60", "--size", "1M", "--tenant", "tqplg-kill",
                 "--timeout", "30"});
  };
  Proc r0(rank(0), baseEnv(dir.path() + "/run"));
  Proc r1(rank(1), baseEnv(dir.path() + "/run"));
  const double t0 = monotonicSeconds();
  while (w->collect(realClock().nowNs(), 0).processes < 2 ||
         w->collect(realClock().nowNs(), 0).tx_bytes == 0) {
    ASSERT_TRUE(r0.poll()) << r0.err();
    ASSERT_TRUE(r1.poll()) << r1.err();
    ASSERT_LT(monotonicSeconds() - t0, 20) << "the ranks never started transferring";
    ::usleep(20'000);
  }
  r1.kill(SIGKILL);
  ProcResult res1 = r1.wait(10);
  EXPECT_EQ(res1.signal, SIGKILL);
  const double killed = monotonicSeconds();
  ProcResult res0 = r0.wait(20);
  ASSERT_FALSE(res0.timed_out) << "rank 0 hung after rank 1 died";
  EXPECT_EQ(res0.exit_code, 1);
  EXPECT_LT(monotonicSeconds() - killed, 5.0) << "rank 0 took too long to notice";
  EXPECT_NE(res0.err.find("error"), std::string::npos) << res0.err;
  std::printf("rank 0 after rank 1 died: %s",
              res0.err.substr(res0.err.rfind("[rank 0] tenantqos-perf")).c_str());
  // Both processes are gone: their sockets closed, so their slots are released; the totals
  // keep their counters.
  const uint64_t tx_before = w->collect(realClock().nowNs(), 0).tx_bytes;
  for (int i = 0; i < 200 && !agent.server().attachments().empty(); ++i) ::usleep(10'000);
  EXPECT_TRUE(agent.server().attachments().empty());
  TenantUsage u = w->collect(realClock().nowNs(), 0);
  EXPECT_EQ(u.processes, 0u);
  EXPECT_GE(u.tx_bytes, tx_before) << "releasing must keep the totals monotonic";
  EXPECT_GT(u.tx_bytes, 0u);
}

}  // namespace
}  // namespace tq::plugin::testing
