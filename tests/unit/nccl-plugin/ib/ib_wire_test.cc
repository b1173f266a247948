// Wire formats of the ib transport (nccl-plugin/ib/ib_wire.h): round trips and every rejection
// carrying its reason. Pure; runs on the host (no RDMA needed).
#include "nccl-plugin/ib/ib_wire.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cstring>

#include "nccl-plugin/ib/ib_comm.h"
#include "nccl-plugin/socket/wire.h"

namespace tq::plugin::ib {
namespace {

IbEndpointInfo endpoint() {
  IbEndpointInfo ep;
  ep.link_layer = LinkLayerCode::kEthernet;
  ep.port = 1;
  ep.mtu_bytes = 4096;
  ep.gid = *tq::ib::parseGid("::ffff:10.77.0.1");
  ep.psn = 0x123456;
  ep.nqps = 3;
  ep.qpn[0] = 0x11;
  ep.qpn[1] = 0x12;
  ep.qpn[2] = 0xffffff;
  ep.device = "rxe0";
  return ep;
}

IbHello hello() {
  IbHello h;
  h.nonce = 0x0102030405060708ull;
  h.conn_id = 0xaabbccddeeff0011ull;
  h.dscp = 46;
  h.service_level = 5;
  h.tenant = "team-a";
  h.ep = endpoint();
  h.cts_addr = 0x7f0000001000ull;
  h.cts_rkey = 0x1234;
  return h;
}

TEST(IbWire, HandleRoundTripsAndIsRecognisedAgainstTheSocketOne) {
  IbHandle h;
  auto& a4 = reinterpret_cast<sockaddr_in&>(h.addr.storage);
  a4.sin_family = AF_INET;
  inet_pton(AF_INET, "10.77.0.1", &a4.sin_addr);
  h.addr.len = sizeof(sockaddr_in);
  h.addr.setPort(4242);
  h.nonce = 99;
  uint8_t buf[kHandleBytes] = {};
  encodeIbHandle(h, buf);
  auto p = parseIbHandle(buf, sizeof buf);
  ASSERT_TRUE(p.ok()) << p.status().toString();
  EXPECT_EQ(p->addr.toString(), "10.77.0.1:4242");
  EXPECT_EQ(p->nonce, 99u);

  buf[40] ^= 1;  // reserved/scope byte of an IPv4 handle; crc catches it first
  auto bad = parseIbHandle(buf, sizeof buf);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("crc"), std::string::npos);

  // A socket transport's handle: the two ranks run different transports; say so.
  socket::HandleInfo sh;
  sh.addr = h.addr;
  sh.nsocks = 2;
  sh.nonce = 1;
  uint8_t sbuf[kHandleBytes] = {};
  socket::encodeHandle(sh, sbuf);
  auto cross = parseIbHandle(sbuf, sizeof sbuf);
  ASSERT_FALSE(cross.ok());
  EXPECT_EQ(cross.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(cross.status().message().find("TENANTQOS_TRANSPORT"), std::string::npos);

  uint8_t junk[kHandleBytes];
  std::memset(junk, 0x11, sizeof junk);
  EXPECT_NE(parseIbHandle(junk, sizeof junk).status().message().find("bad magic"),
            std::string::npos);
  EXPECT_FALSE(parseIbHandle(buf, 10).ok());
}

TEST(IbWire, HelloRoundTripsByteForByte) {
  uint8_t buf[kIbHelloBytes];
  encodeIbHello(hello(), buf);
  auto p = parseIbHello(buf, sizeof buf);
  ASSERT_TRUE(p.ok()) << p.status().toString();
  EXPECT_EQ(p->nonce, hello().nonce);
  EXPECT_EQ(p->conn_id, hello().conn_id);
  EXPECT_EQ(p->dscp, 46);
  EXPECT_EQ(p->service_level, 5);
  EXPECT_EQ(p->tenant, "team-a");
  EXPECT_EQ(p->ep.nqps, 3);
  EXPECT_EQ(p->ep.qpn[2], 0xffffffu);
  EXPECT_EQ(p->ep.psn, 0x123456u);
  EXPECT_EQ(p->ep.gid.toString(), "::ffff:10.77.0.1");
  EXPECT_EQ(p->ep.mtu_bytes, 4096);
  EXPECT_EQ(p->ep.device, "rxe0");
  EXPECT_EQ(p->cts_addr, hello().cts_addr);
  EXPECT_EQ(p->cts_rkey, 0x1234u);
  uint8_t again[kIbHelloBytes];
  encodeIbHello(*p, again);
  EXPECT_EQ(std::memcmp(buf, again, sizeof buf), 0);
}

TEST(IbWire, HelloRejectionsSayWhy) {
  auto reject = [](IbHello h) {
    uint8_t buf[kIbHelloBytes];
    encodeIbHello(h, buf);
    auto p = parseIbHello(buf, sizeof buf);
    EXPECT_FALSE(p.ok());
    return p.ok() ? std::string() : p.status().message();
  };
  IbHello h = hello();
  h.ep.qpn[1] = 0;
  EXPECT_NE(reject(h).find("QP number"), std::string::npos);
  h = hello();
  h.ep.gid = {};
  EXPECT_NE(reject(h).find("zero GID"), std::string::npos);
  h = hello();
  h.ep.link_layer = LinkLayerCode::kInfiniBand;
  h.ep.lid = 0;
  EXPECT_NE(reject(h).find("zero LID"), std::string::npos);
  h = hello();
  h.ep.mtu_bytes = 1500;
  EXPECT_NE(reject(h).find("MTU"), std::string::npos);
  h = hello();
  h.cts_addr = 0;
  EXPECT_NE(reject(h).find("clear-to-send"), std::string::npos);

  uint8_t buf[kIbHelloBytes];
  encodeIbHello(hello(), buf);
  std::memcpy(buf, "TQHELLO1", 8);  // a socket transport's hello
  EXPECT_NE(parseIbHello(buf, sizeof buf).status().message().find("bad magic"), std::string::npos);
  encodeIbHello(hello(), buf);
  buf[100] ^= 0x40;
  EXPECT_NE(parseIbHello(buf, sizeof buf).status().message().find("crc"), std::string::npos);
  EXPECT_NE(parseIbHello(buf, 100).status().message().find("truncated"), std::string::npos);

  // Another version parses so that the acceptor can name it.
  IbHello v = hello();
  v.version = 7;
  encodeIbHello(v, buf);
  auto p = parseIbHello(buf, sizeof buf);
  ASSERT_TRUE(p.ok()) << p.status().toString();
  EXPECT_EQ(p->version, 7);
}

TEST(IbWire, ReplyAcceptedAndRejected) {
  IbReply r;
  r.conn_id = 42;
  r.ep = endpoint();
  r.ep.device = "rxe1";
  r.sizes_addr = 0x7f0000002000ull;
  r.sizes_rkey = 77;
  uint8_t buf[kIbReplyBytes];
  encodeIbReply(r, buf);
  auto p = parseIbReply(buf, sizeof buf);
  ASSERT_TRUE(p.ok()) << p.status().toString();
  EXPECT_EQ(p->status, IbReplyStatus::kAccepted);
  EXPECT_EQ(p->conn_id, 42u);
  EXPECT_EQ(p->ep.nqps, 3);
  EXPECT_EQ(p->ep.device, "rxe1");
  EXPECT_EQ(p->sizes_rkey, 77u);
  uint8_t again[kIbReplyBytes];
  encodeIbReply(*p, again);
  EXPECT_EQ(std::memcmp(buf, again, sizeof buf), 0);

  IbReply no;
  no.status = IbReplyStatus::kSetupFailed;
  no.conn_id = 42;
  no.ep.device = "rxe1";
  no.reason = "modify rxe1 QP 0x11 to RTR: Network is unreachable";
  encodeIbReply(no, buf);
  p = parseIbReply(buf, sizeof buf);
  ASSERT_TRUE(p.ok()) << p.status().toString();
  EXPECT_EQ(p->status, IbReplyStatus::kSetupFailed);
  EXPECT_EQ(p->reason, no.reason);
  encodeIbReply(*p, again);
  EXPECT_EQ(std::memcmp(buf, again, sizeof buf), 0);
  buf[10] = 9;  // unknown status (crc recomputed below would hide nothing: crc fails first)
  EXPECT_FALSE(parseIbReply(buf, sizeof buf).ok());
}

TEST(IbWire, ReadyCarriesTheFailureReason) {
  IbReady r;
  r.ok = false;
  r.conn_id = 5;
  r.reason = "modify rxe0 QP 0x12 to RTR (dgid ::ffff:10.99.0.1): Network is unreachable";
  uint8_t buf[kIbReadyBytes];
  encodeIbReady(r, buf);
  auto p = parseIbReady(buf, sizeof buf);
  ASSERT_TRUE(p.ok()) << p.status().toString();
  EXPECT_FALSE(p->ok);
  EXPECT_EQ(p->conn_id, 5u);
  EXPECT_EQ(p->reason, r.reason.substr(0, kMaxReadyReason));
  std::memset(buf, 0, sizeof buf);
  EXPECT_NE(parseIbReady(buf, sizeof buf).status().message().find("bad magic"), std::string::npos);
}

TEST(IbWire, CtsEntryLayoutIsFixed) {
  EXPECT_EQ(sizeof(CtsEntry), 64u);
  EXPECT_EQ(offsetof(CtsEntry, addr), 0u);
  EXPECT_EQ(offsetof(CtsEntry, size), 8u);
  EXPECT_EQ(offsetof(CtsEntry, rkey), 16u);
  EXPECT_EQ(offsetof(CtsEntry, n), 20u);
  EXPECT_EQ(offsetof(CtsEntry, tag), 24u);
  EXPECT_EQ(offsetof(CtsEntry, seq), 32u);
  EXPECT_EQ(kImmRefused & kImmSizeMask, 0u);
}

TEST(IbWire, WorkRequestIdsRoundTrip) {
  const uint64_t id = makeWrId(WrKind::kFinal, 7, 0x123456789abcull);
  EXPECT_EQ(wrKind(id), WrKind::kFinal);
  EXPECT_EQ(wrQp(id), 7);
  EXPECT_EQ(wrValue(id), 0x123456789abcull);
  EXPECT_EQ(wrKind(makeWrId(WrKind::kRecv, 0, 31)), WrKind::kRecv);
}

}  // namespace
}  // namespace tq::plugin::ib
