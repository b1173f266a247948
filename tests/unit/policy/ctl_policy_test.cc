// validate, apply, get, history and rollback against a real policyd in this process.
#include "policy/ctl_policy.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "ctl_test_util.h"
#include "test_util.h"

namespace tq::policy::ctl {
namespace {

using testing::CtlRun;
using testing::examplePolicy;
using testing::LocalPolicyd;
using testing::runCtlWith;

std::string exampleText() {
  auto text = readFile(examplePolicy(), kMaxPolicyBytes);
  EXPECT_TRUE(text.ok());
  return text.ok() ? *text : "";
}

TEST(CtlPolicyTest, ValidateIsOfflineAndPrintsEveryError) {
  CtlRun r = runCtlWith({"--server", "127.0.0.1:1", "validate", examplePolicy()});
  EXPECT_EQ(r.rc, kExitOk) << r.err;
  EXPECT_EQ(r.out, examplePolicy() + ": valid (1 link, 2 tenants)\n");

  r = runCtlWith({"validate", "-o", "json", "-"}, exampleText());
  ASSERT_EQ(r.rc, kExitOk) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["version"], 0) << "not stored";

  r = runCtlWith({"validate", "-"}, testing::replaceLine(exampleText(), 29, "    guarantee: fast"));
  EXPECT_EQ(r.rc, kExitRejected);
  EXPECT_NE(r.err.find("<stdin>:29:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("-: invalid (1 error)"), std::string::npos) << r.err;

  r = runCtlWith({"validate", "-o", "yaml", examplePolicy()});
  EXPECT_EQ(r.rc, kExitUsage);
  EXPECT_NE(r.err.find("-o wants json, got \"yaml\""), std::string::npos);
  EXPECT_EQ(runCtlWith({"validate"}).rc, kExitUsage);
}

TEST(CtlPolicyTest, ApplyDryRunNoChangeAndExpectedVersion) {
  LocalPolicyd policyd;
  ASSERT_TRUE(policyd.ok());
  CtlRun r = policyd.ctl({"apply", "-f", examplePolicy(), "--dry-run"});
  ASSERT_EQ(r.rc, kExitOk) << r.err;
  EXPECT_NE(r.out.find("+ tenant tenant-a: added"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("dry run: would become version 1 (nothing stored)"), std::string::npos);
  EXPECT_EQ(policyd.ctl({"history"}).out, "no policy has been applied yet\n");

  r = policyd.ctl({"apply", "-f", examplePolicy()});
  ASSERT_EQ(r.rc, kExitOk) << r.err;
  EXPECT_NE(r.out.find("applied: version 1"), std::string::npos) << r.out;
  r = policyd.ctl({"apply", "-f", "-"}, exampleText());
  EXPECT_EQ(r.rc, kExitOk) << r.err;
  EXPECT_EQ(r.out, "no change: the policy equals version 1 (nothing stored)\n");

  const std::string changed =
      testing::replaceLine(exampleText(), 29, "    guarantee: 30Gbps          # less");
  r = policyd.ctl({"apply", "-f", "-", "--expected-version", "0"}, changed);
  EXPECT_EQ(r.rc, kExitRejected);
  EXPECT_NE(r.err.find("apply - failed (FAILED_PRECONDITION)"), std::string::npos) << r.err;
  r = policyd.ctl({"apply", "-f", "-", "--expected-version", "1"}, changed);
  ASSERT_EQ(r.rc, kExitOk) << r.err;
  EXPECT_NE(r.out.find("~ tenant tenant-a: changed"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(1 tenant unchanged)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("applied: version 2"), std::string::npos) << r.out;

  EXPECT_EQ(policyd.ctl({"apply"}).rc, kExitUsage);
  EXPECT_EQ(policyd.ctl({"apply", "-f", "x", "--expected-version", "v1"}).rc, kExitUsage);
  r = policyd.ctl({"apply", "-f", "/nonexistent/p.yaml"});
  EXPECT_EQ(r.rc, kExitRejected);
  EXPECT_NE(r.err.find("/nonexistent/p.yaml"), std::string::npos) << r.err;
}

TEST(CtlPolicyTest, GetHistoryAndRollback) {
  LocalPolicyd policyd;
  ASSERT_TRUE(policyd.ok());
  ASSERT_EQ(policyd.ctl({"apply", "-f", examplePolicy()}).rc, kExitOk);
  const std::string changed = testing::replaceLine(exampleText(), 29, "    guarantee: 30Gbps");
  ASSERT_EQ(policyd.ctl({"apply", "-f", "-"}, changed).rc, kExitOk);

  CtlRun r = policyd.ctl({"get"});
  ASSERT_EQ(r.rc, kExitOk) << r.err;
  EXPECT_EQ(r.out.rfind("# tenantqos policy version 2, applied ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find(" from <stdin>"), std::string::npos) << "the source name is shown";
  // What get prints is a policy file again.
  EXPECT_EQ(runCtlWith({"validate", "-"}, r.out).rc, kExitOk);

  r = policyd.ctl({"get", "-o", "json", "--version", "1"});
  ASSERT_EQ(r.rc, kExitOk) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["version"], 1);
  EXPECT_EQ(j["tenants"][0]["guaranteeBytesPerSecond"], 40'000'000'000 / 8);
  EXPECT_EQ(policyd.ctl({"get", "-o", "xml"}).rc, kExitUsage);
  r = policyd.ctl({"get", "--version", "9"});
  EXPECT_EQ(r.rc, kExitRejected);
  EXPECT_NE(r.err.find("NOT_FOUND"), std::string::npos) << r.err;

  r = policyd.ctl({"rollback", "1", "--expected-version", "2"});
  ASSERT_EQ(r.rc, kExitOk) << r.err;
  EXPECT_NE(r.out.find("rolled back: version 3"), std::string::npos) << r.out;
  EXPECT_EQ(policyd.ctl({"rollback", "0"}).rc, kExitUsage);
  EXPECT_EQ(policyd.ctl({"rollback", "1", "--expected-version", "2"}).rc, kExitRejected);

  r = policyd.ctl({"history"});
  ASSERT_EQ(r.rc, kExitOk) << r.err;
  std::istringstream lines(r.out);
  std::string header, v3, v2, v1;
  std::getline(lines, header);
  std::getline(lines, v3);
  std::getline(lines, v2);
  std::getline(lines, v1);
  EXPECT_EQ(header.rfind("VERSION  APPLIED (UTC)", 0), 0u) << r.out;
  EXPECT_EQ(v3.rfind("3 ", 0), 0u) << r.out;
  EXPECT_NE(v3.find("latest, rollback of 1"), std::string::npos) << r.out;
  EXPECT_EQ(v2.rfind("2 ", 0), 0u) << r.out;
  EXPECT_EQ(v2.find("latest"), std::string::npos) << r.out;
  EXPECT_NE(v1.find(examplePolicy()), std::string::npos) << "the source of version 1: " << r.out;
}

}  // namespace
}  // namespace tq::policy::ctl
