#include "nccl-plugin/socket/wire.h"

#include <algorithm>
#include <cstring>
#include <string_view>

#include "common/file_util.h"
#include "nccl-plugin/oob/envelope.h"
#include "nccl-plugin/wire_bytes.h"

namespace tq::plugin::socket {
namespace {

using namespace wire;  // NOLINT: byte helpers of this file's formats
constexpr uint64_t kHandleMagic = magic64("TQHANDL1");
constexpr uint64_t kHelloMagic = magic64("TQHELLO1");
constexpr uint64_t kAckMagic = magic64("TQACK001");

}  // namespace

void encodeHandle(const HandleInfo& h, uint8_t out[kHandlePublicBytes]) {
  oob::startEnvelope(out, kHandlePublicBytes, kHandleMagic, h.version);
  out[11] = static_cast<uint8_t>(h.nsocks);
  oob::putHandleAddress(out, h.addr, h.nonce);
  oob::sealEnvelope(out, kHandlePublicBytes);
}

Result<HandleInfo> parseHandle(const uint8_t* p, size_t len) {
  constexpr std::string_view kWhat = "net handle";
  HandleInfo h;
  TQ_ASSIGN_OR_RETURN(h.version, oob::openEnvelope(p, len, kHandlePublicBytes, kHandleMagic, kWhat,
                                                   "a tenantqos socket handle"));
  TQ_RETURN_IF_ERROR(oob::expectVersion(h.version, kProtocolVersion, kWhat));
  h.nsocks = p[11];
  if (h.nsocks < 1 || h.nsocks > kMaxSocks) return bad(kWhat, "stream count out of range");
  if (!allZero(p + 14, 2) || !allZero(p + 44, 16)) return bad(kWhat, "reserved bytes set");
  TQ_RETURN_IF_ERROR(oob::getHandleAddress(p, kWhat, &h.addr, &h.nonce));
  return h;
}

void encodeHello(const Hello& h, uint8_t out[kHelloBytes]) {
  oob::startEnvelope(out, kHelloBytes, kHelloMagic, h.version);
  put16(out + 10, kHelloBytes);
  out[12] = static_cast<uint8_t>(h.index);
  out[13] = static_cast<uint8_t>(h.nsocks);
  out[14] = static_cast<uint8_t>(h.dscp);
  out[15] = static_cast<uint8_t>(h.service_level);
  out[16] = h.has_priority ? 1 : 0;
  const size_t tl = std::min(h.tenant.size(), kMaxTenantBytes);
  out[17] = static_cast<uint8_t>(tl);
  put32(out + 20, h.priority);
  put64(out + 24, h.nonce);
  put64(out + 32, h.conn_id);
  std::memcpy(out + 40, h.tenant.data(), tl);
  put32(out + 104, h.min_chunk);
  oob::sealEnvelope(out, kHelloBytes);
}

Result<Hello> parseHello(const uint8_t* p, size_t len) {
  constexpr std::string_view kWhat = "handshake";
  Hello h;
  TQ_ASSIGN_OR_RETURN(
      h.version, oob::openEnvelope(p, len, kHelloBytes, kHelloMagic, kWhat, "a tenantqos peer"));
  if (get16(p + 10) != kHelloBytes) return bad(kWhat, "unexpected length field");
  if (h.version != kProtocolVersion) return h;  // the caller reports the version mismatch
  h.index = p[12];
  h.nsocks = p[13];
  h.dscp = p[14];
  h.service_level = p[15];
  if (h.nsocks < 1 || h.nsocks > kMaxSocks) return bad(kWhat, "stream count out of range");
  if (h.index > h.nsocks) return bad(kWhat, "stream index out of range");
  if (h.dscp > 63) return bad(kWhat, "DSCP out of range");
  if (h.service_level > 15) return bad(kWhat, "service level out of range");
  if (p[16] > 1) return bad(kWhat, "unknown flags");
  h.has_priority = p[16] == 1;
  if (!allZero(p + 18, 2) || !allZero(p + 108, 16)) return bad(kWhat, "reserved bytes set");
  h.priority = get32(p + 20);
  h.nonce = get64(p + 24);
  h.conn_id = get64(p + 32);
  TQ_ASSIGN_OR_RETURN(h.tenant, getText(p + 40, 64, p[17], "handshake tenant"));
  h.min_chunk = get32(p + 104);
  if (h.min_chunk < 4096) return bad(kWhat, "chunk size out of range");
  return h;
}

void encodeAck(const Ack& a, uint8_t out[kAckBytes]) {
  oob::startEnvelope(out, kAckBytes, kAckMagic, a.version);
  put16(out + 10, static_cast<uint16_t>(a.status));
  put64(out + 16, a.conn_id);
  std::string reason = a.reason.substr(0, kMaxAckReason);
  for (char& c : reason) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  std::memcpy(out + 24, reason.data(), reason.size());
  oob::sealEnvelope(out, kAckBytes);
}

Result<Ack> parseAck(const uint8_t* p, size_t len) {
  constexpr std::string_view kWhat = "handshake reply";
  Ack a;
  TQ_ASSIGN_OR_RETURN(a.version,
                      oob::openEnvelope(p, len, kAckBytes, kAckMagic, kWhat, "a tenantqos peer"));
  if (get32(p + 12) != 0 || get32(p + 120) != 0) return bad(kWhat, "reserved bytes set");
  const uint16_t status = get16(p + 10);
  if (status > static_cast<uint16_t>(AckStatus::kBadStreams)) return bad(kWhat, "unknown status");
  a.status = static_cast<AckStatus>(status);
  a.conn_id = get64(p + 16);
  size_t n = 0;
  while (n < 96 && p[24 + n] != 0) ++n;
  TQ_ASSIGN_OR_RETURN(a.reason, getText(p + 24, 96, n, "handshake reply reason"));
  return a;
}

void encodeFrame(const Frame& f, uint8_t out[kFrameBytes]) {
  std::memset(out, 0, kFrameBytes);
  out[0] = static_cast<uint8_t>(f.type);
  out[1] = f.flags;
  put32(out + 4, f.seq);
  put64(out + 8, f.size);
}

Result<Frame> parseFrame(const uint8_t* p, size_t len) {
  constexpr std::string_view kWhat = "control frame";
  if (len < kFrameBytes) return bad(kWhat, "truncated");
  Frame f;
  if (p[0] != static_cast<uint8_t>(FrameType::kMessage) &&
      p[0] != static_cast<uint8_t>(FrameType::kError)) {
    return bad(kWhat, "unknown type " + std::to_string(p[0]));
  }
  f.type = static_cast<FrameType>(p[0]);
  f.flags = p[1];
  if ((f.flags & ~kFrameInline) != 0) return bad(kWhat, "unknown flags");
  if (get16(p + 2) != 0) return bad(kWhat, "reserved bytes set");
  f.seq = get32(p + 4);
  f.size = get64(p + 8);
  if (f.type == FrameType::kError && (f.size > kMaxErrorText || f.flags != 0)) {
    return bad(kWhat, "error text too long");
  }
  return f;
}

int planStripes(uint64_t size, int nsocks, uint32_t seq, uint64_t min_chunk,
                Stripe out[kMaxSocks]) {
  if (size == 0 || nsocks <= 0) return 0;
  nsocks = std::min(nsocks, kMaxSocks);
  min_chunk = std::max<uint64_t>(min_chunk, 1);
  const uint64_t per = (size + static_cast<uint64_t>(nsocks) - 1) / static_cast<uint64_t>(nsocks);
  const uint64_t chunk = std::max(min_chunk, per);
  int n = 0;
  for (uint64_t off = 0; off < size; off += chunk, ++n) {
    out[n].stream =
        static_cast<int>((seq + static_cast<uint32_t>(n)) % static_cast<uint32_t>(nsocks));
    out[n].offset = off;
    out[n].length = std::min(chunk, size - off);
  }
  return n;
}

}  // namespace tq::plugin::socket
