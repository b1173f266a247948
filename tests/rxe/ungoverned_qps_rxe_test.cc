// The agent's ungoverned-QP metrics against the kernel's real RDMA netlink (Soft-RoCE VM):
// tenantqos-agent (from a persisted policy, --tc-mode none on rxeveth0, a 200 ms QP scan) lists
// the QPs of rxe0 and rxe1. An ib_write_bw pair (perftest: verbs without the plugin) must show
// up as ungoverned under its two pids, with as many QPs as `rdma resource show qp` (iproute2)
// lists for them; a tenantqos-perf pair whose ranks are attached to the agent's tenant through
// the plugin must count as governed and never appear as ungoverned. promtool accepts the
// exposition, and the ungoverned series go away with their processes.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <sstream>
#include <thread>

#include "agent/snapshot_store.h"
#include "common/file_util.h"
#include "common/policy.h"
#include "tests/support/exposition.h"
#include "tests/support/process.h"

namespace tq {
namespace {

using testing::runCommand;
using testing::Subprocess;

bool eventually(const std::function<bool()>& pred, int timeout_ms) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return pred();
}

std::string slurp(const std::string& path) {
  auto r = readFile(path);
  return r.ok() ? *r : std::string();
}

class UngovernedQpsRxeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tq-ungoverned-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    tmp_ = tmpl;
    // The agent starts from a persisted policy (fail-static start) and is ready at once;
    // policyd is not needed here (nothing listens at the address given).
    VersionedPolicy v;
    v.version = 1;
    v.policy.links = {{"fabric", 125'000'000, 5}};
    TenantSpec t;
    t.name = "tqrxe-gov";
    t.link = "fabric";
    t.guarantee_bytes_per_second = 12'500'000;
    t.limit_bytes_per_second = 112'500'000;
    t.service_level = 1;
    t.dscp = 10;
    t.traffic_classes = {1};
    v.policy.tenants = {t};
    ASSERT_TRUE(makeDirs(tmp_ + "/state", 0755).ok());
    ASSERT_TRUE(agent::SnapshotStore(tmp_ + "/state").save(v).ok());
    auto a = Subprocess::start(
        // No policyd (fail-static from the saved snapshot), so no TLS material either.
        {TQ_AGENT_BIN,
         "--policyd",
         "127.0.0.1:1",
         "--insecure",
         "--node",
         "rxevm",
         "--device",
         "rxeveth0=fabric",
         "--run-dir",
         tmp_ + "/run",
         "--state-dir",
         tmp_ + "/state",
         "--metrics",
         "127.0.0.1:0",
         "--metrics-port-file",
         tmp_ + "/metrics.port",
         "--tc-mode",
         "none",
         "--qp-scan-interval-ms",
         "200"},
        tmp_ + "/agent.log");
    ASSERT_TRUE(a.ok()) << a.status().toString();
    agent_ = std::make_unique<Subprocess>(std::move(*a));
    metrics_port_ = waitPort(tmp_ + "/metrics.port", tmp_ + "/agent.log");
    ASSERT_GT(metrics_port_, 0);
    ASSERT_TRUE(
        eventually([&] { return value(metrics(), "tenantqos_agent_ready") == 1.0; }, 20'000))
        << slurp(tmp_ + "/agent.log");
  }

  void TearDown() override {
    for (auto* p : {&perf_, &bw_client_, &bw_server_, &agent_}) p->reset();
    if (HasFailure()) {
      std::printf("--- agent log ---\n%s\n", slurp(tmp_ + "/agent.log").c_str());
    } else if (!tmp_.empty()) {
      runCommand({"rm", "-rf", tmp_}).status().ignore();
    }
  }

  int waitPort(const std::string& file, const std::string& log) {
    int port = 0;
    eventually(
        [&] {
          port = std::atoi(slurp(file).c_str());
          return port > 0;
        },
        20'000);
    if (port <= 0) ADD_FAILURE() << "no port in " << file << ": " << slurp(log);
    return port;
  }

  std::string metrics() {
    auto r = runCommand(
        {"curl", "-s", "-m", "5", "http://127.0.0.1:" + std::to_string(metrics_port_) + "/metrics"},
        10'000);
    return r.ok() ? r->output : "";
  }
  // The value of the series `name{labels}` (labels exactly as exposed), if present.
  static std::optional<double> value(const std::string& text, const std::string& series) {
    return testing::seriesValue(text, series);
  }
  static std::string ungoverned(const std::string& device, pid_t pid) {
    return "tenantqos_ungoverned_qps{comm=\"ib_write_bw\",device=\"" + device + "\",pid=\"" +
           std::to_string(pid) + "\"}";
  }
  static std::string qps(const std::string& device, const std::string& owner) {
    return "tenantqos_rdma_qps{device=\"" + device + "\",owner=\"" + owner + "\"}";
  }
  // QPs that iproute2's `rdma resource show qp` attributes to `pid`.
  static int rdmaToolQps(pid_t pid) {
    auto r = runCommand({"rdma", "resource", "show", "qp"}, 10'000);
    if (!r.ok()) return -1;
    const std::regex re("\\bpid " + std::to_string(pid) + "\\b");
    std::istringstream in(r->output);
    std::string line;
    int n = 0;
    while (std::getline(in, line)) n += std::regex_search(line, re);
    return n;
  }

  std::string tmp_;
  int metrics_port_ = 0;
  std::unique_ptr<Subprocess> agent_, bw_server_, bw_client_, perf_;
};

TEST_F(UngovernedQpsRxeTest, PerftestIsUngovernedAndAnAttachedPluginProcessIsNot) {
  // perftest's ib_write_bw: the server on rxe1 (it listens on TCP 18515 for the QP exchange),
  // the client on rxe0, RoCE v2 GID 1, 5 s of writes.
  auto s = Subprocess::start({"ib_write_bw", "-d", "rxe1", "-x", "1", "-F", "-D", "5"},
                             tmp_ + "/bw-server.log");
  ASSERT_TRUE(s.ok()) << s.status().toString();
  bw_server_ = std::make_unique<Subprocess>(std::move(*s));
  ASSERT_TRUE(eventually(
      [&] {
        auto r = runCommand({"ss", "-Htln", "sport", "=", ":18515"});
        return r.ok() && r->output.find("18515") != std::string::npos;
      },
      20'000))
      << slurp(tmp_ + "/bw-server.log");
  auto c = Subprocess::start({"ib_write_bw", "-d", "rxe0", "-x", "1", "-F", "-D", "5", "10.77.0.2"},
                             tmp_ + "/bw-client.log");
  ASSERT_TRUE(c.ok()) << c.status().toString();
  bw_client_ = std::make_unique<Subprocess>(std::move(*c));

  // The plugin pair of the agent's tenant, at the same time.
  auto p = Subprocess::start({TQ_PERF_BIN,
                              "sendrecv",
                              "--local",
                              "2",
                              "--unidirectional",
                              "--duration",
                              "5",
                              "--size",
                              "64K",
                              "--plugin",
                              TQ_PLUGIN_SO,
                              "--tenant",
                              "tqrxe-gov",
                              "--timeout",
                              "40",
                              "--env",
                              "TENANTQOS_TRANSPORT=ib",
                              "--env",
                              "TENANTQOS_SOCKET_IFNAME=lo",
                              "--env",
                              "TENANTQOS_RUN_DIR=" + tmp_ + "/run",
                              "--rank-env",
                              "0:TENANTQOS_IB_HCA==rxe0",
                              "--rank-env",
                              "1:TENANTQOS_IB_HCA==rxe1"},
                             tmp_ + "/perf.log");
  ASSERT_TRUE(p.ok()) << p.status().toString();
  perf_ = std::make_unique<Subprocess>(std::move(*p));

  // Both at once in one exposition: ib_write_bw's QPs as ungoverned under its pids, the
  // plugin ranks' QPs as governed.
  std::string text;
  const pid_t server = bw_server_->pid(), client = bw_client_->pid();
  ASSERT_TRUE(eventually(
      [&] {
        text = metrics();
        return value(text, ungoverned("rxe0", client)).value_or(0) >= 1 &&
               value(text, ungoverned("rxe1", server)).value_or(0) >= 1 &&
               value(text, qps("rxe0", "governed")).value_or(0) >= 1 &&
               value(text, qps("rxe1", "governed")).value_or(0) >= 1 &&
               value(text, R"(tenantqos_tenant_processes{node="rxevm",tenant="tqrxe-gov"})") == 2.0;
      },
      30'000))
      << text << "\n--- perf ---\n"
      << slurp(tmp_ + "/perf.log") << "\n--- ib_write_bw ---\n"
      << slurp(tmp_ + "/bw-client.log") << slurp(tmp_ + "/bw-server.log");
  std::istringstream lines(text);
  for (std::string l; std::getline(lines, l);) {
    if (l.rfind("tenantqos_rdma_qps", 0) == 0 || l.rfind("tenantqos_ungoverned_qp", 0) == 0) {
      std::printf("%s\n", l.c_str());
    }
  }
  EXPECT_EQ(text.find("comm=\"tenantqos-perf\""), std::string::npos)
      << "an attached plugin process counted as ungoverned:\n"
      << text;
  // One owner per device, and every ungoverned QP is one of perftest's.
  for (const char* dev : {"rxe0", "rxe1"}) {
    EXPECT_EQ(value(text, "tenantqos_ungoverned_qp_owners{device=\"" + std::string(dev) + "\"}"),
              1.0)
        << text;
    EXPECT_EQ(value(text, qps(dev, "ungoverned")),
              value(text, ungoverned(dev, std::string(dev) == "rxe0" ? client : server)));
    EXPECT_GE(value(text, qps(dev, "kernel")).value_or(0), 1) << "ib_core's GSI QP";
  }
  EXPECT_NE(slurp(tmp_ + "/agent.log").find("pid " + std::to_string(client) + " (ib_write_bw)"),
            std::string::npos)
      << slurp(tmp_ + "/agent.log");

  // Our parser agrees with iproute2's on how many QPs each perftest process owns (both hold
  // theirs for the whole run; the next scan is at most 200 ms away).
  const int tool_client = rdmaToolQps(client);
  ASSERT_GT(tool_client, 0);
  EXPECT_TRUE(eventually(
      [&] { return value(metrics(), ungoverned("rxe0", client)) == double(tool_client); }, 5'000))
      << "rdma resource show qp: " << tool_client << " QPs of pid " << client << "\n"
      << metrics();

  const std::string exposition = tmp_ + "/metrics.txt";
  ASSERT_TRUE(writeFileAtomic(exposition, text).ok());
  auto lint = runCommand({"sh", "-c", "promtool check metrics < '" + exposition + "'"}, 20'000);
  ASSERT_TRUE(lint.ok()) << lint.status().toString();
  EXPECT_EQ(lint->exit_code, 0) << lint->output;

  // The processes end: their series go.
  EXPECT_TRUE(bw_client_->wait(40'000).ok());
  EXPECT_TRUE(bw_server_->wait(40'000).ok());
  EXPECT_TRUE(eventually(
      [&] {
        text = metrics();
        return text.find("comm=\"ib_write_bw\"") == std::string::npos;
      },
      5'000))
      << text;
  auto perf_exit = perf_->wait(60'000);
  ASSERT_TRUE(perf_exit.ok()) << perf_exit.status().toString();
  EXPECT_EQ(*perf_exit, 0) << slurp(tmp_ + "/perf.log");
}

}  // namespace
}  // namespace tq
