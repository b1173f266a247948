#include "policy/authz.h"

#include <gtest/gtest.h>

namespace tq::policy {
namespace {

Caller caller(std::string cn, std::vector<std::string> groups) {
  return makeCaller(rpc::PeerIdentity{true, std::move(cn), std::move(groups)}, false,
                    "ipv4:10.0.0.1:4242");
}

TEST(AuthzTest, EachRoleGetsExactlyItsMethods) {
  const Caller admin = caller("alice", {"acme", "tenantqos:admins"});
  const Caller viewer = caller("bob", {"tenantqos:viewers"});
  const Caller agent = caller("node1", {"tenantqos:agents"});
  const Caller nobody = caller("eve", {});
  for (Permission p : {Permission::kChange, Permission::kRead, Permission::kUsage,
                       Permission::kWatch, Permission::kReport, Permission::kAllocate}) {
    EXPECT_TRUE(authorize(admin, "M", p, "any-node").ok());
    EXPECT_EQ(authorize(nobody, "M", p, "eve").code(), StatusCode::kPermissionDenied);
  }
  EXPECT_TRUE(authorize(viewer, "GetPolicy", Permission::kRead).ok());
  EXPECT_TRUE(authorize(viewer, "GetUsage", Permission::kUsage).ok());
  EXPECT_EQ(authorize(viewer, "WatchPolicy", Permission::kWatch).code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(authorize(viewer, "ReportUsage", Permission::kReport, "bob").code(),
            StatusCode::kPermissionDenied);
  EXPECT_TRUE(authorize(agent, "WatchPolicy", Permission::kWatch).ok());
  EXPECT_TRUE(authorize(agent, "ReportUsage", Permission::kReport, "node1").ok());
  EXPECT_TRUE(authorize(agent, "ReportUsage", Permission::kReport).ok());  // role only
  EXPECT_EQ(authorize(agent, "GetPolicy", Permission::kRead).code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(authorize(agent, "Allocate", Permission::kAllocate, "node1").ok());
  EXPECT_EQ(authorize(viewer, "Allocate", Permission::kAllocate).code(),
            StatusCode::kPermissionDenied);
  Status other = authorize(agent, "Allocate", Permission::kAllocate, "node2");
  EXPECT_EQ(other.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(other.message().find("may report demand only for node \"node1\""), std::string::npos)
      << other.message();

  Status s = authorize(viewer, "ApplyPolicy", Permission::kChange);
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(),
            "ApplyPolicy: bob (groups tenantqos:viewers) lacks the role tenantqos:admins");
  s = authorize(agent, "ReportUsage", Permission::kReport, "node2");
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(s.message().find("node1 (groups tenantqos:agents) may report usage only for node "
                             "\"node1\", not for \"node2\""),
            std::string::npos)
      << s.message();
}

TEST(AuthzTest, NoVerifiedIdentityIsUnauthenticated) {
  Caller c = makeCaller(rpc::PeerIdentity{}, false, "ipv4:10.0.0.1:4242");
  EXPECT_EQ(authorize(c, "GetPolicy", Permission::kRead).code(), StatusCode::kUnauthenticated);
}

TEST(AuthzTest, InsecureCallersAreNamedByHostAndHoldEveryRole) {
  Caller c = makeCaller(rpc::PeerIdentity{}, true, "ipv4:127.0.0.1:5555");
  EXPECT_EQ(c.identity, "insecure:127.0.0.1");
  EXPECT_TRUE(authorize(c, "ApplyPolicy", Permission::kChange).ok());
  EXPECT_EQ(makeCaller(rpc::PeerIdentity{}, true, "ipv6:[::1]:5555").identity, "insecure:[::1]");
  // A certificate does not matter on an insecure server (there is none to verify).
  EXPECT_EQ(makeCaller(rpc::PeerIdentity{true, "alice", {}}, true, "ipv4:1.2.3.4:1").identity,
            "insecure:1.2.3.4");
}

}  // namespace
}  // namespace tq::policy
