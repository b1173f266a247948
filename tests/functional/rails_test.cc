// Rails: two nodes joined by two emulated rails (two veth pairs, each a 200 Mbit/s port: tbf on
// every end), both carrying the policy's link "fabric", a real tenantqos-agent on each node
// (--tc-mode none: the plugin's buckets alone separate the tenants, as on an RDMA NIC) and the
// real policyd, over mutual TLS. Tenant "crowd" (no guarantee, weight 4, 8 streams) floods rail
// 0; tenant "steady" (guarantee 100 Mbit/s) runs one job on rail 0 and one on rail 1. Per
// (tenant, device) allocation and buckets at both ends mean: crowd does not take steady's
// guarantee on rail 0, and takes nothing of rail 1, where steady gets the whole port.
//
// Namespaces, veths, qdiscs and processes carry the prefix "tqrl<pid>" and are removed by the
// fixture (two_node_harness.h). About 15 s.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "common/units.h"
#include "tests/functional/plugin_proc_util.h"
#include "tests/functional/two_node_harness.h"

namespace tq::agent::functional {
namespace {

using plugin::testing::Proc;
using plugin::testing::ProcResult;
using plugin::testing::TogetherWindows;
using plugin::testing::togetherWindows;

constexpr double kPortMbit = 200;  // each rail's port
constexpr double kSteadyGuaranteeMbit = 100;
constexpr double kAllocatable = kPortMbit * 0.95;  // the policy's 5 % headroom

class PrivilegedRailsTest : public TwoNodeHarness {
 protected:
  PrivilegedRailsTest() : TwoNodeHarness("tqrl", 91, 2) {}

  void SetUp() override {
    TwoNodeHarness::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    // Each rail's port: a shallow FIFO at the rail's rate on both ends (left alone by the agents
    // in none mode: not their qdisc).
    for (int r = 0; r < 2; ++r) {
      for (int n = 0; n < 2; ++n) {
        auto q = node_[n].ns->run({"tc", "qdisc", "add", "dev", node_[n].dev[r], "root", "tbf",
                                   "rate", "200mbit", "burst", "32kb", "limit", "256kb"});
        ASSERT_TRUE(q.ok()) << q.status().toString();
      }
    }
  }

  std::string bucket(int n, const std::string& family, const std::string& tenant, int rail,
                     const char* direction) {
    return family + "{device=\"" + node_[n].dev[rail] + "\",direction=\"" + direction +
           "\",node=\"node" + std::to_string(n + 1) + "\",tenant=\"" + tenant + "\"}";
  }

  // One job: rank 0 on node 1 sends to rank 1 on node 2 over `rail`.
  std::unique_ptr<Proc> job(int index, const std::string& tenant, int rail, int nsocks,
                            double seconds, int rank) {
    return TwoNodeHarness::rank(
        rank, rail, 29700 + index, {.seconds = seconds, .size = "256K", .tenant = tenant},
        {{"TENANTQOS_NSOCKS", std::to_string(nsocks)}, {"NCCL_DEBUG", "INFO"}});
  }
};

TEST_F(PrivilegedRailsTest, ACrowdedRailTakesNothingFromTheOtherRailNorTheGuaranteeOnIt) {
  startPolicyd();
  startAgent(0);
  startAgent(1);
  apply(
      "apiVersion: tenantqos/v1\nkind: TenantPolicy\nlinks:\n"
      "  - name: fabric\n    capacity: 200Mbps\n    headroom: 5%\n"
      "tenants:\n"
      "  - name: crowd\n    link: fabric\n    guarantee: 0Mbps\n    limit: 200Mbps\n"
      "    weight: 4\n    serviceLevel: 1\n    dscp: 10\n"
      "  - name: steady\n    link: fabric\n    guarantee: 100Mbps\n    limit: 200Mbps\n"
      "    weight: 1\n    serviceLevel: 2\n    dscp: 20\n");
  for (int n = 0; n < 2; ++n) {
    ASSERT_TRUE(eventually(
        [&] {
          return metric(n, bucket(n, "tenantqos_bucket_allocated_rate_bytes_per_second", "steady",
                                  1, n == 0 ? "tx" : "rx"))
              .has_value();
        },
        5000))
        << "node" << n + 1 << " has no per-rail buckets:\n"
        << readTextFile(node_[n].log);
  }

  // crowd floods rail 0 with 8 streams; steady streams on both rails.
  const double seconds = 6;
  struct Job {
    std::string tenant;
    int rail, nsocks;
    std::unique_ptr<Proc> rank[2];
  } jobs[] = {{"crowd", 0, 8, {}}, {"steady", 0, 2, {}}, {"steady", 1, 2, {}}};
  for (size_t i = 0; i < 3; ++i) {
    for (int r = 1; r >= 0; --r) {
      jobs[i].rank[r] =
          job(static_cast<int>(i), jobs[i].tenant, jobs[i].rail, jobs[i].nsocks, seconds, r);
    }
  }
  // While they run: each rail's allocation at the sender and at the receiver.
  double steady0_tx = 0, steady1_tx = 0, steady0_rx = 0;
  int samples = 0;
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(4500)) {
    ::usleep(300'000);
    if (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(2000)) continue;
    auto a =
        metric(0, bucket(0, "tenantqos_bucket_allocated_rate_bytes_per_second", "steady", 0, "tx"));
    auto b =
        metric(0, bucket(0, "tenantqos_bucket_allocated_rate_bytes_per_second", "steady", 1, "tx"));
    auto c =
        metric(1, bucket(1, "tenantqos_bucket_allocated_rate_bytes_per_second", "steady", 0, "rx"));
    if (a && b && c) {
      steady0_tx += *a;
      steady1_tx += *b;
      steady0_rx += *c;
      ++samples;
    }
  }
  ProcResult res[3][2];
  for (size_t i = 0; i < 3; ++i) {
    for (int r = 0; r < 2; ++r) {
      res[i][r] = jobs[i].rank[r]->wait(60);
      ASSERT_EQ(res[i][r].exit_code, 0)
          << jobs[i].tenant << " rail " << jobs[i].rail << " rank " << r << ": " << res[i][r].err;
    }
  }
  // The receivers' rates over the window the three jobs share (past their warm-up).
  const TogetherWindows t =
      togetherWindows({&res[0][1].out, &res[1][1].out, &res[2][1].out}, /*warmup_s=*/1.0);
  ASSERT_GT(t.span_s, 2.0) << "the jobs barely overlapped";
  double mbit[3];
  for (size_t i = 0; i < 3; ++i) mbit[i] = t.windows[i].rate() * 8e-6;
  std::printf(
      "rails, receiver rates over %.1f s: crowd on rail 0 %.1f Mbit/s, steady on rail 0 %.1f "
      "Mbit/s (guarantee %.0f), steady on rail 1 %.1f Mbit/s (port %.0f, allocatable %.0f); "
      "steady's allocation: rail 0 tx %.1f, rx %.1f, rail 1 tx %.1f Mbit/s (%d samples)\n",
      t.span_s, mbit[0], mbit[1], kSteadyGuaranteeMbit, mbit[2], kPortMbit, kAllocatable,
      samples ? steady0_tx / samples * 8e-6 : 0, samples ? steady0_rx / samples * 8e-6 : 0,
      samples ? steady1_tx / samples * 8e-6 : 0, samples);
  // Rail 0: crowd, with four times steady's weight and four times its streams, leaves steady its
  // guarantee (and steady's share of the spare).
  EXPECT_GE(mbit[1], 0.95 * kSteadyGuaranteeMbit) << "crowd took steady's guarantee on rail 0";
  EXPECT_GT(mbit[0], 0.2 * kAllocatable) << "crowd got its share of rail 0's spare";
  EXPECT_LE(mbit[0] + mbit[1], 1.01 * kAllocatable) << "rail 0 within its allocatable capacity";
  // Rail 1: steady alone, whatever crowd does on rail 0: the port minus the headroom. A node-wide
  // allocation would have split steady's node share between its rails.
  EXPECT_GE(mbit[2], 0.9 * kAllocatable) << "crowd on rail 0 took steady's share of rail 1";
  ASSERT_GT(samples, 0);
  EXPECT_GE(steady0_tx / samples * 8e-6, kSteadyGuaranteeMbit);
  EXPECT_GE(steady0_rx / samples * 8e-6, kSteadyGuaranteeMbit);
  EXPECT_GE(steady1_tx / samples * 8e-6, 0.9 * kAllocatable);
}

}  // namespace
}  // namespace tq::agent::functional
