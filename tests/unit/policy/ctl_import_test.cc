// `tenantqosctl import volcano`'s own flags; the mapping itself is volcano_import_test.cc.
#include "policy/ctl_import.h"

#include <gtest/gtest.h>

#include "ctl_test_util.h"

namespace tq::policy::ctl {
namespace {

using testing::CtlRun;
using testing::runCtlWith;

TEST(CtlImportTest, TierCapacities) {
  VolcanoImportOptions o;
  EXPECT_EQ(parseTierCapacities("1=400Gbps,2=800Gbps", &o), "");
  ASSERT_EQ(o.tier_capacity.size(), 2u);
  EXPECT_EQ(o.tier_capacity.at(1), 400'000'000'000u / 8);
  EXPECT_EQ(o.tier_capacity.at(2), 800'000'000'000u / 8);
  for (const auto& [text, want] :
       {std::pair{"1", "\"1\" is not TIER=RATE"},
        std::pair{"x=1Gbps", "\"x=1Gbps\" is not TIER=RATE"},
        std::pair{"-1=1Gbps", "is not TIER=RATE"}, std::pair{"1=0Gbps", "the rate must be above 0"},
        std::pair{"1=fast", "\"1=fast\": "}, std::pair{"1=1Gbps,", "\"\" is not TIER=RATE"}}) {
    VolcanoImportOptions bad;
    EXPECT_NE(parseTierCapacities(text, &bad).find(want), std::string::npos) << text;
  }
}

TEST(CtlImportTest, UsageErrorsAndUnreadableFiles) {
  CtlRun r = runCtlWith({"import", "volcano"});
  EXPECT_EQ(r.rc, kExitUsage);
  EXPECT_NE(r.err.find("import volcano needs -f FILE"), std::string::npos) << r.err;
  r = runCtlWith({"import", "volcano", "-f", "q.yaml", "--capacity", "lots"});
  EXPECT_EQ(r.rc, kExitUsage);
  EXPECT_NE(r.err.find("--capacity: "), std::string::npos) << r.err;
  r = runCtlWith({"import", "volcano", "-f", "q.yaml", "--tier-capacity", "1"});
  EXPECT_EQ(r.rc, kExitUsage);
  EXPECT_NE(r.err.find("--tier-capacity: \"1\" is not TIER=RATE"), std::string::npos) << r.err;
  r = runCtlWith({"import", "volcano", "-f", "/nonexistent/q.yaml"});
  EXPECT_EQ(r.rc, kExitRejected);
  EXPECT_NE(r.err.find("tenantqosctl: import volcano: /nonexistent/q.yaml: "), std::string::npos)
      << r.err;
  r = runCtlWith({"import", "volcano", "-f", "-", "--nodes", "/nonexistent/nodes.yaml"});
  EXPECT_EQ(r.rc, kExitRejected);
  EXPECT_NE(r.err.find("/nonexistent/nodes.yaml"), std::string::npos) << r.err;
}

TEST(CtlImportTest, StandardInputIsReadWhole) {
  const std::string queue =
      "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata:\n  name: team-a\n"
      "  annotations:\n    tenantqos.io/guarantee: 10Gbps\n    tenantqos.io/limit: 20Gbps\n"
      "spec:\n  weight: 2\n";
  CtlRun r = runCtlWith({"import", "volcano", "-f", "-", "--capacity", "100Gbps"}, queue);
  EXPECT_EQ(r.rc, kExitOk) << r.err;
  EXPECT_NE(r.out.find("name: team-a"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("volcanoQueues: [team-a]"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace tq::policy::ctl
