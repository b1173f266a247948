// `tenantqosctl render` framing: which tenants go in, the provenance and file banners, errors.
// The plan arithmetic itself is checked against hand-computed files in tests/unit/ib/ and, for
// the example policy end to end through the binary, in tests/functional/policyd_test.cc.
#include "policy/qos_render.h"

#include <gtest/gtest.h>

#include "ib/qos_input.h"

namespace tq::policy {
namespace {

PolicySpec policy() {
  PolicySpec p;
  p.links = {{"fabric", 12'500'000'000, 5}, {"storage", 3'125'000'000, 0}};
  TenantSpec a;
  a.name = "tenant-a";
  a.link = "fabric";
  a.guarantee_bytes_per_second = 5'000'000'000;
  a.limit_bytes_per_second = 7'500'000'000;
  a.weight = 2;
  a.service_level = 1;
  a.dscp = 26;
  TenantSpec s = a;
  s.name = "backup";
  s.link = "storage";
  s.service_level = 5;
  s.dscp = 40;
  s.guarantee_bytes_per_second = 1'250'000'000;  // 10 Gbit/s of 25
  s.limit_bytes_per_second = 2'500'000'000;
  p.tenants = {a, s};
  return p;
}

bool endsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

TEST(QosRenderTest, DcbIsAScriptEndingWithThePlanOfThatLinkOnly) {
  auto out = renderDcb(policy(), "fabric", "eth2", "file p.yaml");
  ASSERT_TRUE(out.ok()) << out.status().toString();
  EXPECT_EQ(out->rfind("#!/bin/sh\n", 0), 0u);
  EXPECT_NE(out->find("# tenantqosctl render dcb: link fabric (100Gbps, 1 tenant) on device eth2\n"
                      "# Policy: file p.yaml\n"),
            std::string::npos)
      << *out;
  EXPECT_NE(out->find("\nset -e\n"), std::string::npos);
  auto plan = ib::planRoceQos(*ib::qosPlanInputForLink(policy(), "fabric"));
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(endsWith(*out, "set -e\n" + ib::renderDcbScript(*plan, "eth2"))) << *out;
  EXPECT_EQ(out->find("backup"), std::string::npos);  // a tenant of another link
  EXPECT_EQ(out->find("dscp-prio 40:"), std::string::npos);
}

TEST(QosRenderTest, OpenSmPartsAndBanners) {
  ib::IbQosOptions opts;
  opts.max_vls = 4;
  opts.mtu = 2048;
  auto plan = ib::planIbQos(*ib::qosPlanInputForLink(policy(), "storage"), opts);
  ASSERT_TRUE(plan.ok());
  const std::string options = ib::renderOpenSmOptions(*plan);
  const std::string levels = ib::renderOpenSmQosPolicy(*plan);

  auto both = renderOpenSm(policy(), "storage", opts, OpenSmPart::kBoth, "S");
  ASSERT_TRUE(both.ok()) << both.status().toString();
  EXPECT_EQ(both->rfind("# tenantqosctl render opensm: link storage (25Gbps, 1 tenant), 4 data "
                        "VLs, MTU 2048\n# Policy: S\n",
                        0),
            0u)
      << *both;
  const size_t p1 = both->find("# ======== Part 1 of 2: opensm.conf");
  const size_t o = both->find(options);
  const size_t p2 = both->find("# ======== Part 2 of 2: qos-policy.conf");
  const size_t l = both->find(levels);
  ASSERT_NE(p1, std::string::npos) << *both;
  ASSERT_NE(o, std::string::npos);
  ASSERT_NE(p2, std::string::npos);
  ASSERT_NE(l, std::string::npos);
  EXPECT_LT(p1, o);
  EXPECT_LT(o, p2);
  EXPECT_LT(p2, l);
  EXPECT_TRUE(endsWith(*both, levels));
  EXPECT_EQ(both->find("tenant-a"), std::string::npos);

  auto only_options = renderOpenSm(policy(), "storage", opts, OpenSmPart::kOptions, "S");
  ASSERT_TRUE(only_options.ok());
  EXPECT_TRUE(endsWith(*only_options, options));
  EXPECT_EQ(only_options->find("qos-levels"), std::string::npos);
  EXPECT_NE(only_options->find("# For opensm.conf"), std::string::npos);
  auto only_levels = renderOpenSm(policy(), "storage", opts, OpenSmPart::kQosPolicy, "S");
  ASSERT_TRUE(only_levels.ok());
  EXPECT_TRUE(endsWith(*only_levels, levels));
  EXPECT_EQ(only_levels->find("qos_vlarb_low"), std::string::npos);
  EXPECT_NE(only_levels->find("# For qos-policy.conf"), std::string::npos);
}

TEST(QosRenderTest, Errors) {
  auto r = renderDcb(policy(), "nope", "eth2", "S");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(),
            "link \"nope\" is not in the policy (its links: fabric, storage)");
  r = renderOpenSm(policy(), "nope", {}, OpenSmPart::kBoth, "S");
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);

  for (const char* dev : {"", "eth 2", "eth2;reboot", "$(x)", "a/b", "..", "sixteen-chars-xx"}) {
    r = renderDcb(policy(), "fabric", dev, "S");
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << dev;
  }
  EXPECT_TRUE(isSafeDeviceName("enp65s0f0np0"));
  EXPECT_TRUE(isSafeDeviceName("ib0.8001"));

  // A policy that did not pass validation (guarantees above the link): the plan says why.
  PolicySpec bad = policy();
  bad.tenants[0].guarantee_bytes_per_second = 13'000'000'000;
  bad.tenants[0].limit_bytes_per_second = 13'000'000'000;
  r = renderDcb(bad, "fabric", "eth2", "S");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message().rfind("link fabric: QoS plan: guarantees add up to 104Gbps", 0),
            0u)
      << r.status().message();
  ib::IbQosOptions opts;
  opts.max_vls = 16;
  r = renderOpenSm(policy(), "fabric", opts, OpenSmPart::kBoth, "S");
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tq::policy
