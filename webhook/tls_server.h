// A small HTTPS/1.1 server (OpenSSL) for the admission webhook: one request per connection
// (`Connection: close`), a fixed pool of worker threads, everything a peer sends bounded.
//
// Bounds (a peer is hostile until the request is answered): request line and headers at most
// kMaxHeaderBytes, a body only with Content-Length and at most Options::max_body_bytes (413
// beyond, before reading it; chunked bodies get 411), every connection done within
// Options::connection_timeout_ms (non-blocking socket, every TLS call polls against that
// deadline, the handshake included),
// at most Options::workers connections served at once and kQueueDepth waiting (more are closed
// at once). The certificate and key are re-read when their files change (cert-manager renews
// the Secret in place), checked at most every kReloadCheckMs; a broken new pair keeps the old.
// Thread-safety: the handler runs on the worker threads, concurrently.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/fd.h"
#include "common/status.h"
#include "common/thread_annotations.h"

typedef struct ssl_ctx_st SSL_CTX;

namespace tq::webhook {

struct HttpRequest {
  std::string method;
  std::string path;  // without the query
  std::string body;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

class TlsServer {
 public:
  static constexpr size_t kMaxHeaderBytes = 16 << 10;
  static constexpr size_t kQueueDepth = 64;
  static constexpr int64_t kReloadCheckMs = 10'000;

  struct Options {
    std::string listen;               // HOST:PORT ([v6]:PORT); port 0 = any free port (see port())
    std::string cert_file, key_file;  // PEM; the certificate file may hold the chain
    size_t max_body_bytes = 4u << 20;
    int workers = 4;
    int connection_timeout_ms = 10'000;
    const Clock* clock = &realClock();  // deadlines and the certificate re-read cadence
  };
  using Handler = std::function<HttpResponse(const HttpRequest&)>;

  static Result<std::unique_ptr<TlsServer>> start(Options options, Handler handler);
  ~TlsServer();  // stops accepting, closes queued connections, joins the threads
  TlsServer(const TlsServer&) = delete;
  TlsServer& operator=(const TlsServer&) = delete;

  int port() const { return port_; }

 private:
  TlsServer() = default;
  void acceptLoop();
  void workerLoop();
  void serve(Fd fd);
  std::shared_ptr<SSL_CTX> context();  // the current one, reloaded when the files changed

  Options options_;
  Handler handler_;
  Fd listen_fd_;
  int port_ = 0;
  std::atomic<bool> stopping_{false};

  Mutex mu_;
  std::condition_variable cv_;
  std::deque<Fd> queue_ TQ_GUARDED_BY(mu_);  // accepted connections waiting for a worker
  Mutex ctx_mu_;
  std::shared_ptr<SSL_CTX> ctx_ TQ_GUARDED_BY(ctx_mu_);
  int64_t files_mtime_ns_ TQ_GUARDED_BY(ctx_mu_) = 0;  // of cert + key when ctx_ was loaded
  int64_t next_check_ms_ TQ_GUARDED_BY(ctx_mu_) = 0;

  std::thread acceptor_;
  std::vector<std::thread> workers_;
};

}  // namespace tq::webhook
