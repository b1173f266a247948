// The admission rules without a server; tests/functional/webhook_test.py drives the real
// server over HTTPS with AdmissionReview JSON.
#include "webhook/admission.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace tq::webhook {
namespace {

PolicySpec policy() {
  PolicySpec p;
  TenantSpec a, b;
  a.name = "tenant-a";
  a.namespaces = {"team-a"};
  a.volcano_queues = {"queue-a"};
  b.name = "tenant-b";
  b.namespaces = {"team-b"};
  b.volcano_queues = {"queue-b"};
  p.tenants = {a, b};
  return p;
}

TEST(Admission, TenantFromNamespaceThenQueueWhereAllowedThenDefault) {
  PolicySpec p = policy();
  EXPECT_EQ(resolveTenant(p, "team-b", "queue-a").tenant, nullptr);
  EXPECT_NE(resolveTenant(p, "team-b", "queue-a").refusal, "");
  EXPECT_EQ(resolveTenant(p, "team-b", "queue-b").tenant->name, "tenant-b");
  EXPECT_EQ(resolveTenant(p, "team-b", "unknown").tenant->name, "tenant-b");
  EXPECT_EQ(resolveTenant(p, "team-b", "").why, "namespace \"team-b\"");
  EXPECT_EQ(resolveTenant(p, "shared", "queue-a", {"shared"}).tenant->name, "tenant-a");
  EXPECT_EQ(resolveTenant(p, "shared", "queue-a", {"shared"}).why, "Volcano queue \"queue-a\"");
  TenantMatch none = resolveTenant(p, "other", "q");
  EXPECT_EQ(none.tenant, nullptr);
  EXPECT_EQ(none.why,
            "namespace \"other\" and Volcano queue \"q\" belong to no tenant, and the "
            "policy has no default tenant");
  p.tenants[1].is_default = true;
  EXPECT_EQ(resolveTenant(p, "other", "").tenant->name, "tenant-b");
  EXPECT_EQ(resolveTenant(p, "other", "").why, "the default tenant");
}

// The JSONPatch of a mutate answer (the response carries it base64-encoded).
std::string patchOf(const std::string& body) {
  const std::string key = "\"patch\":\"";
  const size_t at = body.find(key);
  if (at == std::string::npos) return "";
  const std::string_view b64(body.data() + at + key.size(),
                             body.find('"', at + key.size()) - at - key.size());
  const std::string alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : b64) {
    const size_t v = alphabet.find(c);
    if (v == std::string::npos) break;  // '=' padding
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return out;
}

TEST(Admission, SupplementalGroupIsTheTenantsNumericUnixGroupElseTheFlag) {
  const std::string pod =
      R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u",)"
      R"("kind":{"group":"","version":"v1","kind":"Pod"},"namespace":"team-a",)"
      R"("operation":"CREATE","object":{"metadata":{"name":"p"},"spec":{"containers":[]}}}})";
  RecipeOptions o;
  o.group = 7400;
  VersionedPolicy vp{1, policy()};
  vp.policy.tenants[0].unix_group = "7410";
  std::string patch = patchOf(review(Endpoint::kMutate, pod, &vp, o).body);
  EXPECT_NE(patch.find(R"("supplementalGroups":[7410])"), std::string::npos) << patch;
  EXPECT_EQ(patch.find("7400"), std::string::npos) << patch;
  vp.policy.tenants[0].unix_group = "tenant-a-group";  // a name: not a pod's gid
  patch = patchOf(review(Endpoint::kMutate, pod, &vp, o).body);
  EXPECT_NE(patch.find(R"("supplementalGroups":[7400])"), std::string::npos) << patch;
  vp.policy.tenants[0].unix_group = "";
  o.group.reset();  // --group none
  patch = patchOf(review(Endpoint::kMutate, pod, &vp, o).body);
  EXPECT_FALSE(patch.empty());
  EXPECT_EQ(patch.find("supplementalGroups"), std::string::npos) << patch;
}

TEST(Admission, JsonDepthIgnoresBracketsInStrings) {
  EXPECT_EQ(jsonDepth(R"({"a": [1, {"b": "[[[{{{"}]})", 64), 3);
  EXPECT_EQ(jsonDepth(R"({"a": "\"[[["})", 64), 1);
  EXPECT_EQ(jsonDepth(std::string(1000, '['), 64), 65);  // stops past the limit
}

TEST(Admission, ErrorsAreAnswersNotCrashes) {
  VersionedPolicy vp{1, policy()};
  RecipeOptions o;
  EXPECT_EQ(review(Endpoint::kMutate, "", &vp, o).http_status, 400);
  EXPECT_EQ(review(Endpoint::kMutate, std::string(kMaxReviewBytes + 1, ' '), &vp, o).http_status,
            413);
  const std::string pod =
      R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u",)"
      R"("kind":{"group":"","version":"v1","kind":"Pod"},"namespace":"team-a",)"
      R"("operation":"CREATE","object":{"metadata":{"name":"p"},"spec":{"containers":[]}}}})";
  ReviewResult r = review(Endpoint::kMutate, pod, nullptr, o);
  EXPECT_EQ(r.http_status, 200);
  EXPECT_EQ(r.outcome, "error");
  EXPECT_NE(r.body.find("\"code\":503"), std::string::npos) << r.body;
  r = review(Endpoint::kMutate, pod, &vp, o);
  EXPECT_EQ(r.outcome, "mutated") << r.body;
  // A refusal message cut inside a UTF-8 sequence still serialises.
  std::string bad = pod;
  bad.replace(bad.find("\"containers\":[]"), 15,
              R"("containers":[{"name":"c","env":[{"name":"TENANTQOS_X","value":"x"}]}],)"
              R"("volumes":[{"name":")" +
                  std::string(199, 'v') + "\xc3\xa9" + R"(","hostPath":{"path":"/run"}}])");
  r = review(Endpoint::kValidate, bad, &vp, o);
  EXPECT_EQ(r.outcome, "refused") << r.body;
  EXPECT_NE(r.message.find("sets TENANTQOS_X itself"), std::string::npos) << r.message;
}

// --- Hostile pods (issue 23 items 1-3): a pod's own fields never pick another tenant. ---

// An AdmissionReview of a Pod CREATE in `ns`, its metadata and spec merged from `meta`/`spec`.
std::string podReview(const std::string& ns, nlohmann::json meta, nlohmann::json spec) {
  meta["name"] = "p";
  if (!spec.contains("containers")) spec["containers"] = {{{"name", "c"}}};
  nlohmann::json r = {{"apiVersion", "admission.k8s.io/v1"},
                      {"kind", "AdmissionReview"},
                      {"request",
                       {{"uid", "u"},
                        {"kind", {{"group", ""}, {"version", "v1"}, {"kind", "Pod"}}},
                        {"namespace", ns},
                        {"operation", "CREATE"},
                        {"object", {{"metadata", meta}, {"spec", spec}}}}}};
  return r.dump();
}
nlohmann::json queue(const std::string& q) {
  return {{"annotations", {{std::string(kVolcanoQueueAnnotation), q}}}};
}
// Tenants a (namespace team-a, queue queue-a, gid 7401) and b (team-b, queue-b, gid 7402).
VersionedPolicy groupedPolicy() {
  VersionedPolicy vp{1, policy()};
  vp.policy.tenants[0].unix_group = "7401";
  vp.policy.tenants[1].unix_group = "7402";
  return vp;
}

// Both endpoints refuse, and the reason contains `why`.
void expectRefused(const std::string& body, const VersionedPolicy& vp, const RecipeOptions& o,
                   const std::string& why) {
  for (Endpoint e : {Endpoint::kMutate, Endpoint::kValidate}) {
    const ReviewResult r = review(e, body, &vp, o);
    EXPECT_EQ(r.outcome, "refused") << r.body;
    EXPECT_NE(r.message.find(why), std::string::npos) << r.message;
  }
}
std::string tenantOfPatch(const ReviewResult& r) {
  const std::string patch = patchOf(r.body);
  const std::string key = R"({"name":"TENANTQOS_TENANT","value":")";
  const size_t at = patch.find(key);
  if (r.outcome != "mutated" || at == std::string::npos) return "(" + r.outcome + ")";
  return patch.substr(at + key.size(), patch.find('"', at + key.size()) - at - key.size());
}

TEST(AdmissionHostile, QueueAnnotationCannotTakeAnotherTenantThanTheNamespaces) {
  const VersionedPolicy vp = groupedPolicy();
  const RecipeOptions o;
  // Before issue 23: mutated into tenant-a (its directory and group 7401).
  expectRefused(podReview("team-b", queue("queue-a"), {}), vp, o,
                "Volcano queue \"queue-a\" is tenant \"tenant-a\"'s, but namespace \"team-b\" is "
                "tenant \"tenant-b\"'s");
  // The namespace's own queue, or a queue of no tenant: the namespace decides.
  EXPECT_EQ(
      tenantOfPatch(review(Endpoint::kMutate, podReview("team-b", queue("queue-b"), {}), &vp, o)),
      "tenant-b");
  EXPECT_EQ(
      tenantOfPatch(review(Endpoint::kMutate, podReview("team-b", queue("other"), {}), &vp, o)),
      "tenant-b");
  // A namespace of no tenant: a queue decides only where --queue-namespaces says so.
  expectRefused(podReview("research", queue("queue-a"), {}), vp, o,
                "namespace \"research\" has no tenant and is not one of --queue-namespaces");
  VersionedPolicy with_default = vp;
  with_default.policy.tenants[1].is_default = true;
  expectRefused(podReview("research", queue("queue-a"), {}), with_default, o,
                "is not one of --queue-namespaces");
  RecipeOptions shared = o;
  shared.queue_namespaces = {"research"};
  EXPECT_EQ(tenantOfPatch(review(Endpoint::kMutate, podReview("research", queue("queue-a"), {}),
                                 &vp, shared)),
            "tenant-a");
  EXPECT_EQ(tenantOfPatch(review(Endpoint::kMutate, podReview("research", queue("queue-b"), {}),
                                 &vp, shared)),
            "tenant-b");
  // --queue-namespaces never overrides a namespace that has a tenant.
  shared.queue_namespaces = {"team-b"};
  expectRefused(podReview("team-b", queue("queue-a"), {}), vp, shared, "but namespace");
}

TEST(AdmissionHostile, HostPathsAreComparedAfterLexicalNormalisation) {
  const VersionedPolicy vp = groupedPolicy();
  const RecipeOptions o;
  for (const char* path :
       {"/run/./tenantqos/tenants/tenant-a", "/./run/tenantqos/tenants/tenant-a",
        "/run/tenantqos/tenants/./tenant-a/.", "run/tenantqos/tenants/tenant-a",
        "/run//tenantqos/./tenants//tenant-a/", "/var/./run/tenantqos/tenants/tenant-a",
        "/./run/./tenantqos", "/run/tenantqos/tenants/tenant-b/../tenant-a"}) {
    SCOPED_TRACE(path);
    const nlohmann::json spec = {{"volumes", {{{"name", "x"}, {"hostPath", {{"path", path}}}}}},
                                 {"securityContext", {{"supplementalGroups", {7402}}}}};
    // From tenant-b's namespace (before issue 23: mutated and allowed with tenant-a's
    // directory mounted) and from a namespace of no tenant.
    expectRefused(podReview("team-b", {}, spec), vp, o, "mounts host path");
    expectRefused(podReview("research", {}, {{"volumes", spec["volumes"]}}), vp, o,
                  "mounts host path");
  }
  // The pod's own entry, however spelled, is its own.
  const ReviewResult own = review(
      Endpoint::kMutate,
      podReview("team-b", {},
                {{"volumes",
                  {{{"name", "tenantqos-tenant"},
                    {"hostPath",
                     {{"path", "/run/./tenantqos/tenants/tenant-b/"}, {"type", "Directory"}}}}}}}),
      &vp, o);
  EXPECT_EQ(own.outcome, "mutated") << own.body;
}

TEST(AdmissionHostile, AnotherTenantsGroupIsRefusedWhereverThePodClaimsIt) {
  const VersionedPolicy vp = groupedPolicy();
  const RecipeOptions o;
  const nlohmann::json claims[] = {
      {{"securityContext", {{"supplementalGroups", {5, 7401}}}}},
      {{"securityContext", {{"runAsGroup", 7401}}}},
      {{"securityContext", {{"fsGroup", 7401}}}},
      {{"containers", {{{"name", "c"}, {"securityContext", {{"runAsGroup", 7401}}}}}}},
      {{"initContainers", {{{"name", "i"}, {"securityContext", {{"runAsGroup", 7401}}}}}}}};
  for (const nlohmann::json& spec : claims) {
    SCOPED_TRACE(spec.dump());
    expectRefused(podReview("team-b", {}, spec), vp, o, "7401 is tenant \"tenant-a\"'s unixGroup");
    expectRefused(podReview("research", {}, spec), vp, o,
                  "7401 is tenant \"tenant-a\"'s unixGroup");
  }
  // Its own tenant's group, or a group of no tenant, is the pod's business.
  const ReviewResult own =
      review(Endpoint::kMutate,
             podReview("team-b", {}, {{"securityContext", {{"runAsGroup", 7402}, {"fsGroup", 5}}}}),
             &vp, o);
  EXPECT_EQ(own.outcome, "mutated") << own.body;
}

TEST(AdmissionHostile, GroupFlagNeverGivesATenantsGroupToAnother) {
  // The shipped --group 7400 and the example policy's tenant-a unixGroup "7400": a tenant whose
  // unixGroup is a name used to get tenant-a's group.
  EXPECT_FALSE(RecipeOptions{}.group.has_value()) << "the default adds no group";
  VersionedPolicy vp{1, policy()};
  vp.policy.tenants[0].unix_group = "7400";
  vp.policy.tenants[1].unix_group = "tenant-b-group";
  RecipeOptions o;
  o.group = 7400;
  expectRefused(podReview("team-b", {}, {}), vp, o,
                "--group 7400 is tenant \"tenant-a\"'s unixGroup");
  o.group = 7499;  // a group of no tenant
  const std::string patch =
      patchOf(review(Endpoint::kMutate, podReview("team-b", {}, {}), &vp, o).body);
  EXPECT_NE(patch.find(R"("supplementalGroups":[7499])"), std::string::npos) << patch;
}

}  // namespace
}  // namespace tq::webhook
