#include "nccl-plugin/ib/ib_wire.h"

#include <netinet/in.h>

#include <cstring>

#include "nccl-plugin/oob/envelope.h"
#include "nccl-plugin/wire_bytes.h"

namespace tq::plugin::ib {
namespace {

using namespace wire;  // NOLINT: byte helpers of this file's formats

constexpr uint64_t kHandleMagic = magic64("TQIBHDL1");
constexpr uint64_t kSocketHandleMagic = magic64("TQHANDL1");
constexpr uint64_t kHelloMagic = magic64("TQIBHEL1");
constexpr uint64_t kReplyMagic = magic64("TQIBREP1");
constexpr uint64_t kReadyMagic = magic64("TQIBRDY1");
constexpr uint32_t k24Bits = 0xffffff;

bool validMtu(int m) { return m == 256 || m == 512 || m == 1024 || m == 2048 || m == 4096; }

// Shared by hello (offsets relative to the hello) and reply: the fields differ in place, so each
// format writes its own; only the QPN array and GID helpers are common.
void putQpns(uint8_t* p, const IbEndpointInfo& ep) {
  for (int i = 0; i < kMaxQpsPerConn; ++i) put32(p + 4 * i, i < ep.nqps ? ep.qpn[i] : 0);
}

Status getQpns(const uint8_t* p, IbEndpointInfo* ep, std::string_view what) {
  for (int i = 0; i < kMaxQpsPerConn; ++i) {
    const uint32_t q = get32(p + 4 * i);
    if (i < ep->nqps) {
      ep->qpn[i] = q;
    } else if (q != 0) {
      return bad(what, "QP number beyond the QP count");
    }
  }
  return okStatus();
}

Result<LinkLayerCode> linkLayerOf(uint8_t v, std::string_view what) {
  if (v == static_cast<uint8_t>(LinkLayerCode::kInfiniBand)) return LinkLayerCode::kInfiniBand;
  if (v == static_cast<uint8_t>(LinkLayerCode::kEthernet)) return LinkLayerCode::kEthernet;
  return bad(what, "unknown link layer " + std::to_string(v));
}

}  // namespace

Status checkEndpoint(const IbEndpointInfo& ep, std::string_view what) {
  if (!validMtu(ep.mtu_bytes)) return bad(what, "MTU " + std::to_string(ep.mtu_bytes));
  if (ep.nqps < 1 || ep.nqps > kMaxQpsPerConn) {
    return bad(what, "QP count " + std::to_string(ep.nqps) + " out of range 1-" +
                         std::to_string(kMaxQpsPerConn));
  }
  for (int i = 0; i < ep.nqps; ++i) {
    if (ep.qpn[i] == 0 || ep.qpn[i] > k24Bits) return bad(what, "QP number not a 24-bit value");
  }
  if (ep.psn > k24Bits) return bad(what, "PSN not a 24-bit value");
  if (ep.port < 1 || ep.port > 255) return bad(what, "port " + std::to_string(ep.port));
  if (ep.link_layer == LinkLayerCode::kEthernet && ep.gid.isZero()) return bad(what, "zero GID");
  if (ep.link_layer == LinkLayerCode::kInfiniBand && ep.lid == 0) return bad(what, "zero LID");
  return okStatus();
}

// ---- handle -----------------------------------------------------------------------------------

void encodeIbHandle(const IbHandle& h, uint8_t out[kIbHandlePublicBytes]) {
  oob::startEnvelope(out, kIbHandlePublicBytes, kHandleMagic, h.version);
  oob::putHandleAddress(out, h.addr, h.nonce);
  oob::sealEnvelope(out, kIbHandlePublicBytes);
}

Result<IbHandle> parseIbHandle(const uint8_t* p, size_t len) {
  constexpr std::string_view kWhat = "net handle";
  if (len >= 8 && get64(p) == kSocketHandleMagic) {
    return bad(kWhat,
               "a socket transport handle: the listening process uses "
               "TENANTQOS_TRANSPORT=socket, this one ib (set the same transport everywhere)");
  }
  IbHandle h;
  TQ_ASSIGN_OR_RETURN(h.version, oob::openEnvelope(p, len, kIbHandlePublicBytes, kHandleMagic,
                                                   kWhat, "a tenantqos ib handle"));
  TQ_RETURN_IF_ERROR(oob::expectVersion(h.version, kIbProtocolVersion, kWhat));
  if (p[11] != 0 || !allZero(p + 14, 2) || !allZero(p + 44, 16)) {
    return bad(kWhat, "reserved bytes set");
  }
  TQ_RETURN_IF_ERROR(oob::getHandleAddress(p, kWhat, &h.addr, &h.nonce));
  return h;
}

// ---- hello ------------------------------------------------------------------------------------

void encodeIbHello(const IbHello& h, uint8_t out[kIbHelloBytes]) {
  oob::startEnvelope(out, kIbHelloBytes, kHelloMagic, h.version);
  put16(out + 10, static_cast<uint16_t>(kIbHelloBytes));
  out[12] = static_cast<uint8_t>(h.ep.link_layer);
  out[13] = static_cast<uint8_t>(h.ep.port);
  out[14] = static_cast<uint8_t>(h.dscp & 63);
  out[15] = static_cast<uint8_t>(h.service_level & 15);
  put16(out + 16, h.ep.lid);
  put16(out + 18, static_cast<uint16_t>(h.ep.mtu_bytes));
  out[20] = static_cast<uint8_t>(h.ep.nqps);
  out[21] = static_cast<uint8_t>(putText(out + 112, kMaxTenantBytes, h.tenant));
  out[22] = static_cast<uint8_t>(putText(out + 176, kMaxDeviceNameBytes, h.ep.device));
  put64(out + 24, h.nonce);
  put64(out + 32, h.conn_id);
  std::memcpy(out + 40, h.ep.gid.raw.data(), 16);
  put32(out + 56, h.ep.psn);
  putQpns(out + 64, h.ep);
  put64(out + 96, h.cts_addr);
  put32(out + 104, h.cts_rkey);
  oob::sealEnvelope(out, kIbHelloBytes);
}

Result<IbHello> parseIbHello(const uint8_t* p, size_t len) {
  constexpr std::string_view kWhat = "ib handshake hello";
  IbHello h;
  TQ_ASSIGN_OR_RETURN(h.version, oob::openEnvelope(p, len, kIbHelloBytes, kHelloMagic, kWhat,
                                                   "a tenantqos ib peer"));
  if (get16(p + 10) != kIbHelloBytes) return bad(kWhat, "unexpected length field");
  if (h.version != kIbProtocolVersion) return h;  // the caller reports the version
  if (p[23] != 0 || get32(p + 60) != 0 || get32(p + 108) != 0 || !allZero(p + 208, 44)) {
    return bad(kWhat, "reserved bytes set");
  }
  TQ_ASSIGN_OR_RETURN(h.ep.link_layer, linkLayerOf(p[12], kWhat));
  h.ep.port = p[13];
  if (p[14] > 63) return bad(kWhat, "DSCP out of range");
  if (p[15] > 15) return bad(kWhat, "service level out of range");
  h.dscp = p[14];
  h.service_level = p[15];
  h.ep.lid = get16(p + 16);
  h.ep.mtu_bytes = get16(p + 18);
  h.ep.nqps = p[20];
  TQ_ASSIGN_OR_RETURN(h.tenant, getText(p + 112, kMaxTenantBytes, p[21], kWhat));
  TQ_ASSIGN_OR_RETURN(h.ep.device, getText(p + 176, kMaxDeviceNameBytes, p[22], kWhat));
  h.nonce = get64(p + 24);
  h.conn_id = get64(p + 32);
  std::memcpy(h.ep.gid.raw.data(), p + 40, 16);
  h.ep.psn = get32(p + 56);
  if (h.ep.nqps < 1 || h.ep.nqps > kMaxQpsPerConn) return bad(kWhat, "QP count out of range");
  TQ_RETURN_IF_ERROR(getQpns(p + 64, &h.ep, kWhat));
  h.cts_addr = get64(p + 96);
  h.cts_rkey = get32(p + 104);
  TQ_RETURN_IF_ERROR(checkEndpoint(h.ep, kWhat));
  if (h.cts_addr == 0) return bad(kWhat, "no clear-to-send ring address");
  return h;
}

// ---- reply ------------------------------------------------------------------------------------

void encodeIbReply(const IbReply& r, uint8_t out[kIbReplyBytes]) {
  oob::startEnvelope(out, kIbReplyBytes, kReplyMagic, r.version);
  put16(out + 10, static_cast<uint16_t>(r.status));
  if (r.status == IbReplyStatus::kAccepted) {
    out[12] = static_cast<uint8_t>(r.ep.link_layer);
    out[13] = static_cast<uint8_t>(r.ep.port);
    put16(out + 14, r.ep.lid);
    put16(out + 16, static_cast<uint16_t>(r.ep.mtu_bytes));
    out[18] = static_cast<uint8_t>(r.ep.nqps);
    put32(out + 20, r.ep.psn);
    std::memcpy(out + 32, r.ep.gid.raw.data(), 16);
    putQpns(out + 48, r.ep);
    put64(out + 80, r.sizes_addr);
    put32(out + 88, r.sizes_rkey);
  }
  out[19] = static_cast<uint8_t>(putText(out + 96, kMaxDeviceNameBytes, r.ep.device));
  put64(out + 24, r.conn_id);
  out[92] = static_cast<uint8_t>(putText(out + 128, kMaxReplyReason, r.reason));
  oob::sealEnvelope(out, kIbReplyBytes);
}

Result<IbReply> parseIbReply(const uint8_t* p, size_t len) {
  constexpr std::string_view kWhat = "ib handshake reply";
  IbReply r;
  TQ_ASSIGN_OR_RETURN(r.version, oob::openEnvelope(p, len, kIbReplyBytes, kReplyMagic, kWhat,
                                                   "a tenantqos ib peer"));
  const uint16_t status = get16(p + 10);
  if (status > static_cast<uint16_t>(IbReplyStatus::kSetupFailed)) {
    return bad(kWhat, "unknown status " + std::to_string(status));
  }
  r.status = static_cast<IbReplyStatus>(status);
  if (!allZero(p + 93, 3) || get32(p + 248) != 0) return bad(kWhat, "reserved bytes set");
  r.conn_id = get64(p + 24);
  TQ_ASSIGN_OR_RETURN(r.ep.device, getText(p + 96, kMaxDeviceNameBytes, p[19], kWhat));
  TQ_ASSIGN_OR_RETURN(r.reason, getText(p + 128, kMaxReplyReason, p[92], kWhat));
  if (r.status != IbReplyStatus::kAccepted) {
    // A rejection carries nothing but its reason (and the device name, if known).
    if (!allZero(p + 12, 7) || !allZero(p + 20, 4) || !allZero(p + 32, 60)) {
      return bad(kWhat, "rejection with endpoint fields set");
    }
    return r;
  }
  TQ_RETURN_IF_ERROR(oob::expectVersion(r.version, kIbProtocolVersion, kWhat));
  TQ_ASSIGN_OR_RETURN(r.ep.link_layer, linkLayerOf(p[12], kWhat));
  r.ep.port = p[13];
  r.ep.lid = get16(p + 14);
  r.ep.mtu_bytes = get16(p + 16);
  r.ep.nqps = p[18];
  r.ep.psn = get32(p + 20);
  std::memcpy(r.ep.gid.raw.data(), p + 32, 16);
  if (r.ep.nqps < 1 || r.ep.nqps > kMaxQpsPerConn) return bad(kWhat, "QP count out of range");
  TQ_RETURN_IF_ERROR(getQpns(p + 48, &r.ep, kWhat));
  r.sizes_addr = get64(p + 80);
  r.sizes_rkey = get32(p + 88);
  TQ_RETURN_IF_ERROR(checkEndpoint(r.ep, kWhat));
  if (r.sizes_addr == 0) return bad(kWhat, "no sizes ring address");
  return r;
}

// ---- ready ------------------------------------------------------------------------------------

void encodeIbReady(const IbReady& r, uint8_t out[kIbReadyBytes]) {
  oob::startEnvelope(out, kIbReadyBytes, kReadyMagic, r.version);
  put16(out + 10, r.ok ? 0 : 1);
  out[12] = static_cast<uint8_t>(putText(out + 24, kMaxReadyReason, r.reason));
  put64(out + 16, r.conn_id);
  oob::sealEnvelope(out, kIbReadyBytes);
}

Result<IbReady> parseIbReady(const uint8_t* p, size_t len) {
  constexpr std::string_view kWhat = "ib handshake ready";
  IbReady r;
  TQ_ASSIGN_OR_RETURN(r.version, oob::openEnvelope(p, len, kIbReadyBytes, kReadyMagic, kWhat,
                                                   "a tenantqos ib peer"));
  TQ_RETURN_IF_ERROR(oob::expectVersion(r.version, kIbProtocolVersion, kWhat));
  const uint16_t status = get16(p + 10);
  if (status > 1) return bad(kWhat, "unknown status");
  r.ok = status == 0;
  if (!allZero(p + 13, 3)) return bad(kWhat, "reserved bytes set");
  r.conn_id = get64(p + 16);
  TQ_ASSIGN_OR_RETURN(r.reason, getText(p + 24, kMaxReadyReason, p[12], kWhat));
  return r;
}

}  // namespace tq::plugin::ib
