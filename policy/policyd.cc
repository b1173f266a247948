#include "policy/policyd.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <prometheus/exposer.h>
#include <prometheus/registry.h>
#include <signal.h>

#include <cinttypes>
#include <cstring>
#include <iostream>
#include <thread>

#include "common/endpoints.h"
#include "common/file_util.h"
#include "common/log.h"
#include "policy/audit_log.h"
#include "policy/grpc_service.h"
#include "policy/metrics.h"
#include "policy/service.h"

namespace tq::policy {
namespace {

// "HOST:PORT" -> host part ("[::1]:7400" -> "[::1]").
std::string hostOf(const std::string& listen) {
  size_t colon = listen.rfind(':');
  return colon == std::string::npos ? listen : listen.substr(0, colon);
}

}  // namespace

Status checkNewestRecord(const PolicyStore& store, bool serve_newest_intact) {
  std::vector<VersionSummary> versions = store.list();
  if (versions.empty() || versions.front().intact) return okStatus();
  const VersionSummary& newest = versions.front();
  auto latest = store.latest();
  const std::string serving =
      latest ? "version " + std::to_string(latest->version) + " (the newest intact one)"
             : "no policy (no version is intact)";
  if (!serve_newest_intact) {
    return dataLoss("the newest policy version " + std::to_string(newest.version) + " in " +
                    store.describe() + " is corrupt: " + newest.problem +
                    ". Agents may enforce it already, so an older version is not served as the "
                    "latest. Restore the record from a backup, or start with "
                    "--serve-newest-intact to serve " +
                    serving + " (the next apply becomes version " +
                    std::to_string(store.nextVersion()) + ")");
  }
  TQ_LOG(kError,
         "the newest policy version %" PRIu64
         " in %s is corrupt (%s); serving %s because of "
         "--serve-newest-intact",
         newest.version, store.describe().c_str(), newest.problem.c_str(), serving.c_str());
  return okStatus();
}

namespace {

// etcd may be between leaders (a member restarting: a proposal made during the election is
// dropped and the call times out) or not up yet when policyd starts, as in a cluster that
// boots together: an unavailable etcd is tried again, once a second, for up to `wait`. Real
// time, like the gRPC deadlines inside each attempt.
Result<std::unique_ptr<PolicyStore>> openEtcdStoreWaiting(const EtcdStoreOptions& etcd,
                                                          std::chrono::seconds wait) {
  const auto give_up = std::chrono::steady_clock::now() + wait;
  for (int attempt = 1;; ++attempt) {
    Result<std::unique_ptr<PolicyStore>> store = openEtcdStore(etcd);
    if (store.ok() || store.status().code() != StatusCode::kUnavailable ||
        std::chrono::steady_clock::now() >= give_up) {
      return store;
    }
    TQ_LOG(kWarn, "%s; trying again (attempt %d, for up to --etcd-wait %lld s in all)",
           store.status().message().c_str(), attempt + 1, static_cast<long long>(wait.count()));
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

}  // namespace

Result<std::unique_ptr<Policyd>> Policyd::start(const PolicydOptions& options, Clock& clock) {
  std::unique_ptr<Policyd> d(new Policyd());
  d->options_ = options;
  d->metrics_ = std::make_unique<PolicydMetrics>();

  TQ_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                      rpc::serverCredentials(options.tls));
  if (options.store_backend == "etcd") {
    EtcdStoreOptions etcd = options.etcd;
    etcd.retain_versions = options.store.retain_versions;
    TQ_ASSIGN_OR_RETURN(d->store_, openEtcdStoreWaiting(etcd, options.etcd_wait));
  } else {
    TQ_ASSIGN_OR_RETURN(d->store_, openFileStore(options.data_dir, options.store));
  }
  TQ_RETURN_IF_ERROR(checkNewestRecord(*d->store_, options.serve_newest_intact));
  const std::vector<VersionSummary> versions = d->store_->list();
  const bool newest_corrupt = !versions.empty() && !versions.front().intact;
  d->metrics_->setStoreInfo(options.store_backend, d->store_->epoch());
  d->metrics_->setStoreNewestCorruptVersion(newest_corrupt ? versions.front().version : 0);
  const std::string audit_path =
      options.audit_log.empty() ? options.data_dir + "/audit.jsonl" : options.audit_log;
  TQ_ASSIGN_OR_RETURN(d->audit_, AuditLog::open(audit_path));
  d->core_ = std::make_unique<PolicyCore>(*d->store_, clock, d->metrics_.get(), d->audit_.get(),
                                          options.core);
  GrpcServiceOptions grpc_options = options.grpc;
  grpc_options.insecure = options.tls.insecure;
  d->service_ = std::make_unique<PolicyGrpcService>(*d->core_, d->metrics_.get(), grpc_options);

  if (!options.metrics_listen.empty()) {
    // prometheus-cpp (civetweb) throws when it cannot bind: convert at this boundary.
    try {
      d->exposer_ = std::make_unique<prometheus::Exposer>(options.metrics_listen);
      d->exposer_->RegisterCollectable(d->metrics_->registry());
      auto ports = d->exposer_->GetListeningPorts();
      d->metrics_port_ = ports.empty() ? 0 : ports.front();
    } catch (const std::exception& e) {
      return unavailable("cannot serve metrics on " + options.metrics_listen + ": " + e.what());
    }
  }

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, credentials, &d->port_);
  builder.RegisterService(d->service_.get());
  builder.SetMaxReceiveMessageSize(options.max_request_bytes);
  // gRPC sets SO_REUSEPORT by default, which would let a second policyd bind the same port.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Find dead watchers (agents that vanished) within about a minute; accept agents' pings.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  d->server_ = builder.BuildAndStart();
  if (!d->server_ || d->port_ == 0) {
    d->server_.reset();
    return unavailable("cannot listen on " + options.listen +
                       " (address in use, not a local address, or malformed HOST:PORT)");
  }
  d->address_ = hostOf(options.listen) + ":" + std::to_string(d->port_);
  if (auto* health = d->server_->GetHealthCheckService()) {
    health->SetServingStatus(kStoreHealthService, !newest_corrupt);
  }
  // Logged before the port file appears, so a script that waited for the file finds the line.
  auto latest = d->core_->latest();
  TQ_LOG(kInfo,
         "tenantqos-policyd listening on %s (%s, store %s, epoch %s, audit log %s, policy "
         "version %" PRIu64 ")",
         d->address_.c_str(), options.tls.insecure ? "PLAINTEXT, no authentication" : "mutual TLS",
         d->store_->describe().c_str(), d->store_->epoch().c_str(), audit_path.c_str(),
         latest ? latest->version : 0);
  if (d->exposer_) {
    TQ_LOG(kInfo, "metrics on http://%s:%d/metrics", hostOf(options.metrics_listen).c_str(),
           d->metrics_port_);
  }
  if (!options.port_file.empty()) {
    Status st = writeFileAtomic(options.port_file, std::to_string(d->port_) + "\n");
    if (!st.ok()) {
      d->shutdown();
      return st.withContext("write --port-file");
    }
  }
  return d;
}

size_t Policyd::watcherCount() const { return service_ ? service_->watcherCount() : 0; }

void Policyd::shutdown() {
  if (stopped_) return;
  stopped_ = true;
  if (server_) {
    if (auto* health = server_->GetHealthCheckService()) health->Shutdown();
    service_->closeWatchers("tenantqos-policyd is shutting down");
    // Drain: let calls in flight finish (bounded by the grace period). grpc::Server::Shutdown
    // would also wait for connected clients to hang up, which idle agents never do, so the
    // drain is ours and Shutdown's own deadline is "now": whatever is left is cancelled.
    auto deadline = std::chrono::steady_clock::now() + options_.shutdown_grace;
    while (service_->callsInFlight() > 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    if (size_t left = service_->callsInFlight()) {
      TQ_LOG(kWarn, "shutdown: cancelling %zu calls still in flight after %lld ms", left,
             static_cast<long long>(options_.shutdown_grace.count()));
    }
    server_->Shutdown(std::chrono::system_clock::now());
    server_->Wait();
    server_.reset();
  }
  exposer_.reset();
}

Policyd::~Policyd() { shutdown(); }

// ---------------------------------------------------------------------------------------------

namespace {

constexpr const char* kUsage =
    R"(Usage: tenantqos-policyd [flags]

The tenantqos policy service: stores versioned tenant policies durably and streams them to
node agents (gRPC tenantqos.v1.PolicyService, plus grpc.health.v1 and server reflection).

Flags:
  --listen HOST:PORT     gRPC address (default 127.0.0.1:7400; port 0 picks a free port;
                         use 0.0.0.0:7400 to serve agents on other nodes)
  --store file|etcd      where the policy history lives (default file: --data-dir; etcd:
                         shared by every replica pointed at the same etcd and prefix)
  --data-dir DIR         where policy versions are stored (default /var/lib/tenantqos/policyd)
  --etcd-endpoints A,B,C etcd client URLs as HOST:PORT (--store etcd)
  --etcd-prefix PREFIX   key prefix in etcd (default /tenantqos/)
  --etcd-ca FILE         TLS to etcd: CA bundle that signed etcd's server certificate
  --etcd-cert FILE       TLS client certificate for etcd (with --etcd-key; etcd
  --etcd-key FILE        --client-cert-auth)
  --etcd-wait SECONDS    at start, keep trying an unavailable etcd (no quorum yet, an
                         election) for this long before giving up (default 30; 0: once)
  --retain-versions N    keep the newest N versions, remove older ones after each apply
                         (default 100; N >= 1)
  --serve-newest-intact  when the newest stored record is corrupt, serve the newest intact
                         version (reported by the health service tenantqos.v1.PolicyStore and
                         tenantqos_policyd_store_newest_corrupt_version) instead of refusing
                         to start
  --port-file FILE       write the bound gRPC port to FILE (atomically) once listening
  --metrics HOST:PORT    serve Prometheus metrics at http://HOST:PORT/metrics (default: off)
  --audit-log FILE       append-only JSON-lines audit log (default DATA_DIR/audit.jsonl)
  --usage-expiry SECONDS drop a node's usage after this long without a report (default 30)
  --max-streams-per-identity N
                         open watch streams one client identity may hold (default 16)
  --log-level LEVEL      error, warn, info (default), debug or trace
  -h, --help             show this help

Mutual TLS (required unless --insecure): clients must present a certificate signed by --tls-ca;
its subject CN is the caller's identity and its O values its groups: tenantqos:admins (every
method), tenantqos:viewers (get, history, top), tenantqos:agents (watch; report usage for the
node named by the CN). With --insecure every caller is "insecure:HOST" with every role.
%TLS%
The bound address is logged as "listening on HOST:PORT". SIGTERM or SIGINT shut down cleanly
(watch streams end with UNAVAILABLE, in-flight calls finish) and the exit code is 0.
Exit codes: 0 clean shutdown, 1 startup failed, 2 usage error.
)";

struct FlagParser {
  int argc;
  char** argv;
  int i = 1;
  std::string error;

  // Matches "--name value" or "--name=value" at argv[i]; advances past it.
  bool take(const char* name, std::string* value) {
    std::string a = argv[i];
    std::string n = name;
    if (a == n) {
      if (i + 1 >= argc) {
        error = n + " needs a value";
        return true;
      }
      *value = argv[i + 1];
      i += 2;
      return true;
    }
    if (a.rfind(n + "=", 0) == 0) {
      *value = a.substr(n.size() + 1);
      ++i;
      return true;
    }
    return false;
  }
};

}  // namespace

int policydMain(int argc, char** argv) {
  PolicydOptions opt;
  std::string level = "info";
  FlagParser p{argc, argv};
  while (p.i < argc && p.error.empty()) {
    std::string a = argv[p.i];
    if (a == "-h" || a == "--help") {
      std::string usage = kUsage;
      usage.replace(usage.find("%TLS%"), 5, rpc::kTlsFlagsHelp);
      std::cout << usage;
      return 0;
    }
    if (a == "--serve-newest-intact") {
      opt.serve_newest_intact = true;
      ++p.i;
      continue;
    }
    std::string retain, endpoints;
    if (p.take("--etcd-endpoints", &endpoints)) {
      auto list = splitEndpointList(endpoints, "--etcd-endpoints");
      if (!list.ok()) p.error = list.status().message();
      if (list.ok()) opt.etcd.endpoints = *list;
      continue;
    }
    std::string wait;
    if (p.take("--etcd-wait", &wait)) {
      char* end = nullptr;
      const long n = std::strtol(wait.c_str(), &end, 10);
      if (wait.empty() || *end != '\0' || n < 0 || n > 3600) {
        p.error = "--etcd-wait wants seconds in [0, 3600], got \"" + wait + "\"";
      }
      opt.etcd_wait = std::chrono::seconds(n);
      continue;
    }
    if (p.take("--retain-versions", &retain)) {
      char* end = nullptr;
      errno = 0;
      unsigned long long n = std::strtoull(retain.c_str(), &end, 10);
      if (retain.empty() || *end != '\0' || errno != 0 || n == 0 || retain[0] == '-') {
        p.error = "--retain-versions wants a whole number >= 1, got \"" + retain + "\"";
      }
      opt.store.retain_versions = n;
      continue;
    }
    std::string v;
    if (p.take("--listen", &opt.listen) || p.take("--data-dir", &opt.data_dir) ||
        p.take("--port-file", &opt.port_file) || p.take("--metrics", &opt.metrics_listen) ||
        p.take("--log-level", &level) || p.take("--store", &opt.store_backend) ||
        p.take("--etcd-prefix", &opt.etcd.prefix) || p.take("--etcd-ca", &opt.etcd.ca_file) ||
        p.take("--etcd-cert", &opt.etcd.cert_file) || p.take("--etcd-key", &opt.etcd.key_file) ||
        p.take("--audit-log", &opt.audit_log)) {
      continue;
    }
    if (a == "--insecure") {
      opt.tls.insecure = true;
      ++p.i;
      continue;
    }
    if (const std::string f = a.substr(0, a.find('='));
        f == "--tls-ca" || f == "--tls-cert" || f == "--tls-key") {
      if (p.take(f.c_str(), &v)) rpc::setTlsFlag(&opt.tls, f, v);
      continue;
    }
    if (p.take("--usage-expiry", &v)) {
      char* end = nullptr;
      const double s = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(s >= 1 && s <= 86400)) {
        p.error = "--usage-expiry wants seconds in [1, 86400], got \"" + v + "\"";
      }
      opt.core.usage_expiry_ns = static_cast<int64_t>(s * 1e9);
      continue;
    }
    if (p.take("--max-streams-per-identity", &v)) {
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n < 1 || n > 1000000) {
        p.error = "--max-streams-per-identity wants 1..1000000, got \"" + v + "\"";
      }
      opt.grpc.max_streams_per_identity = static_cast<size_t>(n);
      continue;
    }
    p.error = "unknown argument \"" + a + "\"";
  }
  if (p.error.empty() && opt.listen.find(':') == std::string::npos) {
    p.error = "--listen wants HOST:PORT, got \"" + opt.listen + "\"";
  }
  if (p.error.empty() && opt.store_backend != "file" && opt.store_backend != "etcd") {
    p.error = "--store wants file or etcd, got \"" + opt.store_backend + "\"";
  }
  if (p.error.empty() && opt.store_backend == "etcd" && opt.etcd.endpoints.empty()) {
    p.error = "--store etcd needs --etcd-endpoints HOST:PORT[,HOST:PORT...]";
  }
  auto lvl = parseLogLevel(level);
  if (p.error.empty() && !lvl.ok()) p.error = lvl.status().message();
  if (!p.error.empty()) {
    std::cerr << "tenantqos-policyd: " << p.error << "\n(see tenantqos-policyd --help)\n";
    return 2;
  }
  setLogLevel(*lvl);

  // Block the shutdown signals before any thread exists, so every gRPC thread inherits the
  // mask and this thread alone receives them through sigwait.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);
  // Every watching agent holds a connection (a file descriptor): use the hard limit.
  if (auto fds = raiseOpenFileLimit(); !fds.ok()) {
    TQ_LOG(kWarn, "%s", fds.status().message().c_str());
  }

  auto d = Policyd::start(opt);
  if (!d.ok()) {
    TQ_LOG(kError, "tenantqos-policyd cannot start: %s", d.status().message().c_str());
    return 1;
  }
  int sig = 0;
  while (sigwait(&sigs, &sig) != 0) {
  }
  TQ_LOG(kInfo, "received %s, shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  (*d)->shutdown();
  TQ_LOG(kInfo, "tenantqos-policyd stopped");
  return 0;
}

}  // namespace tq::policy
