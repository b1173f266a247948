// tenantqos-policyd's command line (policy/policyd.cc): every flag through the one table the
// binary parses with, and the docs table it writes. The server itself runs in
// tests/functional/policyd_test.cc.
#include "policy/policyd.h"

#include <gtest/gtest.h>

#include <vector>

#include "tests/support/docs_table.h"

namespace tq::policy {
namespace {

Result<PolicydArgs> parse(std::vector<const char*> args) {
  args.insert(args.begin(), "tenantqos-policyd");
  return parsePolicydArgs(static_cast<int>(args.size()), args.data());
}

TEST(PolicydFlagsTest, Defaults) {
  auto a = parse({"--insecure"});
  ASSERT_TRUE(a.ok()) << a.status().toString();
  const PolicydOptions& o = a->options;
  EXPECT_EQ(o.listen, kDefaultPolicydListen);
  EXPECT_EQ(o.data_dir, kDefaultDataDir);
  EXPECT_EQ(o.store_backend, "file");
  EXPECT_EQ(o.etcd_wait, 30);
  EXPECT_EQ(o.store.retain_versions, kDefaultRetainVersions);
  EXPECT_EQ(o.core.usage_expiry_ns, 30'000'000'000);
  EXPECT_EQ(o.grpc.max_streams_per_identity, 16u);
  EXPECT_EQ(o.log_level, LogLevel::kInfo);
  EXPECT_TRUE(o.tls.insecure);
  EXPECT_FALSE(o.serve_newest_intact);
  EXPECT_EQ(o.allocator.period_ns, 100'000'000);
  EXPECT_EQ(o.allocator.hold_ns, 3'000'000'000);
  EXPECT_EQ(o.allocator_lease_ttl, 2);
}

TEST(PolicydFlagsTest, EveryFlag) {
  auto a = parse({"--tls-ca",
                  "ca.pem",
                  "--tls-cert",
                  "c.pem",
                  "--tls-key=k.pem",
                  "--listen",
                  "[::1]:0",
                  "--store",
                  "etcd",
                  "--data-dir",
                  "/d",
                  "--etcd-endpoints",
                  "e1:2379,e2:2379",
                  "--etcd-prefix",
                  "/p/",
                  "--etcd-ca",
                  "eca",
                  "--etcd-cert",
                  "ecert",
                  "--etcd-key",
                  "ekey",
                  "--etcd-wait",
                  "0",
                  "--retain-versions",
                  "5",
                  "--serve-newest-intact",
                  "--audit-log",
                  "/a.jsonl",
                  "--usage-expiry",
                  "2.5",
                  "--max-streams-per-identity",
                  "3",
                  "--port-file",
                  "/pf",
                  "--metrics",
                  "127.0.0.1:0",
                  "--allocator-period",
                  "50",
                  "--allocator-lease-ttl",
                  "3",
                  "--allocator-hold",
                  "5000",
                  "--log-level",
                  "trace"});
  ASSERT_TRUE(a.ok()) << a.status().toString();
  const PolicydOptions& o = a->options;
  EXPECT_EQ(o.tls.ca_file, "ca.pem");
  EXPECT_EQ(o.tls.cert_file, "c.pem");
  EXPECT_EQ(o.tls.key_file, "k.pem");
  EXPECT_EQ(o.listen, "[::1]:0");
  EXPECT_EQ(o.store_backend, "etcd");
  EXPECT_EQ(o.data_dir, "/d");
  EXPECT_EQ(o.etcd.endpoints, (std::vector<std::string>{"e1:2379", "e2:2379"}));
  EXPECT_EQ(o.etcd.prefix, "/p/");
  EXPECT_EQ(o.etcd.tls.ca_file, "eca");
  EXPECT_EQ(o.etcd.tls.cert_file, "ecert");
  EXPECT_EQ(o.etcd.tls.key_file, "ekey");
  EXPECT_EQ(o.etcd_wait, 0);
  EXPECT_EQ(o.store.retain_versions, 5u);
  EXPECT_TRUE(o.serve_newest_intact);
  EXPECT_EQ(o.audit_log, "/a.jsonl");
  EXPECT_EQ(o.core.usage_expiry_ns, 2'500'000'000);
  EXPECT_EQ(o.grpc.max_streams_per_identity, 3u);
  EXPECT_EQ(o.port_file, "/pf");
  EXPECT_EQ(o.metrics_listen, "127.0.0.1:0");
  EXPECT_EQ(o.log_level, LogLevel::kTrace);
  EXPECT_EQ(o.allocator.period_ns, 50'000'000);
  EXPECT_EQ(o.allocator_lease_ttl, 3);
  EXPECT_EQ(o.allocator.hold_ns, 5'000'000'000);
}

TEST(PolicydFlagsTest, UsageErrors) {
  const std::vector<std::pair<std::vector<const char*>, std::string>> cases = {
      {{"--listen", "7400"}, "--listen: \"7400\" is not HOST:PORT"},
      {{"--store", "disk"}, "--store: \"disk\" is not file or etcd"},
      {{"--store", "etcd"}, "--store etcd needs --etcd-endpoints"},
      {{"--etcd-endpoints", "a:1,"}, "--etcd-endpoints: "},
      {{"--etcd-wait", "3601"}, "--etcd-wait: 3601 is outside [0, 3600]"},
      {{"--retain-versions", "0"}, "--retain-versions: 0 is outside"},
      {{"--retain-versions", "-3"}, "--retain-versions: -3 is outside"},
      {{"--usage-expiry", "0"}, "--usage-expiry: 0 s is outside [1, 86400]"},
      {{"--max-streams-per-identity", "0"}, "--max-streams-per-identity: 0 is outside"},
      {{"--allocator-lease-ttl", "0"}, "--allocator-lease-ttl: 0 is outside"},
      {{"--allocator-period", "5"}, "--allocator-period: "},
      {{"--metrics", "9090"}, "--metrics: \"9090\" is not HOST:PORT"},
      {{"--log-level", "chatty"}, "--log-level: "},
      {{"--serve-newest-intact=yes"}, "--serve-newest-intact takes no value"},
      {{"--data-dir"}, "--data-dir needs a value DIR"},
      {{"--tls-ca="}, "--tls-ca: empty value"},
      {{"--listen", "a:1", "--listen", "a:2"}, "--listen given twice"},
      {{"--bogus"}, "unknown flag \"--bogus\""},
      {{"serve"}, "unexpected argument \"serve\""},
  };
  for (const auto& [args, want] : cases) {
    auto a = parse(args);
    ASSERT_FALSE(a.ok()) << want;
    EXPECT_NE(a.status().message().find(want), std::string::npos)
        << a.status().message() << " (wanted: " << want << ")";
  }
}

TEST(PolicydFlagsTest, HelpAndDocsFromTheTable) {
  auto a = parse({"--listen", "x:1", "--help", "--bogus"});
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->help);
  const std::string usage = policydUsage();
  for (const char* s : {"--etcd-wait SECONDS", "--tls-ca FILE", "(default 127.0.0.1:7400)",
                        "Exit codes: 0 clean shutdown, 1 startup failed, 2 usage error."}) {
    EXPECT_NE(usage.find(s), std::string::npos) << s << "\n" << usage;
  }
  EXPECT_EQ(testing::docsBlockMismatch("docs/cli.md", "addPolicydFlags", policydFlagsMarkdown()),
            "");
}

}  // namespace
}  // namespace tq::policy
