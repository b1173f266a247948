#include "agent/http_server.h"

#include <arpa/inet.h>
#include <civetweb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

#include "common/endpoints.h"
#include "common/fd.h"
#include "common/log.h"

namespace tq::agent {
namespace {

const char* reasonPhrase(int status) {
  switch (status) {
    case 200: return "OK";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Status";
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
  TQ_ASSIGN_OR_RETURN(HostPort hp, parseHostPort(host_port));
  static std::once_flag once;
  std::call_once(once, [] { mg_init_library(0); });

  std::unique_ptr<HttpServer> server(new HttpServer());
  server->routes_ = std::move(routes);
  server->host_ = hp.host;
  const std::string listen = hp.toString();
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

namespace {

// A connection to our own listening port, closed at once: it ends civetweb's current poll().
void pokeListener(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos;
  std::string to = host;
  if (to.empty() || to == "0.0.0.0") to = "127.0.0.1";
  if (to == "::") to = "::1";
  const Fd fd(::socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return;
  if (v6) {
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_port = htons(static_cast<uint16_t>(port));
    if (::inet_pton(AF_INET6, to.c_str(), &a.sin6_addr) != 1) return;
    (void)::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a);
  } else {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    if (::inet_pton(AF_INET, to.c_str(), &a.sin_addr) != 1) return;
    (void)::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a);
  }
}

}  // namespace

HttpServer::~HttpServer() {
  if (ctx_ == nullptr) return;
  // civetweb's listening thread polls in 2 s quanta (SOCKET_TIMEOUT_QUANTUM in civetweb.c)
  // and sees mg_stop() only between polls, so a plain mg_stop() takes up to 2 s. Connecting
  // to ourselves ends the poll: stopping takes milliseconds. Repeated until mg_stop() returns
  // because a connection that arrives before mg_stop() raised its flag starts another poll.
  std::atomic<bool> stopped{false};
  std::thread stopper([&] {
    mg_stop(ctx_);
    stopped = true;
  });
  for (int i = 0; i < 400 && !stopped; ++i) {  // at most ~4 s; mg_stop() ends on its own anyway
    pokeListener(host_, port_);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  stopper.join();
}

}  // namespace tq::agent
