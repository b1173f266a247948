#include "common/endpoints.h"

#include <gtest/gtest.h>

namespace tq {
namespace {

TEST(EndpointsTest, SplitEndpointList) {
  auto l = splitEndpointList(" a:1 ,b:2,\tc:3", "--x");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(*l, (std::vector<std::string>{"a:1", "b:2", "c:3"}));
  EXPECT_FALSE(splitEndpointList("", "--x").ok());
  auto bad = splitEndpointList("a:1,,b:2", "--x");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--x: empty entry"), std::string::npos);
}

TEST(EndpointsTest, ParseHostPort) {
  auto a = parseHostPort("127.0.0.1:0");
  ASSERT_TRUE(a.ok()) << a.status().toString();
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 0);
  EXPECT_EQ(a->toString(), "127.0.0.1:0");
  auto b = parseHostPort("[::1]:9464");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->host, "::1");
  EXPECT_EQ(b->port, 9464);
  EXPECT_EQ(b->urlHost(), "[::1]");
  EXPECT_EQ(b->toString(), "[::1]:9464");
  auto c = parseHostPort("policyd.tenantqos-system.svc:65535");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->host, "policyd.tenantqos-system.svc");
  EXPECT_EQ(c->port, 65535);
}

TEST(EndpointsTest, ParseHostPortRefusals) {
  for (const char* bad : {"", "host", ":80", "[::1]80", "[::1]", "::1:80", "h:", "h:-1", "h:65536",
                          "h:8o", "h: 80", "[]:80"}) {
    auto r = parseHostPort(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(std::string("\"") + bad + "\" is not HOST:PORT"),
              std::string::npos)
        << r.status().message();
  }
}

}  // namespace
}  // namespace tq
