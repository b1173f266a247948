// Wire formats of the socket transport: the listen handle NCCL ships between ranks, the
// per-stream hello a connector sends, the acceptor's ack, and the per-message control frames.
// Pure encode/parse functions over byte arrays (little-endian, fixed sizes, CRC-32C), so the
// parsers can be fuzzed (nccl-plugin/fuzz/) and every rejection carries a reason.
//
// Handle (128 B; bytes 64-127 are private to the connecting process, see socket_transport.cc):
//   0 magic "TQHANDL1" | 8 u16 version | 10 u8 family (4|6) | 11 u8 nsocks | 12 u16 port
//   14 u16 0 | 16 u8 addr[16] | 32 u64 listen nonce | 40 u32 IPv6 scope | 44..59 0 | 60 u32 crc
// Hello (128 B, connector -> acceptor, first bytes of every stream):
//   0 magic "TQHELLO1" | 8 u16 version | 10 u16 length (128) | 12 u8 stream index
//   13 u8 nsocks | 14 u8 dscp | 15 u8 service level | 16 u8 flags (1: priority set)
//   17 u8 tenant length | 18 u16 0 | 20 u32 priority | 24 u64 listen nonce | 32 u64 conn id
//   40 char tenant[64] | 104 u32 min chunk | 108..123 0 | 124 u32 crc
// Ack (128 B, acceptor -> connector on the control stream):
//   0 magic "TQACK001" | 8 u16 version | 10 u16 status (0 = accepted) | 12 u32 0
//   16 u64 conn id | 24 char reason[96] | 120 u32 0 | 124 u32 crc
// Frame (16 B, control stream, after the handshake):
//   0 u8 type | 1 u8 flags | 2 u16 0 | 4 u32 message sequence | 8 u64 size
//   type 1 (message): size = message bytes; flag 1 = the payload follows inline.
//   type 2 (error, receiver -> sender): size = bytes of UTF-8 text that follow (<= 1024).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"
#include "nccl-plugin/oob/address.h"

namespace tq::plugin::socket {

inline constexpr uint16_t kProtocolVersion = 1;
inline constexpr size_t kHandlePublicBytes = 64;
inline constexpr size_t kHelloBytes = 128;
inline constexpr size_t kAckBytes = 128;
inline constexpr size_t kFrameBytes = 16;
inline constexpr size_t kMaxTenantBytes = 63;
inline constexpr size_t kMaxAckReason = 95;
inline constexpr size_t kMaxErrorText = 1024;
inline constexpr int kMaxSocks = 16;

struct HandleInfo {
  uint16_t version = kProtocolVersion;
  oob::SocketAddress addr;
  int nsocks = 0;
  uint64_t nonce = 0;
};

struct Hello {
  uint16_t version = kProtocolVersion;
  int index = 0;  // 0..nsocks-1: data streams; nsocks: the control stream
  int nsocks = 0;
  int dscp = 0;
  int service_level = 0;
  bool has_priority = false;
  uint32_t priority = 0;
  uint64_t nonce = 0;
  uint64_t conn_id = 0;
  std::string tenant;
  uint32_t min_chunk = 0;
};

enum class AckStatus : uint16_t {
  kAccepted = 0,
  kBadVersion = 1,
  kBadHello = 2,
  kWrongListener = 3,
  kBadStreams = 4,
};

struct Ack {
  uint16_t version = kProtocolVersion;
  AckStatus status = AckStatus::kAccepted;
  uint64_t conn_id = 0;
  std::string reason;
};

enum class FrameType : uint8_t { kMessage = 1, kError = 2 };
inline constexpr uint8_t kFrameInline = 1;

struct Frame {
  FrameType type = FrameType::kMessage;
  uint8_t flags = 0;
  uint32_t seq = 0;
  uint64_t size = 0;
};

void encodeHandle(const HandleInfo& h, uint8_t out[kHandlePublicBytes]);
// Errors are kInvalidArgument with the reason ("bad magic", "crc mismatch", ...).
Result<HandleInfo> parseHandle(const uint8_t* data, size_t len);

void encodeHello(const Hello& h, uint8_t out[kHelloBytes]);
// Checks magic, length, crc, field ranges. A version other than kProtocolVersion parses (so the
// acceptor can say which version it got) but is reported through Hello::version.
Result<Hello> parseHello(const uint8_t* data, size_t len);

void encodeAck(const Ack& a, uint8_t out[kAckBytes]);
Result<Ack> parseAck(const uint8_t* data, size_t len);

void encodeFrame(const Frame& f, uint8_t out[kFrameBytes]);
Result<Frame> parseFrame(const uint8_t* data, size_t len);

// How a message of `size` bytes is cut into stripes over the data streams. Both ends compute
// it from the same inputs (sender's min chunk, listener's nsocks, message sequence), so no
// per-stripe header travels. At most one stripe per stream; stripe j of message `seq` goes to
// stream (seq + j) % nsocks, so small messages rotate over the streams.
struct Stripe {
  int stream = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
};
int planStripes(uint64_t size, int nsocks, uint32_t seq, uint64_t min_chunk, Stripe out[kMaxSocks]);

}  // namespace tq::plugin::socket
