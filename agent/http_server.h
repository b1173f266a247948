// A small HTTP/1.x server for /metrics, /healthz and /readyz: one thread, one poll() loop,
// non-blocking sockets, GET and HEAD only, one request per connection (Connection: close).
//
// Every peer is hostile (the port is open to every uid of the node, and to the network when
// bound beyond loopback): nothing a peer does blocks the loop or another peer's request. A
// request head must arrive whole within request_timeout_ms of the accept and fit in
// kMaxRequestHeadBytes; the response must be taken within response_timeout_ms; a peer address
// holds at most max_connections_per_peer connections and the server max_connections. When a
// new connection would exceed either bound, the oldest connection still waiting for its
// request (of that peer, or of all) is closed to make room, so a kubelet probe that sends its
// request at once is answered however many slow connections the same address holds; if every
// connection already has its request, the new one is closed instead.
//
// Each route is a function returning the whole response; handlers run on the server's thread,
// one at a time, so they must be quick and read only thread-safe state (the StateBoard).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "common/fd.h"
#include "common/status.h"

namespace tq::agent {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

inline constexpr size_t kMaxRequestHeadBytes = 16 * 1024;

class HttpServer {
 public:
  using Handler = std::function<HttpResponse()>;

  struct Options {
    int request_timeout_ms = 2000;    // accept -> the whole request head
    int response_timeout_ms = 10000;  // the response, however slowly the peer reads it
    size_t max_connections_per_peer = 16;
    size_t max_connections = 256;
  };

  // Listens on host:port (port 0 = a free port; see port()). IPv6 hosts in brackets.
  static Result<std::unique_ptr<HttpServer>> start(const std::string& host_port,
                                                   std::map<std::string, Handler> routes,
                                                   Options options);
  static Result<std::unique_ptr<HttpServer>> start(const std::string& host_port,
                                                   std::map<std::string, Handler> routes) {
    return start(host_port, std::move(routes), Options());
  }
  ~HttpServer();  // stops the thread and closes every connection
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }
  const std::string& host() const { return host_; }

 private:
  struct Conn;
  HttpServer() = default;
  void run();
  void accept(int64_t now_ms);
  // Makes room for one more connection from `peer`; false: none could be made.
  bool makeRoom(const std::string& peer);
  void onReadable(Conn& c, int64_t now_ms);
  void onWritable(Conn& c);
  void respond(Conn& c, const std::string& head, int64_t now_ms);

  Options options_;
  std::map<std::string, Handler> routes_;
  std::string host_;
  int port_ = 0;
  Fd listen_fd_;
  Fd wake_fd_;                                       // eventfd: the destructor ends the loop
  std::map<uint64_t, std::unique_ptr<Conn>> conns_;  // by accept order (oldest first)
  uint64_t next_id_ = 0;
  std::thread thread_;
};

}  // namespace tq::agent
