#include "policy/volcano_import.h"

#include <gtest/gtest.h>

#include <sstream>

#include "common/file_util.h"
#include "policy/ctl.h"
#include "test_util.h"

namespace tq::policy {
namespace {

const std::string kQueues = TQ_SOURCE_DIR "/tests/unit/policy/testdata/volcano-queues.yaml";

std::string queuesText() {
  auto text = readFile(kQueues, kMaxPolicyBytes);
  EXPECT_TRUE(text.ok()) << text.status().message();
  return text.ok() ? *text : "";
}

std::string errorsText(const std::vector<PolicyError>& errors) {
  std::string s;
  for (const PolicyError& e : errors) s += e.toString() + "\n";
  return s;
}

// The source articles' two queues (weight 2 vs 1) become examples/policy.yaml's two tenants.
TEST(VolcanoImport, TheArticlesTwoQueues) {
  VolcanoImport r = importVolcanoQueues(queuesText(), "queues.yaml", {"fabric", 12'500'000'000});
  ASSERT_TRUE(r.errors.empty()) << errorsText(r.errors);
  EXPECT_TRUE(r.todos.empty());
  ParsedPolicy p = parsePolicyYaml(r.yaml, "import");
  ASSERT_TRUE(p.ok()) << errorsText(p.errors) << r.yaml;
  ParsedPolicy example = loadPolicyFile(TQ_SOURCE_DIR "/examples/policy.yaml");
  ASSERT_TRUE(example.ok());
  ASSERT_EQ(p.policy.tenants.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const TenantSpec& got = p.policy.tenants[i];
    const TenantSpec& want = example.policy.tenants[i];
    EXPECT_EQ(got.name, want.name);
    EXPECT_EQ(got.volcano_queues, std::vector<std::string>{want.name});
    EXPECT_EQ(got.weight, want.weight);
    EXPECT_EQ(got.guarantee_bytes_per_second, want.guarantee_bytes_per_second);
    EXPECT_EQ(got.limit_bytes_per_second, want.limit_bytes_per_second);
    EXPECT_EQ(got.service_level, want.service_level);
    EXPECT_EQ(got.dscp, want.dscp);
  }
  EXPECT_EQ(p.policy.tenants[0].weight, 2u);
  EXPECT_EQ(p.policy.tenants[1].weight, 1u);
  // What the import writes is the canonical form (apart from its header comment).
  EXPECT_NE(r.yaml.find(toYaml(p.policy)), std::string::npos) << r.yaml;
}

TEST(VolcanoImport, MissingAnnotationsAndCapacityAreTodos) {
  std::string text = queuesText();
  text.erase(text.find("    tenantqos.io/limit: 40Gbps\n"), 31);  // tenant-b: no limit
  VolcanoImport r = importVolcanoQueues(text, "q.yaml", {});
  ASSERT_TRUE(r.errors.empty()) << errorsText(r.errors);
  ASSERT_EQ(r.todos.size(), 2u);
  EXPECT_EQ(r.todos[0], "queue \"tenant-b\": no tenantqos.io/limit annotation: set the rate");
  EXPECT_EQ(r.todos[1], "link \"fabric\": set its capacity");
  EXPECT_NE(r.yaml.find("# TODO: no tenantqos.io/limit annotation"), std::string::npos);
  EXPECT_NE(r.yaml.find("    limit: TODO\n"), std::string::npos);
  EXPECT_FALSE(parsePolicyYaml(r.yaml, "x").ok()) << "a skeleton with TODOs must not validate";
}

TEST(VolcanoImport, BadValuesAreTodosWithTheReason) {
  std::string text = queuesText();
  text.replace(text.find("40Gbps"), 6, "lots");
  text.replace(text.find("weight: 2"), 9, "weight: 0");
  VolcanoImport r = importVolcanoQueues(text, "q.yaml", {"fabric", 1'000'000'000});
  ASSERT_EQ(r.todos.size(), 2u) << r.yaml;
  EXPECT_NE(r.todos[0].find("spec.weight \"0\" is not an integer in 1..10000"), std::string::npos);
  EXPECT_NE(r.todos[1].find("tenantqos.io/guarantee \"lots\""), std::string::npos);
}

TEST(VolcanoImport, ListsAndDefaultWeight) {
  const std::string list =
      "apiVersion: v1\nkind: List\nitems:\n"
      "  - apiVersion: scheduling.volcano.sh/v1beta1\n    kind: Queue\n"
      "    metadata: {name: research, annotations: {tenantqos.io/guarantee: 1Gbps,"
      " tenantqos.io/limit: 2Gbps}}\n"
      "    spec: {reclaimable: true}\n";
  VolcanoImport r = importVolcanoQueues(list, "l.yaml", {"fabric", 1'000'000'000});
  ASSERT_TRUE(r.errors.empty()) << errorsText(r.errors);
  ParsedPolicy p = parsePolicyYaml(r.yaml, "import");
  ASSERT_TRUE(p.ok()) << errorsText(p.errors);
  EXPECT_EQ(p.policy.tenants[0].weight, 1u);  // Volcano's default
}

TEST(VolcanoImport, UnusableInputIsAnErrorWithItsPosition) {
  auto r = importVolcanoQueues("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n",
                               "d.yaml", {});
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].toString(),
            "d.yaml:1:1: kind: not a Volcano Queue or HyperNode (apiVersion \"apps/v1\", kind "
            "\"Deployment\"; expected scheduling.volcano.sh/v1beta1 Queue or "
            "topology.volcano.sh/v1alpha1 HyperNode)");
  EXPECT_TRUE(r.yaml.empty());
  r = importVolcanoQueues("a: [", "s.yaml", {});
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].field, "(yaml)");
  std::string twice = queuesText() + "---\n" + queuesText().substr(queuesText().find("apiV"));
  r = importVolcanoQueues(twice, "t.yaml", {});
  ASSERT_FALSE(r.errors.empty());
  EXPECT_NE(r.errors[0].reason.find("queue \"tenant-a\" is given twice"), std::string::npos);
  r = importVolcanoQueues(
      "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: 'a b#c'}\n",
      "n.yaml", {});
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_NE(r.errors[0].reason.find("not a Kubernetes object name"), std::string::npos);
}

using testing::ctl;

TEST(VolcanoImport, CtlExitCodes) {
  std::string out, err;
  EXPECT_EQ(ctl({"import", "volcano", "-f", kQueues, "--capacity", "100Gbps"}, &out, &err), 0)
      << err;
  EXPECT_NE(out.find("volcanoQueues: [tenant-b]"), std::string::npos);
  EXPECT_EQ(err, "");
  // Without a capacity: a TODO; fine by default, exit 1 under --strict.
  EXPECT_EQ(ctl({"import", "volcano", "-f", kQueues}, &out, &err), 0);
  EXPECT_EQ(err, "tenantqosctl: TODO: link \"fabric\": set its capacity\n");
  EXPECT_EQ(ctl({"import", "volcano", "-f", kQueues, "--strict"}, &out, &err), 1);
  // Complete but not admissible: 60 Gbit/s of guarantees on a 50 Gbit/s link.
  EXPECT_EQ(ctl({"import", "volcano", "-f", kQueues, "--capacity", "50Gbps"}, &out, &err), 1);
  EXPECT_NE(err.find("admission"), std::string::npos) << err;
  EXPECT_EQ(ctl({"import", "kueue", "-f", kQueues}, &out, &err), 2);
}

}  // namespace
}  // namespace tq::policy
