#include "nccl-plugin/oob/tcp.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "common/log.h"

namespace tq::plugin::oob {

Status netError(int err, std::string_view what) {
  Status s = errnoStatus(err, what);
  StatusCode code = StatusCode::kUnavailable;
  if (err == ETIMEDOUT) code = StatusCode::kDeadlineExceeded;
  if (err == EMFILE || err == ENFILE || err == ENOMEM || err == ENOBUFS) {
    code = StatusCode::kResourceExhausted;
  }
  return Status(code, s.message());
}

Status applyQos(int fd, int family, const TrafficQos& qos) {
  const int tos = (qos.dscp & 0x3f) << 2;
  if (family == AF_INET6) {
    if (::setsockopt(fd, IPPROTO_IPV6, IPV6_TCLASS, &tos, sizeof tos) != 0) {
      return netError(errno, "set IPV6_TCLASS " + std::to_string(tos));
    }
    // An AF_INET6 socket may carry IPv4 (mapped addresses); mark that path too, best effort.
    (void)::setsockopt(fd, IPPROTO_IP, IP_TOS, &tos, sizeof tos);
  } else {
    if (::setsockopt(fd, IPPROTO_IP, IP_TOS, &tos, sizeof tos) != 0) {
      return netError(errno, "set IP_TOS " + std::to_string(tos));
    }
  }
  if (qos.priority.has_value()) {
    const int prio = static_cast<int>(*qos.priority);
    if (::setsockopt(fd, SOL_SOCKET, SO_PRIORITY, &prio, sizeof prio) != 0) {
      if (errno != EPERM) return netError(errno, "set SO_PRIORITY " + std::to_string(prio));
      static std::atomic<bool> warned{false};
      if (!warned.exchange(true)) {
        TQ_LOG(kWarn,
               "SO_PRIORITY %d refused (needs CAP_NET_ADMIN above 6); sockets keep the default "
               "priority, DSCP marking still applies",
               prio);
      }
    }
  }
  return okStatus();
}

Result<SocketMarking> readMarking(int fd) {
  SocketMarking m;
  int domain = 0;
  socklen_t len = sizeof domain;
  if (::getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0) {
    return errnoStatus("getsockopt SO_DOMAIN");
  }
  len = sizeof m.tos;
  const int rc = domain == AF_INET6 ? ::getsockopt(fd, IPPROTO_IPV6, IPV6_TCLASS, &m.tos, &len)
                                    : ::getsockopt(fd, IPPROTO_IP, IP_TOS, &m.tos, &len);
  if (rc != 0) return errnoStatus("getsockopt TOS");
  len = sizeof m.priority;
  if (::getsockopt(fd, SOL_SOCKET, SO_PRIORITY, &m.priority, &len) != 0) {
    return errnoStatus("getsockopt SO_PRIORITY");
  }
  return m;
}

Status setNonBlocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    return netError(errno, "set O_NONBLOCK");
  }
  return okStatus();
}

Status setBuffers(int fd, int bytes) {
  if (::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes) != 0 ||
      ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes) != 0) {
    return netError(errno, "set SO_SNDBUF/SO_RCVBUF " + std::to_string(bytes));
  }
  return okStatus();
}

Status setNoDelay(int fd) {
  const int one = 1;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) {
    return netError(errno, "set TCP_NODELAY");
  }
  return okStatus();
}

IoResult sendSome(int fd, const void* buf, size_t len, size_t* done, int* err) {
  for (;;) {
    const ssize_t n = ::send(fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      *done += static_cast<size_t>(n);
      return IoResult::kProgress;
    }
    if (n == 0) return len == 0 ? IoResult::kProgress : IoResult::kWouldBlock;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return IoResult::kWouldBlock;
    *err = errno;
    return IoResult::kError;
  }
}

IoResult recvSome(int fd, void* buf, size_t len, size_t* done, int* err) {
  for (;;) {
    const ssize_t n = ::recv(fd, buf, len, MSG_DONTWAIT);
    if (n > 0) {
      *done += static_cast<size_t>(n);
      return IoResult::kProgress;
    }
    if (n == 0) return len == 0 ? IoResult::kProgress : IoResult::kClosed;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return IoResult::kWouldBlock;
    *err = errno;
    return IoResult::kError;
  }
}

IoResult peekAlive(int fd, int* err) {
  for (;;) {
    char c;
    const ssize_t n = ::recv(fd, &c, 1, MSG_DONTWAIT | MSG_PEEK);
    if (n > 0) return IoResult::kProgress;
    if (n == 0) return IoResult::kClosed;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return IoResult::kWouldBlock;
    *err = errno;
    return IoResult::kError;
  }
}

Result<Fd> listenTcp(SocketAddress* addr, const TrafficQos& qos, int backlog) {
  const int family = addr->family();
  Fd fd(::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return netError(errno, "listen on " + addr->toString() + ": socket");
  TQ_RETURN_IF_ERROR_CTX(applyQos(fd.get(), family, qos), "listen on " + addr->toString());
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr->storage), addr->len) != 0) {
    return netError(errno, "listen: bind " + addr->toString());
  }
  if (::listen(fd.get(), backlog) != 0) return netError(errno, "listen on " + addr->toString());
  socklen_t len = sizeof addr->storage;
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr->storage), &len) != 0) {
    return netError(errno, "listen on " + addr->toString() + ": getsockname");
  }
  addr->len = len;
  return fd;
}

Result<Fd> acceptTcp(int listen_fd, SocketAddress* peer) {
  for (;;) {
    socklen_t len = sizeof peer->storage;
    const int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&peer->storage), &len,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Fd();
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return netError(errno, "accept");
    }
    peer->len = len;
    Fd out(fd);
    TQ_RETURN_IF_ERROR(setNoDelay(fd));
    return out;
  }
}

Result<TcpConnect> startTcpConnect(const SocketAddress& to, const TrafficQos& qos, Fd* fd) {
  const int family = to.family();
  fd->reset(::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd->valid()) return netError(errno, "socket");
  TQ_RETURN_IF_ERROR(applyQos(fd->get(), family, qos));  // before connect(): the SYN is marked
  TQ_RETURN_IF_ERROR(setNoDelay(fd->get()));
  if (::connect(fd->get(), reinterpret_cast<const sockaddr*>(&to.storage), to.len) == 0) {
    return TcpConnect::kConnected;
  }
  if (errno == ECONNREFUSED) {
    fd->reset();
    return TcpConnect::kRefused;
  }
  if (errno == EINPROGRESS || errno == EINTR) return TcpConnect::kInProgress;
  const int err = errno;
  fd->reset();
  return netError(err, "TCP connect");
}

Result<TcpConnect> pollTcpConnect(Fd* fd) {
  pollfd p{fd->get(), POLLOUT, 0};
  if (::poll(&p, 1, 0) <= 0) return TcpConnect::kInProgress;
  int err = 0;
  socklen_t len = sizeof err;
  ::getsockopt(fd->get(), SOL_SOCKET, SO_ERROR, &err, &len);
  if (err == 0) return TcpConnect::kConnected;
  fd->reset();
  if (err == ECONNREFUSED) return TcpConnect::kRefused;
  return netError(err, "TCP connect");
}

}  // namespace tq::plugin::oob
