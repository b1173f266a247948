#include "policy/service.h"

#include <gtest/gtest.h>

#include <stdlib.h>
#include <cmath>

#include <atomic>

#include "policy/file_store.h"
#include "tests/support/temp_dir.h"

namespace tq::policy {
namespace {

const char* const kPolicy = R"(apiVersion: tenantqos/v1
kind: TenantPolicy
links:
  - name: fabric
    capacity: 100Gbps
    headroom: 5%
tenants:
  - name: tenant-a
    link: fabric
    guarantee: 40Gbps
    limit: 60Gbps
    weight: 2
    serviceLevel: 1
    dscp: 26
    trafficClasses: [1]
  - name: tenant-b
    link: fabric
    guarantee: 20Gbps
    limit: 40Gbps
    serviceLevel: 2
    dscp: 18
    trafficClasses: [2]
)";

// kPolicy with tenant-a's limit set to `limit` (a distinct valid policy per value).
std::string policyWithLimit(const std::string& limit) {
  std::string s = kPolicy;
  s.replace(s.find("limit: 60Gbps"), 13, "limit: " + limit);
  return s;
}

ApplyRequest req(std::string yaml) {
  ApplyRequest r;
  r.yaml = std::move(yaml);
  r.source_name = "p.yaml";
  r.author = {"alice", {"tenantqos:admins"}};
  return r;
}

class CoreTest : public ::testing::Test {
 protected:
  CoreTest() : store_(makeMemoryStore()), core_(*store_, clock_, &metrics_) {
    core_.setPublisher(
        [this](const std::shared_ptr<const PolicyRecord>& r) { published_.push_back(r->version); });
  }
  FakeClock clock_{1'700'000'000'000'000'000};
  PolicydMetrics metrics_;
  std::unique_ptr<PolicyStore> store_;
  PolicyCore core_;
  std::vector<uint64_t> published_;
};

TEST_F(CoreTest, ApplyGetAndPublish) {
  EXPECT_EQ(core_.get(0).status().code(), StatusCode::kNotFound);
  auto r = core_.apply(req(kPolicy));
  ASSERT_TRUE(r.ok()) << r.status().toString();
  EXPECT_EQ(r->version, 1u);
  EXPECT_TRUE(r->changed);
  EXPECT_FALSE(r->dry_run);
  ASSERT_EQ(r->diff.tenants.size(), 2u);
  EXPECT_EQ(r->diff.tenants[0].kind, ChangeKind::kAdded);
  auto got = core_.get(0);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->version, 1u);
  EXPECT_EQ(got->source_yaml, kPolicy);
  EXPECT_EQ(got->applied_by, "alice");
  EXPECT_EQ(got->applied_by_groups, std::vector<std::string>{"tenantqos:admins"});
  EXPECT_EQ(got->source_name, "p.yaml");
  EXPECT_EQ(got->diff_summary, "tenants +tenant-a +tenant-b; links +fabric");
  EXPECT_EQ(got->applied_at_unix_ms, 1'700'000'000'000);
  EXPECT_EQ(got->policy.tenants[1].weight, 1u);  // default
  EXPECT_EQ(published_, std::vector<uint64_t>{1});
  EXPECT_EQ(core_.get(1)->version, 1u);
}

TEST_F(CoreTest, IdenticalPolicyStoresNothing) {
  ASSERT_TRUE(core_.apply(req(kPolicy)).ok());
  // Same content with other comments, formatting and order: still identical.
  std::string reformatted = std::string("# a comment\n") + kPolicy;
  auto r = core_.apply(req(reformatted));
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->changed);
  EXPECT_EQ(r->version, 1u);
  EXPECT_FALSE(r->diff.hasChanges());
  EXPECT_EQ(store_->list().size(), 1u);
  EXPECT_EQ(published_.size(), 1u);
  EXPECT_EQ(core_.get(0)->source_yaml, kPolicy);  // the stored source is untouched
}

TEST_F(CoreTest, DryRunStoresNothing) {
  ASSERT_TRUE(core_.apply(req(kPolicy)).ok());
  ApplyRequest a = req(policyWithLimit("70Gbps"));
  a.dry_run = true;
  auto r = core_.apply(a);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->dry_run);
  EXPECT_TRUE(r->changed);
  EXPECT_EQ(r->version, 2u);  // what it would get
  EXPECT_EQ(r->diff.tenants[0].details, std::vector<std::string>{"limit: 60Gbps -> 70Gbps"});
  EXPECT_EQ(core_.get(0)->version, 1u);
  EXPECT_EQ(store_->list().size(), 1u);
  EXPECT_EQ(published_.size(), 1u);
}

TEST_F(CoreTest, ExpectedVersion) {
  ApplyRequest first = req(kPolicy);
  first.expected_version = 0;  // "only if nothing was applied yet"
  ASSERT_TRUE(core_.apply(first).ok());
  ApplyRequest stale = req(policyWithLimit("70Gbps"));
  stale.expected_version = 0;
  auto r = core_.apply(stale);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("expected_version 0 is stale: the latest version is 1"),
            std::string::npos);
  EXPECT_EQ(core_.get(0)->version, 1u);
  stale.expected_version = 1;
  auto ok = core_.apply(stale);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->version, 2u);
}

TEST_F(CoreTest, InvalidPolicyChangesNothingAndListsEveryError) {
  ASSERT_TRUE(core_.apply(req(kPolicy)).ok());
  std::string bad = policyWithLimit("30Gbps");
  bad.replace(bad.find("dscp: 18"), 8, "dscp: 99");
  auto r = core_.apply(req(bad));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("2 errors in policy:"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("p.yaml:11:12: tenants[0].limit:"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("p.yaml:21:11: tenants[1].dscp:"), std::string::npos)
      << r.status().message();
  EXPECT_EQ(core_.get(0)->version, 1u);
  EXPECT_EQ(core_.get(0)->source_yaml, kPolicy);
  EXPECT_EQ(published_.size(), 1u);
}

TEST_F(CoreTest, Rollback) {
  ASSERT_TRUE(core_.apply(req(kPolicy)).ok());
  ASSERT_TRUE(core_.apply(req(policyWithLimit("70Gbps"))).ok());
  auto r = core_.rollback(1, std::nullopt, Author{"bob", {}});
  ASSERT_TRUE(r.ok()) << r.status().toString();
  EXPECT_EQ(r->version, 3u);
  EXPECT_TRUE(r->changed);
  EXPECT_EQ(r->diff.tenants[0].details, std::vector<std::string>{"limit: 70Gbps -> 60Gbps"});
  auto latest = core_.get(0);
  EXPECT_EQ(latest->rollback_of, 1u);
  EXPECT_EQ(latest->policy, core_.get(1)->policy);
  EXPECT_EQ(latest->applied_by, "bob");
  EXPECT_EQ(published_, (std::vector<uint64_t>{1, 2, 3}));
  // Rolling back to what is already the content: no new version.
  auto same = core_.rollback(1, std::nullopt, Author{"bob", {}});
  ASSERT_TRUE(same.ok());
  EXPECT_FALSE(same->changed);
  EXPECT_EQ(same->version, 3u);
  EXPECT_EQ(core_.rollback(9, std::nullopt, Author{"x", {}}).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(core_.rollback(0, std::nullopt, Author{"x", {}}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(core_.rollback(2, 1, Author{"x", {}}).status().code(), StatusCode::kFailedPrecondition);
}

TEST_F(CoreTest, VersionsArePublishedInOrder) {
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(core_.apply(req(policyWithLimit(std::to_string(41 + i) + "Gbps"))).ok());
  }
  ASSERT_EQ(published_.size(), 20u);
  for (size_t i = 0; i < published_.size(); ++i) EXPECT_EQ(published_[i], i + 1);
  auto list = core_.list();
  ASSERT_EQ(list.size(), 20u);
  EXPECT_EQ(list.front().version, 20u);
  EXPECT_EQ(list.back().version, 1u);
}

TEST_F(CoreTest, Usage) {
  ASSERT_TRUE(core_.apply(req(kPolicy)).ok());
  NodeUsageReport n1{"node1", 1, 123, {}, {}};
  n1.tenants.push_back(
      {"tenant-a", 100, 10, 5'000'000'000, 5'000'000'000, 5'000'000'000, 7'500'000'000, 0.5, 2});
  NodeUsageReport n2{"node2", 1, 124, {}, {"tc: something failed"}};
  n2.tenants.push_back(
      {"tenant-a", 50, 5, 1'000'000'000, 2'000'000'000, 5'000'000'000, 7'500'000'000, 0.25, 1});
  n2.tenants.push_back({"tenant-b", 7, 7, 7, 7, 7, 7, 0, 1});
  ASSERT_TRUE(core_.reportUsage(n1).ok());
  ASSERT_TRUE(core_.reportUsage(n2).ok());
  ClusterUsage u = core_.usage();
  ASSERT_EQ(u.nodes.size(), 2u);
  EXPECT_EQ(u.latest_version, 1u);
  EXPECT_EQ(u.nodes[0].received_unix_ms, 1'700'000'000'000);
  ASSERT_EQ(u.totals.size(), 2u);
  EXPECT_EQ(u.totals[0].tenant, "tenant-a");
  EXPECT_EQ(u.totals[0].transmit_bytes_total, 150u);
  EXPECT_EQ(u.totals[0].transmit_rate_bytes_per_second, 6'000'000'000u);
  EXPECT_DOUBLE_EQ(u.totals[0].throttled_seconds_total, 0.75);
  EXPECT_EQ(u.totals[0].processes, 3u);
  // A newer report replaces the node's previous one.
  n1.tenants.clear();
  ASSERT_TRUE(core_.reportUsage(n1).ok());
  u = core_.usage();
  EXPECT_EQ(u.totals[0].transmit_bytes_total, 50u);
  EXPECT_EQ(core_.reportUsage(NodeUsageReport{}).code(), StatusCode::kInvalidArgument);
  EXPECT_NE(metrics_.serialize().find("tenantqos_policyd_usage_nodes 2"), std::string::npos);
}

// Issue 23 item 12: one agent's figures can neither wrap the cluster totals nor count a tenant
// twice.
TEST_F(CoreTest, UsageTotalsSaturateAndATenantIsReportedOncePerNode) {
  NodeUsageReport hostile{"node1", 1, 1, {}, {}};
  hostile.tenants.push_back({"tenant-a", UINT64_MAX - 4, UINT64_MAX - 4, UINT64_MAX - 4,
                             UINT64_MAX - 4, UINT64_MAX - 4, UINT64_MAX - 4, 1e300,
                             UINT32_MAX - 1});
  NodeUsageReport honest{"node2", 1, 1, {}, {}};
  honest.tenants.push_back(
      {"tenant-a", 5'000'000'000'000, 5'000'000'000'000, 1000, 1000, 1000, 1000, 1e300, 3});
  ASSERT_TRUE(core_.reportUsage(hostile).ok());
  ASSERT_TRUE(core_.reportUsage(honest).ok());
  ClusterUsage u = core_.usage();
  ASSERT_EQ(u.totals.size(), 1u);
  const TenantUsageReport& t = u.totals[0];
  // Before: 5 TB + (2^64 - 5) wrapped to 4999999999995.
  EXPECT_EQ(t.transmit_bytes_total, UINT64_MAX);
  EXPECT_EQ(t.receive_bytes_total, UINT64_MAX);
  EXPECT_EQ(t.transmit_rate_bytes_per_second, UINT64_MAX);
  EXPECT_EQ(t.allocated_rate_bytes_per_second, UINT64_MAX);
  EXPECT_EQ(t.guarantee_bytes_per_second, UINT64_MAX);
  EXPECT_EQ(t.limit_bytes_per_second, UINT64_MAX);
  EXPECT_EQ(t.processes, UINT32_MAX);
  EXPECT_TRUE(std::isfinite(t.throttled_seconds_total));

  NodeUsageReport twice{"node3", 1, 1, {}, {}};
  twice.tenants.push_back({"tenant-b", 1, 1, 1, 1, 1, 1, 0, 1});
  twice.tenants.push_back({"tenant-b", 1, 1, 1, 1, 1, 1, 0, 1});
  const Status dup = core_.reportUsage(twice);
  EXPECT_EQ(dup.code(), StatusCode::kInvalidArgument) << dup.toString();
  EXPECT_NE(dup.message().find("tenant-b"), std::string::npos) << dup.message();
  EXPECT_EQ(core_.usage().nodes.size(), 2u);  // node3 was not kept
  twice.tenants.pop_back();
  twice.tenants[0].throttled_seconds_total = std::nan("");
  EXPECT_EQ(core_.reportUsage(twice).code(), StatusCode::kInvalidArgument);
}

NodeUsageReport nodeWithTenants(const std::string& node, size_t tenants) {
  NodeUsageReport r{node, 1, 1, {}, {}};
  for (size_t i = 0; i < tenants; ++i) {
    r.tenants.push_back({"t" + std::to_string(i), 1, 1, 1, 1, 1, 1, 0, 1});
  }
  return r;
}

TEST_F(CoreTest, UsageIsBoundedPerReportAndInTotalAndExpires) {
  CoreOptions o;
  o.usage_expiry_ns = 30'000'000'000;
  o.max_usage_entries = 3 * kMaxTenantsPerAgent;
  PolicyCore core(*store_, clock_, nullptr, nullptr, o);
  EXPECT_EQ(core.reportUsage(nodeWithTenants("big", kMaxTenantsPerAgent + 1)).code(),
            StatusCode::kInvalidArgument);
  NodeUsageReport bad = nodeWithTenants("node\x1b[31m", 1);
  EXPECT_EQ(core.reportUsage(bad).code(), StatusCode::kInvalidArgument);
  bad = nodeWithTenants("n", 1);
  bad.tenants[0].tenant = "a\nb";
  EXPECT_EQ(core.reportUsage(bad).code(), StatusCode::kInvalidArgument);
  // Errors are cut in number and length, not refused.
  NodeUsageReport chatty = nodeWithTenants("chatty", 1);
  chatty.errors.assign(100, std::string(10000, 'e'));
  ASSERT_TRUE(core.reportUsage(chatty).ok());
  ClusterUsage u = core.usage();
  ASSERT_EQ(u.nodes.size(), 1u);
  EXPECT_EQ(u.nodes[0].report.errors.size(), kMaxUsageErrorsPerNode);
  EXPECT_EQ(u.nodes[0].report.errors[0].size(), kMaxUsageErrorBytes);

  // The total budget: a node beyond it is refused; a node replacing its own report is not.
  for (const char* n : {"n1", "n2"})
    ASSERT_TRUE(core.reportUsage(nodeWithTenants(n, kMaxTenantsPerAgent)).ok());
  Status full = core.reportUsage(nodeWithTenants("n3", kMaxTenantsPerAgent));
  EXPECT_EQ(full.code(), StatusCode::kResourceExhausted) << full.toString();
  EXPECT_TRUE(core.reportUsage(nodeWithTenants("n2", kMaxTenantsPerAgent)).ok());

  // Silent nodes expire; then there is room again.
  clock_.advanceNs(20'000'000'000);
  ASSERT_TRUE(core.reportUsage(nodeWithTenants("n1", kMaxTenantsPerAgent)).ok());
  clock_.advanceNs(11'000'000'000);  // chatty and n2: 31 s silent; n1: 11 s
  u = core.usage();
  ASSERT_EQ(u.nodes.size(), 1u);
  EXPECT_EQ(u.nodes[0].report.node, "n1");
  EXPECT_TRUE(core.reportUsage(nodeWithTenants("n3", kMaxTenantsPerAgent)).ok());
}

TEST_F(CoreTest, UsagePagesCoverEveryNodeOnceAndTotalsCoverAll) {
  CoreOptions o;
  o.max_usage_entries = 100'000;
  PolicyCore core(*store_, clock_, nullptr, nullptr, o);
  for (int i = 0; i < 12; ++i) {
    ASSERT_TRUE(core.reportUsage(nodeWithTenants("node" + std::to_string(10 + i), 4000)).ok());
  }
  std::vector<std::string> seen;
  std::string token;
  int pages = 0;
  do {
    ClusterUsage u = core.usage(token);
    ++pages;
    EXPECT_EQ(u.total_nodes, 12u);
    ASSERT_EQ(u.totals.size(), 4000u);
    EXPECT_EQ(u.totals[0].processes, 12u);  // summed over all nodes on every page
    size_t entries = 0;
    for (const auto& n : u.nodes) {
      seen.push_back(n.report.node);
      entries += n.report.tenants.size();
    }
    EXPECT_LE(entries, kUsagePageEntries);
    token = u.next_page_token;
  } while (!token.empty() && pages < 20);
  EXPECT_EQ(pages, 3);  // 5 + 5 + 2 nodes of 4000 entries
  ASSERT_EQ(seen.size(), 12u);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(seen[i], "node" + std::to_string(10 + i));
}

TEST_F(CoreTest, Metrics) {
  ASSERT_TRUE(core_.apply(req(kPolicy)).ok());
  ASSERT_TRUE(core_.apply(req(kPolicy)).ok());
  ASSERT_FALSE(core_.apply(req("nope: 1")).ok());
  std::string m = metrics_.serialize();
  EXPECT_NE(m.find("tenantqos_policyd_policy_version 1"), std::string::npos) << m;
  EXPECT_NE(m.find("tenantqos_policyd_applies_total{op=\"apply\",result=\"applied\"} 1"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("tenantqos_policyd_applies_total{op=\"apply\",result=\"unchanged\"} 1"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("tenantqos_policyd_applies_total{op=\"apply\",result=\"invalid\"} 1"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("tenantqos_policyd_store_corrupt_records 0"), std::string::npos) << m;
}

std::atomic<bool> g_fail{false};
Status failHook(const std::string&, const std::string&) {
  return g_fail ? internalError("injected crash between write and rename") : okStatus();
}

TEST(CoreWithFileStore, StoreFailureLeavesTheServiceUnchanged) {
  tq::testing::TempDir temp("tqpol-core");
  ASSERT_TRUE(temp.ok()) << temp.error();
  const std::string& dir = temp.path();
  {
    FileStoreOptions o;
    o.before_rename = &failHook;
    auto store = openFileStore(dir, o);
    ASSERT_TRUE(store.ok());
    FakeClock clock;
    PolicyCore core(**store, clock);
    std::vector<uint64_t> published;
    core.setPublisher(
        [&](const std::shared_ptr<const PolicyRecord>& r) { published.push_back(r->version); });
    ASSERT_TRUE(core.apply(req(kPolicy)).ok());
    g_fail = true;
    auto r = core.apply(req(policyWithLimit("70Gbps")));
    g_fail = false;
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInternal);  // the server's fault, not the client's
    EXPECT_NE(r.status().message().find("injected crash"), std::string::npos);
    EXPECT_EQ(core.get(0)->version, 1u);
    EXPECT_EQ(core.get(0)->source_yaml, kPolicy);
    EXPECT_EQ(core.list().size(), 1u);
    EXPECT_EQ(published, std::vector<uint64_t>{1});
    // And it recovers: the same change then gets version 2.
    auto again = core.apply(req(policyWithLimit("70Gbps")));
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->version, 2u);
  }
  {
    auto store = openFileStore(dir);
    ASSERT_TRUE(store.ok());
    FakeClock clock;
    PolicyCore core(**store, clock);
    EXPECT_EQ(core.get(0)->version, 2u);
    EXPECT_EQ(core.list().size(), 2u);
  }
}

}  // namespace
}  // namespace tq::policy
