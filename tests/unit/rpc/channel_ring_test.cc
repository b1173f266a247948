// rpc::ChannelRing: one channel per replica, failover round robin on a fresh channel, renew.
#include "rpc/channel_ring.h"

#include <gtest/gtest.h>

#include <map>

namespace tq::rpc {
namespace {

TEST(ChannelRingTest, FailoverMovesRoundRobinOnFreshChannels) {
  std::map<std::string, int> made;
  ChannelRing ring({"a:1", "b:2", "c:3"}, [&](const std::string& t) {
    ++made[t];
    return grpc::CreateChannel(t, grpc::InsecureChannelCredentials());
  });
  EXPECT_EQ(ring.size(), 3u);
  EXPECT_EQ(made, (std::map<std::string, int>{{"a:1", 1}, {"b:2", 1}, {"c:3", 1}}));
  EXPECT_EQ(ring.currentTarget(), "a:1");
  const auto first_a = ring.current();
  EXPECT_EQ(ring.failover(), "b:2");
  EXPECT_EQ(made["a:1"], 2) << "the failed replica gets a new channel for its next turn";
  EXPECT_EQ(ring.failover(), "c:3");
  EXPECT_EQ(ring.failover(), "a:1");
  EXPECT_NE(ring.current(), first_a);
  ring.renew();
  EXPECT_EQ(made["a:1"], 3);
  EXPECT_EQ(ring.currentTarget(), "a:1");
}

TEST(ChannelRingTest, OneReplicaFailsOverToItself) {
  int made = 0;
  ChannelRing ring({"only:1"}, [&](const std::string& t) {
    ++made;
    return grpc::CreateChannel(t, grpc::InsecureChannelCredentials());
  });
  const auto before = ring.current();
  EXPECT_EQ(ring.failover(), "only:1");
  EXPECT_EQ(made, 2);
  EXPECT_NE(ring.current(), before);
}

TEST(ChannelRingTest, MakeChannelRingUsesOneChannelPerTarget) {
  auto ring = makeChannelRing({"127.0.0.1:1", "127.0.0.1:2"}, BackoffOptions{},
                              grpc::InsecureChannelCredentials());
  ASSERT_EQ(ring->size(), 2u);
  EXPECT_NE(ring->current(), nullptr);
  // Nothing listens: the channel does not become ready (and gRPC connects lazily).
  EXPECT_NE(ring->current()->GetState(false), GRPC_CHANNEL_READY);
}

}  // namespace
}  // namespace tq::rpc
