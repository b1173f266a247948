#include "webhook/tls_server.h"

#include <netdb.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

#include "common/clock.h"
#include "common/endpoints.h"
#include "common/log.h"
#include "common/text.h"
#include "common/thread_annotations.h"

namespace tq::webhook {
namespace {

std::string sslError() {
  unsigned long e = ERR_get_error();
  if (e == 0) return "no OpenSSL error queued";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  ERR_clear_error();
  return buf;
}

int64_t mtimeNs(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return -1;
  return st.st_mtim.tv_sec * kNsPerSec + st.st_mtim.tv_nsec;
}

Result<std::shared_ptr<SSL_CTX>> loadContext(const std::string& cert, const std::string& key) {
  std::shared_ptr<SSL_CTX> ctx(SSL_CTX_new(TLS_server_method()), &SSL_CTX_free);
  if (!ctx) return internalError("SSL_CTX_new: " + sslError());
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  if (SSL_CTX_use_certificate_chain_file(ctx.get(), cert.c_str()) != 1) {
    return invalidArgument("--tls-cert " + cert + ": " + sslError());
  }
  if (SSL_CTX_use_PrivateKey_file(ctx.get(), key.c_str(), SSL_FILETYPE_PEM) != 1) {
    return invalidArgument("--tls-key " + key + ": " + sslError());
  }
  if (SSL_CTX_check_private_key(ctx.get()) != 1) {
    return invalidArgument("--tls-key " + key + " does not match --tls-cert " + cert + ": " +
                           sslError());
  }
  return ctx;
}

// A TLS session on an accepted socket (which outlives it).
struct SslFree {
  void operator()(SSL* ssl) const {
    SSL_shutdown(ssl);  // best effort close_notify (non-blocking: never waits)
    SSL_free(ssl);
  }
};

// One connection's TLS I/O on its non-blocking socket: every OpenSSL call waits (poll) only
// until the connection's deadline, so the deadline bounds the whole exchange, handshake
// included, however slowly a peer dribbles its bytes.
struct TlsIo {
  SSL* ssl;
  int fd;
  int64_t deadline_ns;
  const Clock& clock;

  // `op` is an SSL_* call returning > 0 on success; returns it, or <= 0 (failed, closed or the
  // deadline passed).
  template <typename Op>
  int run(Op op) const {
    for (;;) {
      const int r = op();
      if (r > 0) return r;
      const int e = SSL_get_error(ssl, r);
      const short events = e == SSL_ERROR_WANT_READ    ? POLLIN
                           : e == SSL_ERROR_WANT_WRITE ? POLLOUT
                                                       : 0;
      if (events == 0) return r;
      const int64_t left_ms = (deadline_ns - clock.nowNs()) / kNsPerMs;
      if (left_ms <= 0) return 0;
      pollfd p{fd, events, 0};
      const int n = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left_ms, 60'000)));
      if (n == 0 || (n < 0 && errno != EINTR)) return 0;
    }
  }
  int read(char* buf, size_t size) const {
    return run([&] { return SSL_read(ssl, buf, static_cast<int>(size)); });
  }
};

void respond(const TlsIo& io, const HttpResponse& r) {
  std::string out = "HTTP/1.1 " + std::to_string(r.status) + " " + httpReasonPhrase(r.status) +
                    "\r\nContent-Type: " + r.content_type +
                    "\r\nContent-Length: " + std::to_string(r.body.size()) +
                    "\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n" + r.body;
  // An answer gets a little time past the deadline (a 408 is sent after it).
  const TlsIo w{io.ssl, io.fd, std::max(io.deadline_ns, io.clock.nowNs() + kNsPerSec), io.clock};
  size_t off = 0;
  while (off < out.size()) {
    const int len = static_cast<int>(std::min<size_t>(out.size() - off, 1 << 20));
    const int n = w.run([&] { return SSL_write(w.ssl, out.data() + off, len); });
    if (n <= 0) return;  // the peer went away or does not read: nothing more to tell it
    off += static_cast<size_t>(n);
  }
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

Result<std::unique_ptr<TlsServer>> TlsServer::start(Options options, Handler handler) {
  const std::string& l = options.listen;
  Result<HostPort> listen = parseHostPort(l);
  if (!listen.ok()) return listen.status().withContext("--listen");
  const std::string host = listen->host;
  const std::string port = std::to_string(listen->port);
  std::unique_ptr<TlsServer> s(new TlsServer());
  s->options_ = std::move(options);
  s->handler_ = std::move(handler);
  TQ_ASSIGN_OR_RETURN(auto ctx, loadContext(s->options_.cert_file, s->options_.key_file));
  {
    MutexLock lock(s->ctx_mu_);  // (no other thread yet)
    s->ctx_ = std::move(ctx);
    s->files_mtime_ns_ = mtimeNs(s->options_.cert_file) ^ mtimeNs(s->options_.key_file);
  }

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0) return invalidArgument("--listen " + l + ": " + gai_strerror(rc));
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> guard(res, &freeaddrinfo);
  s->listen_fd_ = Fd(::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!s->listen_fd_.valid()) return errnoStatus("socket for --listen " + l);
  const int fd = s->listen_fd_.get();
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd, res->ai_addr, res->ai_addrlen) != 0) return errnoStatus("bind --listen " + l);
  if (::listen(fd, 128) != 0) return errnoStatus("listen on " + l);
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  s->port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                               : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  for (int i = 0; i < std::max(1, s->options_.workers); ++i) {
    s->workers_.emplace_back([p = s.get()] { p->workerLoop(); });
  }
  s->acceptor_ = std::thread([p = s.get()] { p->acceptLoop(); });
  return s;
}

TlsServer::~TlsServer() {
  stopping_ = true;
  if (listen_fd_.valid()) ::shutdown(listen_fd_.get(), SHUT_RDWR);  // wakes accept()
  if (acceptor_.joinable()) acceptor_.join();
  {
    MutexLock lock(mu_);
    queue_.clear();
  }
  cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void TlsServer::acceptLoop() {
  while (!stopping_) {
    Fd fd(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!fd.valid()) {
      if (stopping_) return;
      if (errno == EINTR || errno == ECONNABORTED) continue;
      TQ_LOG(kWarn, "webhook: accept: %s", std::strerror(errno));
      if (errno == EMFILE || errno == ENFILE) ::usleep(100'000);  // let workers free fds
      continue;
    }
    MutexLock lock(mu_);
    if (queue_.size() >= kQueueDepth) {
      lock.unlock();
      continue;  // overloaded: closed; the API server retries or applies failurePolicy
    }
    queue_.push_back(std::move(fd));
    lock.unlock();
    cv_.notify_one();
  }
}

void TlsServer::workerLoop() {
  for (;;) {
    Fd fd;
    {
      MutexLock lock(mu_);
      cv_.wait(lock.native(), [&]() TQ_REQUIRES(mu_) { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      fd = std::move(queue_.front());
      queue_.pop_front();
    }
    serve(std::move(fd));
  }
}

std::shared_ptr<SSL_CTX> TlsServer::context() {
  MutexLock lock(ctx_mu_);
  const int64_t now_ms = options_.clock->nowNs() / kNsPerMs;
  if (now_ms >= next_check_ms_) {
    next_check_ms_ = now_ms + kReloadCheckMs;
    const int64_t m = mtimeNs(options_.cert_file) ^ mtimeNs(options_.key_file);
    if (m != files_mtime_ns_) {
      auto fresh = loadContext(options_.cert_file, options_.key_file);
      if (fresh.ok()) {
        ctx_ = *std::move(fresh);
        files_mtime_ns_ = m;
        TQ_LOG(kInfo, "webhook: reloaded the TLS certificate %s", options_.cert_file.c_str());
      } else {
        // Probably half-written (the Secret's files change one after the other): retry soon.
        TQ_LOG(kWarn, "webhook: keeping the old TLS certificate: %s",
               fresh.status().message().c_str());
      }
    }
  }
  return ctx_;
}

void TlsServer::serve(Fd fd) {
  const Clock& clock = *options_.clock;
  const int64_t deadline = clock.nowNs() + options_.connection_timeout_ms * kNsPerMs;
  std::shared_ptr<SSL_CTX> ctx = context();
  std::unique_ptr<SSL, SslFree> session(SSL_new(ctx.get()));
  if (!session) return;
  SSL* ssl = session.get();
  SSL_set_fd(ssl, fd.get());
  const TlsIo io{ssl, fd.get(), deadline, clock};
  if (io.run([&] { return SSL_accept(ssl); }) != 1) {
    ERR_clear_error();  // a scanner, a plain-HTTP client or a timeout: nothing to answer
    return;
  }
  auto expired = [&] { return clock.nowNs() > deadline; };
  // Request line and headers.
  std::string buf;
  size_t header_end = std::string::npos;
  char chunk[8192];
  while (header_end == std::string::npos) {
    if (buf.size() > kMaxHeaderBytes) {
      return respond(io, {431, "text/plain; charset=utf-8", "request headers too large\n"});
    }
    if (expired()) return respond(io, {408, "text/plain; charset=utf-8", "request timeout\n"});
    int n = io.read(chunk, sizeof chunk);
    if (n <= 0) return;
    buf.append(chunk, static_cast<size_t>(n));
    header_end = buf.find("\r\n\r\n");
  }
  if (header_end > kMaxHeaderBytes) {
    return respond(io, {431, "text/plain; charset=utf-8", "request headers too large\n"});
  }
  HttpRequest req;
  const size_t line_end = buf.find("\r\n");
  const std::string line = buf.substr(0, line_end);
  const size_t sp1 = line.find(' '), sp2 = line.rfind(' ');
  if (sp1 == std::string::npos || sp2 == sp1) {
    return respond(io, {400, "text/plain; charset=utf-8", "malformed request line\n"});
  }
  req.method = line.substr(0, sp1);
  req.path = line.substr(sp1 + 1, sp2 - sp1 - 1);
  req.path = req.path.substr(0, req.path.find('?'));
  std::optional<size_t> content_length;
  bool chunked = false;
  for (size_t pos = line_end + 2; pos < header_end;) {
    size_t eol = buf.find("\r\n", pos);
    const std::string h = buf.substr(pos, eol - pos);
    pos = eol + 2;
    const size_t colon = h.find(':');
    if (colon == std::string::npos) continue;
    const std::string name = lower(h.substr(0, colon));
    std::string value = h.substr(colon + 1);
    value.erase(0, value.find_first_not_of(" \t"));
    value.erase(value.find_last_not_of(" \t") + 1);
    if (name == "content-length") {
      size_t v = 0;
      auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
      if (value.empty() || ec != std::errc() || end != value.data() + value.size() ||
          (content_length && *content_length != v)) {
        return respond(io, {400, "text/plain; charset=utf-8", "bad Content-Length\n"});
      }
      content_length = v;
    } else if (name == "transfer-encoding") {
      chunked = true;
    }
  }
  if (chunked) {
    return respond(io, {411, "text/plain; charset=utf-8",
                        "Transfer-Encoding is not supported: send Content-Length\n"});
  }
  const size_t length = content_length.value_or(0);
  if (length > options_.max_body_bytes) {
    return respond(io, {413, "text/plain; charset=utf-8",
                        "request body of " + std::to_string(length) + " bytes exceeds the " +
                            std::to_string(options_.max_body_bytes) + "-byte limit\n"});
  }
  req.body = buf.substr(header_end + 4, length);
  while (req.body.size() < length) {
    if (expired()) return respond(io, {408, "text/plain; charset=utf-8", "request timeout\n"});
    int n = io.read(chunk, std::min(sizeof chunk, length - req.body.size()));
    if (n <= 0) return;
    req.body.append(chunk, static_cast<size_t>(n));
  }
  HttpResponse r;
  // The handler is our code and returns errors as values; this only keeps a third-party
  // exception (std::bad_alloc from the JSON library) from ending the process.
  try {
    r = handler_(req);
  } catch (const std::exception& e) {
    TQ_LOG(kError, "webhook: %s %s: internal error: %s", req.method.c_str(), req.path.c_str(),
           e.what());
    r = {500, "text/plain; charset=utf-8", "internal error\n"};
  }
  respond(io, r);
}

}  // namespace tq::webhook
