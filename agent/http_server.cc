#include "agent/http_server.h"

#include <civetweb.h>

#include <cstring>
#include <mutex>

#include "agent/config.h"
#include "common/log.h"

namespace tq::agent {
namespace {

const char* reasonPhrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "Status";
  }
}

void send(mg_connection* conn, const HttpResponse& r, bool head) {
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
            "Cache-Control: no-store\r\nConnection: close\r\n\r\n",
            r.status, reasonPhrase(r.status), r.content_type.c_str(), r.body.size());
  if (!head && !r.body.empty()) mg_write(conn, r.body.data(), r.body.size());
}

}  // namespace

int HttpServer::dispatch(mg_connection* conn, void* cbdata) {
  auto* self = static_cast<HttpServer*>(cbdata);
  const mg_request_info* info = mg_get_request_info(conn);
  const bool head = std::strcmp(info->request_method, "HEAD") == 0;
  if (!head && std::strcmp(info->request_method, "GET") != 0) {
    send(conn, {405, "text/plain; charset=utf-8", "only GET and HEAD\n"}, false);
    return 405;
  }
  auto it = self->routes_.find(info->local_uri != nullptr ? info->local_uri : "");
  if (it == self->routes_.end()) {
    send(conn, {404, "text/plain; charset=utf-8", "not found\n"}, head);
    return 404;
  }
  HttpResponse r = it->second();
  send(conn, r, head);
  return r.status;
}

Result<std::unique_ptr<HttpServer>> HttpServer::start(const std::string& host_port,
                                                      std::map<std::string, Handler> routes) {
  TQ_ASSIGN_OR_RETURN(auto hp, splitHostPort(host_port));
  static std::once_flag once;
  std::call_once(once, [] { mg_init_library(0); });

  std::unique_ptr<HttpServer> server(new HttpServer());
  server->routes_ = std::move(routes);
  server->host_ = hp.first;
  const std::string listen = hp.first.find(':') != std::string::npos
                                 ? "[" + hp.first + "]:" + std::to_string(hp.second)
                                 : hp.first + ":" + std::to_string(hp.second);
  // clang-format off
  const char* options[] = {"listening_ports", listen.c_str(),
                           "num_threads", "2",
                           "request_timeout_ms", "10000",
                           "enable_keep_alive", "no",
                           nullptr};
  // clang-format on
  mg_callbacks callbacks;
  std::memset(&callbacks, 0, sizeof callbacks);
  // civetweb prints its own errors through log_message; route them to our log.
  callbacks.log_message = [](const mg_connection*, const char* message) -> int {
    TQ_LOG(kWarn, "metrics http: %s", message);
    return 1;
  };
  server->ctx_ = mg_start(&callbacks, nullptr, options);
  if (server->ctx_ == nullptr) {
    return unavailable("listen on " + host_port +
                       " for metrics: civetweb could not start (address in use or invalid?)");
  }
  for (const auto& [path, handler] : server->routes_) {
    mg_set_request_handler(server->ctx_, path.c_str(), &HttpServer::dispatch, server.get());
  }
  mg_server_port ports[4];
  const int n = mg_get_server_ports(server->ctx_, 4, ports);
  if (n < 1) return internalError("metrics server on " + host_port + ": no listening port");
  server->port_ = ports[0].port;
  return server;
}

HttpServer::~HttpServer() {
  if (ctx_ != nullptr) mg_stop(ctx_);
}

}  // namespace tq::agent
