// Writes valid encodings of every wire message into a directory: the fuzzer's seed corpus,
// so it starts from inputs that pass the magic and CRC checks and mutates from there.
#include <arpa/inet.h>

#include <cstdio>
#include <string>

#include "nccl-plugin/socket/wire.h"

using namespace tq::plugin::socket;

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
  return 0;
}
