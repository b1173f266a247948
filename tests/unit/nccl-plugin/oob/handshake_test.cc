// The out-of-band layer's own pieces: the envelope codec and the resumable message steps over a
// real socket pair (the transports' tests cover them in their handshakes too).
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "nccl-plugin/oob/envelope.h"
#include "nccl-plugin/oob/handshake.h"
#include "nccl-plugin/wire_bytes.h"

namespace tq::plugin::oob {
namespace {

constexpr uint64_t kMagic = wire::magic64("TQTEST01");

TEST(Envelope, SealedMessageOpensWithItsVersionAndEveryCorruptionIsNamed) {
  uint8_t m[128];
  startEnvelope(m, sizeof m, kMagic, 7);
  m[20] = 0x42;
  sealEnvelope(m, sizeof m);
  auto v = openEnvelope(m, sizeof m, sizeof m, kMagic, "test message", "a test peer");
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_EQ(*v, 7);
  EXPECT_TRUE(expectVersion(*v, 7, "test message").ok());
  EXPECT_NE(expectVersion(*v, 1, "test message")
                .message()
                .find("protocol version 7, this plugin "
                      "speaks 1"),
            std::string::npos);

  auto t = openEnvelope(m, 100, sizeof m, kMagic, "test message", "a test peer");
  EXPECT_EQ(t.status().message(), "test message: truncated (100 of 128 bytes)");
  auto wrong =
      openEnvelope(m, sizeof m, sizeof m, wire::magic64("TQOTHER1"), "test message", "a test peer");
  EXPECT_EQ(wrong.status().message(), "test message: bad magic (not a test peer)");
  m[20] ^= 1;
  auto crc = openEnvelope(m, sizeof m, sizeof m, kMagic, "test message", "a test peer");
  EXPECT_NE(crc.status().message().find("crc mismatch"), std::string::npos);
  EXPECT_EQ(crc.status().code(), StatusCode::kInvalidArgument);
}

TEST(MessageIo, SendsAndReceivesInStepsAndNamesAPeerThatClosesEarly) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
  Fd a(sv[0]);
  Fd b(sv[1]);
  MessageIo out(200);
  for (size_t i = 0; i < out.size(); ++i) out.data()[i] = static_cast<uint8_t>(i);
  MessageIo in(200);
  EXPECT_TRUE(in.recvStep(b.get(), "test").ok());  // nothing there yet: no progress, no error
  EXPECT_EQ(in.done(), 0u);
  ASSERT_TRUE(out.sendStep(a.get(), "test").ok());
  ASSERT_TRUE(out.complete());
  ASSERT_TRUE(in.recvStep(b.get(), "test").ok());
  ASSERT_TRUE(in.complete());
  EXPECT_EQ(std::memcmp(in.data(), out.data(), 200), 0);

  MessageIo partial(128);
  sendBestEffort(a.get(), out.data(), 5);
  a.reset();
  EXPECT_TRUE(partial.recvStep(b.get(), "hello").ok());
  Status closed = partial.recvStep(b.get(), "hello");
  EXPECT_EQ(closed.code(), StatusCode::kUnavailable);
  EXPECT_EQ(closed.message(), "the peer closed the connection after 5 of 128 hello bytes");
}

}  // namespace
}  // namespace tq::plugin::oob
