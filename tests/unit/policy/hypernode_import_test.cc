// Volcano HyperNodes -> the policy's sharedLinks (policy/hypernode_import.h), through
// importVolcanoQueues (the one entry point of `tenantqosctl import volcano`) and the CLI.
#include "policy/hypernode_import.h"

#include <gtest/gtest.h>

#include <sstream>

#include "common/file_util.h"
#include "policy/ctl.h"
#include "policy/volcano_import.h"
#include "test_util.h"

namespace tq::policy {
namespace {

const std::string kDir = TQ_SOURCE_DIR "/tests/unit/policy/testdata/";

std::string read(const std::string& name) {
  auto text = readFile(kDir + name, kMaxPolicyBytes);
  EXPECT_TRUE(text.ok()) << text.status().message();
  return text.ok() ? *text : "";
}

std::string lines(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += x + "\n";
  return s;
}

VolcanoImportOptions withNodes() {
  VolcanoImportOptions o;
  o.capacity = 12'500'000'000;
  o.tier_capacity = {{1, 12'500'000'000}, {2, 18'750'000'000}};
  o.nodes_yaml = read("volcano-nodes.yaml");
  o.nodes_source = "nodes.yaml";
  return o;
}

TEST(HyperNodeImport, TiersBecomeSharedLinksAndHyperNodesTheirGroups) {
  // Queues and HyperNodes in one input, as `kubectl get queues,hypernodes -o yaml` gives them.
  VolcanoImport r =
      importVolcanoQueues(read("volcano-queues.yaml") + "---\n" + read("volcano-hypernodes.yaml"),
                          "v.yaml", withNodes());
  ASSERT_TRUE(r.errors.empty()) << r.errors[0].toString();
  EXPECT_TRUE(r.todos.empty()) << lines(r.todos);
  EXPECT_EQ(lines(r.unmapped),
            "tier-3: HyperNode \"spine\" holds every node: no link leaves it, left out\n"
            "tier-3: no group left: the tier is not a shared link\n");
  ParsedPolicy p = parsePolicyYaml(r.yaml, "out");
  ASSERT_TRUE(p.ok()) << p.status().message() << "\n" << r.yaml;
  ASSERT_EQ(p.policy.shared_links.size(), 2u);
  const SharedLinkSpec& leaves = p.policy.shared_links[0];
  EXPECT_EQ(leaves.name, "tier-1");
  EXPECT_EQ(leaves.capacity_bytes_per_second, 12'500'000'000u);
  ASSERT_EQ(leaves.groups.size(), 4u);
  // Exact names, a regex, matchLabels and matchExpressions against the cluster's nodes.
  EXPECT_EQ(leaves.groups[0].nodes, (std::vector<std::string>{"node-1", "node-2"}));
  EXPECT_EQ(leaves.groups[1].nodes, (std::vector<std::string>{"node-3", "node-4"}));
  EXPECT_EQ(leaves.groups[2].nodes, (std::vector<std::string>{"node-5", "node-6"}));
  EXPECT_EQ(leaves.groups[2].capacity_bytes_per_second, 25'000'000'000u);  // its annotation
  EXPECT_EQ(leaves.groups[3].nodes, (std::vector<std::string>{"node-7", "node-8"}));
  // Pods: their member HyperNodes' nodes (by name, and by regex over HyperNode names).
  const SharedLinkSpec& pods = p.policy.shared_links[1];
  EXPECT_EQ(pods.name, "tier-2");
  ASSERT_EQ(pods.groups.size(), 2u);
  EXPECT_EQ(pods.groups[0].name, "pod-1");
  EXPECT_EQ(pods.groups[0].nodes,
            (std::vector<std::string>{"node-1", "node-2", "node-3", "node-4"}));
  EXPECT_EQ(pods.groups[1].nodes,
            (std::vector<std::string>{"node-5", "node-6", "node-7", "node-8"}));
  // The queues' tenants are there too.
  EXPECT_EQ(p.policy.tenants.size(), 2u);
}

TEST(HyperNodeImport, WithoutTheClusterNodesRegexAndLabelMembersAreListedAsNotMapped) {
  VolcanoImportOptions o;
  o.tier_capacity = {{1, 12'500'000'000}};
  VolcanoImport r = importVolcanoQueues(read("volcano-hypernodes.yaml"), "h.yaml", o);
  ASSERT_TRUE(r.errors.empty()) << r.errors[0].toString();
  const std::string u = lines(r.unmapped);
  EXPECT_NE(u.find("HyperNode \"leaf-2\": member 0: regexMatch needs the cluster's nodes "
                   "(--nodes FILE)"),
            std::string::npos)
      << u;
  EXPECT_NE(u.find("HyperNode \"leaf-3\": member 0: labelMatch needs the cluster's nodes"),
            std::string::npos)
      << u;
  EXPECT_NE(u.find("tier-1: HyperNode \"leaf-2\" has no nodes it could resolve: left out"),
            std::string::npos)
      << u;
  // Tier 2 has no capacity: a TODO naming both ways to give one.
  EXPECT_EQ(lines(r.todos),
            "shared link \"tier-2\": the uplinks' capacity (--tier-capacity 2=RATE, or the "
            "annotation tenantqos.io/uplink-capacity on each HyperNode)\n");
  EXPECT_NE(r.yaml.find("    capacity: TODO  # TODO:"), std::string::npos) << r.yaml;
  // HyperNodes only: no links, no tenants, and no TODO for the link's capacity.
  EXPECT_NE(r.yaml.find("links: []\n"), std::string::npos);
  EXPECT_NE(r.yaml.find("tenants: []\n"), std::string::npos);
}

const char* const kHead = "apiVersion: topology.volcano.sh/v1alpha1\nkind: HyperNode\n";

std::string hypernode(const std::string& name, int tier, const std::string& members) {
  return std::string(kHead) + "metadata: {name: " + name +
         "}\nspec:\n  tier: " + std::to_string(tier) + "\n  members:\n" + members + "---\n";
}
std::string node(const std::string& name) {
  return "    - {type: Node, selector: {exactMatch: {name: " + name + "}}}\n";
}

TEST(HyperNodeImport, WhatCannotBeMappedIsListedAndLeftOut) {
  VolcanoImportOptions o = withNodes();
  const std::string text =
      hypernode("a", 1, node("node-1") + node("node-2")) +
      hypernode("b", 1, node("node-2") + node("node-3")) +  // node-2 again in tier 1
      hypernode("c", 2,
                "    - {type: HyperNode, selector: {exactMatch: {name: nowhere}}}\n"
                "    - {type: HyperNode, selector: {exactMatch: {name: d}}}\n"
                "    - {type: HyperNode, selector: {exactMatch: {name: a}}}\n") +
      hypernode("d", 2, "    - {type: HyperNode, selector: {exactMatch: {name: c}}}\n") +
      hypernode("e", 1,
                "    - {type: Node, selector: {regexMatch: {pattern: '(a)\\1'}}}\n"
                "    - {type: Node, selector: {regexMatch: {pattern: '(?i)NODE'}}}\n"
                "    - {type: Switch, selector: {exactMatch: {name: x}}}\n"
                "    - {type: Node, selector: {}}\n"
                "    - {type: Node, selector: {labelMatch: {matchExpressions: "
                "[{key: k, operator: Gt, values: ['1']}]}}}\n") +
      hypernode("f.g", 1, node("node-8"));
  VolcanoImport r = importVolcanoQueues(text, "h.yaml", o);
  ASSERT_TRUE(r.errors.empty()) << r.errors[0].toString();
  const std::string u = lines(r.unmapped);
  for (const char* want : {
           "tier-1: node \"node-2\" is in HyperNodes \"a\" and \"b\": kept in \"a\"",
           "HyperNode \"c\": member 0: unknown HyperNode \"nowhere\"",
           "is its own member through others (a cycle)",
           "HyperNode \"e\": member 0: regexMatch \"(a)\\1\": backreferences are not supported",
           "HyperNode \"e\": member 1: regexMatch \"(?i)NODE\": ",
           "HyperNode \"e\": member 2 has type \"Switch\" (Node or HyperNode expected)",
           "HyperNode \"e\": member 3: the selector needs exactly one of exactMatch, "
           "regexMatch, labelMatch",
           "labelMatch: unknown operator \"Gt\"",
           "tier-1: HyperNode \"f.g\" is not a DNS-1123 label: group \"f-g\"",
       }) {
    EXPECT_NE(u.find(want), std::string::npos) << "missing: " << want << "\ngot:\n" << u;
  }
  // The rest is a valid topology.
  ParsedPolicy p = parsePolicyYaml(r.yaml, "out");
  ASSERT_TRUE(p.ok()) << p.status().message() << "\n" << r.yaml;
  EXPECT_EQ(p.policy.shared_links[0].groups[1].nodes, (std::vector<std::string>{"node-3"}));
  EXPECT_EQ(p.policy.shared_links[0].groups.back().name, "f-g");
}

TEST(HyperNodeImport, MalformedHyperNodesAreErrorsWithTheirPosition) {
  auto r = importVolcanoQueues(std::string(kHead) + "metadata: {name: a}\nspec: {tier: high}\n",
                               "h.yaml", {});
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].toString(),
            "h.yaml:4:14: spec.tier: HyperNode \"a\": spec.tier must be an integer 0..1000, got "
            "\"high\"");
  r = importVolcanoQueues(hypernode("a", 1, node("n")) + hypernode("a", 1, node("m")), "h.yaml",
                          {});
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_NE(r.errors[0].reason.find("HyperNode \"a\" is given twice"), std::string::npos);
  r = importVolcanoQueues("apiVersion: v2\nkind: HyperNode\nmetadata: {name: a}\nspec: {tier: 1}\n",
                          "h.yaml", {});
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_NE(r.errors[0].reason.find("not a Volcano HyperNode"), std::string::npos);
  VolcanoImportOptions bad;
  bad.nodes_yaml = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n";
  bad.nodes_source = "nodes.yaml";
  r = importVolcanoQueues(hypernode("a", 1, node("n")), "h.yaml", bad);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].toString(), "nodes.yaml:1:1: kind: not a Node (kubectl get nodes -o yaml)");
}

TEST(HyperNodeImport, DeepNestingIsBoundedNotAStackOverflow) {
  // A chain of 2000 HyperNodes, each the only member of the next, top first (so that resolving
  // the first one walks the whole chain).
  std::string text;
  for (int i = 1999; i >= 1; --i) {
    text += hypernode("h" + std::to_string(i), 2,
                      "    - {type: HyperNode, selector: {exactMatch: {name: h" +
                          std::to_string(i - 1) + "}}}\n");
  }
  text += hypernode("h0", 1, node("node-1"));
  VolcanoImport r = importVolcanoQueues(text, "deep.yaml", {});
  ASSERT_TRUE(r.errors.empty()) << r.errors[0].toString();
  EXPECT_NE(lines(r.unmapped).find("is nested more than 32 HyperNodes deep"), std::string::npos);
}

using testing::ctl;

TEST(HyperNodeImport, CtlFlagsAndExitCodes) {
  std::string out, err;
  const std::string hn = kDir + "volcano-hypernodes.yaml";
  EXPECT_EQ(ctl({"import", "volcano", "-f", hn, "--tier-capacity", "1=100Gbps,2=150Gbps", "--nodes",
                 kDir + "volcano-nodes.yaml"},
                &out, &err),
            0)
      << err;
  EXPECT_NE(out.find("  - name: tier-2\n    capacity: 150Gbps\n"), std::string::npos) << out;
  EXPECT_EQ(err,
            "tenantqosctl: not mapped: tier-3: HyperNode \"spine\" holds every node: no link "
            "leaves it, left out\n"
            "tenantqosctl: not mapped: tier-3: no group left: the tier is not a shared link\n");
  // Something not mapped fails --strict.
  EXPECT_EQ(ctl({"import", "volcano", "-f", hn, "--tier-capacity", "1=100Gbps,2=150Gbps", "--nodes",
                 kDir + "volcano-nodes.yaml", "--strict"},
                &out, &err),
            1);
  EXPECT_EQ(ctl({"import", "volcano", "-f", hn, "--tier-capacity", "1:100Gbps"}, &out, &err), 2);
  EXPECT_NE(err.find("--tier-capacity: \"1:100Gbps\" is not TIER=RATE"), std::string::npos) << err;
  EXPECT_EQ(ctl({"import", "volcano", "-f", hn, "--nodes", "/nonexistent"}, &out, &err), 1);
  EXPECT_NE(err.find("/nonexistent"), std::string::npos) << err;
}

}  // namespace
}  // namespace tq::policy
