// tenantqos-webhook's command line (webhook/webhook.cc): every flag through the one table the
// binary parses with, and the docs table it writes. The webhook itself runs in
// tests/functional/webhook_test.py.
#include "webhook/webhook.h"

#include <gtest/gtest.h>

#include "tests/support/docs_table.h"

namespace tq::webhook {
namespace {

const std::vector<std::string> kRequired = {"--tls-cert", "s.crt",     "--tls-key",
                                            "s.key",      "--policyd", "policyd:7400"};

Result<WebhookArgs> parse(std::vector<std::string> extra) {
  std::vector<std::string> args = kRequired;
  args.insert(args.end(), extra.begin(), extra.end());
  return parseWebhookArgs(args);
}

TEST(WebhookFlagsTest, DefaultsAndEveryFlag) {
  auto a = parse({"--insecure"});
  ASSERT_TRUE(a.ok()) << a.status().toString();
  EXPECT_EQ(a->config.listen, "0.0.0.0:8443");
  EXPECT_EQ(a->config.recipe.run_dir, "/run/tenantqos");
  EXPECT_FALSE(a->config.recipe.group.has_value());
  EXPECT_TRUE(a->config.recipe.queue_namespaces.empty());
  EXPECT_EQ(a->config.request_timeout_ms, 10'000);

  a = parse({"--listen",
             "127.0.0.1:0",
             "--tls-ca",
             "ca.crt",
             "--policyd-cert",
             "p.crt",
             "--policyd-key",
             "p.key",
             "--plugin-image",
             "img:1",
             "--run-dir",
             "/var/run/tq//",
             "--group",
             "none",
             "--default-ld-library-path",
             "/lib",
             "--request-timeout-ms",
             "100",
             "--port-file",
             "/pf"});
  ASSERT_TRUE(a.ok()) << a.status().toString();
  const WebhookConfig& c = a->config;
  EXPECT_EQ(c.tls_cert, "s.crt");
  EXPECT_EQ(c.tls_key, "s.key");
  EXPECT_EQ(c.policyd, "policyd:7400");
  EXPECT_EQ(c.policyd_endpoints, (std::vector<std::string>{"policyd:7400"}));
  EXPECT_EQ(c.listen, "127.0.0.1:0");
  EXPECT_EQ(c.policyd_tls.ca_file, "ca.crt");
  EXPECT_EQ(c.policyd_tls.cert_file, "p.crt");
  EXPECT_EQ(c.policyd_tls.key_file, "p.key");
  EXPECT_FALSE(c.policyd_tls.insecure);
  EXPECT_EQ(c.recipe.image, "img:1");
  EXPECT_EQ(c.recipe.run_dir, "/var/run/tq");  // trailing slashes dropped
  EXPECT_FALSE(c.recipe.group.has_value());
  EXPECT_EQ(c.recipe.default_ld_library_path, "/lib");
  EXPECT_EQ(c.request_timeout_ms, 100);
  EXPECT_EQ(c.port_file, "/pf");
  a = parse({"--insecure", "--group", "1234", "--queue-namespaces", "ml,batch"});
  ASSERT_TRUE(a.ok()) << a.status().toString();
  EXPECT_EQ(a->config.recipe.group, 1234u);
  EXPECT_EQ(a->config.recipe.queue_namespaces, (std::vector<std::string>{"ml", "batch"}));
}

TEST(WebhookFlagsTest, UsageErrors) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--insecure", "--run-dir", "relative"}, "--run-dir: not an absolute path"},
      {{"--insecure", "--group", "-1"}, "--group: \"-1\" is not a group id or \"none\""},
      {{"--insecure", "--queue-namespaces", "ml,,b"},
       "--queue-namespaces: \"\" is not a namespace"},
      {{"--insecure", "--queue-namespaces", "Bad_NS"}, "\"Bad_NS\" is not a namespace name"},
      {{"--insecure", "--request-timeout-ms", "99"}, "--request-timeout-ms: 99 is outside"},
      {{"--insecure", "--listen", "8443"}, "--listen: \"8443\" is not HOST:PORT"},
      {{}, "choose --insecure (plaintext to policyd) or --tls-ca FILE"},
      {{"--insecure", "--tls-ca", "ca"}, "choose --insecure"},
      {{"--tls-ca", "ca", "--policyd-cert", "c"}, "--policyd-cert and --policyd-key go together"},
      {{"--insecure", "--policyd-cert", "c", "--policyd-key", "k"}, "with --tls-ca"},
      {{"--insecure", "--what"}, "unknown flag \"--what\""},
  };
  for (const auto& [args, want] : cases) {
    auto a = parse(args);
    ASSERT_FALSE(a.ok()) << want;
    EXPECT_NE(a.status().message().find(want), std::string::npos)
        << a.status().message() << " (wanted: " << want << ")";
  }
  auto none = parseWebhookArgs({"--insecure"});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("--tls-cert FILE is required"), std::string::npos)
      << none.status().message();
}

TEST(WebhookFlagsTest, HelpAndDocsFromTheTable) {
  auto a = parseWebhookArgs({"--help"});
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->help);
  const std::string usage = webhookUsage();
  EXPECT_NE(usage.find("--group GID|none"), std::string::npos) << usage;
  EXPECT_NE(usage.find("(default none)"), std::string::npos) << usage;
  EXPECT_EQ(testing::docsBlockMismatch("docs/deploy.md", "addWebhookFlags", webhookFlagsMarkdown()),
            "");
}

// What /readyz says as the follower takes policies (rpc::PolicyFollower's handlers).
TEST(PolicyHolderTest, ReadinessNamesThePolicyAndAnAdoptedStore) {
  PolicyHolder holder;
  EXPECT_EQ(holder.readiness("p:1"),
            (std::pair<int, std::string>{503, "no policy from p:1 yet\n"}));
  EXPECT_EQ(holder.current(), nullptr);
  rpc::PolicyFollower::Handlers h = holder.handlers();
  VersionedPolicy v5;
  v5.version = 5;
  v5.store_epoch = std::string(32, 'a');
  h.on_policy(v5, rpc::SnapshotVerdict::kTake, rpc::HeldPolicy{});
  auto [code, body] = holder.readiness("p:1");
  EXPECT_EQ(code, 200);
  EXPECT_EQ(body, "ready: policy v5 of store " + v5.store_epoch + " from p:1\n");
  ASSERT_NE(holder.current(), nullptr);
  EXPECT_EQ(holder.current()->version, 5u);

  // The store is re-created: v1 of another epoch replaces v5, and /readyz says so.
  VersionedPolicy v1;
  v1.version = 1;
  v1.store_epoch = std::string(32, 'b');
  h.on_policy(v1, rpc::SnapshotVerdict::kTakeNewStore, rpc::HeldPolicy{v5.store_epoch, 5});
  std::tie(code, body) = holder.readiness("p:1");
  EXPECT_EQ(code, 200);
  EXPECT_NE(body.find("ready: policy v1 of store " + v1.store_epoch), std::string::npos) << body;
  EXPECT_NE(body.find("adopted a re-created policy store " + v1.store_epoch +
                      " (v1), replacing v5 of store " + v5.store_epoch),
            std::string::npos)
      << body;
  EXPECT_EQ(holder.current()->version, 1u);

  // An older version offered is refused and reported; a newer one clears the report.
  h.on_older(v1, "policyd p:1 offers policy v0 ... not taken");
  EXPECT_NE(holder.readiness("p:1").second.find("not taken"), std::string::npos);
  VersionedPolicy v2 = v1;
  v2.version = 2;
  h.on_policy(v2, rpc::SnapshotVerdict::kTake, rpc::HeldPolicy{v1.store_epoch, 1});
  EXPECT_EQ(holder.readiness("p:1").second,
            "ready: policy v2 of store " + v1.store_epoch + " from p:1\n");
  h.on_connected(true);
  EXPECT_TRUE(holder.connected());
}

}  // namespace
}  // namespace tq::webhook
