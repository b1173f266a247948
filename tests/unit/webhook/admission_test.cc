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
  EXPECT_EQ(none.why, "namespace \"other\" and Volcano queue \"q\" belong to no tenant, and the "
                      "policy has no default tenant");
  p.tenants[1].is_default = true;
  EXPECT_EQ(resolveTenant(p, "other", "").tenant->name, "tenant-b");
  EXPECT_EQ(resolveTenant(p, "other", "").why, "the default tenant");
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
              R"("volumes":[{"name":")" + std::string(199, 'v') + "\xc3\xa9" +
                  R"(","hostPath":{"path":"/run"}}])");
  r = review(Endpoint::kValidate, bad, &vp, o);
  EXPECT_EQ(r.outcome, "refused") << r.body;
  EXPECT_NE(r.message.find("sets TENANTQOS_X itself"), std::string::npos) << r.message;
}

}  // namespace
}  // namespace tq::webhook
