#include "nccl-plugin/perf/rendezvous.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "common/clock.h"

namespace tq::perf {
namespace {

constexpr uint32_t kMagic = 0x50515154;  // "TQQP"

int64_t nowNs() { return realClock().nowNs(); }

int msLeft(int64_t deadline) {
  const int64_t left = deadline - nowNs();
  if (left <= 0) return 0;
  return static_cast<int>(std::min<int64_t>(left / 1'000'000 + 1, 1000));
}

Status waitFd(int fd, short events, int64_t deadline, const std::string& what) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, msLeft(deadline));
    if (rc > 0) return okStatus();
    if (rc < 0 && errno != EINTR) return errnoStatus("poll (" + what + ")");
    if (nowNs() >= deadline) return deadlineExceeded("rendezvous timed out: " + what);
  }
}

struct AddrinfoFree {
  void operator()(addrinfo* a) const { ::freeaddrinfo(a); }
};
using AddrinfoPtr = std::unique_ptr<addrinfo, AddrinfoFree>;

Result<AddrinfoPtr> resolve(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) return invalidArgument("resolve " + host + ": " + gai_strerror(rc));
  return AddrinfoPtr(res);
}

}  // namespace

Result<std::unique_ptr<Rendezvous>> Rendezvous::create(int rank, int nranks,
                                                       const std::string& host, uint16_t port,
                                                       Fd listen, int64_t timeout_ns) {
  std::unique_ptr<Rendezvous> r(new Rendezvous(rank, nranks, timeout_ns));
  const int64_t deadline = nowNs() + timeout_ns;
  if (rank == 0) {
    if (!listen.valid()) {
      TQ_ASSIGN_OR_RETURN(AddrinfoPtr ai, resolve(host, port));
      listen.reset(::socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
      const int one = 1;
      ::setsockopt(listen.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (!listen.valid() || ::bind(listen.get(), ai->ai_addr, ai->ai_addrlen) != 0 ||
          ::listen(listen.get(), 256) != 0) {
        return errnoStatus("rendezvous: listen on " + host + ":" + std::to_string(port));
      }
    }
    r->peers_.resize(static_cast<size_t>(nranks));
    for (int got = 1; got < nranks;) {
      TQ_RETURN_IF_ERROR(waitFd(listen.get(), POLLIN, deadline,
                                std::to_string(got - 1) + " of " + std::to_string(nranks - 1) +
                                    " ranks connected to rank 0"));
      Fd fd(::accept4(listen.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!fd.valid()) continue;
      const int one = 1;
      ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      std::string hello;
      if (!r->recvMsg(fd.get(), deadline, "a connecting rank", &hello).ok() || hello.size() != 12) {
        continue;  // not one of ours (e.g. a port scanner): ignore
      }
      uint32_t magic, peer_rank, peer_n;
      std::memcpy(&magic, hello.data(), 4);
      std::memcpy(&peer_rank, hello.data() + 4, 4);
      std::memcpy(&peer_n, hello.data() + 8, 4);
      if (magic != kMagic || static_cast<int>(peer_n) != nranks || peer_rank == 0 ||
          static_cast<int>(peer_rank) >= nranks || r->peers_[peer_rank].valid()) {
        return invalidArgument("rendezvous: a peer announced rank " + std::to_string(peer_rank) +
                               " of " + std::to_string(peer_n) + " (expected nranks " +
                               std::to_string(nranks) + ", each rank once)");
      }
      r->peers_[peer_rank] = std::move(fd);
      ++got;
    }
    return r;
  }
  TQ_ASSIGN_OR_RETURN(AddrinfoPtr ai, resolve(host, port));
  Fd fd;
  for (;;) {
    fd.reset(::socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) == 0) break;
    const Status last = errnoStatus("connect to rank 0 at " + host + ":" + std::to_string(port));
    fd.reset();
    if (nowNs() >= deadline) return deadlineExceeded("rendezvous timed out: " + last.message());
    ::usleep(20'000);
  }
  const int one = 1;
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  std::string hello(12, '\0');
  const uint32_t vals[3] = {kMagic, static_cast<uint32_t>(rank), static_cast<uint32_t>(nranks)};
  std::memcpy(hello.data(), vals, 12);
  TQ_RETURN_IF_ERROR(r->sendMsg(fd.get(), hello, deadline));
  r->peers_.push_back(std::move(fd));
  return r;
}

Status Rendezvous::sendMsg(int fd, const std::string& m, int64_t deadline) {
  std::string buf(4, '\0');
  const uint32_t len = static_cast<uint32_t>(m.size());
  std::memcpy(buf.data(), &len, 4);
  buf += m;
  size_t off = 0;
  while (off < buf.size()) {
    TQ_RETURN_IF_ERROR(waitFd(fd, POLLOUT, deadline, "send to a rank"));
    const ssize_t n = ::send(fd, buf.data() + off, buf.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) return errnoStatus("rendezvous: send");
    off += static_cast<size_t>(n);
  }
  return okStatus();
}

Status Rendezvous::recvMsg(int fd, int64_t deadline, const std::string& who, std::string* out) {
  auto readN = [&](char* p, size_t n) -> Status {
    size_t off = 0;
    while (off < n) {
      TQ_RETURN_IF_ERROR(waitFd(fd, POLLIN, deadline, "waiting for " + who));
      const ssize_t r = ::recv(fd, p + off, n - off, MSG_DONTWAIT);
      if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (r == 0) return unavailable(who + " closed the rendezvous connection (exited or died)");
      if (r < 0) return errnoStatus("rendezvous: receive from " + who);
      off += static_cast<size_t>(r);
    }
    return okStatus();
  };
  uint32_t len = 0;
  TQ_RETURN_IF_ERROR(readN(reinterpret_cast<char*>(&len), 4));
  if (len > (64u << 20)) return dataLoss("rendezvous: oversized message from " + who);
  out->assign(len, '\0');
  return readN(out->data(), len);
}

Result<std::vector<std::string>> Rendezvous::allGather(const std::string& mine) {
  const int64_t deadline = nowNs() + timeout_ns_;
  std::vector<std::string> all(static_cast<size_t>(nranks_));
  if (rank_ == 0) {
    all[0] = mine;
    for (int r = 1; r < nranks_; ++r) {
      TQ_RETURN_IF_ERROR(recvMsg(peers_[r].get(), deadline, "rank " + std::to_string(r), &all[r]));
    }
    std::string packed;
    for (const std::string& b : all) {
      const uint32_t len = static_cast<uint32_t>(b.size());
      packed.append(reinterpret_cast<const char*>(&len), 4).append(b);
    }
    for (int r = 1; r < nranks_; ++r) {
      TQ_RETURN_IF_ERROR(sendMsg(peers_[r].get(), packed, deadline));
    }
    return all;
  }
  TQ_RETURN_IF_ERROR(sendMsg(peers_[0].get(), mine, deadline));
  std::string packed;
  TQ_RETURN_IF_ERROR(recvMsg(peers_[0].get(), deadline, "rank 0", &packed));
  size_t off = 0;
  for (int r = 0; r < nranks_; ++r) {
    if (off + 4 > packed.size()) return dataLoss("rendezvous: short gather message");
    uint32_t len;
    std::memcpy(&len, packed.data() + off, 4);
    off += 4;
    if (off + len > packed.size()) return dataLoss("rendezvous: short gather message");
    all[r] = packed.substr(off, len);
    off += len;
  }
  return all;
}

Status Rendezvous::barrier() { return allGather("").status(); }

Status Rendezvous::checkAlive() {
  for (size_t i = 0; i < peers_.size(); ++i) {
    const int fd = peers_[i].get();
    if (fd < 0) continue;
    pollfd p{fd, POLLIN | POLLRDHUP, 0};
    if (::poll(&p, 1, 0) <= 0) continue;
    char c;
    const ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
      const std::string who = rank_ == 0 ? "rank " + std::to_string(i) : std::string("rank 0");
      return unavailable(who + " is gone (closed its rendezvous connection: exited or died)");
    }
  }
  return okStatus();
}

}  // namespace tq::perf
