#include "policy/policy_file.h"

#include "common/capacity.h"
#include "test_util.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

namespace tq::policy {
namespace {

// Line numbers below refer to this document (1-based).
const char* const kBase =
    "apiVersion: tenantqos/v1\n"  // 1
    "kind: TenantPolicy\n"        // 2
    "links:\n"                    // 3
    "  - name: fabric\n"          // 4
    "    capacity: 100Gbps\n"     // 5
    "    headroom: 5%\n"          // 6
    "tenants:\n"                  // 7
    "  - name: tenant-a\n"        // 8
    "    link: fabric\n"          // 9
    "    guarantee: 40Gbps\n"     // 10
    "    limit: 60Gbps\n"         // 11
    "    weight: 2\n"             // 12
    "    serviceLevel: 1\n"       // 13
    "    dscp: 26\n"              // 14
    "    trafficClasses: [1]\n"   // 15
    "  - name: tenant-b\n"        // 16
    "    link: fabric\n"          // 17
    "    guarantee: 20Gbps\n"     // 18
    "    limit: 40Gbps\n"         // 19
    "    weight: 1\n"             // 20
    "    serviceLevel: 2\n"       // 21
    "    dscp: 18\n"              // 22
    "    trafficClasses: [2]\n";  // 23

std::string withLine(int n, const std::string& text) {
  return testing::replaceLine(kBase, n, text);
}

using testing::allErrors;
using testing::expectError;
using testing::expectOk;
using testing::expectOnlyError;
using testing::parse;

TEST(PolicyFile, BaseDocumentParses) {
  ParsedPolicy p = parse(kBase);
  ASSERT_TRUE(p.ok()) << allErrors(p);
  ASSERT_EQ(p.policy.links.size(), 1u);
  EXPECT_EQ(p.policy.links[0].name, "fabric");
  EXPECT_EQ(p.policy.links[0].capacity_bytes_per_second, 12'500'000'000u);
  EXPECT_EQ(p.policy.links[0].headroom_percent, 5.0);
  ASSERT_EQ(p.policy.tenants.size(), 2u);
  const TenantSpec& a = p.policy.tenants[0];
  EXPECT_EQ(a.name, "tenant-a");
  EXPECT_EQ(a.link, "fabric");
  EXPECT_EQ(a.guarantee_bytes_per_second, 5'000'000'000u);
  EXPECT_EQ(a.limit_bytes_per_second, 7'500'000'000u);
  EXPECT_EQ(a.weight, 2u);
  EXPECT_EQ(a.service_level, 1u);
  EXPECT_EQ(a.dscp, 26u);
  EXPECT_EQ(a.traffic_classes, std::vector<int32_t>{1});
  EXPECT_FALSE(a.share_class);
}

TEST(PolicyFile, ShippedExampleIsValidAndMatchesTheArticles) {
  ParsedPolicy p = loadPolicyFile(std::string(TQ_SOURCE_DIR) + "/examples/policy.yaml");
  ASSERT_TRUE(p.ok()) << allErrors(p);
  ASSERT_EQ(p.policy.tenants.size(), 2u);
  EXPECT_EQ(p.policy.links[0].capacity_bytes_per_second, 12'500'000'000u);  // 100Gbps
  EXPECT_EQ(p.policy.links[0].headroom_percent, 5.0);
  EXPECT_EQ(p.policy.tenants[0].guarantee_bytes_per_second, 5'000'000'000u);  // 40Gbps
  EXPECT_EQ(p.policy.tenants[0].limit_bytes_per_second, 7'500'000'000u);      // 60Gbps
  EXPECT_EQ(p.policy.tenants[0].weight, 2u);
  EXPECT_EQ(p.policy.tenants[1].guarantee_bytes_per_second, 2'500'000'000u);  // 20Gbps
  EXPECT_EQ(p.policy.tenants[1].limit_bytes_per_second, 5'000'000'000u);      // 40Gbps
  EXPECT_EQ(p.policy.tenants[1].weight, 1u);
}

TEST(PolicyFile, ErrorFormat) {
  PolicyError e{"p.yaml", 11, 12, "tenants[0].limit", "must be >= guarantee"};
  EXPECT_EQ(e.toString(), "p.yaml:11:12: tenants[0].limit: must be >= guarantee");
  PolicyError nopos{"<policy>", 0, 0, "tenants[0].dscp", "bad"};
  EXPECT_EQ(nopos.toString(), "<policy>: tenants[0].dscp: bad");
  ParsedPolicy p = parse(withLine(11, "    limit: 30Gbps"));
  Status s = p.status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(
      s.message().find("1 error in policy:\np.yaml:11:12: tenants[0].limit: must be >= guarantee"),
      std::string::npos)
      << s.message();
}

TEST(PolicyFile, ApiVersionAndKind) {
  expectOnlyError(parse(withLine(1, "apiVersion: tenantqos/v2")), 1, 13, "apiVersion",
                  "unsupported apiVersion \"tenantqos/v2\" (expected \"tenantqos/v1\")");
  expectOnlyError(parse(withLine(2, "kind: Policy")), 2, 7, "kind", "unsupported kind \"Policy\"");
  expectOnlyError(parse(withLine(1, "")), 1, 1, "apiVersion", "required field missing");
  expectOnlyError(parse(withLine(2, "")), 1, 1, "kind", "required field missing");
}

TEST(PolicyFile, UnknownFieldsAreErrorsWithSuggestions) {
  // A misspelt required field: the typo and the missing field are both reported.
  auto typo = parse(withLine(10, "    gurantee: 40Gbps"));
  EXPECT_EQ(typo.errors.size(), 2u) << allErrors(typo);
  expectError(typo, 8, 5, "tenants[0].guarantee", "required field missing");
  expectError(typo, 10, 5, "tenants[0].gurantee", "did you mean \"guarantee\"?");
  auto p = parse(withLine(10, "    guarantee: 40Gbps\n    gurantee: 40Gbps"));
  expectOnlyError(p, 11, 5, "tenants[0].gurantee",
                  "unknown field \"gurantee\" (did you mean \"guarantee\"?)");
  expectOnlyError(parse(withLine(13, "    serviceLevel: 1\n    servicelevel: 1")), 14, 5,
                  "tenants[0].servicelevel", "did you mean \"serviceLevel\"?");
  expectOnlyError(parse(withLine(15, "    trafficClasses: [1]\n    trafficClass: [1]")), 16, 5,
                  "tenants[0].trafficClass", "did you mean \"trafficClasses\"?");
  expectOnlyError(parse(withLine(6, "    headroom: 5%\n    capacty: 1Gbps")), 7, 5,
                  "links[0].capacty", "did you mean \"capacity\"?");
  // Far from every known name: list them.
  expectOnlyError(
      parse(withLine(2, "kind: TenantPolicy\nmetadata: {}")), 3, 1, "metadata",
      "unknown field \"metadata\" (known fields: apiVersion, kind, links, sharedLinks, tenants)");
  auto root_typo = parse(withLine(7, "tenant:"));
  EXPECT_EQ(root_typo.errors.size(), 2u) << allErrors(root_typo);
  expectError(root_typo, 7, 1, "tenant", "did you mean \"tenants\"?");
  expectError(root_typo, 1, 1, "tenants", "required field missing");
}

TEST(PolicyFile, AliasesWorkMergeKeysDoNot) {
  std::string y = withLine(10, "    guarantee: &g 40Gbps");
  y.replace(y.find("    guarantee: 20Gbps"), 21, "    guarantee: *g");
  auto p = parse(y);
  ASSERT_TRUE(p.ok()) << allErrors(p);
  EXPECT_EQ(p.policy.tenants[1].guarantee_bytes_per_second, 5'000'000'000u);
  auto m = parse(withLine(12, "    <<: {weight: 2}"));
  expectOnlyError(m, 12, 5, "tenants[0].<<", "YAML merge keys (<<) are not supported");
}

TEST(PolicyFile, DuplicateKeysAreErrors) {
  // The document keeps both entries of a duplicated key; we report the second one.
  expectOnlyError(parse(withLine(12, "    weight: 2\n    weight: 3")), 13, 5, "tenants[0].weight",
                  "duplicate key \"weight\" (first at line 12, column 5)");
  expectOnlyError(parse(withLine(2, "kind: TenantPolicy\nkind: TenantPolicy")), 3, 1, "kind",
                  "duplicate key \"kind\" (first at line 2, column 1)");
  expectOnlyError(parse(withLine(5, "    capacity: 100Gbps\n    capacity: 200Gbps")), 6, 5,
                  "links[0].capacity", "duplicate key");
}

TEST(PolicyFile, WrongTypes) {
  expectOnlyError(parse(withLine(12, "    weight: two")), 12, 13, "tenants[0].weight",
                  "expected an integer, got \"two\"");
  expectOnlyError(parse(withLine(12, "    weight: \"2\"")), 12, 13, "tenants[0].weight",
                  "expected an integer, got the quoted string \"2\"");
  expectOnlyError(parse(withLine(12, "    weight: 2.5")), 12, 13, "tenants[0].weight",
                  "expected an integer");
  expectOnlyError(parse(withLine(10, "    guarantee: [40Gbps]")), 10, 16, "tenants[0].guarantee",
                  "expected a rate such as \"40Gbps\", got a sequence");
  expectOnlyError(parse(withLine(9, "    link: {name: fabric}")), 9, 11, "tenants[0].link",
                  "expected a string, got a mapping");
  expectOnlyError(parse(withLine(15, "    trafficClasses: 1")), 15, 21, "tenants[0].trafficClasses",
                  "expected a sequence, got \"1\"");
  expectOnlyError(parse(withLine(15, "    trafficClasses:")), 15, 5, "tenants[0].trafficClasses",
                  "expected a sequence (write [] for none), got an empty value");
  expectOnlyError(parse(withLine(15, "    trafficClasses: [1]\n    shareClass: yes")), 16, 17,
                  "tenants[0].shareClass", "expected true or false, got \"yes\"");
  expectOnlyError(
      parse(std::string("apiVersion: tenantqos/v1\nkind: TenantPolicy\nlinks: {}\ntenants: []\n")),
      3, 8, "links", "expected a sequence, got a mapping");
  expectOnlyError(parse(withLine(16, "  - tenant-b\n  - name: tenant-c")), 16, 5, "tenants[1]",
                  "expected a mapping, got \"tenant-b\"");
  expectOnlyError(parse("- 1\n- 2\n"), 1, 1, "(document)", "expected a mapping, got a sequence");
}

TEST(PolicyFile, TrafficClassesWithBadItemsReportEachItem) {
  auto p = parse(withLine(15, "    trafficClasses: [1, x, -3, 2147483648]"));
  EXPECT_EQ(p.errors.size(), 3u) << allErrors(p);
  expectError(p, 15, 25, "tenants[0].trafficClasses[1]", "expected an integer, got \"x\"");
  expectError(p, 15, 28, "tenants[0].trafficClasses[2]",
              "must be between 0 and 2147483647, got -3");
  expectError(p, 15, 32, "tenants[0].trafficClasses[3]", "must be between 0 and 2147483647");
}

TEST(PolicyFile, MalformedYamlReportsTheParserPosition) {
  auto p = parse(withLine(11, "    limit: [60Gbps"));
  ASSERT_EQ(p.errors.size(), 1u) << allErrors(p);
  EXPECT_EQ(p.errors[0].field, "(yaml)");
  EXPECT_EQ(p.errors[0].line, 12) << allErrors(p);  // where the parser notices the missing ']'
  EXPECT_NE(p.errors[0].reason.find("syntax error"), std::string::npos);
  auto q = parse(withLine(12, "   weight: 2"));  // bad indentation
  ASSERT_EQ(q.errors.size(), 1u) << allErrors(q);
  EXPECT_EQ(q.errors[0].field, "(yaml)");
  EXPECT_EQ(q.errors[0].line, 12) << allErrors(q);
  EXPECT_FALSE(parse(std::string("a: ") + std::string(100000, '[')).ok());  // depth guard, no crash
}

TEST(PolicyFile, EmptyAndMultiDocument) {
  expectOnlyError(parse(""), 1, 1, "(document)", "the policy is empty");
  expectOnlyError(parse("# only a comment\n"), 1, 1, "(document)", "the policy is empty");
  auto p = parse(std::string(kBase) + "---\n" + kBase);
  ASSERT_EQ(p.errors.size(), 1u) << allErrors(p);
  EXPECT_EQ(p.errors[0].field, "(yaml)");
  EXPECT_EQ(p.errors[0].line, 25);
  EXPECT_NE(p.errors[0].reason.find("2 YAML documents"), std::string::npos);
}

TEST(PolicyFile, FourMiBLimitIsCheckedBeforeParsing) {
  std::string big = std::string(kBase) + "#" + std::string(kMaxPolicyBytes, 'x') + "\n";
  expectOnlyError(parse(big), 1, 1, "(file)", "more than the limit of 4194304 bytes");
  // Exactly at the limit is parsed (a comment pads it).
  std::string edge = std::string(kBase) + "#";
  edge += std::string(kMaxPolicyBytes - edge.size(), 'x');
  ASSERT_EQ(edge.size(), kMaxPolicyBytes);
  expectOk(parse(edge));
  // From a file: rejected without being read whole.
  char path[] = "/tmp/tqpol-big-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, (64 << 20)), 0);  // sparse 64 MiB
  close(fd);
  ParsedPolicy f = loadPolicyFile(path);
  unlink(path);
  ASSERT_EQ(f.errors.size(), 1u);
  EXPECT_EQ(f.errors[0].field, "(file)");
  EXPECT_NE(f.errors[0].reason.find("more than the limit"), std::string::npos) << allErrors(f);
}

TEST(PolicyFile, MissingFileIsOneError) {
  ParsedPolicy f = loadPolicyFile("/nonexistent/tqpol.yaml");
  ASSERT_EQ(f.errors.size(), 1u);
  EXPECT_EQ(f.errors[0].field, "(file)");
  EXPECT_NE(f.errors[0].reason.find("/nonexistent/tqpol.yaml"), std::string::npos);
}

TEST(PolicyFile, Rates) {
  expectOnlyError(parse(withLine(10, "    guarantee: -40Gbps")), 10, 16, "tenants[0].guarantee",
                  "must not be negative");
  expectOnlyError(parse(withLine(11, "    limit: 99999999999999999999999Tbps")), 11, 12,
                  "tenants[0].limit", "too large");
  expectOnlyError(parse(withLine(11, "    limit: 60Gbs")), 11, 12, "tenants[0].limit",
                  "unknown unit \"Gbs\"");
  expectOnlyError(parse(withLine(5, "    capacity: 0Gbps")), 5, 15, "links[0].capacity",
                  "must be greater than 0");
  std::string zero = withLine(10, "    guarantee: 0");
  zero = zero.replace(zero.find("    limit: 60Gbps"), 17, "    limit: 0");
  auto zero_limit = parse(zero);
  expectOnlyError(zero_limit, 11, 12, "tenants[0].limit", "must be greater than 0");
  // Byte rates, decimals and plain bits per second are all accepted.
  auto p = parse(withLine(10, "    guarantee: 1.5GB/s"));
  expectOk(p);
  EXPECT_EQ(p.policy.tenants[0].guarantee_bytes_per_second, 1'500'000'000u);
  auto q = parse(withLine(10, "    guarantee: 8000000"));
  expectOk(q);
  EXPECT_EQ(q.policy.tenants[0].guarantee_bytes_per_second, 1'000'000u);
  // A guarantee of 0 (best effort) is fine.
  expectOk(parse(withLine(10, "    guarantee: 0")));
}

TEST(PolicyFile, LimitAgainstGuaranteeAndCapacity) {
  expectOnlyError(parse(withLine(11, "    limit: 30Gbps")), 11, 12, "tenants[0].limit",
                  "must be >= guarantee (limit 30Gbps < guarantee 40Gbps)");
  expectOk(parse(withLine(11, "    limit: 40Gbps")));  // equal is fine
  expectOnlyError(parse(withLine(11, "    limit: 600Gbps")), 11, 12, "tenants[0].limit",
                  "600Gbps exceeds the capacity of link \"fabric\" (100Gbps)");
  expectOk(parse(withLine(11, "    limit: 100Gbps")));
}

TEST(PolicyFile, ServiceLevelAndDscpRanges) {
  expectOnlyError(parse(withLine(13, "    serviceLevel: 16")), 13, 19, "tenants[0].serviceLevel",
                  "must be between 0 and 15, got 16");
  expectOnlyError(parse(withLine(13, "    serviceLevel: -1")), 13, 19, "tenants[0].serviceLevel",
                  "must be between 0 and 15, got -1");
  expectOk(parse(withLine(13, "    serviceLevel: 15")));
  expectOk(parse(withLine(13, "    serviceLevel: 0")));
  expectOnlyError(parse(withLine(14, "    dscp: 64")), 14, 11, "tenants[0].dscp",
                  "must be between 0 and 63, got 64");
  expectOnlyError(parse(withLine(14, "    dscp: 99999999999999999999999")), 14, 11,
                  "tenants[0].dscp", "must be between 0 and 63");
  expectOk(parse(withLine(14, "    dscp: 63")));
}

TEST(PolicyFile, WeightDefaultAndRange) {
  auto p = parse(withLine(12, ""));
  expectOk(p);
  EXPECT_EQ(p.policy.tenants[0].weight, 1u);
  expectOnlyError(parse(withLine(12, "    weight: 0")), 12, 13, "tenants[0].weight",
                  "must be between 1 and 10000, got 0");
  expectOnlyError(parse(withLine(12, "    weight: 10001")), 12, 13, "tenants[0].weight",
                  "must be between 1 and 10000");
  expectOk(parse(withLine(12, "    weight: 10000")));
}

TEST(PolicyFile, Dns1123Names) {
  expectOnlyError(parse(withLine(8, "  - name: Tenant-A")), 8, 11, "tenants[0].name",
                  "is not a DNS-1123 label");
  expectOnlyError(parse(withLine(8, "  - name: tenant_a")), 8, 11, "tenants[0].name",
                  "is not a DNS-1123 label");
  expectOnlyError(parse(withLine(8, "  - name: -a")), 8, 11, "tenants[0].name",
                  "is not a DNS-1123 label");
  expectOnlyError(parse(withLine(8, "  - name: " + std::string(64, 'a'))), 8, 11, "tenants[0].name",
                  "is not a DNS-1123 label");
  expectOk(parse(withLine(8, "  - name: " + std::string(63, 'a'))));
  // Link names too; the tenants referring to it are not blamed for its bad name.
  auto p = parse(withLine(4, "  - name: Fabric"));
  expectOnlyError(p, 4, 11, "links[0].name", "is not a DNS-1123 label");
}

TEST(PolicyFile, UniqueNames) {
  expectOnlyError(parse(withLine(16, "  - name: tenant-a")), 16, 11, "tenants[1].name",
                  "duplicate tenant name \"tenant-a\" (also tenants[0], line 8)");
  auto p = parse(withLine(6, "    headroom: 5%\n  - name: fabric\n    capacity: 10Gbps"));
  expectOnlyError(p, 7, 11, "links[1].name",
                  "duplicate link name \"fabric\" (also links[0], line 4)");
}

TEST(PolicyFile, TenantLinkMustExist) {
  expectOnlyError(parse(withLine(17, "    link: fabrik")), 17, 11, "tenants[1].link",
                  "unknown link \"fabrik\" (defined: fabric)");
}

TEST(PolicyFile, RequiredTenantFields) {
  expectOnlyError(parse(withLine(11, "")), 8, 5, "tenants[0].limit", "required field missing");
  expectOnlyError(parse(withLine(14, "")), 8, 5, "tenants[0].dscp", "required field missing");
  expectOnlyError(parse(withLine(5, "")), 4, 5, "links[0].capacity", "required field missing");
  // Optional: weight, trafficClasses, shareClass, headroom.
  auto p = parse(withLine(6, ""));
  expectOk(p);
  EXPECT_EQ(p.policy.links[0].headroom_percent, 0.0);
  expectOk(parse(withLine(15, "")));
}

TEST(PolicyFile, AdmissionPerLink) {
  // 40 + 60 = 100 > 95 (5% headroom): reported at the tenant where the sum first exceeds it.
  std::string over = withLine(18, "    guarantee: 60Gbps");
  over = over.replace(over.find("    limit: 40Gbps"), 17, "    limit: 60Gbps");
  expectOnlyError(
      parse(over), 18, 16, "tenants[1].guarantee",
      "admission: guarantees on link \"fabric\" add up to 100Gbps, more than the 95Gbps it "
      "admits (capacity 100Gbps minus 5% headroom)");
  // Exactly the admissible amount is fine: 40 + 55 = 95.
  std::string exact = withLine(18, "    guarantee: 55Gbps");
  exact = exact.replace(exact.find("    limit: 40Gbps"), 17, "    limit: 60Gbps");
  expectOk(parse(exact));
  // Fractional headroom: 2.5% of 100Gbps admits 97.5Gbps.
  std::string frac = withLine(6, "    headroom: 2.5%");
  frac = frac.replace(frac.find("    guarantee: 20Gbps"), 21, "    guarantee: 57.5Gbps");
  frac = frac.replace(frac.find("    limit: 40Gbps"), 17, "    limit: 60Gbps");
  expectOk(parse(frac));
  frac = frac.replace(frac.find("57.5Gbps"), 8, "57.6Gbps");
  expectOnlyError(parse(frac), 18, 16, "tenants[1].guarantee", "more than the 97.5Gbps it admits");
  // Headroom bounds.
  expectOnlyError(parse(withLine(6, "    headroom: 100%")), 6, 15, "links[0].headroom",
                  "less than 100%");
  expectOnlyError(parse(withLine(6, "    headroom: lots")), 6, 15, "links[0].headroom",
                  "expected a number");
}

// Admission and the agent's allocator share allocatableCapacity() (common/capacity.h), so the
// edge is exact: capacity 100000000001 B/s (800000000008 bps) minus 2.5 % is 97500000000.975,
// which admits 97500000000 B/s. Rates are whole bytes per second, so the smallest step over
// is one byte/s (8 bit/s); the former long-double check admitted it, the agent did not.
TEST(PolicyFile, AdmissionEdgeIsExactAndTheAgentsRule) {
  ASSERT_EQ(allocatableCapacity(100'000'000'001, 2.5), 97'500'000'000u);
  auto policy = [](const std::string& tenant_b_guarantee) {
    std::string y = withLine(5, "    capacity: 800000000008bps");
    y = y.replace(y.find("    headroom: 5%"), 16, "    headroom: 2.5%");
    y = y.replace(y.find("    guarantee: 20Gbps"), 21, "    guarantee: " + tenant_b_guarantee);
    return y.replace(y.find("    limit: 40Gbps"), 17, "    limit: 780Gbps");
  };
  // tenant-a 40Gbps = 5e9 B/s; tenant-b 740Gbps = 92.5e9 B/s: exactly 97.5e9.
  expectOk(parse(policy("740000000000bps")));
  expectOnlyError(parse(policy("740000000008bps")), 18, 16, "tenants[1].guarantee",
                  "more than the 780Gbps it admits");
}

TEST(PolicyFile, ServiceLevelAndDscpSharing) {
  // Same SL without shareClass: error at the second tenant.
  expectOnlyError(
      parse(withLine(21, "    serviceLevel: 1")), 21, 19, "tenants[1].serviceLevel",
      "serviceLevel 1 is also used by tenant \"tenant-a\" (tenants[0], line 8); tenants may "
      "share it only if both set shareClass: true");
  expectOnlyError(parse(withLine(22, "    dscp: 26")), 22, 11, "tenants[1].dscp",
                  "dscp 26 is also used by tenant");
  // Only one of them shares: still an error.
  expectOnlyError(parse(withLine(21, "    serviceLevel: 1\n    shareClass: true")), 21, 19,
                  "tenants[1].serviceLevel", "is also used by");
  // Both share: fine, for SL and DSCP alike.
  std::string both = withLine(
      21, "    serviceLevel: 1\n    dscp: 26\n    trafficClasses: [2]\n    shareClass: true");
  both = both.replace(both.find("    dscp: 18\n    trafficClasses: [2]\n"), 36, "");
  both = both.replace(both.find("    trafficClasses: [1]\n"), 24,
                      "    trafficClasses: [1]\n    shareClass: true\n");
  expectOk(parse(both));
}

TEST(PolicyFile, TrafficClassMapsToOneTenant) {
  expectOnlyError(parse(withLine(23, "    trafficClasses: [3, 1]")), 23, 25,
                  "tenants[1].trafficClasses[1]",
                  "trafficClass 1 already maps to tenant \"tenant-a\" (tenants[0], line 8)");
  expectOnlyError(parse(withLine(15, "    trafficClasses: [1, 1]")), 15, 25,
                  "tenants[0].trafficClasses[1]", "trafficClass 1 is listed twice");
  expectOk(parse(withLine(15, "    trafficClasses: [1, 3, 4]")));
  expectOk(parse(withLine(15, "    trafficClasses: []")));
  std::string many = "    trafficClasses: [";
  for (int i = 100; i < 100 + static_cast<int>(kMaxTrafficClasses) + 1; ++i)
    many += std::to_string(i) + ",";
  many.back() = ']';
  expectOnlyError(parse(withLine(15, many)), 15, 21, "tenants[0].trafficClasses",
                  "too many items: " + std::to_string(kMaxTrafficClasses + 1));
}

TEST(PolicyFile, NamespacesAndVolcanoQueuesNameOneTenant) {
  const std::string a =
      "    trafficClasses: [1]\n    namespaces: [team-a, shared]\n"
      "    volcanoQueues: [queue-a, q.example]\n    default: true";
  ParsedPolicy p = parse(withLine(15, a));
  expectOk(p);
  EXPECT_EQ(p.policy.tenants[0].namespaces, (std::vector<std::string>{"team-a", "shared"}));
  EXPECT_EQ(p.policy.tenants[0].volcano_queues, (std::vector<std::string>{"queue-a", "q.example"}));
  EXPECT_TRUE(p.policy.tenants[0].is_default);
  EXPECT_FALSE(p.policy.tenants[1].is_default);
  ParsedPolicy back = parse(toYaml(p.policy));
  expectOk(back);
  EXPECT_EQ(back.policy, p.policy);
  // Lines 15-18 are tenant-a's; tenant-b's trafficClasses moves to line 26.
  expectOnlyError(parse(withLine(15, a) + "    namespaces: [shared]\n"), 27, 18,
                  "tenants[1].namespaces[0]",
                  "namespace \"shared\" already belongs to tenant \"tenant-a\" (tenants[0], "
                  "line 8); it must name one tenant");
  expectOnlyError(parse(withLine(15, a) + "    volcanoQueues: [q.example]\n"), 27, 21,
                  "tenants[1].volcanoQueues[0]",
                  "Volcano queue \"q.example\" already belongs to tenant \"tenant-a\"");
  expectOnlyError(parse(withLine(15, a) + "    default: true\n"), 27, 14, "tenants[1].default",
                  "tenant \"tenant-a\" (tenants[0], line 8) is the default already");
  expectOnlyError(parse(withLine(15, "    namespaces: [x, x]")), 15, 21, "tenants[0].namespaces[1]",
                  "namespace \"x\" is listed twice");
  expectOnlyError(parse(withLine(15, "    namespaces: [a.b]")), 15, 18, "tenants[0].namespaces[0]",
                  "\"a.b\" is not a DNS-1123 label (a Kubernetes namespace name)");
  expectOnlyError(parse(withLine(15, "    volcanoQueues: [Queue_A]")), 15, 21,
                  "tenants[0].volcanoQueues[0]", "is not a DNS-1123 subdomain");
  expectOnlyError(parse(withLine(15, "    namespaces: [[a]]")), 15, 18, "tenants[0].namespaces[0]",
                  "expected a string, got a sequence");
  expectOnlyError(parse(withLine(15, "    volcanoQueues: q")), 15, 20, "tenants[0].volcanoQueues",
                  "expected a sequence");
  expectOnlyError(parse(withLine(15, "    default: yes")), 15, 14, "tenants[0].default",
                  "expected true or false");
  // Structured input gets the same rules.
  PolicySpec spec = p.policy;
  spec.tenants[1].namespaces = {"team-a"};
  auto errors = validatePolicy(spec);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].field, "tenants[1].namespaces[0]");
}

TEST(PolicyFile, EveryErrorIsReportedSorted) {
  std::string y = withLine(11, "    limit: 30Gbps");              // limit < guarantee
  y = y.replace(y.find("    dscp: 18"), 12, "    dscp: 99");      // line 22
  y = y.replace(y.find("kind: TenantPolicy"), 18, "kind: Nope");  // line 2
  auto p = parse(y);
  ASSERT_EQ(p.errors.size(), 3u) << allErrors(p);
  EXPECT_EQ(p.errors[0].line, 2);
  EXPECT_EQ(p.errors[1].line, 11);
  EXPECT_EQ(p.errors[2].line, 22);
  EXPECT_TRUE(p.policy.tenants.empty());  // nothing usable leaks out of a rejected file
}

TEST(PolicyFile, NonScalarKeys) {
  auto p = parse(withLine(12, "    ? [a, b]\n    : 2"));
  EXPECT_FALSE(p.ok());
  expectError(p, 12, 7, "tenants[0]", "keys must be plain names");
}

TEST(PolicyFile, CanonicalYamlRoundTrips) {
  ParsedPolicy p = parse(kBase);
  ASSERT_TRUE(p.ok());
  std::string y = toYaml(p.policy, "version 3\nsecond line");
  EXPECT_EQ(y.rfind("# version 3\n# second line\napiVersion: tenantqos/v1\n", 0), 0u) << y;
  ParsedPolicy back = parse(y);
  ASSERT_TRUE(back.ok()) << allErrors(back) << y;
  EXPECT_EQ(back.policy, p.policy);

  // Rates that formatRate cannot show exactly, fractional headroom, shareClass, empty lists.
  PolicySpec odd;
  odd.links.push_back({"l1", 1'234'567'891, 2.5});
  TenantSpec t;
  t.name = "t1";
  t.link = "l1";
  t.guarantee_bytes_per_second = 1'234'567;
  t.limit_bytes_per_second = 1'000'000'001;
  t.weight = 7;
  t.service_level = 3;
  t.dscp = 10;
  t.share_class = true;
  odd.tenants.push_back(t);
  std::string oy = toYaml(odd);
  ParsedPolicy ob = parse(oy);
  ASSERT_TRUE(ob.ok()) << allErrors(ob) << oy;
  EXPECT_EQ(ob.policy, odd) << oy;
  EXPECT_NE(oy.find("guarantee: 1234567B/s"), std::string::npos) << oy;
  EXPECT_NE(oy.find("shareClass: true"), std::string::npos);
  EXPECT_EQ(oy.find("trafficClasses"), std::string::npos);

  PolicySpec empty;
  ParsedPolicy eb = parse(toYaml(empty));
  ASSERT_TRUE(eb.ok()) << allErrors(eb);
  EXPECT_EQ(eb.policy, empty);
}

TEST(PolicyFile, ExactRateText) {
  EXPECT_EQ(exactRateText(5'000'000'000), "40Gbps");
  EXPECT_EQ(exactRateText(187'500'000), "1.5Gbps");
  EXPECT_EQ(exactRateText(1'234'567), "1234567B/s");
  EXPECT_EQ(exactRateText(0), "0bps");
}

TEST(PolicyFile, StructuredValidationHasNoPositions) {
  PolicySpec p = parse(kBase).policy;
  EXPECT_TRUE(validatePolicy(p).empty());
  p.tenants[1].dscp = 64;
  p.tenants[1].weight = 0;
  p.tenants[0].link = "nope";
  auto errors = validatePolicy(p);
  ASSERT_EQ(errors.size(), 3u);
  std::string all;
  for (auto& e : errors) all += e.toString() + "\n";
  EXPECT_NE(all.find("<policy>: tenants[0].link: unknown link \"nope\""), std::string::npos) << all;
  EXPECT_NE(all.find("<policy>: tenants[1].dscp: must be between 0 and 63, got 64"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("<policy>: tenants[1].weight: must be between 1 and 10000, got 0"),
            std::string::npos)
      << all;
  PolicySpec many;
  many.tenants.resize(kMaxTenants + 1);
  auto too_many = validatePolicy(many);
  ASSERT_FALSE(too_many.empty());
  EXPECT_EQ(too_many[0].field, "tenants");
}

// The largest policy the rules allow: kMaxTenants tenants sharing one class.
std::string largestPolicy() {
  std::string y =
      "apiVersion: tenantqos/v1\nkind: TenantPolicy\nlinks:\n"
      "  - name: fabric\n    capacity: 100Gbps\ntenants:\n";
  for (size_t i = 0; i < kMaxTenants; ++i) {
    const std::string n = std::to_string(i);
    y += "  - name: tenant-" + n +
         "\n    link: fabric\n    guarantee: 1Mbps\n    limit: 1Gbps\n"
         "    weight: 1\n    serviceLevel: 1\n    dscp: 10\n    shareClass: true\n"
         "    trafficClasses: [" +
         n + "]\n";
  }
  return y;
}

TEST(PolicyFile, DeepOrHugeYamlIsRejectedBeforeParsing) {
  auto expectBudget = [](const std::string& text, const std::string& reason, int line, int col) {
    ParsedPolicy p = parse(text);
    ASSERT_EQ(p.errors.size(), 1u) << allErrors(p);
    EXPECT_EQ(p.errors[0].field, "(yaml)");
    EXPECT_NE(p.errors[0].reason.find(reason), std::string::npos) << p.errors[0].reason;
    EXPECT_EQ(p.errors[0].line, line);
    EXPECT_EQ(p.errors[0].column, col);
  };
  // The issue's cases: 4 MB of '[' and of "{a: ".
  expectBudget(std::string(4'000'000, '['), "nested deeper than 32 levels", 1,
               32);  // + the document
  std::string braces;
  for (int i = 0; i < 800'000; ++i) braces += "{a: ";
  expectBudget(braces, "nested deeper than 32 levels", 1, 4 * 31 + 1);
  // Block nesting: compact "- - -" and indentation.
  std::string dashes;
  for (int i = 0; i < 100; ++i) dashes += "- ";
  expectBudget(dashes + "x\n", "nested deeper than 32 levels", 1, 201);  // at the node
  std::string indented;
  for (int i = 0; i < 40; ++i) indented += std::string(i, ' ') + "k" + std::to_string(i) + ":\n";
  expectBudget(indented, "nested deeper than 32 levels", 33, 33);
  // Wide instead of deep.
  std::string wide = "x: [";
  for (int i = 0; i < 300'000; ++i) wide += "1,";
  expectBudget(wide + "1]\n", "more than 200000 YAML nodes", 1, 400'000);
  // Brackets inside quotes and comments do not count.
  expectOk(parse(withLine(7, "# " + std::string(100, '[') + "\ntenants:")));
  expectOk(parse(withLine(9, "    link: \"fabric\"  # " + std::string(100, '{'))));
  ParsedPolicy q = parse(withLine(9, "    link: 'fab" + std::string(100, '[') + "'"));
  ASSERT_FALSE(q.errors.empty());
  EXPECT_EQ(q.errors[0].field, "tenants[0].link") << allErrors(q);  // unknown link, not budget
}

TEST(PolicyFile, TheLargestValidPolicyFitsTheBudget) {
  const std::string y = largestPolicy();
  ASSERT_LT(y.size(), kMaxPolicyBytes);
  expectOk(parse(y));
  // One tenant more is a validation error (what one agent supports), not a budget error.
  std::string more = y +
                     "  - name: one-more\n    link: fabric\n    guarantee: 1Mbps\n"
                     "    limit: 1Gbps\n    serviceLevel: 1\n    dscp: 10\n    shareClass: true\n";
  ParsedPolicy p = parse(more);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.errors[0].field, "tenants") << allErrors(p);
}

TEST(PolicyFile, EmptyTenantListIsAValidPolicy) {
  auto p = parse("apiVersion: tenantqos/v1\nkind: TenantPolicy\nlinks: []\ntenants: []\n");
  expectOk(p);
  expectOnlyError(parse("apiVersion: tenantqos/v1\nkind: TenantPolicy\nlinks: []\n"), 1, 1,
                  "tenants", "required field missing");
}

}  // namespace
}  // namespace tq::policy
