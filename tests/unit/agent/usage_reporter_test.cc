// The usage reports to policyd (agent/usage_reporter.h): what a report holds, and the reporter
// against an in-process fake PolicyService, its interval on a FakeClock.
#include "agent/usage_reporter.h"

#include <gtest/gtest.h>

#include "tests/unit/rpc/fake_policyd.h"

namespace tq::agent {
namespace {

using tq::testing::driveUntil;
using tq::testing::FakeServer;
using tq::testing::waitFor;

TEST(UsageReportTest, BuildsTotalsRatesAndErrors) {
  AgentState prev, now;
  prev.node = now.node = "n1";
  prev.published_at_ns = 1'000'000'000;
  now.published_at_ns = 3'000'000'000;  // 2 s later
  now.policy_version = 9;
  TenantStatus a;
  a.name = "tenant-a";
  a.transmit_bytes = 1000;
  prev.tenants.push_back(a);
  a.transmit_bytes = 5000;
  a.receive_bytes = 7;
  a.allocated_bytes_per_second = 11;
  a.guarantee_bytes_per_second = 12;
  a.limit_bytes_per_second = 13;
  a.throttled_ns = 2'500'000'000;
  a.processes = 4;
  now.tenants.push_back(a);
  TenantStatus b;  // new since the last report: no rate yet
  b.name = "tenant-b";
  b.transmit_bytes = 100;
  now.tenants.push_back(b);
  now.errors = {"apply policy v10: device ghost0 (link x) does not exist on this node"};

  NodeUsageReport r = buildUsageReport(now, &prev, 1234);
  EXPECT_EQ(r.node, "n1");
  EXPECT_EQ(r.policy_version, 9u);
  EXPECT_EQ(r.timestamp_unix_ms, 1234);
  ASSERT_EQ(r.tenants.size(), 2u);
  const TenantUsageReport& ta = r.tenants[0];
  EXPECT_EQ(ta.tenant, "tenant-a");
  EXPECT_EQ(ta.transmit_bytes_total, 5000u);
  EXPECT_EQ(ta.transmit_rate_bytes_per_second, 2000u);
  EXPECT_EQ(ta.receive_bytes_total, 7u);
  EXPECT_EQ(ta.allocated_rate_bytes_per_second, 11u);
  EXPECT_EQ(ta.guarantee_bytes_per_second, 12u);
  EXPECT_EQ(ta.limit_bytes_per_second, 13u);
  EXPECT_DOUBLE_EQ(ta.throttled_seconds_total, 2.5);
  EXPECT_EQ(ta.processes, 4u);
  EXPECT_EQ(r.tenants[1].transmit_rate_bytes_per_second, 0u);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_NE(r.errors[0].find("ghost0"), std::string::npos);

  // A counter going backwards (tenant file recreated) gives rate 0, not a huge number.
  prev.tenants[0].transmit_bytes = 1'000'000;
  EXPECT_EQ(buildUsageReport(now, &prev, 0).tenants[0].transmit_rate_bytes_per_second, 0u);
  EXPECT_EQ(buildUsageReport(now, nullptr, 0).tenants[0].transmit_rate_bytes_per_second, 0u);
}

TEST(UsageReporterTest, SendsPeriodicallyAndSurvivesPolicydOutage) {
  StateBoard board;
  AgentState s;
  s.node = "n1";
  s.published_at_ns = 1;
  s.policy_version = 2;
  board.publish(s);
  auto server = std::make_unique<FakeServer>();
  const int port = server->port;
  auto eps = rpc::makeChannelRing({"127.0.0.1:" + std::to_string(port)},
                                  BackoffOptions{20'000'000, 100'000'000},
                                  grpc::InsecureChannelCredentials());
  FakeClock clock;
  UsageReporter reporter(eps, board, 50'000'000, clock);
  reporter.start();
  auto reports = [&] {
    return server->service.locked([&] { return server->service.reports.size(); });
  };
  // Nothing is due before the first interval has passed on the clock.
  ASSERT_TRUE(waitFor([&] { return reporter.worker().sleepingUntilNs() > 0; }));
  EXPECT_EQ(reporter.reportsAttempted(), 0u);
  ASSERT_TRUE(driveUntil(clock, reporter.worker(), [&] { return reports() >= 2; }));
  server->stop();
  const uint64_t a0 = reporter.reportsAttempted();
  ASSERT_TRUE(driveUntil(clock, reporter.worker(), [&] {
    return reporter.reportsAttempted() >= a0 + 3;  // failed reports, no crash
  }));
  server = std::make_unique<FakeServer>(port);
  ASSERT_TRUE(server->server);
  ASSERT_TRUE(driveUntil(clock, reporter.worker(), [&] { return reports() >= 1; }));
  reporter.stop();
  auto sent = server->service.locked([&] { return server->service.reports; });
  EXPECT_EQ(sent[0].node(), "n1");
  EXPECT_EQ(sent[0].policy_version(), 2u);
  EXPECT_LE(sent[0].timestamp_unix_ms(), clock.wallNs() / 1'000'000) << "stamped by our clock";
}

}  // namespace
}  // namespace tq::agent
