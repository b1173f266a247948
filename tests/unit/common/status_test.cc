#include "common/status.h"

#include <gtest/gtest.h>

namespace tq {
namespace {

Result<int> half(int x) {
  if (x % 2 != 0) return invalidArgument("odd: " + std::to_string(x));
  return x / 2;
}

Result<int> quarter(int x) {
  TQ_ASSIGN_OR_RETURN(int h, half(x));
  TQ_ASSIGN_OR_RETURN(int q, half(h));
  return q;
}

Status step(bool fail) {
  if (fail) return unavailable("link down");
  return okStatus();
}

Status outer(bool fail) {
  TQ_RETURN_IF_ERROR_CTX(step(fail), "apply class 1:10 on dev eth0");
  return okStatus();
}

TEST(Status, OkByDefault) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.toString(), "OK");
  EXPECT_TRUE(s.withContext("ignored").ok());
}

TEST(Status, ContextReadsOutermostFirst) {
  Status s = outer(true).withContext("reconcile");
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "reconcile: apply class 1:10 on dev eth0: link down");
  EXPECT_EQ(s.toString(), "UNAVAILABLE: reconcile: apply class 1:10 on dev eth0: link down");
  EXPECT_TRUE(outer(false).ok());
}

TEST(Status, ErrnoMapsCodeAndText) {
  Status s = errnoStatus(ENOENT, "open /run/x");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "open /run/x: No such file or directory");
  EXPECT_EQ(errnoStatus(EACCES, "x").code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(errnoStatus(ECONNREFUSED, "x").code(), StatusCode::kUnavailable);
  EXPECT_EQ(errnoStatus(12345, "x").code(), StatusCode::kInternal);
}

TEST(Status, OutOfFileDescriptorsNamesTheLimitNotJustTheObject) {
  Status s = errnoStatus(EMFILE, "open /run/tenantqos/tenants/t9");
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("open /run/tenantqos/tenants/t9: Too many open files (this process "
                             "has used all of its "),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("RLIMIT_NOFILE"), std::string::npos);
}

TEST(Result, ValueAndErrorPropagation) {
  auto r = quarter(12);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 3);
  auto bad = quarter(6);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "odd: 3");
  EXPECT_EQ(bad.valueOr(-1), -1);
}

TEST(Result, OkStatusIsNotAValue) {
  Result<int> r{Status()};
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

TEST(Result, MoveOnlyValues) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(7);
  ASSERT_TRUE(r.ok());
  std::unique_ptr<int> p = std::move(r).value();
  EXPECT_EQ(*p, 7);
}

}  // namespace
}  // namespace tq
