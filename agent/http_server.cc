#include "agent/http_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "common/endpoints.h"
#include "common/log.h"
#include "common/text.h"

namespace tq::agent {

struct HttpServer::Conn {
  Fd fd;
  std::string peer;  // the numeric address, without the port
  std::string in;    // the request head so far
  std::string out;   // the response, once known
  size_t sent = 0;
  bool responding = false;
  int64_t deadline_ms = 0;
};

namespace {

int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string render(const HttpResponse& r, bool head) {
  std::string out = "HTTP/1.1 " + std::to_string(r.status) + " " + httpReasonPhrase(r.status) +
                    "\r\nContent-Type: " + r.content_type +
                    "\r\nContent-Length: " + std::to_string(r.body.size()) +
                    "\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n";
  if (!head) out += r.body;
  return out;
}

std::string peerAddress(const sockaddr_storage& sa) {
  char text[INET6_ADDRSTRLEN] = "?";
  if (sa.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(sa).sin_addr, text, sizeof text);
  } else if (sa.ss_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(sa).sin6_addr, text, sizeof text);
  }
  return text;
}

// The end of the request head ("\r\n\r\n", or "\n\n" from a lax client), or npos.
size_t headEnd(const std::string& in) {
  const size_t crlf = in.find("\r\n\r\n");
  const size_t lf = in.find("\n\n");
  return std::min(crlf, lf);
}

}  // namespace

Result<std::unique_ptr<HttpServer>> HttpServer::start(const std::string& host_port,
                                                      std::map<std::string, Handler> routes,
                                                      Options options) {
  TQ_ASSIGN_OR_RETURN(HostPort hp, parseHostPort(host_port));
  std::unique_ptr<HttpServer> s(new HttpServer());
  s->options_ = options;
  s->routes_ = std::move(routes);
  s->host_ = hp.host;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port_text = std::to_string(hp.port);
  const int gai = ::getaddrinfo(hp.host.c_str(), port_text.c_str(), &hints, &found);
  if (gai != 0) {
    return invalidArgument("metrics address " + host_port + ": " + ::gai_strerror(gai));
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(found, &::freeaddrinfo);
  Fd fd(::socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return errnoStatus("socket for metrics on " + host_port);
  const int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd.get(), found->ai_addr, found->ai_addrlen) != 0) {
    return errnoStatus("listen on " + host_port + " for metrics: bind");
  }
  if (::listen(fd.get(), 128) != 0) return errnoStatus("listen on " + host_port + " for metrics");
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &len) != 0) {
    return errnoStatus("metrics server on " + host_port + ": getsockname");
  }
  s->port_ =
      ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6&>(bound).sin6_port
                                        : reinterpret_cast<const sockaddr_in&>(bound).sin_port);
  s->listen_fd_ = std::move(fd);
  s->wake_fd_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!s->wake_fd_.valid()) return errnoStatus("eventfd for the metrics server");
  s->thread_ = std::thread([p = s.get()] { p->run(); });
  return s;
}

HttpServer::~HttpServer() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_fd_.get(), &one, sizeof one);
    thread_.join();
  }
}

void HttpServer::run() {
  pthread_setname_np(pthread_self(), "tq-http");
  std::vector<pollfd> fds;
  std::vector<uint64_t> ids;
  for (;;) {
    int64_t now = nowMs();
    int timeout = -1;
    fds.assign({{wake_fd_.get(), POLLIN, 0}, {listen_fd_.get(), POLLIN, 0}});
    ids.clear();
    for (auto& [id, c] : conns_) {
      fds.push_back({c->fd.get(), static_cast<short>(c->responding ? POLLOUT : POLLIN), 0});
      ids.push_back(id);
      const int64_t left = std::max<int64_t>(0, c->deadline_ms - now);
      timeout = timeout < 0 ? static_cast<int>(left) : std::min(timeout, static_cast<int>(left));
    }
    if (::poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) {
      TQ_LOG(kError, "metrics http: poll: %s", std::strerror(errno));
      return;
    }
    if (fds[0].revents != 0) return;  // the destructor
    now = nowMs();
    for (size_t i = 0; i < ids.size(); ++i) {
      auto it = conns_.find(ids[i]);
      if (it == conns_.end()) continue;
      Conn& c = *it->second;
      const short ev = fds[2 + i].revents;
      if (ev & (POLLERR | POLLNVAL)) {
        c.fd.reset();
      } else if (c.responding && (ev & (POLLOUT | POLLHUP))) {
        onWritable(c);
      } else if (!c.responding && (ev & (POLLIN | POLLHUP))) {
        onReadable(c, now);
      }
      if (c.fd.valid() && now >= c.deadline_ms) {
        TQ_LOG(kDebug, "metrics http: %s: closed after %s", c.peer.c_str(),
               c.responding ? "the response timeout" : "the request timeout");
        c.fd.reset();
      }
      if (!c.fd.valid()) conns_.erase(it);
    }
    if (fds[1].revents & POLLIN) accept(now);
  }
}

void HttpServer::accept(int64_t now_ms) {
  for (int i = 0; i < 64; ++i) {  // a burst of connects cannot starve the rest of the loop
    sockaddr_storage sa{};
    socklen_t len = sizeof sa;
    Fd fd(::accept4(listen_fd_.get(), reinterpret_cast<sockaddr*>(&sa), &len,
                    SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd.valid()) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) {
        TQ_LOG(kWarn, "metrics http: accept: %s", std::strerror(errno));
      }
      return;
    }
    std::string peer = peerAddress(sa);
    if (!makeRoom(peer)) {
      TQ_LOG(kDebug, "metrics http: %s: connection refused (every slot is answering)",
             peer.c_str());
      continue;  // closes fd
    }
    auto c = std::make_unique<Conn>();
    c->fd = std::move(fd);
    c->peer = std::move(peer);
    c->deadline_ms = now_ms + options_.request_timeout_ms;
    Conn& ref = *c;
    conns_.emplace(next_id_++, std::move(c));
    onReadable(ref, now_ms);  // the request is often there already
    if (!ref.fd.valid()) conns_.erase(std::prev(conns_.end()));
  }
}

bool HttpServer::makeRoom(const std::string& peer) {
  size_t mine = 0;
  for (const auto& [id, c] : conns_) mine += c->peer == peer;
  // Evicts the oldest connection (of `peer` when `only_peer`) that is still waiting for its
  // request: it has had longer than the new one to send it.
  auto evict = [&](bool only_peer) {
    for (auto it = conns_.begin(); it != conns_.end(); ++it) {
      if (it->second->responding || (only_peer && it->second->peer != peer)) continue;
      TQ_LOG(kDebug, "metrics http: %s: unfinished request closed to make room",
             it->second->peer.c_str());
      conns_.erase(it);
      return true;
    }
    return false;
  };
  if (mine >= options_.max_connections_per_peer && !evict(true)) return false;
  if (conns_.size() >= options_.max_connections && !evict(false)) return false;
  return true;
}

void HttpServer::onReadable(Conn& c, int64_t now_ms) {
  char buf[4096];
  for (;;) {
    const ssize_t n = ::recv(c.fd.get(), buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0) {
      c.fd.reset();  // the peer gave up before its request was whole
      return;
    }
    if (n < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) c.fd.reset();
      return;
    }
    c.in.append(buf, static_cast<size_t>(n));
    const size_t end = headEnd(c.in);
    if (end != std::string::npos) {
      respond(c, c.in.substr(0, end), now_ms);
      return;
    }
    if (c.in.size() > kMaxRequestHeadBytes) {
      c.out = render({431, "text/plain; charset=utf-8",
                      "request head over " + std::to_string(kMaxRequestHeadBytes) + " bytes\n"},
                     false);
      c.responding = true;
      c.deadline_ms = now_ms + options_.response_timeout_ms;
      onWritable(c);
      return;
    }
  }
}

void HttpServer::respond(Conn& c, const std::string& head, int64_t now_ms) {
  c.in.clear();
  c.responding = true;
  c.deadline_ms = now_ms + options_.response_timeout_ms;
  // "METHOD TARGET HTTP/x.y"
  const std::string line = head.substr(0, head.find_first_of("\r\n"));
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string::npos || line.compare(sp2 + 1, 5, "HTTP/") != 0) {
    c.out = render({400, "text/plain; charset=utf-8", "not an HTTP/1.x request\n"}, false);
  } else {
    const std::string method = line.substr(0, sp1);
    std::string target = line.substr(sp1 + 1, sp2 - sp1 - 1);
    target = target.substr(0, target.find('?'));
    const bool head_only = method == "HEAD";
    if (!head_only && method != "GET") {
      c.out = render({405, "text/plain; charset=utf-8", "only GET and HEAD\n"}, false);
    } else if (auto it = routes_.find(target); it == routes_.end()) {
      c.out = render({404, "text/plain; charset=utf-8", "not found\n"}, head_only);
    } else {
      c.out = render(it->second(), head_only);
    }
  }
  onWritable(c);
}

void HttpServer::onWritable(Conn& c) {
  while (c.sent < c.out.size()) {
    const ssize_t n = ::send(c.fd.get(), c.out.data() + c.sent, c.out.size() - c.sent,
                             MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) c.fd.reset();
      return;
    }
    c.sent += static_cast<size_t>(n);
  }
  ::shutdown(c.fd.get(), SHUT_WR);  // the whole response is out: Connection: close
  c.fd.reset();
}

}  // namespace tq::agent
