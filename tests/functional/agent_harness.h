// Fixture for the agent's functional tests: a network namespace with veth devices, the real
// tenantqos-policyd and tenantqos-agent as processes inside it (loopback of that namespace),
// tenantqosctl, tc(8) read-back, and the shm files read through the plugin-side reader.
// Everything carries the prefix "tqagt<pid>" and is removed by the fixture (also on failure):
// processes are killed by PID, the namespace (and its veths) deleted, the temp dir removed.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/file_util.h"
#include "common/tenant_shm.h"
#include "tc/netns.h"
#include "tests/functional/test_pki.h"
#include "tests/support/exposition.h"
#include "tests/support/netns.h"
#include "tests/support/process.h"
#include "tests/support/test_agent.h"

namespace tq::agent::functional {

using tq::testing::runCommand;
using tq::testing::seriesValue;
using tq::testing::Subprocess;
using tq::testing::TestNetns;

// Polls `pred` every 20 ms until it holds or `timeout_ms` passes; returns its last value.
inline bool eventually(const std::function<bool()>& pred, int timeout_ms) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

// A file's text ("" when it cannot be read: a log that is not there yet).
inline std::string readTextFile(const std::string& path) {
  auto r = readFile(path);
  return r.ok() ? *r : "";
}

inline std::vector<std::string> withArgs(std::vector<std::string> argv,
                                         const std::vector<std::string>& more) {
  argv.insert(argv.end(), more.begin(), more.end());
  return argv;
}

// The port a process wrote to `path` (its --*-port-file), waited for up to 10 s or until the
// process exits; fails the test naming the file and showing `log` when none comes.
inline int waitForPortFile(const std::string& path, Subprocess* proc, const std::string& log) {
  int port = 0;
  eventually(
      [&] {
        const std::string t = readTextFile(path);
        if (!t.empty()) port = std::atoi(t.c_str());
        return port > 0 || !proc->running();
      },
      10'000);
  EXPECT_GT(port, 0) << "no port file " << path << "; log:\n" << readTextFile(log);
  return port;
}

// Starts `argv` inside `ns` (its output to `log`) and waits for the port it writes to
// `port_file` (removed first: a restart must not read the last run's). Null, with the test
// failed, when it cannot start; *port 0 when no port came.
inline std::unique_ptr<Subprocess> startWithPortFile(const TestNetns& ns,
                                                     const std::vector<std::string>& argv,
                                                     const std::string& port_file,
                                                     const std::string& log, int* port) {
  ::unlink(port_file.c_str());
  auto p = Subprocess::start(ns.exec(argv), log);
  EXPECT_TRUE(p.ok()) << p.status().toString();
  if (!p.ok()) return nullptr;
  auto proc = std::make_unique<Subprocess>(std::move(*p));
  *port = waitForPortFile(port_file, proc.get(), log);
  return proc;
}

// A fresh /tmp/<tag>-func-XXXXXX for a test's files ("" with the test failed).
inline std::string makeTestDir(const std::string& tag) {
  std::string tmpl = "/tmp/" + tag + "-func-XXXXXX";
  EXPECT_NE(::mkdtemp(tmpl.data()), nullptr) << tmpl << ": " << std::strerror(errno);
  return tmpl.find("XXXXXX") == std::string::npos ? tmpl : "";
}

// Removes a test's directory, or keeps it (and says where) when the test failed.
inline void removeTestDir(const std::string& dir, bool failed) {
  if (dir.empty()) return;
  if (failed) {
    std::fprintf(stderr, "logs kept in %s\n", dir.c_str());
    return;
  }
  int rc = std::system(("rm -rf '" + dir + "'").c_str());
  (void)rc;
}

// One HTB class as tc(8) prints it ("class htb 1:10 parent 1:1 prio 0 rate 400Mbit ceil ...").
// iproute2 6.1 prints HTB classes as text even with -j, so the text is parsed.
struct TcClass {
  std::string parent;
  uint64_t rate_bits = 0;
  uint64_t ceil_bits = 0;
  uint64_t bytes = 0;
};

inline uint64_t parseTcRate(const std::string& s) {
  size_t i = 0;
  double v = std::stod(s, &i);
  const std::string unit = s.substr(i);
  double mult = 1;
  if (unit == "Kbit")
    mult = 1e3;
  else if (unit == "Mbit")
    mult = 1e6;
  else if (unit == "Gbit")
    mult = 1e9;
  else if (unit == "Tbit")
    mult = 1e12;
  return static_cast<uint64_t>(v * mult + 0.5);
}

inline std::map<std::string, TcClass> parseTcClasses(const std::string& text) {
  std::map<std::string, TcClass> out;
  std::istringstream in(text);
  std::string w;
  std::vector<std::string> words;
  while (in >> w) words.push_back(w);
  TcClass* cur = nullptr;
  for (size_t i = 0; i < words.size(); ++i) {
    auto next = [&] { return i + 1 < words.size() ? words[++i] : std::string(); };
    if (words[i] == "class" && i + 2 < words.size() && words[i + 1] == "htb") {
      ++i;
      cur = &out[next()];
    } else if (cur == nullptr) {
      continue;
    } else if (words[i] == "parent") {
      cur->parent = next();
    } else if (words[i] == "root") {
      cur->parent = "root";
    } else if (words[i] == "rate") {
      cur->rate_bits = parseTcRate(next());
    } else if (words[i] == "ceil") {
      cur->ceil_bits = parseTcRate(next());
    } else if (words[i] == "Sent") {
      cur->bytes = std::stoull(next());
    }
  }
  return out;
}

// Builds the YAML of a policy file.
struct YamlTenant {
  std::string name, link, guarantee, limit;
  int weight = 1, sl = 0, dscp = 0;
  int traffic_class = 0;
};
struct YamlLink {
  std::string name, capacity;
};
inline std::string policyYaml(const std::vector<YamlLink>& links,
                              const std::vector<YamlTenant>& tenants) {
  std::string y = "apiVersion: tenantqos/v1\nkind: TenantPolicy\nlinks:\n";
  for (const auto& l : links) {
    y += "  - name: " + l.name + "\n    capacity: " + l.capacity + "\n    headroom: 5%\n";
  }
  y += tenants.empty() ? "tenants: []\n" : "tenants:\n";
  for (const auto& t : tenants) {
    y += "  - name: " + t.name + "\n    link: " + t.link + "\n    guarantee: " + t.guarantee +
         "\n    limit: " + t.limit + "\n    weight: " + std::to_string(t.weight) +
         "\n    serviceLevel: " + std::to_string(t.sl) + "\n    dscp: " + std::to_string(t.dscp) +
         "\n    trafficClasses: [" + std::to_string(t.traffic_class) + "]\n";
  }
  return y;
}

class AgentHarness : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!tq::testing::runningAsRoot()) GTEST_SKIP() << "needs root (network namespaces, tc)";
    prefix_ = "tqagt" + std::to_string(::getpid());
    tmp_ = makeTestDir("tqagt");
    ASSERT_FALSE(tmp_.empty());
    auto ns = TestNetns::create(prefix_);
    ASSERT_TRUE(ns.ok()) << ns.status().toString();
    ns_ = std::move(*ns);
    dev0_ = prefix_ + "a";
    dev1_ = prefix_ + "c";
    ASSERT_TRUE(tq::testing::addVethPair(*ns_, dev0_, *ns_, prefix_ + "b").ok());
    ASSERT_TRUE(tq::testing::addVethPair(*ns_, dev1_, *ns_, prefix_ + "d").ok());
    run_dir_ = tmp_ + "/run";
    state_dir_ = tmp_ + "/state";
    // Mutual TLS end to end, with certificates made here (scripts/tq-certs.sh).
    pki_ = std::make_unique<tq::test::TestPki>(std::string(TQ_SOURCE_DIR) + "/scripts/tq-certs.sh",
                                               tmp_ + "/pki", std::vector<std::string>{"node1"});
    ASSERT_TRUE(pki_->ok());
  }

  void TearDown() override {
    prometheus_.reset();
    agent_.reset();
    policyd_.reset();
    ns_.reset();
    removeTestDir(tmp_, HasFailure());
  }

  static std::string readText(const std::string& path) { return readTextFile(path); }
  static std::vector<std::string> withFlags(std::vector<std::string> argv,
                                            const std::vector<std::string>& flags) {
    return withArgs(std::move(argv), flags);
  }

  // Starts policyd inside the namespace; port 0 = any (the first start), else that port.
  void startPolicyd(int port = 0) {
    const std::string port_file = tmp_ + "/policyd.port";
    const std::string log = tmp_ + "/policyd-" + std::to_string(++policyd_starts_) + ".log";
    policyd_ = startWithPortFile(
        *ns_,
        withFlags({TQ_POLICYD_BIN, "--listen", "127.0.0.1:" + std::to_string(port), "--data-dir",
                   tmp_ + "/policyd", "--port-file", port_file, "--log-level", "debug"},
                  pki_->flags(policyd_cert_, ca_)),
        port_file, log, &policyd_port_);
    ASSERT_TRUE(policyd_);
  }
  void killPolicyd() {
    ASSERT_TRUE(policyd_);
    policyd_->kill();
    policyd_.reset();
  }

  std::vector<std::string> agentArgs() {
    std::vector<std::string> a = {TQ_AGENT_BIN,
                                  "--policyd",
                                  "127.0.0.1:" + std::to_string(policyd_port_),
                                  "--node",
                                  "node1",
                                  "--device",
                                  dev0_ + "=fabric",
                                  "--run-dir",
                                  run_dir_,
                                  "--state-dir",
                                  state_dir_,
                                  "--metrics",
                                  "127.0.0.1:0",
                                  "--metrics-port-file",
                                  tmp_ + "/agent.port",
                                  "--report-interval-ms",
                                  "200",
                                  "--log-level",
                                  "debug"};
    a = withFlags(std::move(a), agent_tls_.empty() ? pki_->flags("agent-node1") : agent_tls_);
    a.insert(a.end(), extra_agent_args_.begin(), extra_agent_args_.end());
    return a;
  }
  void startAgent() {
    agent_log_ = tmp_ + "/agent-" + std::to_string(++agent_starts_) + ".log";
    agent_ = startWithPortFile(*ns_, agentArgs(), tmp_ + "/agent.port", agent_log_, &metrics_port_);
    ASSERT_TRUE(agent_);
  }
  // SIGTERM and wait: the agent must exit 0 promptly.
  void stopAgent() {
    ASSERT_TRUE(agent_);
    ASSERT_EQ(::kill(agent_->pid(), SIGTERM), 0);
    auto rc = agent_->wait(10'000);
    ASSERT_TRUE(rc.ok()) << rc.status().toString();
    EXPECT_EQ(*rc, 0) << readText(agent_log_);
    agent_.reset();
  }

  tq::testing::CommandResult ctl(const std::vector<std::string>& args) {
    std::vector<std::string> argv =
        withFlags({TQ_CTL_BIN, "--server", "127.0.0.1:" + std::to_string(policyd_port_)},
                  pki_->flags(admin_cert_, ca_));
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = runCommand(ns_->exec(argv), 20'000);
    EXPECT_TRUE(r.ok()) << r.status().toString();
    return r.ok() ? *r : tq::testing::CommandResult{};
  }
  void apply(const std::string& yaml) {
    const std::string f = tmp_ + "/policy-" + std::to_string(++applies_) + ".yaml";
    ASSERT_TRUE(writeFileAtomic(f, yaml).ok());
    auto r = ctl({"apply", "-f", f});
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }

  struct Http {
    int status = 0;
    std::string body;
  };
  // GET http://127.0.0.1:<port><path> inside the namespace (curl, 5 s bound).
  Http get(const std::string& path, int port = 0) {
    if (port == 0) port = metrics_port_;
    auto r = runCommand(ns_->exec({"curl", "-s", "-m", "5", "-o", "-", "-w", "\n%{http_code}",
                                   "http://127.0.0.1:" + std::to_string(port) + path}),
                        10'000);
    Http h;
    if (!r.ok()) return h;
    const size_t nl = r->output.rfind('\n');
    if (nl == std::string::npos) return h;
    h.status = std::atoi(r->output.c_str() + nl + 1);
    h.body = r->output.substr(0, nl);
    return h;
  }
  // The value of one exposition line "name{labels} value" (exact series text), if present.
  std::optional<double> metric(const std::string& series) {
    return seriesValue(get("/metrics").body, series);
  }

  std::map<std::string, TcClass> tcClasses(const std::string& dev) {
    auto r = ns_->run({"tc", "-s", "class", "show", "dev", dev});
    return r.ok() ? parseTcClasses(*r) : std::map<std::string, TcClass>{};
  }
  std::string tcQdisc(const std::string& dev) {
    auto r = ns_->run({"tc", "qdisc", "show", "dev", dev});
    return r.ok() ? *r : "";
  }
  // The class id the agent gave `tenant` on `dev` ("1:1a2b"), from <state>/tc-classes.
  std::string tenantClass(const std::string& dev, const std::string& tenant) {
    std::istringstream in(readText(state_dir_ + "/tc-classes"));
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream l(line);
      std::string d, t, minor;
      if (l >> d >> t >> minor && d == dev && t == tenant) {
        while (minor.size() > 1 && minor[0] == '0') minor.erase(0, 1);  // tc prints "1:1a2"
        return "1:" + minor;
      }
    }
    return "";
  }
  // What a process attached to `tenant` through its socket reads (nullopt: cannot attach).
  // A read that meets the agent mid-update kSeqlockRetries times in a row (the agent's thread
  // preempted inside its few stores, as on a loaded CI machine) is retried for up to 200 ms, as
  // the plugin keeps its last values and reads again: "busy" is not a different state.
  std::optional<TenantParams> shmParams(const std::string& tenant) {
    auto r = tq::testing::attachAs(attach::tenantSocketPath(run_dir_, tenant), tenant);
    if (!r.ok() || r->view->tenant() != tenant) return std::nullopt;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
    for (;;) {
      if (auto p = r->view->readParams()) return p;
      if (std::chrono::steady_clock::now() > deadline) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  // One line per tenant: what shmParams reads, for failure messages.
  std::string describeShm(const std::vector<std::string>& tenants) {
    std::string s;
    for (const std::string& t : tenants) {
      auto p = shmParams(t);
      s += t + ": ";
      if (!p) {
        s += "cannot attach or read\n";
        continue;
      }
      s += "v" + std::to_string(p->policy_version) + " guarantee " +
           std::to_string(p->guarantee_bytes_per_second * 8) + " limit " +
           std::to_string(p->limit_bytes_per_second * 8) + " bit/s" +
           (p->deleted ? " deleted" : "") + "\n";
    }
    return s;
  }
  bool shmExists(const std::string& tenant) {
    return ::access(attach::tenantSocketPath(run_dir_, tenant).c_str(), F_OK) == 0;
  }

  std::string prefix_, tmp_, run_dir_, state_dir_, dev0_, dev1_, agent_log_;
  std::unique_ptr<TestNetns> ns_;
  std::unique_ptr<tq::test::TestPki> pki_;
  std::string policyd_cert_ = "policyd";  // the certificate startPolicyd serves
  std::string ca_ = "ca";                 // the CA policyd trusts and tenantqosctl checks
  std::string admin_cert_ = "admin";      // tenantqosctl's certificate
  std::vector<std::string> agent_tls_;    // the agent's --tls-* flags ({}: the pki's)
  std::unique_ptr<Subprocess> policyd_, agent_, prometheus_;
  std::vector<std::string> extra_agent_args_;
  int policyd_port_ = 0, metrics_port_ = 0;
  int policyd_starts_ = 0, agent_starts_ = 0, applies_ = 0;
};

}  // namespace tq::agent::functional
