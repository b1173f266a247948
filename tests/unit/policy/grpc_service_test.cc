#include <gtest/gtest.h>

#include "policy/grpc_service.h"

namespace tq::policy {
namespace {

TEST(GrpcStatus, CodesMatchTheCause) {
  EXPECT_TRUE(toGrpcStatus(okStatus()).ok());
  EXPECT_EQ(toGrpcStatus(invalidArgument("x")).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(toGrpcStatus(failedPrecondition("x")).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(toGrpcStatus(notFound("x")).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(toGrpcStatus(dataLoss("x")).error_code(), grpc::StatusCode::DATA_LOSS);
  EXPECT_EQ(toGrpcStatus(resourceExhausted("x")).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(toGrpcStatus(aborted("x")).error_code(), grpc::StatusCode::ABORTED);
  EXPECT_EQ(toGrpcStatus(internalError("x")).error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_EQ(toGrpcStatus(unavailable("x")).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(toGrpcStatus(invalidArgument("the message")).error_message(), "the message");
}

TEST(GrpcStatus, VeryLongErrorListsAreCutAtALineWithACount) {
  std::string m = "400 errors in policy:";
  for (int i = 0; i < 400; ++i)
    m += "\np.yaml:" + std::to_string(i + 1) + ":5: tenants[" + std::to_string(i) + "].x: bad";
  grpc::Status s = toGrpcStatus(invalidArgument(m));
  EXPECT_LE(s.error_message().size(), 6200u);
  EXPECT_EQ(s.error_message().rfind("400 errors in policy:\np.yaml:1:5:", 0), 0u);
  EXPECT_NE(s.error_message().find("more lines not shown (run `tenantqosctl validate FILE`"),
            std::string::npos);
}

}  // namespace
}  // namespace tq::policy
