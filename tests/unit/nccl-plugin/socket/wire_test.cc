#include "nccl-plugin/socket/wire.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>

namespace tq::plugin::socket {
namespace {

oob::SocketAddress v4(const char* ip, uint16_t port) {
  oob::SocketAddress a;
  auto& s = reinterpret_cast<sockaddr_in&>(a.storage);
  s.sin_family = AF_INET;
  inet_pton(AF_INET, ip, &s.sin_addr);
  a.len = sizeof s;
  a.setPort(port);
  return a;
}

Hello sampleHello() {
  Hello h;
  h.index = 2;
  h.nsocks = 4;
  h.dscp = 46;
  h.service_level = 5;
  h.has_priority = true;
  h.priority = 5;
  h.nonce = 0x1122334455667788ull;
  h.conn_id = 0x99aabbccddeeff00ull;
  h.tenant = "team-a";
  h.min_chunk = 65536;
  return h;
}

TEST(SocketWire, HandleRoundTripsIpv4AndIpv6) {
  HandleInfo h;
  h.addr = v4("10.1.2.3", 4242);
  h.nsocks = 4;
  h.nonce = 77;
  uint8_t buf[kHandlePublicBytes];
  encodeHandle(h, buf);
  auto p = parseHandle(buf, sizeof buf);
  ASSERT_TRUE(p.ok()) << p.status().toString();
  EXPECT_EQ(p->addr.toString(), "10.1.2.3:4242");
  EXPECT_EQ(p->nsocks, 4);
  EXPECT_EQ(p->nonce, 77u);

  HandleInfo h6;
  auto& s6 = reinterpret_cast<sockaddr_in6&>(h6.addr.storage);
  s6.sin6_family = AF_INET6;
  inet_pton(AF_INET6, "fd00::7", &s6.sin6_addr);
  h6.addr.len = sizeof s6;
  h6.addr.setPort(9);
  h6.nsocks = 1;
  encodeHandle(h6, buf);
  auto p6 = parseHandle(buf, sizeof buf);
  ASSERT_TRUE(p6.ok()) << p6.status().toString();
  EXPECT_EQ(p6->addr.toString(), "[fd00::7]:9");
}

TEST(SocketWire, HandleRejectsCorruption) {
  HandleInfo h;
  h.addr = v4("127.0.0.1", 1000);
  h.nsocks = 2;
  uint8_t good[kHandlePublicBytes];
  encodeHandle(h, good);
  for (size_t i = 0; i < kHandlePublicBytes; ++i) {
    uint8_t bad[kHandlePublicBytes];
    std::memcpy(bad, good, sizeof bad);
    bad[i] ^= 0x40;
    EXPECT_FALSE(parseHandle(bad, sizeof bad).ok()) << "flipped byte " << i;
  }
  EXPECT_FALSE(parseHandle(good, kHandlePublicBytes - 1).ok());
  uint8_t zero[kHandlePublicBytes] = {};
  auto z = parseHandle(zero, sizeof zero);
  ASSERT_FALSE(z.ok());
  EXPECT_NE(z.status().message().find("magic"), std::string::npos) << z.status().message();
}

TEST(SocketWire, HelloRoundTripsAndRejectsEveryFlippedByte) {
  uint8_t buf[kHelloBytes];
  encodeHello(sampleHello(), buf);
  auto p = parseHello(buf, sizeof buf);
  ASSERT_TRUE(p.ok()) << p.status().toString();
  EXPECT_EQ(p->index, 2);
  EXPECT_EQ(p->nsocks, 4);
  EXPECT_EQ(p->dscp, 46);
  EXPECT_EQ(p->service_level, 5);
  EXPECT_TRUE(p->has_priority);
  EXPECT_EQ(p->priority, 5u);
  EXPECT_EQ(p->nonce, 0x1122334455667788ull);
  EXPECT_EQ(p->conn_id, 0x99aabbccddeeff00ull);
  EXPECT_EQ(p->tenant, "team-a");
  EXPECT_EQ(p->min_chunk, 65536u);
  for (size_t i = 0; i < kHelloBytes; ++i) {
    uint8_t bad[kHelloBytes];
    std::memcpy(bad, buf, sizeof bad);
    bad[i] ^= 0x01;
    EXPECT_FALSE(parseHello(bad, sizeof bad).ok()) << "flipped byte " << i;
  }
  auto t = parseHello(buf, 100);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("truncated"), std::string::npos);
}

TEST(SocketWire, HelloOfAnotherVersionParsesSoTheVersionCanBeReported) {
  Hello h = sampleHello();
  h.version = 9;
  uint8_t buf[kHelloBytes];
  encodeHello(h, buf);
  auto p = parseHello(buf, sizeof buf);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->version, 9);
}

TEST(SocketWire, HelloRejectsOutOfRangeFieldsEvenWithAValidCrc) {
  Hello h = sampleHello();
  h.index = 5;  // > nsocks
  uint8_t buf[kHelloBytes];
  encodeHello(h, buf);
  EXPECT_FALSE(parseHello(buf, sizeof buf).ok());
  h = sampleHello();
  h.dscp = 64;
  encodeHello(h, buf);
  EXPECT_FALSE(parseHello(buf, sizeof buf).ok());
  h = sampleHello();
  h.tenant = std::string("bad\x01name");
  encodeHello(h, buf);
  EXPECT_FALSE(parseHello(buf, sizeof buf).ok());
}

TEST(SocketWire, AckRoundTrips) {
  Ack a;
  a.status = AckStatus::kBadVersion;
  a.conn_id = 5;
  a.reason = "peer speaks protocol version 9";
  uint8_t buf[kAckBytes];
  encodeAck(a, buf);
  auto p = parseAck(buf, sizeof buf);
  ASSERT_TRUE(p.ok()) << p.status().toString();
  EXPECT_EQ(p->status, AckStatus::kBadVersion);
  EXPECT_EQ(p->conn_id, 5u);
  EXPECT_EQ(p->reason, a.reason);
  buf[30] ^= 1;
  EXPECT_FALSE(parseAck(buf, sizeof buf).ok());
}

TEST(SocketWire, FramesRoundTripAndRejectUnknownTypes) {
  uint8_t buf[kFrameBytes];
  encodeFrame({FrameType::kMessage, kFrameInline, 42, 1ull << 40}, buf);
  auto f = parseFrame(buf, sizeof buf);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->seq, 42u);
  EXPECT_EQ(f->size, 1ull << 40);
  EXPECT_EQ(f->flags, kFrameInline);
  buf[0] = 7;
  EXPECT_FALSE(parseFrame(buf, sizeof buf).ok());
  encodeFrame({FrameType::kError, 0, 1, kMaxErrorText + 1}, buf);
  EXPECT_FALSE(parseFrame(buf, sizeof buf).ok());
}

TEST(SocketWire, StripesCoverTheMessageExactlyOnce) {
  std::mt19937_64 rng(1);
  for (int iter = 0; iter < 2000; ++iter) {
    const uint64_t size = rng() % (64ull << 20);
    const int nsocks = 1 + static_cast<int>(rng() % kMaxSocks);
    const uint32_t seq = static_cast<uint32_t>(rng());
    const uint64_t min_chunk = 4096 + rng() % (1 << 20);
    Stripe s[kMaxSocks];
    const int n = planStripes(size, nsocks, seq, min_chunk, s);
    ASSERT_LE(n, nsocks);
    uint64_t off = 0;
    bool used[kMaxSocks] = {};
    for (int j = 0; j < n; ++j) {
      EXPECT_EQ(s[j].offset, off);
      EXPECT_GT(s[j].length, 0u);
      if (j + 1 < n) {
        EXPECT_GE(s[j].length, min_chunk);
      }
      EXPECT_FALSE(used[s[j].stream]) << "two stripes on one stream";
      used[s[j].stream] = true;
      off += s[j].length;
    }
    EXPECT_EQ(off, size);
  }
  Stripe s[kMaxSocks];
  EXPECT_EQ(planStripes(0, 4, 0, 65536, s), 0);
  // Small messages rotate over the streams.
  EXPECT_EQ(planStripes(100, 4, 6, 65536, s), 1);
  EXPECT_EQ(s[0].stream, 2);
  // 4 MiB over 4 streams: 1 MiB each.
  EXPECT_EQ(planStripes(4 << 20, 4, 0, 65536, s), 4);
  EXPECT_EQ(s[3].length, 1u << 20);
}

}  // namespace
}  // namespace tq::plugin::socket
