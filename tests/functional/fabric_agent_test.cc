// The cluster allocator end to end (docs/fabric.md): two nodes behind different leaf switches
// (the policy's shared link class "leaf-uplink", one group per node, 200 Mbit/s each way, 5 %
// headroom), a real tenantqos-agent on each (--tc-mode none: the plugin's buckets alone pace),
// the real policyd (the sole allocator with the file store, --allocator-hold 2000), all over
// mutual TLS. Two tenants stream from node 1 to node 2 through the real plugin
// (tenantqos-perf), so every byte crosses node 1's uplink (tx) and node 2's (rx):
//   1. both backlogged: the allocator splits the uplink by the policy (guarantees, then the
//      spare by weight) and the caps reach the plugin's link buckets on both nodes;
//   2. tenant-b stops: tenant-a's demand takes the link up to its limit (the demand change
//      reaches the caps; the time it took is printed);
//   3. policyd is killed: the agents hold the caps, then after the hold fall back to the static
//      split, and say so in /readyz and metrics; a restarted policyd brings the caps back.
//
// Namespaces, veths and processes carry the prefix "tqfb<pid>" and are removed by the fixture
// (two_node_harness.h). About 25 s.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "common/node_contract.h"
#include "tests/functional/plugin_proc_util.h"
#include "tests/functional/two_node_harness.h"
#include "tests/support/test_agent.h"

namespace tq::agent::functional {
namespace {

using plugin::testing::Proc;
using plugin::testing::ProcResult;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kMbit = 125'000;  // bytes/s
// The policy below, in bytes/s.
constexpr uint64_t kAllocatable = 190 * kMbit;  // 200 Mbit/s less 5 %
constexpr uint64_t kGuaranteeA = 40 * kMbit, kLimitA = 150 * kMbit;
constexpr uint64_t kGuaranteeB = 60 * kMbit;
constexpr int kHoldMs = 2000;

class PrivilegedFabricAgentTest : public TwoNodeHarness {
 protected:
  PrivilegedFabricAgentTest() : TwoNodeHarness("tqfb", 92, 1) {}

  void startPolicyd(int port = 0) {
    TwoNodeHarness::startPolicyd({"--allocator-hold", std::to_string(kHoldMs)}, port);
  }
  // The tenant's cap on node n's leaf uplink (tx on node 1, rx on node 2), as the agent says.
  std::optional<double> cap(int n, const std::string& tenant) {
    return metric(n, std::string("tenantqos_fabric_link_cap_bytes_per_second{direction=\"") +
                         (n == 0 ? "tx" : "rx") + "\",link=\"leaf-uplink\",node=\"node" +
                         std::to_string(n + 1) + "\",tenant=\"" + tenant + "\"}");
  }
  std::string mode(int n) {
    const std::string m = http(n, "/metrics");
    for (const char* name : {"allocator", "held", "static"}) {
      if (m.find(std::string("tenantqos_fabric_mode{mode=\"") + name + "\"} 1") !=
          std::string::npos) {
        return name;
      }
    }
    return "";
  }
  // The rate of the tenant's leaf-uplink bucket as a process of the tenant on node n reads it
  // from its memory (what the plugin paces with); 0 when it cannot attach.
  uint64_t pluginLinkRate(int n, const std::string& tenant) {
    auto a = tq::testing::attachAs(attach::tenantSocketPath(node_[n].run_dir, tenant), tenant);
    if (!a.ok()) return 0;
    std::optional<TenantParams> p = a->view->readParams();
    if (!p) return 0;
    for (const BucketSpec& b : p->buckets) {
      if (b.scope == shm::kScopeFabricLink && b.direction == (n == 0 ? shm::kTx : shm::kRx)) {
        return b.rate_bytes_per_second;
      }
    }
    return 0;
  }

  // One rank of a job streaming from node 1 (rank 0) to node 2 (rank 1) for `seconds`.
  std::unique_ptr<Proc> rank(int index, const std::string& tenant, double seconds, int r) {
    return TwoNodeHarness::rank(
        r, 0, 29800 + index,
        {.seconds = seconds, .size = "256K", .report_interval_ms = 0, .tenant = tenant});
  }
};

TEST_F(PrivilegedFabricAgentTest, DemandReachesTheCapsAndAgentsFallBackToTheStaticSplit) {
  startPolicyd();
  startAgent(0);
  startAgent(1);
  apply(
      "apiVersion: tenantqos/v1\nkind: TenantPolicy\nlinks:\n"
      "  - name: fabric\n    capacity: 1Gbps\n    headroom: 5%\n"
      "sharedLinks:\n"
      "  - name: leaf-uplink\n    capacity: 200Mbps\n    headroom: 5%\n    groups:\n"
      "      - name: leaf-1\n        nodes: [node1]\n"
      "      - name: leaf-2\n        nodes: [node2]\n"
      "tenants:\n"
      "  - name: tenant-a\n    link: fabric\n    guarantee: 40Mbps\n    limit: 150Mbps\n"
      "    weight: 1\n    serviceLevel: 1\n    dscp: 10\n"
      "  - name: tenant-b\n    link: fabric\n    guarantee: 60Mbps\n    limit: 190Mbps\n"
      "    weight: 1\n    serviceLevel: 2\n    dscp: 20\n");
  // Each agent found its link and streams to the allocator; the peer map is there for the
  // plugin (node 2 is behind another leaf, so it is no peer of node 1's group).
  for (int n = 0; n < 2; ++n) {
    ASSERT_TRUE(eventually([&] { return mode(n) == "allocator"; }, 10'000))
        << "node" << n + 1 << " does not take the allocator's caps:\n"
        << readTextFile(node_[n].log);
  }
  const std::string peers = readTextFile(attach::fabricPeersPath(node_[0].run_dir));
  EXPECT_NE(peers.find("link 0 leaf-uplink leaf-1 all"), std::string::npos) << peers;
  EXPECT_EQ(peers.find("peer 0 " + node_[1].ip[0]), std::string::npos) << peers;

  // 1. Both tenants backlogged across the uplinks: guarantees first, the spare by weight.
  jobs_.push_back(rank(0, "tenant-a", 14, 1));
  jobs_.push_back(rank(0, "tenant-a", 14, 0));
  jobs_.push_back(rank(1, "tenant-b", 5, 1));
  jobs_.push_back(rank(1, "tenant-b", 5, 0));
  const uint64_t spare_each = (kAllocatable - kGuaranteeA - kGuaranteeB) / 2;
  const double share_a = static_cast<double>(kGuaranteeA + spare_each);  // 85 Mbit/s
  const double share_b = static_cast<double>(kGuaranteeB + spare_each);  // 105 Mbit/s
  for (int n = 0; n < 2; ++n) {
    EXPECT_TRUE(eventually(
        [&] {
          auto a = cap(n, "tenant-a"), b = cap(n, "tenant-b");
          return a && b && *a > 0.95 * share_a && *a<1.05 * share_a&& * b> 0.95 * share_b &&
                 *b < 1.05 * share_b;
        },
        4'000))
        << "node" << n + 1 << ": tenant-a " << cap(n, "tenant-a").value_or(-1) << ", tenant-b "
        << cap(n, "tenant-b").value_or(-1) << " B/s on the uplink; want " << share_a << ", "
        << share_b;
  }
  // The plugin's link bucket takes the cap at the agent's next period; read until it does (a
  // round between the two reads may move both).
  EXPECT_TRUE(eventually(
      [&] {
        const uint64_t plugin_a = pluginLinkRate(0, "tenant-a");
        return plugin_a > 0.95 * share_a && plugin_a < 1.05 * share_a;
      },
      2'000))
      << "the plugin's link bucket of tenant-a is " << pluginLinkRate(0, "tenant-a")
      << " B/s, not the cap " << share_a;

  // 2. tenant-b's job ends: tenant-a's demand takes the uplinks up to its limit.
  for (int i : {3, 2}) {
    ProcResult rb = jobs_[static_cast<size_t>(i)]->wait(30);
    ASSERT_EQ(rb.exit_code, 0) << rb.err;
  }
  const auto b_done = Clock::now();
  for (int n = 0; n < 2; ++n) {
    EXPECT_TRUE(eventually(
        [&] { return cap(n, "tenant-a").value_or(0) >= 0.99 * static_cast<double>(kLimitA); },
        5'000))
        << "node" << n + 1 << ": tenant-a's cap " << cap(n, "tenant-a").value_or(-1)
        << " B/s; want its limit " << kLimitA;
  }
  const double reach_ms = std::chrono::duration<double, std::milli>(Clock::now() - b_done).count();
  // From there the caps follow tenant-a's own demand (what it sends when no bucket holds it
  // back, plus headroom), well above its share of phase 1. Polled: the first round after the
  // edge may still see the demand tenant-a had under phase 1's caps, and the caps climb with
  // what it then sends.
  EXPECT_TRUE(eventually([&] { return pluginLinkRate(0, "tenant-a") > 1.3 * share_a; }, 3'000))
      << "the plugin's link bucket of tenant-a stays at " << pluginLinkRate(0, "tenant-a")
      << " B/s, want above " << 1.3 * share_a;
  std::printf(
      "fabric: tenant-b's job ended; tenant-a's caps on both uplinks at its limit within "
      "%.0f ms (polled over curl every 20 ms; load %s)\n",
      reach_ms, readTextFile("/proc/loadavg").substr(0, 14).c_str());

  // 3. The allocator dies: held, then after the hold the static split, said in /readyz.
  const double last_cap = cap(0, "tenant-a").value_or(0);
  const int port = killPolicyd();
  const auto killed = Clock::now();
  EXPECT_TRUE(eventually([&] { return mode(0) == "held"; }, 1'000)) << mode(0);
  EXPECT_NE(http(0, "/readyz").find("holding its last caps"), std::string::npos);
  // The last message's caps (one more round may have come between the read and the kill).
  EXPECT_NEAR(cap(0, "tenant-a").value_or(0), last_cap, 0.1 * last_cap) << "held";
  ASSERT_TRUE(
      eventually([&] { return mode(0) == "static" && mode(1) == "static"; }, kHoldMs + 3'000))
      << readTextFile(node_[0].log);
  const double static_after_ms =
      std::chrono::duration<double, std::milli>(Clock::now() - killed).count();
  // The last round saw tenant-a alone on each uplink (k = 1, one (tenant, node) pair):
  // min(limit, guarantee / 1 + (allocatable - all guarantees) / 1).
  const uint64_t want_static =
      std::min(kLimitA, kGuaranteeA + (kAllocatable - kGuaranteeA - kGuaranteeB));
  for (int n = 0; n < 2; ++n) {
    EXPECT_NEAR(cap(n, "tenant-a").value_or(0), static_cast<double>(want_static), 2) << n;
    const std::string ready = http(n, "/readyz");
    EXPECT_NE(ready.find("static split"), std::string::npos) << ready;
  }
  EXPECT_NEAR(static_cast<double>(pluginLinkRate(0, "tenant-a")), want_static, 2);
  EXPECT_GE(static_after_ms, kHoldMs - 1'000 - 100) << "the caps were held for their hold time";
  std::printf(
      "fabric: policyd killed; static split after %.0f ms (hold %d ms, the last message "
      "up to 1 s before the kill)\n",
      static_after_ms, kHoldMs);

  // The allocator back (same port): its caps again.
  startPolicyd(port);
  for (int n = 0; n < 2; ++n) {
    EXPECT_TRUE(eventually([&] { return mode(n) == "allocator"; }, 10'000)) << mode(n);
  }
  for (int i : {1, 0}) {
    ProcResult ra = jobs_[static_cast<size_t>(i)]->wait(30);
    EXPECT_EQ(ra.exit_code, 0) << ra.err;
  }
}

}  // namespace
}  // namespace tq::agent::functional
