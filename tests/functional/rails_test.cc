// Rails: two nodes joined by two emulated rails (two veth pairs, each a 200 Mbit/s port: tbf on
// every end), both carrying the policy's link "fabric", a real tenantqos-agent on each node
// (--tc-mode none: the plugin's buckets alone separate the tenants, as on an RDMA NIC) and the
// real policyd, over mutual TLS. Tenant "crowd" (no guarantee, weight 4, 8 streams) floods rail
// 0; tenant "steady" (guarantee 100 Mbit/s) runs one job on rail 0 and one on rail 1. Per
// (tenant, device) allocation and buckets at both ends mean: crowd does not take steady's
// guarantee on rail 0, and takes nothing of rail 1, where steady gets the whole port.
//
// Namespaces, veths, qdiscs and processes carry the prefix "tqrl<pid>" and are removed by the
// fixture (processes by pid). About 15 s.
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
#include "tests/functional/agent_harness.h"
#include "tests/functional/plugin_proc_util.h"
#include "tests/functional/test_pki.h"
#include "tests/support/netns.h"
#include "tests/support/process.h"

namespace tq::agent::functional {
namespace {

using plugin::testing::jsonLines;
using plugin::testing::jsonNumber;
using plugin::testing::Proc;
using plugin::testing::ProcResult;
using plugin::testing::receiverWindow;

constexpr double kPortMbit = 200;  // each rail's port
constexpr double kSteadyGuaranteeMbit = 100;
constexpr double kAllocatable = kPortMbit * 0.95;  // the policy's 5 % headroom

struct Node {
  std::unique_ptr<TestNetns> ns;
  std::string dev[2];  // rail 0, rail 1
  std::string ip[2];
  std::string run_dir, state_dir, log;
  std::unique_ptr<Subprocess> agent;
  int metrics_port = 0;
};

class PrivilegedRailsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!tq::testing::runningAsRoot()) GTEST_SKIP() << "needs root (network namespaces, tc)";
    prefix_ = "tqrl" + std::to_string(::getpid());
    char tmpl[] = "/tmp/tqrl-func-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    tmp_ = tmpl;
    for (int n = 0; n < 2; ++n) {
      auto ns = TestNetns::create(prefix_ + "n" + std::to_string(n + 1));
      ASSERT_TRUE(ns.ok()) << ns.status().toString();
      node_[n].ns = std::move(*ns);
      node_[n].run_dir = tmp_ + "/run" + std::to_string(n + 1);
      node_[n].state_dir = tmp_ + "/state" + std::to_string(n + 1);
    }
    for (int r = 0; r < 2; ++r) {
      for (int n = 0; n < 2; ++n) {
        node_[n].dev[r] = prefix_ + (n == 0 ? "a" : "b") + std::to_string(r);
        node_[n].ip[r] = "10.91." + std::to_string(r) + "." + std::to_string(n + 1);
      }
      ASSERT_TRUE(tq::testing::addVethPair(*node_[0].ns, node_[0].dev[r], *node_[1].ns,
                                           node_[1].dev[r], node_[0].ip[r] + "/24",
                                           node_[1].ip[r] + "/24")
                      .ok());
      // The port: a shallow FIFO at the rail's rate on both ends (left alone by the agents in
      // none mode: not their qdisc).
      for (int n = 0; n < 2; ++n) {
        auto q = node_[n].ns->run({"tc", "qdisc", "add", "dev", node_[n].dev[r], "root", "tbf",
                                   "rate", "200mbit", "burst", "32kb", "limit", "256kb"});
        ASSERT_TRUE(q.ok()) << q.status().toString();
      }
    }
    pki_ = std::make_unique<tq::test::TestPki>(
        std::string(TQ_SOURCE_DIR) + "/scripts/tq-certs.sh", tmp_ + "/pki",
        std::vector<std::string>{"node1", "node2"}, node_[0].ip[0]);
    ASSERT_TRUE(pki_->ok());
  }

  void TearDown() override {
    for (Node& n : node_) n.agent.reset();
    policyd_.reset();
    for (Node& n : node_) n.ns.reset();
    if (!tmp_.empty() && !HasFailure()) {
      int rc = std::system(("rm -rf '" + tmp_ + "'").c_str());
      (void)rc;
    } else if (!tmp_.empty()) {
      std::fprintf(stderr, "logs kept in %s\n", tmp_.c_str());
    }
  }

  static std::string readText(const std::string& path) { return readTextFile(path); }
  static std::vector<std::string> with(std::vector<std::string> a,
                                       const std::vector<std::string>& b) {
    return withArgs(std::move(a), b);
  }

  // policyd on node 1, reachable from node 2 over rail 0.
  void startPolicyd() {
    const std::string port_file = tmp_ + "/policyd.port";
    const std::string log = tmp_ + "/policyd.log";
    auto p = Subprocess::start(
        node_[0].ns->exec(with({TQ_POLICYD_BIN, "--listen", node_[0].ip[0] + ":0", "--data-dir",
                                tmp_ + "/policyd", "--port-file", port_file},
                               pki_->flags("policyd"))),
        log);
    ASSERT_TRUE(p.ok()) << p.status().toString();
    policyd_ = std::make_unique<Subprocess>(std::move(*p));
    policyd_port_ = waitForPortFile(port_file, policyd_.get(), log);
  }
  void startAgent(int n) {
    Node& node = node_[n];
    const std::string name = "node" + std::to_string(n + 1);
    const std::string port_file = tmp_ + "/agent" + std::to_string(n + 1) + ".port";
    node.log = tmp_ + "/agent" + std::to_string(n + 1) + ".log";
    auto p =
        Subprocess::start(node.ns->exec(with({TQ_AGENT_BIN,
                                              "--policyd",
                                              node_[0].ip[0] + ":" + std::to_string(policyd_port_),
                                              "--node",
                                              name,
                                              "--device",
                                              node.dev[0] + "=fabric",
                                              "--device",
                                              node.dev[1] + "=fabric",
                                              "--tc-mode",
                                              "none",
                                              "--run-dir",
                                              node.run_dir,
                                              "--state-dir",
                                              node.state_dir,
                                              "--metrics",
                                              "127.0.0.1:0",
                                              "--metrics-port-file",
                                              port_file,
                                              "--log-level",
                                              "debug"},
                                             pki_->flags("agent-" + name))),
                          node.log);
    ASSERT_TRUE(p.ok()) << p.status().toString();
    node.agent = std::make_unique<Subprocess>(std::move(*p));
    node.metrics_port = waitForPortFile(port_file, node.agent.get(), node.log);
  }
  void apply(const std::string& yaml) {
    const std::string f = tmp_ + "/policy.yaml";
    ASSERT_TRUE(writeFileAtomic(f, yaml).ok());
    auto r =
        runCommand(node_[0].ns->exec(with(
                       {TQ_CTL_BIN, "--server",
                        node_[0].ip[0] + ":" + std::to_string(policyd_port_), "apply", "-f", f},
                       pki_->flags("admin"))),
                   20'000);
    ASSERT_TRUE(r.ok()) << r.status().toString();
    ASSERT_EQ(r->exit_code, 0) << r->output;
  }
  // A series of node n's /metrics (exact text before the value), if present.
  std::optional<double> metric(int n, const std::string& series) {
    auto r =
        runCommand(node_[n].ns->exec(
                       {"curl", "-s", "-m", "5",
                        "http://127.0.0.1:" + std::to_string(node_[n].metrics_port) + "/metrics"}),
                   10'000);
    if (!r.ok()) return std::nullopt;
    std::istringstream in(r->output);
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
    }
    return std::nullopt;
  }
  std::string bucket(int n, const std::string& family, const std::string& tenant, int rail,
                     const char* direction) {
    return family + "{device=\"" + node_[n].dev[rail] + "\",direction=\"" + direction +
           "\",node=\"node" + std::to_string(n + 1) + "\",tenant=\"" + tenant + "\"}";
  }

  // One job: rank 0 on node 1 sends to rank 1 on node 2 over `rail`.
  std::unique_ptr<Proc> job(int index, const std::string& tenant, int rail, int nsocks,
                            double seconds, int rank) {
    const std::string rv = node_[0].ip[0] + ":" + std::to_string(29700 + index);
    const Node& node = node_[rank];
    std::vector<std::string> argv = {TQ_PERF_BIN,
                                     "sendrecv",
                                     "--rank",
                                     std::to_string(rank),
                                     "--nranks",
                                     "2",
                                     "--rendezvous",
                                     rv,
                                     "--unidirectional",
                                     "--duration",
                                     std::to_string(seconds),
                                     "--size",
                                     "256K",
                                     "--report-interval",
                                     "100",
                                     "--json",
                                     "--plugin",
                                     TQ_PLUGIN_SO,
                                     "--tenant",
                                     tenant,
                                     "--timeout",
                                     "30"};
    std::map<std::string, std::string> env = {{"TENANTQOS_RUN_DIR", node.run_dir},
                                              {"TENANTQOS_SOCKET_IFNAME", "=" + node.dev[rail]},
                                              {"TENANTQOS_NSOCKS", std::to_string(nsocks)},
                                              {"TENANTQOS_REQUIRE_AGENT", "1"},
                                              {"NCCL_DEBUG", "INFO"}};
    return std::make_unique<Proc>(node.ns->exec(argv), env);
  }

  std::string prefix_, tmp_;
  Node node_[2];
  std::unique_ptr<tq::test::TestPki> pki_;
  std::unique_ptr<Subprocess> policyd_;
  int policyd_port_ = 0;
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
        << readText(node_[n].log);
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
  auto span = [](const std::string& out) {
    double first = 1e300, last = 0;
    for (const std::string& l : jsonLines(out, "interval")) {
      const double end = jsonNumber(l, "wall_ns").value_or(0) / 1e9;
      first = std::min(first, end - jsonNumber(l, "interval_s").value_or(0));
      last = std::max(last, end);
    }
    return std::make_pair(first, last);
  };
  double from = 0, to = 1e300;
  for (auto& r : res) {
    const auto [f, t] = span(r[1].out);
    from = std::max(from, f + 1.0);
    to = std::min(to, t - 0.2);
  }
  ASSERT_GT(to - from, 2.0) << "the jobs barely overlapped";
  double mbit[3];
  for (size_t i = 0; i < 3; ++i) mbit[i] = receiverWindow(res[i][1].out, 1, from, to).rate() * 8e-6;
  std::printf(
      "rails, receiver rates over %.1f s: crowd on rail 0 %.1f Mbit/s, steady on rail 0 %.1f "
      "Mbit/s (guarantee %.0f), steady on rail 1 %.1f Mbit/s (port %.0f, allocatable %.0f); "
      "steady's allocation: rail 0 tx %.1f, rx %.1f, rail 1 tx %.1f Mbit/s (%d samples)\n",
      to - from, mbit[0], mbit[1], kSteadyGuaranteeMbit, mbit[2], kPortMbit, kAllocatable,
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
