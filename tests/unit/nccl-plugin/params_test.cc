#include "nccl-plugin/params.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace tq::plugin {
namespace {

EnvLookup envOf(std::map<std::string, std::string> m) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(m));
  return [shared](const char* name) -> const char* {
    auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

TEST(PluginParams, DefaultsWhenNothingIsSet) {
  auto p = loadParams(envOf({}));
  ASSERT_TRUE(p.ok()) << p.status().toString();
  EXPECT_EQ(p->tenant, "");
  EXPECT_EQ(p->default_tenant, "default");
  EXPECT_EQ(p->run_dir, "/run/tenantqos");
  EXPECT_FALSE(p->rate.has_value());
  EXPECT_EQ(p->burst, 4096u);
  EXPECT_EQ(p->bucket_depth_us, 1000);
  EXPECT_FALSE(p->rx_rate.has_value());
  EXPECT_FALSE(p->dscp.has_value());
  EXPECT_FALSE(p->priority.has_value());
  EXPECT_EQ(p->nsocks, 4);
  EXPECT_EQ(p->transport, "auto");
  EXPECT_EQ(p->handshake_timeout_ms, 30000);
  EXPECT_EQ(p->shm_recheck_ms, 1000);
}

TEST(PluginParams, ParsesEveryType) {
  auto p = loadParams(envOf({{"TENANTQOS_TENANT", "team-a"},
                             {"TENANTQOS_RATE", "10Gbps"},
                             {"TENANTQOS_RX_RATE", "1Gbps"},
                             {"TENANTQOS_BUCKET_DEPTH_US", "250"},
                             {"TENANTQOS_BURST", "1MiB"},
                             {"TENANTQOS_DSCP", "26"},
                             {"TENANTQOS_SL", "3"},
                             {"TENANTQOS_PRIORITY", "5"},
                             {"TENANTQOS_NSOCKS", "8"},
                             {"TENANTQOS_SOCKET_INLINE", "4KiB"},
                             {"TENANTQOS_HANDSHAKE_TIMEOUT_MS", "250"}}));
  ASSERT_TRUE(p.ok()) << p.status().toString();
  EXPECT_EQ(p->tenant, "team-a");
  EXPECT_EQ(*p->rate, 1'250'000'000u);
  EXPECT_EQ(*p->rx_rate, 125'000'000u);
  EXPECT_EQ(p->bucket_depth_us, 250);
  EXPECT_EQ(p->burst, 1u << 20);
  EXPECT_EQ(*p->dscp, 26);
  EXPECT_EQ(*p->sl, 3);
  EXPECT_EQ(*p->priority, 5);
  EXPECT_EQ(p->nsocks, 8);
  EXPECT_EQ(p->socket_inline, 4096u);
  EXPECT_EQ(p->handshake_timeout_ms, 250);
}

TEST(PluginParams, EmptyValueMeansUnset) {
  auto p = loadParams(envOf({{"TENANTQOS_RATE", ""}, {"TENANTQOS_NSOCKS", ""}}));
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->rate.has_value());
  EXPECT_EQ(p->nsocks, 4);
}

TEST(PluginParams, ErrorsNameTheVariableAndValue) {
  struct Case {
    const char* name;
    const char* value;
  } cases[] = {{"TENANTQOS_DSCP", "64"},
               {"TENANTQOS_DSCP", "ef"},
               {"TENANTQOS_SL", "-1"},
               {"TENANTQOS_NSOCKS", "0"},
               {"TENANTQOS_NSOCKS", "17"},
               {"TENANTQOS_RATE", "fast"},
               {"TENANTQOS_BURST", "-5"},
               // Issue 23 item 13: zero is out of range like every other bad value (a zero
               // rate never admits a byte; a zero burst cuts ib messages into empty pieces).
               {"TENANTQOS_RATE", "0"},
               {"TENANTQOS_RATE", "0Gbps"},
               {"TENANTQOS_BURST", "0"},
               {"TENANTQOS_BURST", "100"},
               {"TENANTQOS_SOCKET_INLINE", "8MiB"},
               {"TENANTQOS_HANDSHAKE_TIMEOUT_MS", "1"}};
  for (const Case& c : cases) {
    auto p = loadParams(envOf({{c.name, c.value}}));
    ASSERT_FALSE(p.ok()) << c.name << "=" << c.value;
    EXPECT_NE(p.status().message().find(c.name), std::string::npos) << p.status().message();
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(PluginParams, TableListsEveryParameterOnce) {
  const std::string table = paramsMarkdownTable();
  for (const ParamSpec& s : paramSpecs()) {
    const std::string cell = "| `" + std::string(s.env) + "` |";
    const size_t at = table.find(cell);
    ASSERT_NE(at, std::string::npos) << s.env;
    EXPECT_EQ(table.find(cell, at + 1), std::string::npos) << s.env;
    EXPECT_EQ(std::string(s.env).rfind(kPluginEnvPrefix, 0), 0u) << s.env;  // node_contract.h
    EXPECT_GT(std::string(s.meaning).size(), 20u) << s.env;
  }
}

// What the webhook writes into pods (common/node_contract.h) is what the plugin reads.
TEST(PluginParams, TheNodeContractsVariablesAreParameters) {
  auto p = loadParams(envOf({{kTenantEnv, "team-a"}, {kRunDirEnv, "/var/run/tq"}}));
  ASSERT_TRUE(p.ok()) << p.status().toString();
  EXPECT_EQ(p->tenant, "team-a");
  EXPECT_EQ(p->run_dir, "/var/run/tq");
  auto defaults = loadParams(envOf({}));
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(defaults->run_dir, kDefaultRunDir);
}

TEST(PluginParams, DescribeNonDefaultListsOnlyChangedValues) {
  const std::string d = describeNonDefault(
      envOf({{"TENANTQOS_NSOCKS", "4"}, {"TENANTQOS_RATE", "1Gbps"}, {"TENANTQOS_TENANT", ""}}));
  EXPECT_EQ(d, "TENANTQOS_RATE=1Gbps");
}

}  // namespace
}  // namespace tq::plugin
