#include "nccl-plugin/oob/handshake.h"

#include <sys/random.h>
#include <unistd.h>

#include "common/clock.h"
#include "nccl-plugin/oob/tcp.h"

namespace tq::plugin::oob {

uint64_t randomU64() {
  uint64_t v = 0;
  if (::getrandom(&v, sizeof v, 0) != sizeof v) {
    v = static_cast<uint64_t>(realClock().nowNs()) ^ (static_cast<uint64_t>(::getpid()) << 32);
  }
  return v;
}

std::string msText(int64_t ns) { return std::to_string(ns / 1'000'000) + " ms"; }

Result<bool> Dial::step(const SocketAddress& to, const TrafficQos& qos, int64_t now_ns) {
  if (connected) return true;
  if (!fd.valid() && now_ns >= retry_at) {
    TQ_ASSIGN_OR_RETURN(TcpConnect r, startTcpConnect(to, qos, &fd));
    if (r == TcpConnect::kConnected) connected = true;
    if (r == TcpConnect::kRefused) retry_at = now_ns + kConnectRetryNs;
  }
  if (!connected && fd.valid()) {
    TQ_ASSIGN_OR_RETURN(TcpConnect r, pollTcpConnect(&fd));
    if (r == TcpConnect::kConnected) connected = true;
    if (r == TcpConnect::kRefused) retry_at = now_ns + kConnectRetryNs;
  }
  return connected;
}

Status MessageIo::sendStep(int fd, std::string_view what) {
  if (complete()) return okStatus();
  int err = 0;
  if (sendSome(fd, buf_ + done_, size_ - done_, &done_, &err) == IoResult::kError) {
    return netError(err, "send " + std::string(what));
  }
  return okStatus();
}

Status MessageIo::recvStep(int fd, std::string_view what) {
  if (complete()) return okStatus();
  int err = 0;
  switch (recvSome(fd, buf_ + done_, size_ - done_, &done_, &err)) {
    case IoResult::kClosed:
      return unavailable("the peer closed the connection after " + std::to_string(done_) + " of " +
                         std::to_string(size_) + " " + std::string(what) + " bytes");
    case IoResult::kError: return netError(err, "read " + std::string(what));
    default: return okStatus();
  }
}

void sendBestEffort(int fd, const uint8_t* msg, size_t len) {
  size_t done = 0;
  int err = 0;
  (void)sendSome(fd, msg, len, &done, &err);
}

}  // namespace tq::plugin::oob
