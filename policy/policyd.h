// tenantqos-policyd: the gRPC server around PolicyCore, with its store, health and reflection
// services, optional Prometheus endpoint, and the process entry point (flags, signals).
//
// Lifecycle: Policyd::start() opens the store (the file store under data_dir, failing clearly
// if it is not a writable directory; or etcd), refuses to start when the newest stored record
// is corrupt unless serve_newest_intact (then the store's health service
// "tenantqos.v1.PolicyStore" is NOT_SERVING and a metric names the version), binds `listen`
// (port 0 picks a free port; SO_REUSEPORT is off so a busy port is an error), and serves.
// Once listening it starts the cluster allocator (allocator_service.h): always active with the
// file store; with etcd, elected among the replicas (allocator_election.h).
// shutdown() marks health NOT_SERVING, steps down as allocator, ends every watch
// stream with UNAVAILABLE, lets in-flight calls finish (up to shutdown_grace, then cancels
// them), and returns when the server has stopped.
// Thread-safety: start/shutdown from one thread; accessors from any.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "common/clock.h"
#include "common/flags.h"
#include "common/log.h"
#include "common/status.h"
#include "policy/allocator_election.h"
#include "policy/allocator_service.h"
#include "policy/etcd_store.h"
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
inline constexpr int kMaxRequestBytes = 8 << 20;      // 8 MiB: a 4 MiB policy plus envelope
inline constexpr int kMaxStreamsPerConnection = 100;  // HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS

struct PolicydOptions {
  std::string listen = kDefaultPolicydListen;
  std::string data_dir = kDefaultDataDir;
  std::string port_file;       // if set, the bound port is written here (atomically)
  std::string metrics_listen;  // HOST:PORT for Prometheus; empty = no endpoint
  int max_request_bytes = kMaxRequestBytes;
  std::chrono::milliseconds shutdown_grace{5000};
  std::string store_backend = "file";  // "file" (data_dir) or "etcd"
  FileStoreOptions store;              // file store; its retain_versions applies to every backend
  EtcdStoreOptions etcd;               // --store etcd
  int64_t etcd_wait = 30;  // --etcd-wait seconds: how long start-up retries an unavailable etcd
  // Serve the newest intact version when the newest record is corrupt, instead of refusing to
  // start (--serve-newest-intact).
  bool serve_newest_intact = false;
  rpc::TlsConfig tls;               // mutual TLS (or tls.insecure)
  std::string audit_log;            // the JSON-lines audit log; "" = DATA_DIR/audit.jsonl
  CoreOptions core;                 // usage expiry and bounds
  GrpcServiceOptions grpc;          // streams per identity (grpc.insecure follows tls.insecure)
  AllocatorOptions allocator;       // the cluster allocator's rounds and bounds
  int64_t allocator_lease_ttl = 2;  // --allocator-lease-ttl seconds (etcd election)
  LogLevel log_level = LogLevel::kInfo;
};

// The gRPC health service name that reports the store: NOT_SERVING while policyd serves an
// older version than the newest stored one (its record is corrupt).
inline constexpr const char* kStoreHealthService = "tenantqos.v1.PolicyStore";

// The start-up check of the newest record: ok if it is intact (or there is none); otherwise
// kDataLoss naming the record and the way out, unless `serve_newest_intact`.
Status checkNewestRecord(const PolicyStore& store, bool serve_newest_intact);

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
  AllocatorService& allocator() { return *allocator_; }
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
  std::unique_ptr<AllocatorElection> election_;
  std::unique_ptr<AllocatorService> allocator_;
  std::unique_ptr<PolicyGrpcService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;
  int metrics_port_ = 0;
  std::string address_;
  bool stopped_ = false;
};

// The command line: every flag in one table (common/flags.h), which also writes --help and the
// flag table of docs/cli.md.
struct PolicydArgs {
  PolicydOptions options;
  bool help = false;
};
void addPolicydFlags(FlagTable& table, PolicydOptions* options);
Result<PolicydArgs> parsePolicydArgs(int argc, const char* const* argv);  // usage errors only
std::string policydUsage();
std::string policydFlagsMarkdown();

// The process: parses flags (see docs/cli.md), blocks SIGTERM/SIGINT and waits for one, shuts
// down cleanly (common/daemon.h). Returns the exit code: 0 after a clean shutdown, 1 when
// startup fails, 2 for a usage error.
int policydMain(int argc, char** argv);

}  // namespace tq::policy
