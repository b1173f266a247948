// A small HTTP server (civetweb) for /metrics, /healthz and /readyz. Each route is a function
// returning the whole response; handlers run on civetweb's worker threads, so they must only
// read thread-safe state (the StateBoard). GET and HEAD only.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "common/status.h"

struct mg_context;
struct mg_connection;

namespace tq::agent {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

class HttpServer {
 public:
  using Handler = std::function<HttpResponse()>;

  // Listens on host:port (port 0 = a free port; see port()). IPv6 hosts in brackets.
  static Result<std::unique_ptr<HttpServer>> start(const std::string& host_port,
                                                   std::map<std::string, Handler> routes);
  ~HttpServer();  // stops the server (waits for in-flight requests)
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }
  const std::string& host() const { return host_; }

 private:
  HttpServer() = default;
  static int dispatch(::mg_connection* conn, void* cbdata);

  mg_context* ctx_ = nullptr;
  std::map<std::string, Handler> routes_;
  std::string host_;
  int port_ = 0;
};

}  // namespace tq::agent
