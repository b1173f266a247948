// The resumable pieces of an out-of-band handshake over non-blocking TCP, shared by both
// transports (NCCL polls connect/accept; nothing here blocks): a TCP dial retried after
// ECONNREFUSED, a fixed-size message sent or received over as many calls as the socket needs,
// a best-effort rejection, nonces and connection ids. Each transport keeps its own messages
// and its phase enum; the envelope of those messages is envelope.h.
// Thread-safety: one object is driven by one caller at a time (NCCL connects/accepts a comm
// from one thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/fd.h"
#include "common/status.h"
#include "nccl-plugin/oob/address.h"
#include "nccl-plugin/transport.h"

namespace tq::plugin::oob {

// After ECONNREFUSED (the listener's backlog is full, or it is not listening yet).
inline constexpr int64_t kConnectRetryNs = 20'000'000;

// A random 64-bit value (getrandom; the clock and pid if that fails): listen nonces, connection
// ids. Not a secret: it tells connections apart, it does not authenticate them.
uint64_t randomU64();
// "1500 ms", for deadline messages.
std::string msText(int64_t ns);

// One TCP connection being established: marked with the QoS before the SYN, retried every
// kConnectRetryNs while refused.
struct Dial {
  Fd fd;
  bool connected = false;
  int64_t retry_at = 0;
  // Moves the attempt on (now_ns: the caller's clock); ok(true) once connected.
  Result<bool> step(const SocketAddress& to, const TrafficQos& qos, int64_t now_ns);
};

// A fixed-size message (at most kMaxBytes) on its way out or in.
class MessageIo {
 public:
  static constexpr size_t kMaxBytes = 256;

  // Expects a message of `size` bytes: to receive, or to fill through data() and send.
  explicit MessageIo(size_t size = 0) : size_(size) {}
  uint8_t* data() { return buf_; }
  const uint8_t* data() const { return buf_; }
  size_t size() const { return size_; }
  size_t done() const { return done_; }
  bool complete() const { return done_ == size_; }

  // Sends (receives) what is left, once, without blocking. Errors: netError(errno, "send
  // <what>"); the peer closing: kUnavailable "the peer closed the connection after N of M
  // <what> bytes".
  Status sendStep(int fd, std::string_view what);
  Status recvStep(int fd, std::string_view what);

 private:
  uint8_t buf_[kMaxBytes] = {};
  size_t size_ = 0;
  size_t done_ = 0;
};

// Tells a rejected peer why before the caller drops the connection: one non-blocking send of
// the whole message, errors ignored (the peer may be gone; the caller reports its own error).
void sendBestEffort(int fd, const uint8_t* msg, size_t len);

}  // namespace tq::plugin::oob
