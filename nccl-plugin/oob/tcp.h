// Non-blocking TCP of the out-of-band layer: listen/connect/accept, non-blocking I/O results,
// and the QoS marking (IP_TOS / IPV6_TCLASS = DSCP << 2, SO_PRIORITY) applied to every socket.
// Nothing here blocks. Used by both transports' handshakes and by the socket transport's data
// path.
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

// A network failure: like errnoStatus, but always kUnavailable (or kDeadlineExceeded for
// ETIMEDOUT, kResourceExhausted for fd/memory exhaustion), so that it reaches NCCL as
// ncclSystemError whatever errno says.
Status netError(int err, std::string_view what);

// Marks `fd` with `qos`. DSCP failures are errors; an SO_PRIORITY refused for lack of
// CAP_NET_ADMIN (EPERM) is reported once per process in the log and otherwise ignored.
Status applyQos(int fd, int family, const TrafficQos& qos);

// What the kernel holds for a socket (tests and diagnostics).
struct SocketMarking {
  int tos = -1;       // IP_TOS or IPV6_TCLASS byte
  int priority = -1;  // SO_PRIORITY
};
Result<SocketMarking> readMarking(int fd);

Status setNonBlocking(int fd);
// Fixed send and receive buffers (the kernel doubles the value). Used on the control stream so
// an inline message is always written and read in one piece (no flow-control round trips).
Status setBuffers(int fd, int bytes);
Status setNoDelay(int fd);

// A non-blocking, close-on-exec listening socket marked with `qos`, bound to `*addr` (port 0:
// any); *addr receives the bound address. Errors name the address.
Result<Fd> listenTcp(SocketAddress* addr, const TrafficQos& qos, int backlog);
// Takes one completed connection (non-blocking, TCP_NODELAY): an invalid Fd when none waits.
Result<Fd> acceptTcp(int listen_fd, SocketAddress* peer);

// Non-blocking connect. startTcpConnect makes a socket marked with `qos` BEFORE connect() (so
// even the SYN is marked), with TCP_NODELAY, and starts connecting; pollTcpConnect checks an
// attempt in progress. kRefused (ECONNREFUSED: the listener's backlog is full, or it is not
// listening yet) leaves *fd closed: retry later.
enum class TcpConnect { kConnected, kInProgress, kRefused };
Result<TcpConnect> startTcpConnect(const SocketAddress& to, const TrafficQos& qos, Fd* fd);
Result<TcpConnect> pollTcpConnect(Fd* fd);

// Non-blocking transfer outcome.
enum class IoResult { kProgress, kWouldBlock, kClosed, kError };
// Sends/receives up to `len` bytes once (MSG_DONTWAIT, MSG_NOSIGNAL); adds to *done.
IoResult sendSome(int fd, const void* buf, size_t len, size_t* done, int* err);
IoResult recvSome(int fd, void* buf, size_t len, size_t* done, int* err);
// Liveness of an idle connection the peer never writes to after its handshake: kClosed when the
// peer closed it (process gone), kError (with *err) when it was reset, else kWouldBlock. Bytes
// the peer sent are left in the socket (MSG_PEEK) and reported as kProgress.
IoResult peekAlive(int fd, int* err);

}  // namespace tq::plugin::oob
