// libFuzzer target for the transports' wire parsers: the shared out-of-band envelope
// (oob/envelope.h) on its own, the socket transport's listen handle,
// per-stream hello, acceptor's reply and control frame; the ib transport's handle, hello, reply
// and ready message. These parse
// bytes from the network (or from another rank's handle), so any input must be rejected with a
// message or accepted — never crash, hang or read out of bounds (ASan/UBSan on).
//
// Properties checked beyond "no crash": an accepted hello/ack/frame re-encodes to exactly the
// same bytes (the parsers reject every non-canonical form), an accepted handle round-trips,
// and planStripes covers any size exactly.
#include <cstdint>
#include <cstring>

#include "nccl-plugin/ib/ib_wire.h"
#include "nccl-plugin/oob/envelope.h"
#include "nccl-plugin/socket/wire.h"

using namespace tq::plugin::socket;
namespace ibw = tq::plugin::ib;

#define FUZZ_CHECK(cond)           \
  do {                             \
    if (!(cond)) __builtin_trap(); \
  } while (0)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The envelope at every message size the transports use, whatever the magic: an accepted
  // message re-seals to the same bytes, and the version returned is the one at byte 8.
  for (size_t n : {size_t{64}, size_t{128}, size_t{256}}) {
    uint64_t magic = 0;
    if (size >= 8) std::memcpy(&magic, data, 8);
    if (auto v = tq::plugin::oob::openEnvelope(data, size, n, magic, "fuzz", "fuzz"); v.ok()) {
      uint8_t buf[256];
      tq::plugin::oob::startEnvelope(buf, n, magic, *v);
      std::memcpy(buf + 10, data + 10, n - 14);
      tq::plugin::oob::sealEnvelope(buf, n);
      FUZZ_CHECK(std::memcmp(buf, data, n) == 0);
    }
  }
  if (auto h = parseHandle(data, size); h.ok()) {
    uint8_t buf[kHandlePublicBytes];
    encodeHandle(*h, buf);
    auto again = parseHandle(buf, sizeof buf);
    FUZZ_CHECK(again.ok());
    FUZZ_CHECK(again->nonce == h->nonce && again->nsocks == h->nsocks);
    FUZZ_CHECK(again->addr.toString() == h->addr.toString());
  }
  if (auto h = parseHello(data, size); h.ok() && h->version == kProtocolVersion) {
    uint8_t buf[kHelloBytes];
    encodeHello(*h, buf);
    FUZZ_CHECK(std::memcmp(buf, data, kHelloBytes) == 0);
  }
  if (auto a = parseAck(data, size); a.ok() && a->reason.size() <= kMaxAckReason) {
    uint8_t buf[kAckBytes];
    encodeAck(*a, buf);
    FUZZ_CHECK(std::memcmp(buf, data, kAckBytes) == 0);
  }
  if (auto f = parseFrame(data, size); f.ok()) {
    uint8_t buf[kFrameBytes];
    encodeFrame(*f, buf);
    FUZZ_CHECK(std::memcmp(buf, data, kFrameBytes) == 0);
  }
  if (auto h = ibw::parseIbHandle(data, size); h.ok()) {
    uint8_t buf[ibw::kIbHandlePublicBytes];
    ibw::encodeIbHandle(*h, buf);
    auto again = ibw::parseIbHandle(buf, sizeof buf);
    FUZZ_CHECK(again.ok() && again->nonce == h->nonce);
    FUZZ_CHECK(again->addr.toString() == h->addr.toString());
  }
  if (auto h = ibw::parseIbHello(data, size); h.ok() && h->version == ibw::kIbProtocolVersion) {
    uint8_t buf[ibw::kIbHelloBytes];
    ibw::encodeIbHello(*h, buf);
    FUZZ_CHECK(std::memcmp(buf, data, ibw::kIbHelloBytes) == 0);
    FUZZ_CHECK(ibw::checkEndpoint(h->ep, "fuzz").ok());
  }
  if (auto r = ibw::parseIbReply(data, size); r.ok()) {
    uint8_t buf[ibw::kIbReplyBytes];
    ibw::encodeIbReply(*r, buf);
    FUZZ_CHECK(std::memcmp(buf, data, ibw::kIbReplyBytes) == 0);
  }
  if (auto r = ibw::parseIbReady(data, size); r.ok()) {
    uint8_t buf[ibw::kIbReadyBytes];
    ibw::encodeIbReady(*r, buf);
    FUZZ_CHECK(std::memcmp(buf, data, ibw::kIbReadyBytes) == 0);
  }
  if (size >= 16) {
    uint64_t msg = 0, chunk = 0;
    std::memcpy(&msg, data, 8);
    std::memcpy(&chunk, data + 8, 8);
    msg %= (1ull << 40);
    const int nsocks = static_cast<int>(data[0] % kMaxSocks) + 1;
    Stripe s[kMaxSocks];
    const int n = planStripes(msg, nsocks, static_cast<uint32_t>(chunk), chunk % (1 << 30), s);
    uint64_t covered = 0;
    for (int i = 0; i < n; ++i) {
      FUZZ_CHECK(s[i].offset == covered && s[i].stream >= 0 && s[i].stream < nsocks);
      covered += s[i].length;
    }
    FUZZ_CHECK(covered == msg);
  }
  return 0;
}
