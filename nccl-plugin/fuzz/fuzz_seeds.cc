// Writes valid encodings of every wire message into a directory: the fuzzer's seed corpus,
// so it starts from inputs that pass the magic and CRC checks and mutates from there.
#include <arpa/inet.h>

#include <cstdio>
#include <string>

#include "nccl-plugin/ib/ib_wire.h"
#include "nccl-plugin/socket/wire.h"

using namespace tq::plugin::socket;
namespace ibw = tq::plugin::ib;

static void write(const std::string& path, const uint8_t* data, size_t n) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return;
  std::fwrite(data, 1, n, f);
  std::fclose(f);
}

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const std::string dir = argv[1];
  HandleInfo h;
  auto& a4 = reinterpret_cast<sockaddr_in&>(h.addr.storage);
  a4.sin_family = AF_INET;
  inet_pton(AF_INET, "10.0.0.1", &a4.sin_addr);
  h.addr.len = sizeof a4;
  h.addr.setPort(4242);
  h.nsocks = 4;
  h.nonce = 0x0123456789abcdefull;
  uint8_t handle[kHandlePublicBytes];
  encodeHandle(h, handle);
  write(dir + "/handle", handle, sizeof handle);
  Hello hello;
  hello.index = 4;
  hello.nsocks = 4;
  hello.dscp = 26;
  hello.service_level = 3;
  hello.has_priority = true;
  hello.priority = 3;
  hello.nonce = h.nonce;
  hello.conn_id = 42;
  hello.tenant = "team-a";
  hello.min_chunk = 65536;
  uint8_t hb[kHelloBytes];
  encodeHello(hello, hb);
  write(dir + "/hello", hb, sizeof hb);
  uint8_t ab[kAckBytes];
  encodeAck({kProtocolVersion, AckStatus::kBadVersion, 42, "peer speaks protocol version 2"}, ab);
  write(dir + "/ack", ab, sizeof ab);
  uint8_t fb[kFrameBytes];
  encodeFrame({FrameType::kMessage, kFrameInline, 7, 4096}, fb);
  write(dir + "/frame", fb, sizeof fb);
  encodeFrame({FrameType::kError, 0, 7, 100}, fb);
  write(dir + "/error_frame", fb, sizeof fb);

  ibw::IbHandle ih;
  ih.addr = h.addr;
  ih.nonce = h.nonce;
  uint8_t ihb[ibw::kIbHandlePublicBytes];
  ibw::encodeIbHandle(ih, ihb);
  write(dir + "/ib_handle", ihb, sizeof ihb);
  ibw::IbHello ihello;
  ihello.nonce = h.nonce;
  ihello.conn_id = 42;
  ihello.dscp = 26;
  ihello.service_level = 3;
  ihello.tenant = "team-a";
  ihello.ep.gid = *tq::ib::parseGid("::ffff:10.77.0.1");
  ihello.ep.mtu_bytes = 4096;
  ihello.ep.nqps = 2;
  ihello.ep.qpn[0] = 0x11;
  ihello.ep.qpn[1] = 0x12;
  ihello.ep.psn = 0x1234;
  ihello.ep.device = "rxe0";
  ihello.cts_addr = 0x7f0000001000ull;
  ihello.cts_rkey = 0x99;
  uint8_t ihelb[ibw::kIbHelloBytes];
  ibw::encodeIbHello(ihello, ihelb);
  write(dir + "/ib_hello", ihelb, sizeof ihelb);
  ibw::IbReply rep;
  rep.conn_id = 42;
  rep.ep = ihello.ep;
  rep.ep.device = "rxe1";
  rep.sizes_addr = 0x7f0000002000ull;
  rep.sizes_rkey = 0x98;
  uint8_t repb[ibw::kIbReplyBytes];
  ibw::encodeIbReply(rep, repb);
  write(dir + "/ib_reply", repb, sizeof repb);
  ibw::IbReply rej;
  rej.status = ibw::IbReplyStatus::kSetupFailed;
  rej.reason = "modify rxe1 QP 0x11 to RTR: Network is unreachable";
  ibw::encodeIbReply(rej, repb);
  write(dir + "/ib_reject", repb, sizeof repb);
  ibw::IbReady ready;
  ready.conn_id = 42;
  ready.ok = false;
  ready.reason = "QPs towards rxe1";
  uint8_t rdyb[ibw::kIbReadyBytes];
  ibw::encodeIbReady(ready, rdyb);
  write(dir + "/ib_ready", rdyb, sizeof rdyb);
  return 0;
}
