// `tenantqosctl top` against real policyds in this process: one replica's view, the merge over
// several, and a replica that does not answer.
#include "policy/ctl_top.h"

#include <gtest/gtest.h>

#include "ctl_test_util.h"

namespace tq::policy::ctl {
namespace {

namespace v1 = tenantqos::v1;
using testing::CtlRun;
using testing::LocalPolicyd;
using testing::runCtlWith;

// Reports `rate` bytes/s of tenant-a for `node` to `policyd`, with `errors`.
void report(const LocalPolicyd& policyd, const std::string& node, uint64_t rate,
            const std::vector<std::string>& errors = {}) {
  auto stub = v1::PolicyService::NewStub(
      grpc::CreateChannel(policyd.address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext c;
  c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::ReportUsageRequest req;
  req.set_node(node);
  req.set_timestamp_unix_ms(1);
  auto* t = req.add_tenants();
  t->set_tenant("tenant-a");
  t->set_transmit_rate_bytes_per_second(rate);
  t->set_processes(2);
  for (const std::string& e : errors) req.add_errors(e);
  v1::ReportUsageResponse resp;
  const grpc::Status s = stub->ReportUsage(&c, req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
}

TEST(CtlTopTest, OneReplicasNodesTotalsAndEscapedErrors) {
  LocalPolicyd policyd;
  ASSERT_TRUE(policyd.ok());
  CtlRun r = policyd.ctl({"top"});
  ASSERT_EQ(r.rc, kExitOk) << r.err;
  EXPECT_EQ(r.out, "no node has reported usage yet (policy version 0)\n");

  report(policyd, "node-a", 125'000'000, {"tc: class 1:2 \x1b[31mfailed"});
  report(policyd, "node-b", 250'000'000);
  r = policyd.ctl({"top"});
  ASSERT_EQ(r.rc, kExitOk) << r.err;
  EXPECT_NE(r.out.find("policy version 0, 2 nodes reporting\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("NODE    VERSION  AGE"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("node-a  0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" 1Gbps"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" 2Gbps"), std::string::npos) << r.out;
  // The total row sums both nodes: 3 Gbit/s, 4 processes.
  const size_t total = r.out.find("\nTOTAL");
  ASSERT_NE(total, std::string::npos) << r.out;
  const std::string total_row = r.out.substr(total + 1, r.out.find('\n', total + 1) - total - 1);
  EXPECT_NE(total_row.find(" 3Gbps"), std::string::npos) << total_row;
  EXPECT_EQ(total_row.substr(total_row.size() - 2), " 4") << total_row;
  EXPECT_NE(r.out.find("node errors:\n  node-a: tc: class 1:2 \\x1b[31mfailed\n"),
            std::string::npos)
      << r.out;
}

TEST(CtlTopTest, SeveralReplicasAreMergedAndAMissingOneIsNamed) {
  LocalPolicyd a, b;
  ASSERT_TRUE(a.ok() && b.ok());
  report(a, "node-a", 125'000'000);
  report(b, "node-b", 500'000'000);
  const std::string dead = "127.0.0.1:1";
  CtlRun r = runCtlWith({"--server", a.address() + "," + b.address() + "," + dead, "--insecure",
                         "--timeout", "5", "top"});
  ASSERT_EQ(r.rc, kExitOk) << r.err;
  EXPECT_NE(r.out.find("replica " + dead +
                       " (unreachable): the nodes that report to it are "
                       "missing\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("2 nodes reporting"), std::string::npos) << r.out;
  const size_t total = r.out.find("\nTOTAL");
  ASSERT_NE(total, std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" 5Gbps", total), std::string::npos) << "1 + 4 Gbit/s\n" << r.out;

  r = runCtlWith({"--server", dead + ",127.0.0.1:2", "--insecure", "top"});
  EXPECT_EQ(r.rc, kExitUnreachable);
  EXPECT_NE(r.err.find("top: no replica answered: " + dead + " (unreachable), 127.0.0.1:2"),
            std::string::npos)
      << r.err;
  r = runCtlWith({"--server", a.address() + ",nohost", "--insecure", "top"});
  EXPECT_EQ(r.rc, kExitUsage) << r.out;
  EXPECT_NE(r.err.find("\"nohost\" is not HOST:PORT"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace tq::policy::ctl
