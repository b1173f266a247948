// Fixture of the two-node functional tests (the cluster allocator, rails): two network
// namespaces "<tag><pid>n1" and "n2" joined by `links` veth pairs (link r: "<tag><pid>a<r>" on
// node 1 with 10.<subnet>.<r>.1/24, "<tag><pid>b<r>" on node 2 with 10.<subnet>.<r>.2/24), a run
// and a state directory per node, certificates for node1 and node2 (policyd's names node 1's
// first address), the real tenantqos-policyd on node 1 and a real tenantqos-agent per node
// (--tc-mode none, every link a device of the policy's link "fabric": the plugin's buckets alone
// pace), all over mutual TLS; jobs are tenantqos-perf ranks through the real plugin, one per
// node. Everything carries the prefix "<tag><pid>" and is removed by the fixture, also on
// failure: processes by pid, then the namespaces (their veths with them); the test's directory
// is kept, and named, when a test failed. The test's target defines TQ_AGENT_FUNCTIONAL_DEFS,
// TQ_PERF_BIN and TQ_PLUGIN_SO (tests/functional/CMakeLists.txt).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "common/node_contract.h"
#include "tests/functional/agent_harness.h"
#include "tests/functional/plugin_proc_util.h"
#include "tests/functional/test_pki.h"
#include "tests/support/netns.h"
#include "tests/support/process.h"

namespace tq::agent::functional {

class TwoNodeHarness : public ::testing::Test {
 protected:
  struct Node {
    std::string name;  // node1, node2 (the agent's --node, its certificate's CN)
    std::unique_ptr<TestNetns> ns;
    std::vector<std::string> dev, ip;  // per link
    std::string run_dir, state_dir, log;
    std::unique_ptr<Subprocess> agent;
    int metrics_port = 0;
  };

  // `tag`: the prefix of the test's names ("tqfb"); `subnet`: the second octet of the links'
  // addresses; `links`: veth pairs between the nodes.
  TwoNodeHarness(std::string tag, int subnet, int links)
      : tag_(std::move(tag)), subnet_(subnet), links_(links) {}

  void SetUp() override {
    if (!tq::testing::runningAsRoot()) GTEST_SKIP() << "needs root (network namespaces, tc)";
    prefix_ = tag_ + std::to_string(::getpid());
    tmp_ = makeTestDir(tag_);
    ASSERT_FALSE(tmp_.empty());
    for (int n = 0; n < 2; ++n) {
      Node& node = node_[n];
      node.name = "node" + std::to_string(n + 1);
      auto ns = TestNetns::create(prefix_ + "n" + std::to_string(n + 1));
      ASSERT_TRUE(ns.ok()) << ns.status().toString();
      node.ns = std::move(*ns);
      node.run_dir = tmp_ + "/run" + std::to_string(n + 1);
      node.state_dir = tmp_ + "/state" + std::to_string(n + 1);
      for (int r = 0; r < links_; ++r) {
        node.dev.push_back(prefix_ + (n == 0 ? "a" : "b") + std::to_string(r));
        node.ip.push_back("10." + std::to_string(subnet_) + "." + std::to_string(r) + "." +
                          std::to_string(n + 1));
      }
    }
    for (int r = 0; r < links_; ++r) {
      const Status s =
          tq::testing::addVethPair(*node_[0].ns, node_[0].dev[r], *node_[1].ns, node_[1].dev[r],
                                   node_[0].ip[r] + "/24", node_[1].ip[r] + "/24");
      ASSERT_TRUE(s.ok()) << s.toString();
    }
    pki_ = std::make_unique<tq::test::TestPki>(
        std::string(TQ_SOURCE_DIR) + "/scripts/tq-certs.sh", tmp_ + "/pki",
        std::vector<std::string>{"node1", "node2"}, node_[0].ip[0]);
    ASSERT_TRUE(pki_->ok());
  }

  void TearDown() override {
    jobs_.clear();
    for (Node& n : node_) n.agent.reset();
    policyd_.reset();
    for (Node& n : node_) n.ns.reset();
    removeTestDir(tmp_, HasFailure());
  }

  // policyd on node 1's first address, with `flags` added; port 0: any (the first start), else
  // that port (a restart).
  void startPolicyd(const std::vector<std::string>& flags = {}, int port = 0) {
    const std::string port_file = tmp_ + "/policyd.port";
    const std::string log = tmp_ + "/policyd-" + std::to_string(++policyd_starts_) + ".log";
    std::vector<std::string> argv = {
        TQ_POLICYD_BIN, "--listen",        node_[0].ip[0] + ":" + std::to_string(port),
        "--data-dir",   tmp_ + "/policyd", "--port-file",
        port_file};
    argv = withArgs(withArgs(std::move(argv), flags), pki_->flags("policyd"));
    policyd_ = startWithPortFile(*node_[0].ns, argv, port_file, log, &policyd_port_);
    ASSERT_TRUE(policyd_);
  }
  // SIGKILL, as a crash; returns the port it listened on (for a restart there).
  int killPolicyd() {
    EXPECT_TRUE(policyd_);
    if (policyd_) policyd_->kill();
    policyd_.reset();
    return policyd_port_;
  }

  // Node n's agent, every link a device of "fabric", with `flags` added.
  void startAgent(int n, const std::vector<std::string>& flags = {}) {
    Node& node = node_[n];
    const std::string port_file = tmp_ + "/agent" + std::to_string(n + 1) + ".port";
    node.log = tmp_ + "/agent" + std::to_string(n + 1) + ".log";
    std::vector<std::string> argv = {
        TQ_AGENT_BIN, "--policyd", policydAddress(), "--node", node.name, "--tc-mode", "none"};
    for (const std::string& dev : node.dev)
      argv = withArgs(std::move(argv), {"--device", dev + "=fabric"});
    argv = withArgs(std::move(argv),
                    {"--run-dir", node.run_dir, "--state-dir", node.state_dir, "--metrics",
                     "127.0.0.1:0", "--metrics-port-file", port_file, "--log-level", "debug"});
    argv = withArgs(withArgs(std::move(argv), flags), pki_->flags("agent-" + node.name));
    node.agent = startWithPortFile(*node.ns, argv, port_file, node.log, &node.metrics_port);
    ASSERT_TRUE(node.agent);
  }

  std::string policydAddress() const {
    return node_[0].ip[0] + ":" + std::to_string(policyd_port_);
  }

  // tenantqosctl apply (as admin, from node 1).
  void apply(const std::string& yaml) {
    const std::string f = tmp_ + "/policy-" + std::to_string(++applies_) + ".yaml";
    ASSERT_TRUE(writeFileAtomic(f, yaml).ok());
    auto r = runCommand(
        node_[0].ns->exec(withArgs({TQ_CTL_BIN, "--server", policydAddress(), "apply", "-f", f},
                                   pki_->flags("admin"))),
        20'000);
    ASSERT_TRUE(r.ok()) << r.status().toString();
    ASSERT_EQ(r->exit_code, 0) << r->output;
  }

  // GET of node n's agent's HTTP endpoint `path` ("" when it does not answer in 5 s).
  std::string http(int n, const std::string& path) {
    auto r = runCommand(
        node_[n].ns->exec({"curl", "-s", "-m", "5",
                           "http://127.0.0.1:" + std::to_string(node_[n].metrics_port) + path}),
        10'000);
    return r.ok() ? r->output : "";
  }
  // A series of node n's /metrics (the exact text before the value), if present.
  std::optional<double> metric(int n, const std::string& series) {
    return seriesValue(http(n, "/metrics"), series);
  }

  // Rank r of a two-rank job (rank 0 on node 1, rank 1 on node 2) over link `link`, its
  // rendezvous on node 1's first address at `port`; `run` says the rest (bin, plugin and the
  // rank's flags are set here). `env` is added to the node's (its run dir, the link's device,
  // TENANTQOS_REQUIRE_AGENT=1: a job that misses the agent fails instead of running unpaced).
  std::unique_ptr<plugin::testing::Proc> rank(int r, int link, int port,
                                              plugin::testing::PerfRun run,
                                              std::map<std::string, std::string> env = {}) {
    const Node& node = node_[r];
    run.bin = TQ_PERF_BIN;
    run.plugin = TQ_PLUGIN_SO;
    run.local = 0;
    run.rank = r;
    run.nranks = 2;
    run.rendezvous = node_[0].ip[0] + ":" + std::to_string(port);
    env[kRunDirEnv] = node.run_dir;
    env["TENANTQOS_SOCKET_IFNAME"] = "=" + node.dev[static_cast<size_t>(link)];
    env["TENANTQOS_REQUIRE_AGENT"] = "1";
    return std::make_unique<plugin::testing::Proc>(node.ns->exec(plugin::testing::perfArgv(run)),
                                                   env);
  }

  std::string tag_;
  int subnet_ = 0, links_ = 1;
  std::string prefix_, tmp_;
  Node node_[2];
  std::unique_ptr<tq::test::TestPki> pki_;
  std::unique_ptr<Subprocess> policyd_;
  std::vector<std::unique_ptr<plugin::testing::Proc>> jobs_;  // ended first by TearDown
  int policyd_port_ = 0, policyd_starts_ = 0, applies_ = 0;
};

}  // namespace tq::agent::functional
