#include "agent/config.h"

#include <gtest/gtest.h>

#include <vector>

#include "tests/support/docs_table.h"

namespace tq::agent {
namespace {

Result<AgentConfig> parse(std::vector<const char*> args) {
  args.insert(args.begin(), "tenantqos-agent");
  return parseAgentArgs(static_cast<int>(args.size()), args.data());
}

TEST(AgentConfigTest, DefaultsAndRequiredFlags) {
  auto c = parse({"--policyd", "127.0.0.1:7000", "--device", "eth0=fabric", "--node", "n1"});
  ASSERT_TRUE(c.ok()) << c.status().toString();
  EXPECT_EQ(c->policyd, "127.0.0.1:7000");
  EXPECT_EQ(c->node, "n1");
  ASSERT_EQ(c->devices.size(), 1u);
  EXPECT_EQ(c->devices[0], (DeviceMapping{"eth0", "fabric"}));
  EXPECT_EQ(c->run_dir, "/run/tenantqos");
  EXPECT_EQ(c->state_dir, "/var/lib/tenantqos");
  EXPECT_EQ(c->period_ns, 10'000'000);
  EXPECT_EQ(c->report_interval_ns, 1'000'000'000);
  EXPECT_EQ(c->tc_mode, TcMode::kHtb);
  EXPECT_EQ(c->sysfs_root, "/sys");
  EXPECT_FALSE(c->cleanup);
}

TEST(AgentConfigTest, AllFlagsBothSyntaxes) {
  auto c = parse({"--policyd=[::1]:7000",
                  "--device",
                  "eth0=fabric",
                  "--device=ib0=storage",
                  "--device=eth2=fabric,rail=7",
                  "--run-dir",
                  "/tmp/r",
                  "--state-dir=/tmp/s",
                  "--metrics",
                  "127.0.0.1:0",
                  "--metrics-port-file",
                  "/tmp/p",
                  "--log-level",
                  "debug",
                  "--period-ms",
                  "5",
                  "--tc-mode",
                  "none",
                  "--report-interval-ms=250",
                  "--burst",
                  "1MiB",
                  "--bucket-depth-us=2500",
                  "--sysfs-root=/tmp/fake-sys",
                  "--qp-scan-interval-ms=200"});
  ASSERT_TRUE(c.ok()) << c.status().toString();
  EXPECT_EQ(c->devices[1], (DeviceMapping{"ib0", "storage"}));
  EXPECT_EQ(c->devices[2], (DeviceMapping{"eth2", "fabric", 7u}));
  EXPECT_EQ(c->run_dir, "/tmp/r");
  EXPECT_EQ(c->state_dir, "/tmp/s");
  EXPECT_EQ(c->metrics_address, "127.0.0.1:0");
  EXPECT_EQ(c->metrics_port_file, "/tmp/p");
  EXPECT_EQ(c->log_level, LogLevel::kDebug);
  EXPECT_EQ(c->period_ns, 5'000'000);
  EXPECT_EQ(c->report_interval_ns, 250'000'000);
  EXPECT_EQ(c->tc_mode, TcMode::kNone);
  EXPECT_EQ(c->burst_bytes, 1u << 20);
  EXPECT_EQ(c->bucket_depth_ns, 2'500'000);
  EXPECT_EQ(c->sysfs_root, "/tmp/fake-sys");
  EXPECT_EQ(c->qp_scan_interval_ns, 200'000'000);
  EXPECT_FALSE(c->node.empty());  // host name
}

TEST(AgentConfigTest, QpScanIsOnByDefaultAndZeroTurnsItOff) {
  auto c = parse({"--policyd", "h:1", "--device", "e=a"});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->qp_scan_interval_ns, 5'000'000'000);
  c = parse({"--policyd", "h:1", "--device", "e=a", "--qp-scan-interval-ms", "0"});
  ASSERT_TRUE(c.ok()) << c.status().toString();
  EXPECT_EQ(c->qp_scan_interval_ns, 0);
}

TEST(AgentConfigTest, CleanupNeedsNoPolicyd) {
  auto c = parse({"--cleanup", "--device", "eth0=fabric"});
  ASSERT_TRUE(c.ok()) << c.status().toString();
  EXPECT_TRUE(c->cleanup);
}

TEST(AgentConfigTest, UsageErrors) {
  struct Case {
    std::vector<const char*> args;
    const char* needle;
  };
  const Case cases[] = {
      {{"--device", "eth0=fabric"}, "--policyd"},
      {{"--policyd", "h:1"}, "--device"},
      {{"--policyd", "h:1", "--device", "eth0"}, "DEV=LINK"},
      {{"--policyd", "h:1", "--device", "=fabric"}, "DEV=LINK"},
      {{"--policyd", "h:1", "--device", "eth0="}, "DEV=LINK"},
      {{"--policyd", "h:1", "--device", "a/b=fabric"}, "valid device"},
      {{"--policyd", "h:1", "--device", "averyveryverylongname=x"}, "valid device"},
      {{"--policyd", "h:1", "--device", "e=a", "--device", "e=b"}, "twice"},
      {{"--policyd", "h:1", "--device", "e=,rail=1"}, "DEV=LINK[,rail=N]"},
      {{"--policyd", "h:1", "--device", "e=a,lane=1"}, "\"lane=1\" is not rail=N"},
      {{"--policyd", "h:1", "--device", "e=a,rail="}, "rail \"\" is not a whole number"},
      {{"--policyd", "h:1", "--device", "e=a,rail=256"}, "rail 256 is outside [0, 255]"},
      {{"--policyd", "h:1", "--device", "e=a,rail=1,rail=2"}, "not a whole number"},
      {{"--policyd", "nohostport", "--device", "e=a"}, "HOST:PORT"},
      {{"--policyd", "h:99999", "--device", "e=a"}, "port"},
      {{"--policyd", "h:1", "--device", "e=a", "--period-ms", "0"}, "outside"},
      {{"--policyd", "h:1", "--device", "e=a", "--period-ms", "ten"},
       "--period-ms: \"ten\" is not a whole number"},
      {{"--policyd", "h:1", "--device", "e=a", "--tc-mode", "cake"}, "htb or none"},
      {{"--policyd", "h:1", "--device", "e=a", "--log-level", "loud"}, "log level"},
      {{"--policyd", "h:1", "--device", "e=a", "--frobnicate"}, "unknown flag \"--frobnicate\""},
      {{"--policyd", "h:1", "--device", "e=a", "--run-dir"}, "needs a value"},
      {{"--policyd", "h:1", "--device", "e=a", "--metrics", "localhost"}, "HOST:PORT"},
      {{"--policyd", "h:1", "--device", "e=a", "--burst", "10B"}, "outside"},
      {{"--policyd", "h:1", "--device", "e=a", "--bucket-depth-us", "5"}, "[10, 1000000]"},
      {{"--policyd", "h:1", "--device", "e=a", "--bucket-depth-us", "1ms"}, "not a whole number"},
      {{"--policyd", "h:1",      "--device", "e0=a",     "--device", "e1=a",     "--device",
        "e2=a",      "--device", "e3=a",     "--device", "e4=a",     "--device", "e5=a",
        "--device",  "e6=a",     "--device", "e7=a",     "--device", "e8=a"},
       "more than 8 devices carry link a"},
      {{"--policyd", "h:1", "--device", "e=a", "--sysfs-root="}, "--sysfs-root: empty value"},
      {{"--policyd", "h:1", "--device", "e=a", "--sysfs-root"}, "needs a value"},
      {{"--cleanup=yes", "--device", "e=a"}, "no value"},
      {{"--policyd", "h:1", "--policyd", "h:2", "--device", "e=a"}, "--policyd given twice"},
      {{"--policyd", "h:1,", "--device", "e=a"}, "--policyd: "},
      {{"--policyd", "h:1", "--device", "e=a", "--default-tenant", "Bad_Name"}, "DNS-1123"},
      {{"--policyd", "h:1", "--device", "e=a", "stray"}, "unexpected argument \"stray\""},
      {{"--policyd", "h:1", "--device", "e=a", "--qp-scan-interval-ms", "50"}, "below 100"},
  };
  for (const Case& c : cases) {
    auto r = parse(c.args);
    ASSERT_FALSE(r.ok()) << c.needle;
    EXPECT_NE(r.status().message().find(c.needle), std::string::npos)
        << r.status().message() << " (wanted: " << c.needle << ")";
  }
}

TEST(AgentConfigTest, TlsFlags) {
  auto c = parse({"--policyd", "h:1", "--device", "e=a", "--tls-ca", "ca.pem", "--tls-cert=c.pem",
                  "--tls-key", "k.pem"});
  ASSERT_TRUE(c.ok()) << c.status().toString();
  EXPECT_EQ(c->tls.ca_file, "ca.pem");
  EXPECT_EQ(c->tls.cert_file, "c.pem");
  EXPECT_EQ(c->tls.key_file, "k.pem");
  EXPECT_FALSE(c->tls.insecure);
  c = parse({"--policyd", "h:1", "--device", "e=a", "--insecure"});
  ASSERT_TRUE(c.ok()) << c.status().toString();
  EXPECT_TRUE(c->tls.insecure);
}

TEST(AgentConfigTest, PolicydReplicas) {
  auto c = parse({"--policyd", "a:1, [::1]:2,b:3", "--device", "e=a"});
  ASSERT_TRUE(c.ok()) << c.status().toString();
  EXPECT_EQ(c->policyd, "a:1, [::1]:2,b:3");
  EXPECT_EQ(c->policyd_endpoints, (std::vector<std::string>{"a:1", "[::1]:2", "b:3"}));
}

// The help text and docs/agent.md's table come from the flag table the parser uses.
TEST(AgentConfigTest, HelpAndDocsFromTheTable) {
  const std::string usage = agentUsage();
  for (const char* flag : {"--policyd", "--tls-ca", "--device", "--burst", "--cleanup"}) {
    EXPECT_NE(usage.find(flag), std::string::npos) << flag;
  }
  EXPECT_NE(usage.find("(1..10000; default 10)"), std::string::npos) << usage;  // --period-ms
  EXPECT_NE(usage.find("(1500B..4GiB; default 4KiB)"), std::string::npos) << usage;
  EXPECT_NE(usage.find("(10..1000000; default 1000)"), std::string::npos) << usage;
  EXPECT_EQ(testing::docsBlockMismatch("docs/agent.md", "addAgentFlags", agentFlagsMarkdown()), "");
}

TEST(AgentConfigTest, HelpWins) {
  auto c = parse({"--help"});
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->help);
  EXPECT_NE(agentUsage().find("--tc-mode"), std::string::npos);
}

}  // namespace
}  // namespace tq::agent
