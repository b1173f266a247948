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

// --- Every rule admission.h states, one test each where the tests above do not show it. ---

TEST(AdmissionRules, NormalPathIsTheHostsViewOfThePath) {
  const std::pair<const char*, const char*> cases[] = {
      {"/run/tenantqos", "/run/tenantqos"},
      {"/run/tenantqos/", "/run/tenantqos"},
      {"//run///tenantqos//", "/run/tenantqos"},
      {"/run/./tenantqos/.", "/run/tenantqos"},
      {"run/tenantqos", "/run/tenantqos"},
      {"/var/run/tenantqos", "/run/tenantqos"},
      {"/var/run", "/run"},
      {"/var/running", "/var/running"},
      {"/run/a/../b", "/run/a/../b"},  // `..` is kept for the caller to refuse
      {"", "/"},
      {"/", "/"},
      {".", "/"},
  };
  for (const auto& [in, want] : cases) EXPECT_EQ(normalPath(in), want) << in;
}

// The pod as the API server stores it after the /mutate answer's JSONPatch.
std::string patched(const std::string& review_body, const ReviewResult& r) {
  nlohmann::json doc = nlohmann::json::parse(review_body);
  doc["request"]["object"] = doc["request"]["object"].patch(nlohmann::json::parse(patchOf(r.body)));
  return doc.dump();
}

TEST(AdmissionRules, AMutatedPodValidatesAndASecondMutateLeavesItAlone) {
  const VersionedPolicy vp = groupedPolicy();
  RecipeOptions o;
  o.group = 7499;
  const nlohmann::json spec = {
      {"containers",
       {{{"name", "trainer"}, {"env", {{{"name", "LD_LIBRARY_PATH"}, {"value", "/usr/lib/x"}}}}},
        {{"name", "sidecar"}}}}};
  const std::string pod = podReview("team-a", {{"labels", {{"app", "x"}}}}, spec);
  const ReviewResult first = review(Endpoint::kMutate, pod, &vp, o);
  ASSERT_EQ(first.outcome, "mutated") << first.body;
  const std::string after = patched(pod, first);
  const nlohmann::json obj = nlohmann::json::parse(after)["request"]["object"];
  EXPECT_EQ(obj["metadata"]["labels"][std::string(kTenantLabel)], "tenant-a");
  EXPECT_EQ(obj["spec"]["securityContext"]["supplementalGroups"], nlohmann::json({7401}))
      << "the tenant's numeric unixGroup, not --group";
  EXPECT_EQ(obj["spec"]["initContainers"][0]["name"], "tenantqos-plugin");
  const nlohmann::json& trainer = obj["spec"]["containers"][0];
  EXPECT_EQ(trainer["env"][0]["value"], o.plugin_dir + ":/usr/lib/x")
      << "the plugin's directory first, the container's own path kept";
  const nlohmann::json& sidecar = obj["spec"]["containers"][1];
  bool ld = false, tenant = false;
  for (const auto& e : sidecar["env"]) {
    if (e["name"] == "LD_LIBRARY_PATH") {
      ld = e["value"] == o.plugin_dir + ":" + o.default_ld_library_path;
    }
    tenant |= e["name"] == "TENANTQOS_TENANT" && e["value"] == "tenant-a";
  }
  EXPECT_TRUE(ld && tenant) << sidecar.dump();

  EXPECT_EQ(review(Endpoint::kMutate, after, &vp, o).outcome, "unchanged");
  const ReviewResult valid = review(Endpoint::kValidate, after, &vp, o);
  EXPECT_EQ(valid.outcome, "allowed") << valid.message;
  EXPECT_NE(valid.body.find("\"allowed\":true"), std::string::npos) << valid.body;
}

TEST(AdmissionRules, ValidateRefusesAPodThatLacksTheRecipe) {
  const VersionedPolicy vp = groupedPolicy();
  const ReviewResult r = review(Endpoint::kValidate, podReview("team-a", {}, {}), &vp, {});
  EXPECT_EQ(r.outcome, "refused");
  EXPECT_NE(r.message.find("pod team-a/p (tenant \"tenant-a\", from its namespace \"team-a\") "
                           "lacks its tenant's tenantqos settings (was /mutate skipped?): "),
            std::string::npos)
      << r.message;
  EXPECT_NE(r.message.find("label tenantqos.io/tenant"), std::string::npos) << r.message;
  EXPECT_NE(r.body.find("\"code\":403"), std::string::npos) << r.body;
}

TEST(AdmissionRules, APodsOwnTenantqosSettingsAreRefusedWithTheReasons) {
  const VersionedPolicy vp = groupedPolicy();
  const RecipeOptions o;
  const std::pair<nlohmann::json, std::string> claims[] = {
      {{{"containers", {{{"name", "c"}, {"env", {{{"name", "NCCL_NET"}, {"value", "Socket"}}}}}}}},
       "container \"c\" sets NCCL_NET=\"Socket\": its tenant's recipe has NCCL_NET=\"tenantqos\""},
      {{{"containers",
         {{{"name", "c"}, {"env", {{{"name", "TENANTQOS_TENANT"}, {"value", "tenant-b"}}}}}}}},
       "sets TENANTQOS_TENANT=\"tenant-b\""},
      {{{"containers",
         {{{"name", "c"},
           {"env", {{{"name", "TENANTQOS_TENANT"}, {"valueFrom", {{"fieldRef", {}}}}}}}}}}},
       "sets TENANTQOS_TENANT=(valueFrom)"},
      {{{"containers",
         {{{"name", "c"}, {"env", {{{"name", "LD_LIBRARY_PATH"}, {"valueFrom", nullptr}}}}}}}},
       "sets LD_LIBRARY_PATH from valueFrom"},
      {{{"initContainers", {{{"name", "tenantqos-plugin"}, {"image", "evil"}}}}},
       "init container name \"tenantqos-plugin\" is reserved"},
      {{{"volumes", {{{"name", "tenantqos-plugin"}, {"emptyDir", nlohmann::json::object()}}}}},
       "volume name \"tenantqos-plugin\" is reserved"},
      {{{"containers",
         {{{"name", "c"},
           {"volumeMounts",
            {{{"name", "tenantqos-tenant"},
              {"mountPath", "/run/tenantqos/tenants/tenant-a"},
              {"readOnly", true}}}}}}}},
       "the plugin opens \"/run/tenantqos/tenants/tenant-a\" read-write"},
      {{{"containers",
         {{{"name", "c"},
           {"volumeMounts", {{{"name", "tenantqos-plugin"}, {"mountPath", "/elsewhere"}}}}}}}},
       "the recipe mounts it at \"/opt/tenantqos/lib\""},
  };
  for (const auto& [spec, why] : claims) {
    SCOPED_TRACE(spec.dump());
    expectRefused(podReview("team-a", {}, spec), vp, o, why);
  }
  expectRefused(podReview("team-a", {{"labels", {{std::string(kTenantLabel), "tenant-b"}}}}, {}),
                vp, o,
                "label tenantqos.io/tenant=\"tenant-b\" contradicts its tenant \"tenant-a\"");
  // A pod of no tenant may not carry tenantqos settings either, and is told why it has none.
  expectRefused(podReview("research", {{"labels", {{std::string(kTenantLabel), "tenant-a"}}}}, {}),
                vp, o, "the pod has no tenant (namespace \"research\" belong");
}

TEST(AdmissionRules, OnlyCreatesOfPodsAreReviewed) {
  const VersionedPolicy vp = groupedPolicy();
  nlohmann::json doc = nlohmann::json::parse(podReview("team-a", {}, {}));
  doc["request"]["operation"] = "UPDATE";
  EXPECT_EQ(review(Endpoint::kMutate, doc.dump(), &vp, {}).outcome, "unchanged");
  EXPECT_EQ(review(Endpoint::kValidate, doc.dump(), &vp, {}).outcome, "allowed");
  doc["request"]["operation"] = "CREATE";
  doc["request"]["kind"] = {{"group", "apps"}, {"version", "v1"}, {"kind", "Deployment"}};
  ReviewResult r = review(Endpoint::kMutate, doc.dump(), &vp, {});
  EXPECT_EQ(r.outcome, "error");
  EXPECT_NE(r.message.find("reviews Pods only, got \"apps/Deployment\""), std::string::npos);
  EXPECT_NE(r.body.find("\"allowed\":false"), std::string::npos) << r.body;
}

TEST(AdmissionRules, TheBodyIsBoundedAndCheckedBeforeUse) {
  const VersionedPolicy vp = groupedPolicy();
  const std::string deep = R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","x":)" +
                           std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']') + "}";
  ReviewResult r = review(Endpoint::kMutate, deep, &vp, {});
  EXPECT_EQ(r.http_status, 400);
  EXPECT_EQ(r.message, "request JSON nests deeper than 64 levels");
  for (const char* bad :
       {R"({"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{}})",
        R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":7}})",
        R"({"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":[]})", "[1,2]",
        "{\"a\":"}) {
    r = review(Endpoint::kValidate, bad, &vp, {});
    EXPECT_EQ(r.http_status, 400) << bad;
    EXPECT_EQ(r.outcome, "error") << bad;
  }
  nlohmann::json no_spec = nlohmann::json::parse(podReview("team-a", {}, {}));
  no_spec["request"]["object"]["spec"] = "x";
  r = review(Endpoint::kMutate, no_spec.dump(), &vp, {});
  EXPECT_EQ(r.outcome, "error");
  EXPECT_NE(r.message.find("not a Pod with a spec"), std::string::npos) << r.message;
}

TEST(AdmissionRules, MistypedFieldsReadAsAbsentAndNeverCrash) {
  const VersionedPolicy vp = groupedPolicy();
  const RecipeOptions o;
  const nlohmann::json specs[] = {
      {{"containers", "x"}},
      {{"containers", {1, "c", nullptr, {{"name", 5}, {"env", {{"x", 1}}}}}}},
      {{"containers", {{{"name", "c"}, {"env", {{{"name", "A"}, {"value", {1, 2}}}}}}}}},
      {{"volumes", {1, "v", {{"name", "v"}, {"hostPath", "/run"}}}}},
      {{"volumes", {{{"name", "v"}, {"hostPath", {{"path", 7}}}}}}},
      {{"securityContext", {1, 2}}},
      {{"securityContext", {{"supplementalGroups", "7402"}}}},
      {{"securityContext", {{"supplementalGroups", {"7402", -1, 1.5, nullptr}}}}},
      {{"initContainers", {{"name", "tenantqos-plugin"}}}},
  };
  for (const nlohmann::json& spec : specs) {
    SCOPED_TRACE(spec.dump());
    for (Endpoint e : {Endpoint::kMutate, Endpoint::kValidate}) {
      const ReviewResult r = review(e, podReview("team-a", {{"labels", 5}}, spec), &vp, o);
      EXPECT_EQ(r.http_status, 200);
      EXPECT_TRUE(r.outcome == "mutated" || r.outcome == "refused" || r.outcome == "unchanged")
          << r.outcome << ": " << r.message;
      EXPECT_TRUE(nlohmann::json::accept(r.body)) << r.body;
    }
  }
  // A gid spelled as a float is still that gid; a negative number or a string is no group.
  expectRefused(podReview("team-b", {}, {{"securityContext", {{"fsGroup", 7401.0}}}}), vp, o,
                "securityContext.fsGroup 7401 is tenant \"tenant-a\"'s unixGroup");
  EXPECT_EQ(review(Endpoint::kMutate,
                   podReview("team-b", {}, {{"securityContext", {{"runAsGroup", "7401"}}}}), &vp, o)
                .outcome,
            "mutated");
}

TEST(AdmissionRules, HostPathsAtOrAboveTheRunDirectoryAndAnyDotDotAreRefused) {
  const VersionedPolicy vp = groupedPolicy();
  const RecipeOptions o;
  for (const char* path : {"/", "/run", "/var/run", "/var/run/", "/run/tenantqos/tenants",
                           "/opt/../run/tenantqos", "/data/..", "/.."}) {
    SCOPED_TRACE(path);
    expectRefused(
        podReview("team-a", {}, {{"volumes", {{{"name", "x"}, {"hostPath", {{"path", path}}}}}}}),
        vp, o, "mounts host path");
  }
  // Elsewhere on the host is not tenantqos's business.
  const ReviewResult r = review(
      Endpoint::kMutate,
      podReview("team-a", {}, {{"volumes", {{{"name", "d"}, {"hostPath", {{"path", "/data"}}}}}}}),
      &vp, o);
  EXPECT_EQ(r.outcome, "mutated") << r.message;
}

TEST(AdmissionRules, EphemeralContainersCannotClaimAnotherTenantsGroup) {
  const VersionedPolicy vp = groupedPolicy();
  expectRefused(podReview("team-b", {},
                          {{"ephemeralContainers",
                            {{{"name", "debug"}, {"securityContext", {{"runAsGroup", 7401}}}}}}}),
                vp, {},
                "container \"debug\": securityContext.runAsGroup 7401 is tenant \"tenant-a\"'s");
}

TEST(AdmissionRules, ARefusalListsTheFirstTenReasonsAndCountsTheRest) {
  const VersionedPolicy vp = groupedPolicy();
  nlohmann::json env = nlohmann::json::array();
  for (int i = 0; i < 30; ++i) {
    env.push_back({{"name", "TENANTQOS_X" + std::to_string(i)}, {"value", "1"}});
  }
  const ReviewResult r =
      review(Endpoint::kValidate,
             podReview("team-a", {}, {{"containers", {{{"name", "c"}, {"env", env}}}}}), &vp, {});
  EXPECT_EQ(r.outcome, "refused");
  EXPECT_NE(r.message.find("TENANTQOS_X9 itself"), std::string::npos) << r.message;
  EXPECT_EQ(r.message.find("TENANTQOS_X10 itself"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("; and 20 more"), std::string::npos) << r.message;
}

}  // namespace
}  // namespace tq::webhook
