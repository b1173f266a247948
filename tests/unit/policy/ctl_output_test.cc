// What tenantqosctl prints: times, the JSON of a policy, tables and diffs.
#include "policy/ctl_output.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sstream>

#include "policy/policy_file.h"

namespace tq::policy::ctl {
namespace {

TEST(CtlOutputTest, TimesAndAges) {
  EXPECT_EQ(timeText(0), "-");
  EXPECT_EQ(timeText(-5), "-");
  EXPECT_EQ(timeText(1'700'000'000'000), "2023-11-14T22:13:20Z");
  const int64_t now = 1'700'000'000'000;
  EXPECT_EQ(ageText(0, now), "-");
  EXPECT_EQ(ageText(now - 42'000, now), "42s");
  EXPECT_EQ(ageText(now - 119'999, now), "119s");
  EXPECT_EQ(ageText(now - 5 * 60'000, now), "5m");
  EXPECT_EQ(ageText(now - 3 * 3'600'000, now), "3h");
  EXPECT_EQ(ageText(now + 10'000, now), "0s") << "a clock ahead of ours is not a negative age";
}

TEST(CtlOutputTest, PolicyJsonIsJsonWithIntegerRates) {
  ParsedPolicy p = loadPolicyFile(std::string(TQ_SOURCE_DIR) + "/examples/policy.yaml");
  ASSERT_TRUE(p.ok());
  PolicyRecord r;
  r.version = 7;
  r.applied_by = "alice \"admin\"";
  r.applied_at_unix_ms = 1'700'000'000'000;
  r.policy = p.policy;
  const nlohmann::json j = nlohmann::json::parse(policyJson(r));
  EXPECT_EQ(j["version"], 7);
  EXPECT_EQ(j["appliedBy"], "alice \"admin\"");
  EXPECT_EQ(j["appliedAt"], "2023-11-14T22:13:20Z");
  EXPECT_EQ(j["kind"], "TenantPolicy");
  ASSERT_EQ(j["links"].size(), p.policy.links.size());
  EXPECT_EQ(j["links"][0]["capacityBytesPerSecond"], 100'000'000'000 / 8);
  ASSERT_EQ(j["tenants"].size(), 2u);
  EXPECT_EQ(j["tenants"][0]["name"], "tenant-a");
  EXPECT_EQ(j["tenants"][0]["guaranteeBytesPerSecond"], 40'000'000'000 / 8);
  EXPECT_EQ(j["tenants"][0]["unixGroup"], "7400");

  PolicyRecord empty;
  const nlohmann::json e = nlohmann::json::parse(policyJson(empty));
  EXPECT_TRUE(e["tenants"].empty());
  EXPECT_EQ(e["appliedAt"], "-");
}

TEST(CtlOutputTest, TablesAlignAndEscapeWhatOthersWrote) {
  std::ostringstream out;
  printTable(out, {{"NODE", "TENANT"}, {"node-1", "a"}, {"n\x1b[2J", "tenant-b"}, {"x"}});
  EXPECT_EQ(out.str(),
            "NODE      TENANT\n"
            "node-1    a\n"
            "n\\x1b[2J  tenant-b\n"
            "x\n");
  // A cell with a newline cannot start a forged row.
  std::ostringstream forged;
  printTable(forged, {{"A", "B"}, {"x\nTOTAL", "y"}});
  EXPECT_EQ(forged.str().find("\nTOTAL"), std::string::npos) << forged.str();
}

TEST(CtlOutputTest, DiffShowsChangesAndCountsUnchangedTenants) {
  PolicyDiff d;
  d.links = {{"fabric", ChangeKind::kChanged, {"capacity 100Gbps -> 200Gbps"}}};
  d.tenants = {{"tenant-c", ChangeKind::kAdded, {"guarantee 1Gbps", "ignored"}},
               {"tenant-a", ChangeKind::kUnchanged, {}},
               {"tenant-b", ChangeKind::kUnchanged, {}},
               {"old", ChangeKind::kRemoved, {}}};
  std::ostringstream out;
  printDiff(out, d);
  EXPECT_EQ(out.str(),
            "~ link fabric: changed\n"
            "    capacity 100Gbps -> 200Gbps\n"
            "+ tenant tenant-c: added (guarantee 1Gbps)\n"
            "- tenant old: removed\n"
            "  (2 tenants unchanged)\n");
}

}  // namespace
}  // namespace tq::policy::ctl
