// The admission rules without a server; tests/functional/webhook_test.py drives the real
// server over HTTPS with AdmissionReview JSON.
#include "webhook/admission.h"

#include <gtest/gtest.h>

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

TEST(Admission, TenantFromQueueThenNamespaceThenDefault) {
  PolicySpec p = policy();
  EXPECT_EQ(resolveTenant(p, "team-b", "queue-a").tenant->name, "tenant-a");
  EXPECT_EQ(resolveTenant(p, "team-b", "queue-a").why, "Volcano queue \"queue-a\"");
  EXPECT_EQ(resolveTenant(p, "team-b", "unknown").tenant->name, "tenant-b");
  EXPECT_EQ(resolveTenant(p, "team-b", "").why, "namespace \"team-b\"");
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
  RecipeOptions o;  // --group 7400
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

}  // namespace
}  // namespace tq::webhook
