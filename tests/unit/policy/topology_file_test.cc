// The topology part of the policy file (policy/topology_file.h): shared links, their groups, the
// tenants' own values on them, admission per shared link, canonical YAML and JSON.
#include "policy/topology_file.h"

#include <gtest/gtest.h>

#include <sstream>

#include "common/capacity.h"
#include "common/topology.h"
#include "policy/policy_diff.h"
#include "policy/policy_file.h"
#include "test_util.h"

namespace tq::policy {
namespace {

// Line numbers below refer to this document (1-based). The article's scenario on the testbed:
// two leaves of two nodes each under one 1 Gbit/s spine, tenant-a 400/600 Mbit/s weight 2.
const char* const kBase =
    "apiVersion: tenantqos/v1\n"       // 1
    "kind: TenantPolicy\n"             // 2
    "links:\n"                         // 3
    "  - name: fabric\n"               // 4
    "    capacity: 1Gbps\n"            // 5
    "    headroom: 5%\n"               // 6
    "sharedLinks:\n"                   // 7
    "  - name: leaf-uplink\n"          // 8
    "    capacity: 1Gbps\n"            // 9
    "    headroom: 5%\n"               // 10
    "    groups:\n"                    // 11
    "      - name: leaf1\n"            // 12
    "        nodes: [node1, node2]\n"  // 13
    "      - name: leaf2\n"            // 14
    "        nodes: [node3, node4]\n"  // 15
    "tenants:\n"                       // 16
    "  - name: tenant-a\n"             // 17
    "    link: fabric\n"               // 18
    "    guarantee: 400Mbps\n"         // 19
    "    limit: 600Mbps\n"             // 20
    "    weight: 2\n"                  // 21
    "    serviceLevel: 1\n"            // 22
    "    dscp: 26\n"                   // 23
    "  - name: noisy\n"                // 24
    "    link: fabric\n"               // 25
    "    guarantee: 0\n"               // 26
    "    limit: 1Gbps\n"               // 27
    "    serviceLevel: 2\n"            // 28
    "    dscp: 18\n"                   // 29
    "    sharedLinks:\n"               // 30
    "      - link: leaf-uplink\n"      // 31
    "        limit: 500Mbps\n"         // 32
    "        weight: 3\n";             // 33

std::string withLine(int n, const std::string& text, const std::string& base = kBase) {
  return testing::replaceLine(base, n, text);
}

using testing::allErrors;
using testing::expectOnlyError;
using testing::parse;

TEST(TopologyFile, BaseDocumentParses) {
  ParsedPolicy p = parse(kBase);
  ASSERT_TRUE(p.ok()) << allErrors(p);
  ASSERT_EQ(p.policy.shared_links.size(), 1u);
  const SharedLinkSpec& l = p.policy.shared_links[0];
  EXPECT_EQ(l.name, "leaf-uplink");
  EXPECT_EQ(l.capacity_bytes_per_second, 125'000'000u);
  EXPECT_EQ(l.headroom_percent, 5.0);
  EXPECT_FALSE(l.rail.has_value());
  ASSERT_EQ(l.groups.size(), 2u);
  EXPECT_EQ(l.groups[1].name, "leaf2");
  EXPECT_EQ(l.groups[1].nodes, (std::vector<std::string>{"node3", "node4"}));
  EXPECT_EQ(l.groups[1].capacity_bytes_per_second, 0u);  // the shared link's
  EXPECT_TRUE(p.policy.tenants[0].shared_links.empty());
  ASSERT_EQ(p.policy.tenants[1].shared_links.size(), 1u);
  const TenantLinkValues& v = p.policy.tenants[1].shared_links[0];
  EXPECT_EQ(v.link, "leaf-uplink");
  EXPECT_FALSE(v.guarantee_bytes_per_second.has_value());
  EXPECT_EQ(v.limit_bytes_per_second, 62'500'000u);
  EXPECT_EQ(v.weight, 3u);
}

TEST(TopologyFile, ATenantsShareIsItsOwnValuesUnlessItSetsOthers) {
  ParsedPolicy p = parse(kBase);
  ASSERT_TRUE(p.ok()) << allErrors(p);
  EXPECT_EQ(tenantShareOn(p.policy.tenants[0], "leaf-uplink"),
            (LinkShare{50'000'000, 75'000'000, 2}));
  EXPECT_EQ(tenantShareOn(p.policy.tenants[1], "leaf-uplink"), (LinkShare{0, 62'500'000, 3}));
  // A class the tenant has no entry for: its own values.
  EXPECT_EQ(tenantShareOn(p.policy.tenants[1], "spine"), (LinkShare{0, 125'000'000, 1}));
}

TEST(TopologyFile, ShippedExampleIsValid) {
  ParsedPolicy p = loadPolicyFile(std::string(TQ_SOURCE_DIR) + "/examples/fabric-policy.yaml");
  ASSERT_TRUE(p.ok()) << allErrors(p);
  EXPECT_EQ(p.policy.shared_links.size(), 2u);
}

TEST(TopologyFile, NoTopologyIsTodaysPolicy) {
  std::string plain;
  std::istringstream in(kBase);
  std::string line;
  for (int i = 1; std::getline(in, line); ++i) {
    if ((i >= 7 && i <= 15) || i >= 30) continue;
    plain += line + "\n";
  }
  ParsedPolicy q = parse(plain);
  ASSERT_TRUE(q.ok()) << allErrors(q);
  EXPECT_TRUE(q.policy.shared_links.empty());
  EXPECT_EQ(toYaml(q.policy).find("sharedLinks"), std::string::npos);
}

TEST(TopologyFile, ANodeInTwoGroupsOfOneSharedLinkIsRejectedWhereItIsListedAgain) {
  expectOnlyError(parse(withLine(15, "        nodes: [node3, node2]")), 15, 24,
                  "sharedLinks[0].groups[1].nodes[1]",
                  "node \"node2\" is in group \"leaf1\" (sharedLinks[0].groups[0], line 12) "
                  "already; a node is in at most one group of a shared link");
  expectOnlyError(parse(withLine(15, "        nodes: [node3, node3]")), 15, 24,
                  "sharedLinks[0].groups[1].nodes[1]", "node \"node3\" is listed twice");
}

TEST(TopologyFile, ANodeMayBeInOneGroupOfEachSharedLink) {
  ParsedPolicy p = parse(withLine(15,
                                  "        nodes: [node3, node4]\n"
                                  "  - name: spine\n"
                                  "    capacity: 2Gbps\n"
                                  "    groups:\n"
                                  "      - name: pod1\n"
                                  "        nodes: [node1, node2, node3, node4]"));
  EXPECT_TRUE(p.ok()) << allErrors(p);
}

TEST(TopologyFile, AGroupWithNoCapacityIsRejected) {
  // Neither the shared link nor its groups give one: one error per group, at the group.
  ParsedPolicy none = parse(withLine(9, ""));
  ASSERT_EQ(none.errors.size(), 2u) << allErrors(none);
  EXPECT_EQ(none.errors[0].toString(),
            "p.yaml:11:9: sharedLinks[0].groups[0]: group \"leaf1\" has no capacity: set capacity "
            "on the group or on shared link \"leaf-uplink\"");
  EXPECT_EQ(none.errors[1].field, "sharedLinks[0].groups[1]");
  // A group's own capacity is enough.
  ParsedPolicy p = parse(withLine(9, "",
                                  withLine(13,
                                           "        nodes: [node1, node2]\n"
                                           "        capacity: 1Gbps",
                                           withLine(15,
                                                    "        nodes: [node3, node4]\n"
                                                    "        capacity: 2Gbps"))));
  ASSERT_TRUE(p.ok()) << allErrors(p);
  EXPECT_EQ(groupCapacity(p.policy.shared_links[0], p.policy.shared_links[0].groups[1]),
            250'000'000u);
  expectOnlyError(parse(withLine(9, "    capacity: 0")), 9, 15, "sharedLinks[0].capacity",
                  "must be greater than 0");
}

TEST(TopologyFile, AGroupWithOnlyTheSecondGroupUncoveredNamesThatGroup) {
  // leaf1 has its own capacity, leaf2 has none and the shared link none.
  ParsedPolicy p = parse(withLine(9, "",
                                  withLine(13,
                                           "        nodes: [node1, node2]\n"
                                           "        capacity: 1Gbps")));
  expectOnlyError(p, 14, 9, "sharedLinks[0].groups[1]", "group \"leaf2\" has no capacity");
}

TEST(TopologyFile, GuaranteesOverASharedLinksCapacityAreRejected) {
  // Inherited: on an 800 Mbit/s uplink tenant-a's 400 Mbit/s and noisy's 400 (both within the
  // NICs' 950) are over its 760.
  const std::string over =
      withLine(9, "    capacity: 800Mbps", withLine(26, "    guarantee: 400Mbps"));
  expectOnlyError(parse(over), 26, 16, "tenants[1].guarantee",
                  "admission: guarantees on shared link \"leaf-uplink\" add up to 800Mbps, more "
                  "than the 760Mbps it admits (group \"leaf1\": capacity 800Mbps minus 5% "
                  "headroom;");
  // The error says the guarantee there is the tenant's own and how to set another.
  EXPECT_NE(parse(over).errors.at(0).reason.find(
                "a tenants[].sharedLinks entry for \"leaf-uplink\" sets another"),
            std::string::npos);
  // Set on the shared link: reported at that entry; 0 on the node link is fine.
  expectOnlyError(parse(withLine(32,
                                 "        guarantee: 551Mbps\n"
                                 "        limit: 600Mbps")),
                  32, 20, "tenants[1].sharedLinks[0].guarantee",
                  "add up to 951Mbps, more than the 950Mbps it admits");
  EXPECT_TRUE(parse(withLine(32,
                             "        guarantee: 550Mbps\n"
                             "        limit: 600Mbps"))
                  .ok());
}

TEST(TopologyFile, AdmissionUsesTheSmallestGroup) {
  // leaf2 is 500 Mbit/s: 400 + 0 fits its 475; a 100 Mbit/s guarantee for noisy does not.
  std::string doc = withLine(15,
                             "        nodes: [node3, node4]\n"
                             "        capacity: 500Mbps",
                             withLine(26, "    guarantee: 100Mbps"));
  ParsedPolicy p = parse(doc);
  ASSERT_EQ(p.errors.size(), 1u) << allErrors(p);
  EXPECT_NE(p.errors[0].reason.find("more than the 475Mbps it admits (group \"leaf2\""),
            std::string::npos)
      << allErrors(p);
  EXPECT_EQ(allocatableCapacity(parse(withLine(15,
                                               "        nodes: [node3, node4]\n"
                                               "        capacity: 500Mbps"))
                                    .policy.shared_links[0],
                                LinkGroupSpec{"x", {"n"}, 62'500'000}),
            59'375'000u);
}

TEST(TopologyFile, TenantValuesAreChecked) {
  expectOnlyError(parse(withLine(31, "      - link: leaf-uplnk")), 31, 15,
                  "tenants[1].sharedLinks[0].link",
                  "unknown shared link \"leaf-uplnk\" (defined: leaf-uplink)");
  expectOnlyError(parse(withLine(33,
                                 "        weight: 3\n"
                                 "      - link: leaf-uplink")),
                  34, 15, "tenants[1].sharedLinks[1].link",
                  "shared link \"leaf-uplink\" is given twice for this tenant");
  expectOnlyError(parse(withLine(32, "        limit: 2Gbps")), 32, 16,
                  "tenants[1].sharedLinks[0].limit",
                  "2Gbps exceeds the capacity of every group of shared link \"leaf-uplink\" "
                  "(largest 1Gbps)");
  expectOnlyError(parse(withLine(32, "        limit: 0")), 32, 16,
                  "tenants[1].sharedLinks[0].limit", "must be greater than 0");
  // A guarantee above the limit: the tenant's own 400 Mbit/s over a 300 Mbit/s limit there.
  expectOnlyError(parse(withLine(23,
                                 "    dscp: 26\n"
                                 "    sharedLinks: [{link: leaf-uplink, limit: 300Mbps}]")),
                  24, 46, "tenants[0].sharedLinks[0].limit",
                  "on shared link \"leaf-uplink\" the limit must be >= the guarantee (limit "
                  "300Mbps < guarantee 400Mbps (the tenant's))");
  expectOnlyError(parse(withLine(33, "        weight: 0")), 33, 17,
                  "tenants[1].sharedLinks[0].weight", "must be between 1 and 10000, got 0");
  expectOnlyError(parse(withLine(33, "        wieght: 3")), 33, 9,
                  "tenants[1].sharedLinks[0].wieght", "did you mean \"weight\"?");
  expectOnlyError(parse(withLine(31, "      - guarantee: 1Mbps")), 31, 9,
                  "tenants[1].sharedLinks[0].link", "required field missing");
}

TEST(TopologyFile, SharedLinkAndGroupFieldsAreChecked) {
  expectOnlyError(parse(withLine(8, "  - name: fabric", withLine(31, "      - link: fabric"))), 8,
                  11, "sharedLinks[0].name",
                  "\"fabric\" is also the name of a node link (links[0]); a name means one link");
  expectOnlyError(parse(withLine(14, "      - name: leaf1")), 14, 15,
                  "sharedLinks[0].groups[1].name",
                  "duplicate group name \"leaf1\" in shared link \"leaf-uplink\" (also "
                  "sharedLinks[0].groups[0], line 12)");
  expectOnlyError(parse(withLine(13, "        nodes: []")), 13, 16,
                  "sharedLinks[0].groups[0].nodes", "a group needs at least one node");
  expectOnlyError(parse(withLine(13, "        nodes: [Node_1]")), 13, 17,
                  "sharedLinks[0].groups[0].nodes[0]", "\"Node_1\" is not a Kubernetes node name");
  expectOnlyError(
      parse(withLine(11, "    groups: []",
                     withLine(12, "", withLine(13, "", withLine(14, "", withLine(15, "")))))),
      11, 13, "sharedLinks[0].groups", "a shared link needs at least one group");
  expectOnlyError(parse(withLine(10, "    headroom: 100%")), 10, 15, "sharedLinks[0].headroom",
                  "must be at least 0% and less than 100%");
  expectOnlyError(parse(withLine(10, "    rail: 256")), 10, 11, "sharedLinks[0].rail",
                  "must be between 0 and 255, got 256");
  expectOnlyError(parse(withLine(12, "      - name: leaf1\n        node: [x]")), 13, 9,
                  "sharedLinks[0].groups[0].node", "did you mean \"nodes\"?");
}

TEST(TopologyFile, CanonicalYamlRoundTrips) {
  std::string doc = withLine(10,
                             "    headroom: 5%\n"
                             "    rail: 3",
                             withLine(15,
                                      "        nodes: [node3, node4]\n"
                                      "        capacity: 2Gbps",
                                      withLine(33,
                                               "        weight: 3\n"
                                               "        guarantee: 1234567B/s")));
  ParsedPolicy p = parse(doc);
  ASSERT_TRUE(p.ok()) << allErrors(p);
  const std::string y = toYaml(p.policy);
  ParsedPolicy back = parsePolicyYaml(y, "canonical");
  ASSERT_TRUE(back.ok()) << allErrors(back) << y;
  EXPECT_EQ(back.policy, p.policy);
  EXPECT_EQ(toYaml(back.policy), y);
  EXPECT_NE(y.find("    rail: 3\n"), std::string::npos) << y;
  EXPECT_NE(y.find("        capacity: 2Gbps\n        nodes: [node3, node4]\n"), std::string::npos)
      << y;
}

TEST(TopologyFile, StructuredValidationHasNoPositionsAndTheSameRules) {
  ParsedPolicy p = parse(kBase);
  ASSERT_TRUE(p.ok()) << allErrors(p);
  PolicySpec s = p.policy;
  s.shared_links[0].groups[1].nodes.push_back("node1");
  s.shared_links[0].capacity_bytes_per_second = 0;  // structured: 0 is "not given"
  std::vector<PolicyError> errors = validatePolicy(s);
  ASSERT_EQ(errors.size(), 3u);
  EXPECT_EQ(errors[0].line, 0);
  std::string all;
  for (const auto& e : errors) all += e.toString() + "\n";
  EXPECT_NE(all.find("sharedLinks[0].groups[0]: group \"leaf1\" has no capacity"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("sharedLinks[0].groups[1].nodes[2]: node \"node1\" is in group \"leaf1\""),
            std::string::npos)
      << all;
  s = p.policy;
  s.shared_links.resize(kMaxSharedLinks + 1, s.shared_links[0]);
  errors = validatePolicy(s);
  ASSERT_FALSE(errors.empty());
  EXPECT_EQ(errors[0].field, "sharedLinks");
}

TEST(TopologyFile, JsonListsEverything) {
  ParsedPolicy p = parse(kBase);
  ASSERT_TRUE(p.ok()) << allErrors(p);
  EXPECT_EQ(tenantLinkValuesJson(p.policy.tenants[1].shared_links),
            "\"sharedLinks\": [{\"link\": \"leaf-uplink\", \"limitBytesPerSecond\": 62500000, "
            "\"weight\": 3}]");
  const std::string j = sharedLinksJson(p.policy.shared_links);
  EXPECT_NE(j.find("{\"name\": \"leaf-uplink\", \"capacityBytesPerSecond\": 125000000, "
                   "\"headroomPercent\": 5, \"groups\": [{\"name\": \"leaf1\", "
                   "\"capacityBytesPerSecond\": 0, \"nodes\": [\"node1\", \"node2\"]}"),
            std::string::npos)
      << j;
}

TEST(TopologyFile, DiffNamesSharedLinkAndGroupChanges) {
  ParsedPolicy a = parse(kBase);
  ParsedPolicy b = parse(withLine(15,
                                  "        nodes: [node3, node4, node5]\n"
                                  "      - name: leaf3\n"
                                  "        nodes: [node6]",
                                  withLine(9, "    capacity: 2Gbps")));
  ASSERT_TRUE(a.ok() && b.ok()) << allErrors(a) << allErrors(b);
  PolicyDiff d = diffPolicies(a.policy, b.policy);
  EXPECT_TRUE(d.hasChanges());
  ASSERT_EQ(d.shared_links.size(), 1u);
  EXPECT_EQ(d.shared_links[0].kind, ChangeKind::kChanged);
  EXPECT_EQ(d.shared_links[0].details,
            (std::vector<std::string>{"capacity: 1Gbps -> 2Gbps", "groups: +leaf3",
                                      "group leaf2: nodes +1 -0"}));
  EXPECT_EQ(summarizeDiff(d), "shared links ~leaf-uplink");
  PolicyDiff t = diffPolicies(a.policy, parse(withLine(33, "        weight: 4")).policy);
  ASSERT_EQ(t.tenants.size(), 2u);
  EXPECT_EQ(t.tenants[1].details,
            (std::vector<std::string>{"sharedLinks: [leaf-uplink limit 500Mbps weight 3] -> "
                                      "[leaf-uplink limit 500Mbps weight 4]"}));
  EXPECT_FALSE(diffPolicies(a.policy, a.policy).hasChanges());
}

}  // namespace
}  // namespace tq::policy
