#include "agent/config.h"

#include <gtest/gtest.h>

#include <vector>

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
      {{"--policyd", "nohostport", "--device", "e=a"}, "HOST:PORT"},
      {{"--policyd", "h:99999", "--device", "e=a"}, "port"},
      {{"--policyd", "h:1", "--device", "e=a", "--period-ms", "0"}, "outside"},
      {{"--policyd", "h:1", "--device", "e=a", "--period-ms", "ten"}, "milliseconds"},
      {{"--policyd", "h:1", "--device", "e=a", "--tc-mode", "cake"}, "htb or none"},
      {{"--policyd", "h:1", "--device", "e=a", "--log-level", "loud"}, "log level"},
      {{"--policyd", "h:1", "--device", "e=a", "--frobnicate"}, "unknown argument"},
      {{"--policyd", "h:1", "--device", "e=a", "--run-dir"}, "needs a value"},
      {{"--policyd", "h:1", "--device", "e=a", "--metrics", "localhost"}, "HOST:PORT"},
      {{"--policyd", "h:1", "--device", "e=a", "--burst", "10B"}, "outside"},
      {{"--policyd", "h:1", "--device", "e=a", "--bucket-depth-us", "5"}, "10..1000000"},
      {{"--policyd", "h:1", "--device", "e=a", "--bucket-depth-us", "1ms"}, "10..1000000"},
      {{"--policyd", "h:1",      "--device", "e0=a",     "--device", "e1=a",     "--device",
        "e2=a",      "--device", "e3=a",     "--device", "e4=a",     "--device", "e5=a",
        "--device",  "e6=a",     "--device", "e7=a",     "--device", "e8=a"},
       "more than 8 devices carry link a"},
      {{"--policyd", "h:1", "--device", "e=a", "--sysfs-root="}, "--sysfs-root: empty path"},
      {{"--policyd", "h:1", "--device", "e=a", "--sysfs-root"}, "needs a value"},
      {{"--cleanup=yes", "--device", "e=a"}, "no value"},
      {{"--policyd", "h:1", "--device", "e=a", "--qp-scan-interval-ms", "50"}, "below 100"},
  };
  for (const Case& c : cases) {
    auto r = parse(c.args);
    ASSERT_FALSE(r.ok()) << c.needle;
    EXPECT_NE(r.status().message().find(c.needle), std::string::npos)
        << r.status().message() << " (wanted: " << c.needle << ")";
  }
}

TEST(AgentConfigTest, SplitHostPort) {
  auto a = splitHostPort("127.0.0.1:0");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->first, "127.0.0.1");
  EXPECT_EQ(a->second, 0);
  auto b = splitHostPort("[::1]:9464");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->first, "::1");
  EXPECT_EQ(b->second, 9464);
  EXPECT_FALSE(splitHostPort(":80").ok());
  EXPECT_FALSE(splitHostPort("[::1]80").ok());
  EXPECT_FALSE(splitHostPort("h:-1").ok());
}

TEST(AgentConfigTest, HelpWins) {
  auto c = parse({"--help"});
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->help);
  EXPECT_NE(agentUsage().find("--tc-mode"), std::string::npos);
}

}  // namespace
}  // namespace tq::agent
