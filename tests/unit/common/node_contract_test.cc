#include "common/node_contract.h"

#include <gtest/gtest.h>

namespace tq {
namespace {

TEST(NodeContractTest, PathsUnderTheRunDirectory) {
  EXPECT_EQ(attach::tenantsDir("/run/tq"), "/run/tq/tenants");
  EXPECT_EQ(attach::tenantDir("/run/tq", "a"), "/run/tq/tenants/a");
  EXPECT_EQ(attach::tenantSocketPath("/run/tq", "a"), "/run/tq/tenants/a/agent.sock");
  EXPECT_EQ(attach::nodeSocketPath("/run/tq"), "/run/tq/agent.sock");
  EXPECT_EQ(attach::trafficClassesPath("/run/tq"), "/run/tq/traffic-classes");
}

TEST(NodeContractTest, ThePluginsVariablesCarryItsPrefix) {
  const std::string prefix = kPluginEnvPrefix;
  EXPECT_EQ(std::string(kTenantEnv).rfind(prefix, 0), 0u);
  EXPECT_EQ(std::string(kRunDirEnv).rfind(prefix, 0), 0u);
  EXPECT_EQ(std::string(kDefaultRunDir).front(), '/');
}

}  // namespace
}  // namespace tq
