// Wire formats of the ib transport: the listen handle NCCL ships between ranks, the out-of-band
// TCP handshake (hello, reply, ready), and the two RDMA-written rings (clear-to-send entries in
// the sender's memory, multi-receive sizes in the receiver's). Pure encode/parse functions over
// byte arrays (little-endian, fixed sizes, CRC-32C on the TCP messages), fuzzed with the socket
// transport's parsers (nccl-plugin/fuzz/); every rejection carries a reason.
//
// Handle (128 B; bytes 64-127 are private to the connecting process, handle_state.h):
//   0 magic "TQIBHDL1" | 8 u16 version | 10 u8 family (4|6) | 11 u8 0 | 12 u16 TCP port
//   14 u16 0 | 16 u8 addr[16] | 32 u64 listen nonce | 40 u32 IPv6 scope | 44..59 0 | 60 u32 crc
// Hello (256 B, connector -> acceptor, after TCP connect):
//   0 magic "TQIBHEL1" | 8 u16 version | 10 u16 length (256) | 12 u8 link layer (1 IB, 2 Eth)
//   13 u8 port | 14 u8 dscp | 15 u8 service level | 16 u16 lid | 18 u16 mtu (bytes)
//   20 u8 nqps | 21 u8 tenant length | 22 u8 device name length | 23 u8 0 | 24 u64 listen nonce
//   32 u64 connection id | 40 u8 gid[16] | 56 u32 first PSN | 60 u32 0 | 64 u32 qpn[8]
//   96 u64 CTS ring address | 104 u32 CTS ring rkey | 108 u32 0 | 112 char tenant[64]
//   176 char device[32] | 208..251 0 | 252 u32 crc
// Reply (256 B, acceptor -> connector):
//   0 magic "TQIBREP1" | 8 u16 version | 10 u16 status (0 accepted) | 12 u8 link layer
//   13 u8 port | 14 u16 lid | 16 u16 mtu | 18 u8 nqps | 19 u8 device name length
//   20 u32 first PSN | 24 u64 connection id | 32 u8 gid[16] | 48 u32 qpn[8]
//   80 u64 sizes ring address | 88 u32 sizes ring rkey | 92 u8 reason length | 93..95 0
//   96 char device[32] | 128 char reason[120] | 248 u32 0 | 252 u32 crc
// Ready (128 B, connector -> acceptor, once its QPs are connected or failed):
//   0 magic "TQIBRDY1" | 8 u16 version | 10 u16 status (0 ready) | 12 u8 reason length
//   13..15 0 | 16 u64 connection id | 24 char reason[100] | 124 u32 crc
// CTS entry (64 B; the receiver RDMA-writes n of them per receive into the sender's ring, slot
// seq % kCtsSlots, entries [0, n)):
//   0 u64 buffer address | 8 u64 posted size | 16 u32 rkey | 20 u32 n | 24 i32 tag | 28 u32 0
//   32 u64 seq + 1 (0 = empty; written with the entry, checked on every entry) | 40..63 0
// Sizes ring: u32 [kCtsSlots][kMaxRecvs] in the receiver's memory; for n > 1 the sender writes
// the n message sizes there with the WRITE_WITH_IMM that completes the receive.
// Immediate data of the completing WRITE_WITH_IMM: n == 1: the size (< 2^31); n > 1: 0 (sizes in
// the ring). Bit 31 set: the sender refused the message (larger than the posted buffer); the
// low bits carry min(size, 2^31 - 1) of the offending message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"
#include "ib/gid.h"
#include "nccl-plugin/oob/address.h"
#include "nccl-plugin/transport.h"

namespace tq::plugin::ib {

inline constexpr uint16_t kIbProtocolVersion = 1;
inline constexpr size_t kIbHandlePublicBytes = 64;
inline constexpr size_t kIbHelloBytes = 256;
inline constexpr size_t kIbReplyBytes = 256;
inline constexpr size_t kIbReadyBytes = 128;
inline constexpr int kMaxQpsPerConn = 8;
inline constexpr size_t kMaxTenantBytes = 64;
inline constexpr size_t kMaxDeviceNameBytes = 32;
inline constexpr size_t kMaxReplyReason = 120;
inline constexpr size_t kMaxReadyReason = 100;
// Clear-to-send slots: one per outstanding receive (at most kMaxRequests per receive comm).
inline constexpr int kCtsSlots = kMaxRequests;
inline constexpr uint32_t kImmRefused = 1u << 31;
inline constexpr uint32_t kImmSizeMask = kImmRefused - 1;

enum class LinkLayerCode : uint8_t { kInfiniBand = 1, kEthernet = 2 };

struct IbHandle {
  uint16_t version = kIbProtocolVersion;
  oob::SocketAddress addr;
  uint64_t nonce = 0;
};

// One side's RDMA endpoint as the handshake carries it.
struct IbEndpointInfo {
  LinkLayerCode link_layer = LinkLayerCode::kEthernet;
  int port = 1;
  uint16_t lid = 0;
  int mtu_bytes = 1024;
  tq::ib::Gid gid;
  uint32_t psn = 0;
  int nqps = 1;
  uint32_t qpn[kMaxQpsPerConn] = {};
  std::string device;  // "rxe0", for messages
};

struct IbHello {
  uint16_t version = kIbProtocolVersion;
  uint64_t nonce = 0;
  uint64_t conn_id = 0;
  int dscp = 0;
  int service_level = 0;
  std::string tenant;
  IbEndpointInfo ep;
  uint64_t cts_addr = 0;
  uint32_t cts_rkey = 0;
};

enum class IbReplyStatus : uint16_t {
  kAccepted = 0,
  kBadVersion = 1,
  kBadHello = 2,
  kWrongListener = 3,
  kSetupFailed = 4,  // the acceptor could not create or connect its QPs (reason says why)
};

struct IbReply {
  uint16_t version = kIbProtocolVersion;
  IbReplyStatus status = IbReplyStatus::kAccepted;
  uint64_t conn_id = 0;
  IbEndpointInfo ep;
  uint64_t sizes_addr = 0;
  uint32_t sizes_rkey = 0;
  std::string reason;
};

struct IbReady {
  uint16_t version = kIbProtocolVersion;
  bool ok = true;
  uint64_t conn_id = 0;
  std::string reason;
};

struct CtsEntry {
  uint64_t addr;
  uint64_t size;
  uint32_t rkey;
  uint32_t n;
  int32_t tag;
  uint32_t reserved0;
  uint64_t seq;  // slot sequence + 1; 0 = empty
  uint8_t reserved1[24];
};
static_assert(sizeof(CtsEntry) == 64, "CTS entry layout");
static_assert(offsetof(CtsEntry, seq) == 32, "CTS entry layout");

void encodeIbHandle(const IbHandle& h, uint8_t out[kIbHandlePublicBytes]);
// Errors are kInvalidArgument with the reason; a socket transport's handle is recognised and
// named (the two processes disagree on TENANTQOS_TRANSPORT).
Result<IbHandle> parseIbHandle(const uint8_t* data, size_t len);

void encodeIbHello(const IbHello& h, uint8_t out[kIbHelloBytes]);
// Checks magic, length, crc, field ranges. Another version parses (so the acceptor can say which
// version it got) and is reported through IbHello::version.
Result<IbHello> parseIbHello(const uint8_t* data, size_t len);

void encodeIbReply(const IbReply& r, uint8_t out[kIbReplyBytes]);
Result<IbReply> parseIbReply(const uint8_t* data, size_t len);

void encodeIbReady(const IbReady& r, uint8_t out[kIbReadyBytes]);
Result<IbReady> parseIbReady(const uint8_t* data, size_t len);

// Valid endpoint values: MTU 256..4096 (power of two), 1..kMaxQpsPerConn QPs with non-zero 24-bit
// numbers, 24-bit PSN, a non-zero GID on Ethernet / LID on InfiniBand.
Status checkEndpoint(const IbEndpointInfo& ep, std::string_view what);

}  // namespace tq::plugin::ib
