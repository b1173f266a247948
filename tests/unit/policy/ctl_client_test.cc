// tenantqosctl's connection: the replicas in order, HOST:PORT checked, failures as exit codes.
#include "policy/ctl_client.h"

#include <gtest/gtest.h>

#include <sstream>

#include "ctl_test_util.h"

namespace tq::policy::ctl {
namespace {

using testing::LocalPolicyd;

rpc::TlsConfig insecure() {
  rpc::TlsConfig tls;
  tls.insecure = true;
  return tls;
}

TEST(CtlClientTest, EveryEntryMustBeHostPortAndTheMessageNamesWhereItCameFrom) {
  for (const auto& [list, from, want] :
       {std::tuple{"127.0.0.1:7400,nohost", "--server", "--server: \"nohost\" is not HOST:PORT"},
        std::tuple{"::1:7400", "$TENANTQOS_SERVER",
                   "$TENANTQOS_SERVER: \"::1:7400\" is not HOST:PORT (an IPv6 address is "
                   "written [ADDRESS]:PORT)"},
        std::tuple{"a:1,,b:2", "--server", "--server: empty entry in \"a:1,,b:2\""},
        std::tuple{"a:99999", "--server", "the port is not 0..65535"}}) {
    Client c(list, 1, insecure(), from);
    std::ostringstream err;
    EXPECT_EQ(c.connect(err), kExitUsage) << list;
    EXPECT_NE(err.str().find(want), std::string::npos) << err.str();
  }
}

TEST(CtlClientTest, UnreachableIsExitThreeNamingTheAddress) {
  Client c("127.0.0.1:1", 1, insecure());
  std::ostringstream err;
  EXPECT_EQ(c.connect(err), kExitUnreachable);
  EXPECT_NE(err.str().find("cannot reach tenantqos-policyd at 127.0.0.1:1"), std::string::npos)
      << err.str();
  EXPECT_NE(err.str().find("a TLS server refuses --insecure clients"), std::string::npos);
}

TEST(CtlClientTest, UnusableTlsFilesAreAUsageError) {
  rpc::TlsConfig tls;
  tls.ca_file = "/nonexistent/ca.pem";
  tls.cert_file = "/nonexistent/cert.pem";
  tls.key_file = "/nonexistent/key.pem";
  Client c("127.0.0.1:1", 1, tls);
  std::ostringstream err;
  EXPECT_EQ(c.connect(err), kExitUsage);
  EXPECT_NE(err.str().find("/nonexistent/ca.pem"), std::string::npos) << err.str();
}

TEST(CtlClientTest, TakesTheFirstReplicaThatAnswers) {
  LocalPolicyd policyd;
  ASSERT_TRUE(policyd.ok());
  Client c("127.0.0.1:1," + policyd.address(), 5, insecure());
  std::ostringstream err;
  ASSERT_EQ(c.connect(err), 0) << err.str();
  EXPECT_NE(err.str().find("127.0.0.1:1: connection failed; trying the next server"),
            std::string::npos)
      << err.str();
  EXPECT_EQ(c.server(), policyd.address()) << "later messages name the replica in use";
  grpc::ClientContext ctx;
  c.prepare(&ctx);
  tenantqos::v1::ListVersionsResponse resp;
  EXPECT_TRUE(c.stub().ListVersions(&ctx, tenantqos::v1::ListVersionsRequest(), &resp).ok());
}

TEST(CtlClientTest, FailedCallsMapToExitCodes) {
  Client c("h:1", 1, insecure());
  std::ostringstream err;
  EXPECT_EQ(c.fail(grpc::Status(grpc::StatusCode::UNAVAILABLE, "down"), "get", err),
            kExitUnreachable);
  EXPECT_EQ(err.str(),
            "tenantqosctl: get: tenantqos-policyd at h:1 did not answer (UNAVAILABLE: "
            "down)\n");
  err.str("");
  EXPECT_EQ(c.fail(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "slow"), "get", err),
            kExitUnreachable);
  err.str("");
  EXPECT_EQ(
      c.fail(grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "no role\n\x1b[1mx"), "apply", err),
      kExitRejected);
  EXPECT_EQ(err.str(), "tenantqosctl: apply failed (PERMISSION_DENIED):\nno role\n\\x1b[1mx\n");
}

TEST(CtlClientTest, CodeNames) {
  EXPECT_EQ(codeName(grpc::StatusCode::OK), "OK");
  EXPECT_EQ(codeName(grpc::StatusCode::FAILED_PRECONDITION), "FAILED_PRECONDITION");
  EXPECT_EQ(codeName(grpc::StatusCode::UNAUTHENTICATED), "UNAUTHENTICATED");
  EXPECT_EQ(codeName(static_cast<grpc::StatusCode>(99)), "UNKNOWN");
}

TEST(CtlClientTest, FetchPolicyChecksTheVersionBeforeConnecting) {
  std::ostringstream out, err;
  std::istringstream in;
  CtlContext ctx{out, err, in, [](const std::string&) { return std::string(); }};
  Args a;
  a.cmd = findCommand("get");
  a.values["--version"] = "0";
  Client c("127.0.0.1:1", 1, insecure());
  PolicyRecord r;
  EXPECT_EQ(fetchPolicy(a, ctx, c, "get", &r), kExitUsage);
  EXPECT_NE(err.str().find("--version needs a version number >= 1"), std::string::npos);
  EXPECT_EQ(err.str().find("cannot reach"), std::string::npos) << "no connection attempted";
}

}  // namespace
}  // namespace tq::policy::ctl
