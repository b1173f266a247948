// Marking on the wire: two ranks of tenantqos-perf in two network namespaces joined by a veth
// pair; HTB on each veth's egress with one class per DSCP (u32 filters on the DS field; this
// kernel has no CONFIG_CLS_U32_PERF, so class statistics do the counting). The sender's tenant
// marks DSCP 10, the receiver's own tenant would mark DSCP 20: the data must leave the sender
// as DSCP 10, and the receiver's ACKs too (it adopts the sender's marking). Needs root.
#include <gtest/gtest.h>
#include <unistd.h>

#include <map>
#include <regex>
#include <sstream>

#include "tests/functional/plugin_proc_util.h"

namespace tq::plugin::testing {
namespace {

struct ClassStats {
  uint64_t bytes = 0;
  uint64_t packets = 0;
};

class PrivilegedPluginDscpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (network namespaces, tc)";
    const std::string id = std::to_string(::getpid());
    ns_a_ = "tqplg" + id + "a";
    ns_b_ = "tqplg" + id + "b";
    veth_a_ = "tqplg" + id + "x";
    veth_b_ = "tqplg" + id + "y";
    const int net = ::getpid() % 250;
    ip_a_ = "10.231." + std::to_string(net) + ".1";
    ip_b_ = "10.231." + std::to_string(net) + ".2";
    sh({"ip", "netns", "add", ns_a_});
    sh({"ip", "netns", "add", ns_b_});
    created_ = true;
    sh({"ip", "link", "add", veth_a_, "netns", ns_a_, "type", "veth", "peer", "name", veth_b_,
        "netns", ns_b_});
    for (const auto& [ns, dev, ip] :
         {std::tuple{ns_a_, veth_a_, ip_a_}, std::tuple{ns_b_, veth_b_, ip_b_}}) {
      sh({"ip", "-n", ns, "addr", "add", ip + "/24", "dev", dev});
      sh({"ip", "-n", ns, "link", "set", "lo", "up"});
      sh({"ip", "-n", ns, "link", "set", dev, "up"});
      // One HTB class per DSCP, classified by u32 on the DS field (mask 0xfc), like the agent.
      tc(ns, {"qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "99"});
      tc(ns,
         {"class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb", "rate", "40gbit"});
      for (const char* minor : {"10", "20", "99"}) {
        tc(ns, {"class", "add", "dev", dev, "parent", "1:1", "classid", std::string("1:") + minor,
                "htb", "rate", "10gbit", "ceil", "40gbit"});
      }
      tc(ns, {"filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32",
              "match", "ip", "dsfield", "0x28", "0xfc", "flowid", "1:10"});  // DSCP 10
      tc(ns, {"filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "2", "u32",
              "match", "ip", "dsfield", "0x50", "0xfc", "flowid", "1:20"});  // DSCP 20
    }
  }

  void TearDown() override {
    if (!created_) return;
    run({"ip", "netns", "del", ns_a_}, {}, 30);  // removes the veth pair too
    run({"ip", "netns", "del", ns_b_}, {}, 30);
  }

  void sh(const std::vector<std::string>& argv) {
    ProcResult r = run(argv, {}, 30);
    ASSERT_EQ(r.exit_code, 0) << argv[0] << " " << argv[1] << " ...: " << r.err;
  }
  void tc(const std::string& ns, std::vector<std::string> args) {
    args.insert(args.begin(), {"ip", "netns", "exec", ns, "tc"});
    sh(args);
  }

  std::map<std::string, ClassStats> classStats(const std::string& ns, const std::string& dev) {
    ProcResult r =
        run({"ip", "netns", "exec", ns, "tc", "-s", "class", "show", "dev", dev}, {}, 30);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::map<std::string, ClassStats> out;
    std::istringstream in(r.out);
    std::string line, current;
    const std::regex cls(R"(^class htb (\d+:\d+) )"), sent(R"(Sent (\d+) bytes (\d+) pkt)");
    std::smatch m;
    while (std::getline(in, line)) {
      if (std::regex_search(line, m, cls))
        current = m[1];
      else if (!current.empty() && std::regex_search(line, m, sent)) {
        out[current] = {std::stoull(m[1]), std::stoull(m[2])};
        current.clear();
      }
    }
    return out;
  }

  std::string ns_a_, ns_b_, veth_a_, veth_b_, ip_a_, ip_b_;
  bool created_ = false;
};

TEST_F(PrivilegedPluginDscpTest, DataAndAcksCarryTheSendersDscp) {
  const std::string rv = ip_a_ + ":29471";
  auto rank = [&](int r, const std::string& ns, const std::string& dev, const std::string& dscp,
                  const std::string& tenant) {
    std::vector<std::string> argv = {"ip", "netns", "exec", ns};
    for (std::string& a : perfArgv({.bin = TQ_PERF_BIN,
                          .plugin = TQ_PLUGIN_SO,
                          .local = 0,
                          .rank = r,
                          .rendezvous = rv,
                          .seconds = 1,
                          .size = "1M",
                          .report_interval_ms = 0,
                          .json = false,
                          .timeout_s = 20})) {
      argv.push_back(std::move(a));
    }
    std::map<std::string, std::string> env = {{"TENANTQOS_SOCKET_IFNAME", dev},
                                              {"TENANTQOS_DSCP", dscp},
                                              {"TENANTQOS_TENANT", tenant},
                                              {"TENANTQOS_RUN_DIR", "/nonexistent/tqplg"}};
    return std::make_unique<Proc>(argv, env);
  };
  auto sender = rank(0, ns_a_, veth_a_, "10", "tqplg-send");
  auto receiver = rank(1, ns_b_, veth_b_, "20", "tqplg-recv");
  ProcResult rs = sender->wait(60), rr = receiver->wait(60);
  ASSERT_EQ(rs.exit_code, 0) << rs.err;
  ASSERT_EQ(rr.exit_code, 0) << rr.err;

  auto a = classStats(ns_a_, veth_a_);
  auto b = classStats(ns_b_, veth_b_);
  std::printf("sender egress   DSCP10 %lu pkt %lu B | DSCP20 %lu pkt | other %lu pkt %lu B\n",
              a["1:10"].packets, a["1:10"].bytes, a["1:20"].packets, a["1:99"].packets,
              a["1:99"].bytes);
  std::printf("receiver egress DSCP10 %lu pkt | DSCP20 %lu pkt | other %lu pkt\n",
              b["1:10"].packets, b["1:20"].packets, b["1:99"].packets);
  // Sender: the data is DSCP 10; only the rendezvous (plain TCP) and ARP are unmarked.
  EXPECT_GT(a["1:10"].packets, 200u);
  EXPECT_EQ(a["1:20"].packets, 0u);
  EXPECT_GT(a["1:10"].bytes, 99 * a["1:99"].bytes) << "data left the sender unmarked";
  // Receiver: its ACKs carry the sender's DSCP 10. DSCP 20 appears only before the accept
  // adopts the sender's marking (SYN-ACKs and the first ACKs of the handshake streams).
  EXPECT_GT(b["1:10"].packets, 100u);
  EXPECT_GT(b["1:10"].packets, 10 * (b["1:20"].packets + 1));
  EXPECT_LE(b["1:20"].packets, 40u);
}

}  // namespace
}  // namespace tq::plugin::testing
