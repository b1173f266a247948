// tenantqos-policyd: the gRPC server around PolicyCore, with its store, health and reflection
// services, optional Prometheus endpoint, and the process entry point (flags, signals).
//
// Lifecycle: Policyd::start() opens the store under data_dir (failing clearly if it is not a
// writable directory), binds `listen` (port 0 picks a free port; SO_REUSEPORT is off so a
// busy port is an error), and serves. shutdown() marks health NOT_SERVING, ends every watch
// stream with UNAVAILABLE, lets in-flight calls finish (up to shutdown_grace, then cancels
// them), and returns when the server has stopped.
// Thread-safety: start/shutdown from one thread; accessors from any.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "common/clock.h"
#include "common/status.h"
#include "policy/file_store.h"
#include "policy/grpc_service.h"
#include "policy/service.h"
#include "rpc/tls.h"

namespace grpc {
class Server;
}
namespace prometheus {
class Exposer;
}

namespace tq::policy {

class AuditLog;
class PolicydMetrics;

inline constexpr int kDefaultPolicydPort = 7400;
inline constexpr const char* kDefaultPolicydListen = "127.0.0.1:7400";
inline constexpr const char* kDefaultDataDir = "/var/lib/tenantqos/policyd";
inline constexpr int kMaxRequestBytes = 8 << 20;  // 8 MiB: a 4 MiB policy plus envelope

struct PolicydOptions {
  std::string listen = kDefaultPolicydListen;
  std::string data_dir = kDefaultDataDir;
  std::string port_file;       // if set, the bound port is written here (atomically)
  std::string metrics_listen;  // HOST:PORT for Prometheus; empty = no endpoint
  int max_request_bytes = kMaxRequestBytes;
  std::chrono::milliseconds shutdown_grace{5000};
  FileStoreOptions store;
  rpc::TlsConfig tls;       // mutual TLS (or tls.insecure)
  std::string audit_log;    // the JSON-lines audit log; "" = DATA_DIR/audit.jsonl
  CoreOptions core;         // usage expiry and bounds
  GrpcServiceOptions grpc;  // streams per identity (grpc.insecure follows tls.insecure)
};

class Policyd {
 public:
  static Result<std::unique_ptr<Policyd>> start(const PolicydOptions& options,
                                                Clock& clock = realClock());
  ~Policyd();  // shuts down if still running
  Policyd(const Policyd&) = delete;
  Policyd& operator=(const Policyd&) = delete;

  int port() const { return port_; }
  // "HOST:PORT" actually bound (port resolved when 0 was asked for).
  const std::string& address() const { return address_; }
  int metricsPort() const { return metrics_port_; }

  PolicyCore& core() { return *core_; }
  PolicydMetrics& metrics() { return *metrics_; }
  size_t watcherCount() const;

  void shutdown();  // idempotent

 private:
  Policyd() = default;

  PolicydOptions options_;
  std::unique_ptr<PolicydMetrics> metrics_;
  std::unique_ptr<PolicyStore> store_;
  std::unique_ptr<AuditLog> audit_;
  std::unique_ptr<PolicyCore> core_;
  std::unique_ptr<PolicyGrpcService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;
  int metrics_port_ = 0;
  std::string address_;
  bool stopped_ = false;
};

// The process: parses flags (see docs/cli.md), blocks SIGTERM/SIGINT and waits for one, shuts
// down cleanly. Returns the exit code: 0 after a clean shutdown, 1 when startup fails, 2 for a
// usage error.
int policydMain(int argc, char** argv);

}  // namespace tq::policy
