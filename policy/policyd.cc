#include "policy/policyd.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <malloc.h>
#include <prometheus/exposer.h>
#include <prometheus/registry.h>

#include <cinttypes>
#include <cstring>
#include <iostream>
#include <thread>

#include <unistd.h>

#include "common/daemon.h"
#include "common/endpoints.h"
#include "common/file_util.h"
#include "common/flags.h"
#include "common/log.h"
#include "policy/audit_log.h"
#include "policy/grpc_service.h"
#include "policy/metrics.h"
#include "policy/service.h"
#include "rpc/runtime.h"

namespace tq::policy {
namespace {

// "HOST:PORT" -> host part ("[::1]:7400" -> "[::1]"); the flags were checked.
std::string hostOf(const std::string& listen) {
  Result<HostPort> hp = parseHostPort(listen);
  return hp.ok() ? hp->urlHost() : listen;
}

// Who this replica is in the allocator election (the key's value, standbys' messages).
std::string allocatorIdentity(const std::string& address) {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  return std::string(host[0] ? host : "?") + " " + address + " pid " + std::to_string(::getpid());
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
                                                          int64_t wait_s) {
  const std::chrono::seconds wait(wait_s);
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
  d->allocator_ = std::make_unique<AllocatorService>(clock, d->metrics_.get(), d->audit_.get(),
                                                     options.allocator);
  GrpcServiceOptions grpc_options = options.grpc;
  grpc_options.insecure = options.tls.insecure;
  d->service_ = std::make_unique<PolicyGrpcService>(*d->core_, d->metrics_.get(), grpc_options,
                                                    d->allocator_.get());

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
  // Every call on one connection counts against its HTTP/2 stream limit (a client queues the
  // rest); health and reflection streams are gated per identity (makeCallGate).
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, kMaxStreamsPerConnection);
  {
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> gates;
    gates.push_back(makeCallGate(grpc_options));
    builder.experimental().SetInterceptorCreators(std::move(gates));
  }
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
  // The allocator's election starts once clients can reach this replica.
  const std::string identity = allocatorIdentity(d->address_);
  if (options.store_backend == "etcd") {
    EtcdElectionOptions e;
    e.etcd = options.etcd;
    e.ttl_s = options.allocator_lease_ttl;
    e.identity = identity;
    TQ_ASSIGN_OR_RETURN(d->election_, makeEtcdElection(e, clock));
  } else {
    d->election_ = makeSoleElection(clock, identity);
  }
  TQ_LOG(kInfo, "cluster allocator: %s, as %s", d->election_->describe().c_str(), identity.c_str());
  d->allocator_->start(*d->election_);
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
    allocator_->stop();  // steps down first: a standby takes over while this one drains
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

constexpr const char* kUsageHead =
    R"(Usage: tenantqos-policyd (--tls-ca FILE --tls-cert FILE --tls-key FILE | --insecure) [flags]

The tenantqos policy service: stores versioned tenant policies durably and streams them to
node agents (gRPC tenantqos.v1.PolicyService, plus grpc.health.v1 and server reflection).

Mutual TLS: clients must present a certificate signed by --tls-ca; its subject CN is the
caller's identity and its O values its groups: tenantqos:admins (every method),
tenantqos:viewers (get, history, top), tenantqos:agents (watch; report usage for the node named
by the CN). With --insecure every caller is "insecure:HOST" with every role.

Flags:
)";

constexpr const char* kUsageTail = R"(
The bound address is logged as "listening on HOST:PORT". SIGTERM or SIGINT shut down cleanly
(watch streams end with UNAVAILABLE, in-flight calls finish) and the exit code is 0.
Exit codes: 0 clean shutdown, 1 startup failed, 2 usage error.
)";

}  // namespace

void addPolicydFlags(FlagTable& t, PolicydOptions* o) {
  rpc::addTlsFlags(t, &o->tls, "every client's certificate",
                   "its SAN must name the address clients dial");
  t.hostPort("--listen", &o->listen,
             "gRPC address (port 0 picks a free port; 0.0.0.0:7400 serves agents on other nodes)");
  t.choice("--store", &o->store_backend, {"file", "etcd"},
           "where the policy history lives: file = --data-dir on this machine (one policyd); etcd "
           "= an etcd cluster shared by every replica pointed at the same etcd and prefix");
  t.nonEmpty("--data-dir", "DIR", &o->data_dir,
             "where policy versions are stored with --store file (created if missing), and the "
             "default place of the audit log");
  t.hostPortList("--etcd-endpoints", &o->etcd.endpoints, "etcd client addresses (--store etcd)")
      .requiredWhen("with --store etcd");
  t.nonEmpty("--etcd-prefix", "PREFIX", &o->etcd.prefix,
             "key prefix in etcd; two clusters of policyd may share an etcd with different "
             "prefixes");
  t.nonEmpty("--etcd-ca", "FILE", &o->etcd.tls.ca_file,
             "TLS to etcd: the CA bundle that signed etcd's server certificate");
  t.nonEmpty("--etcd-cert", "FILE", &o->etcd.tls.cert_file,
             "TLS client certificate for etcd's --client-cert-auth (with --etcd-key)");
  t.nonEmpty("--etcd-key", "FILE", &o->etcd.tls.key_file,
             "its key (the three files are re-read every 2 s: a rotation needs no restart)");
  t.integer("--etcd-wait", "SECONDS", &o->etcd_wait, 0, 3600,
            "at start, an etcd that does not answer (no quorum yet, a leader election) is tried "
            "again once a second for this long, each failure logged; 0 tries once");
  t.integer("--retain-versions", "N", &o->store.retain_versions, 1, 1'000'000'000,
            "keep the newest N versions; older records are removed after each apply");
  t.toggle("--serve-newest-intact", &o->serve_newest_intact,
           "when the newest stored record is corrupt, serve the newest intact version (reported "
           "by the health service tenantqos.v1.PolicyStore and "
           "tenantqos_policyd_store_newest_corrupt_version) instead of refusing to start");
  t.text("--audit-log", "FILE", &o->audit_log,
         "append-only JSON-lines audit log, one line per stored version")
      .defaultText("DATA_DIR/audit.jsonl");
  t.seconds("--usage-expiry", &o->core.usage_expiry_ns, 1, 86400,
            "a node that has not reported usage for this long is dropped from top");
  t.integer("--max-streams-per-identity", "N", &o->grpc.max_streams_per_identity, 1, 1'000'000,
            "open WatchPolicy streams one certificate identity may hold (an agent needs one); "
            "more get RESOURCE_EXHAUSTED");
  t.millis("--allocator-period", &o->allocator.period_ns, 10, 10000,
           "the cluster allocator computes one round of shared-link caps this often "
           "(docs/fabric.md)");
  t.millis("--allocator-coalesce-ms", &o->allocator.coalesce_ns, 0, 1000,
           "a report that is an edge of a node's demand (a tenant starting, stopping or "
           "jumping by over 25 %) asks for a round this long after it (one "
           "round for the nodes that report the same edge; at most one such round per 20 ms); "
           "0: rounds only every --allocator-period");
  t.integer("--allocator-lease-ttl", "SECONDS", &o->allocator_lease_ttl, 1, 60,
            "with --store etcd: the TTL of the lease the active allocator holds; a standby "
            "takes over within about this long after the active one dies");
  t.millis("--allocator-hold", &o->allocator.hold_ns, 100, 600000,
           "how long agents keep the last caps without news from the allocator before "
           "they fall back to their static split (longer than a failover)");
  t.text("--port-file", "FILE", &o->port_file,
         "once listening, write the bound gRPC port to FILE (atomically)");
  t.hostPort("--metrics", &o->metrics_listen,
             "serve Prometheus metrics at http://HOST:PORT/metrics (port 0 picks one; 7401 is "
             "the suggested fixed port)")
      .defaultText("off");
  t.logLevel("--log-level", &o->log_level, "error, warn, info, debug or trace");
}

Result<PolicydArgs> parsePolicydArgs(int argc, const char* const* argv) {
  PolicydArgs a;
  FlagTable t("tenantqos-policyd");
  addPolicydFlags(t, &a.options);
  TQ_ASSIGN_OR_RETURN(FlagTable::Parsed parsed, t.parse(argc, argv));
  a.help = parsed.help;
  if (a.help) return a;
  const PolicydOptions& o = a.options;
  if (o.store_backend == "etcd" && o.etcd.endpoints.empty()) {
    return invalidArgument("--store etcd needs --etcd-endpoints HOST:PORT[,HOST:PORT...]");
  }
  return a;
}

std::string policydUsage() {
  return kUsageHead + flagDocs("tenantqos-policyd", addPolicydFlags).usage + kUsageTail;
}

std::string policydFlagsMarkdown() {
  return flagDocs("tenantqos-policyd", addPolicydFlags).markdown;
}

int policydMain(int argc, char** argv) {
  rpc::configureGrpcRuntime();  // first: before any gRPC object (rpc/runtime.h)
  Result<PolicydArgs> args = parsePolicydArgs(argc, argv);
  if (!args.ok()) {
    std::cerr << usageErrorText("tenantqos-policyd", args.status());
    return 2;
  }
  if (args->help) {
    std::cout << policydUsage();
    return 0;
  }
  const PolicydOptions& opt = args->options;
  setLogLevel(opt.log_level);
  // Policy-sized buffers (a 4 MiB source, its snapshot, their gRPC slices) come and go with
  // callers. glibc raises its mmap threshold after such a buffer is freed, after which the
  // next ones come from the heap and stay in policyd's RSS when freed (issue 23: 461 MiB kept
  // after a hostile caller left). A fixed threshold keeps every buffer over 256 KiB an mmap
  // that free() returns to the kernel.
  mallopt(M_MMAP_THRESHOLD, 256 * 1024);
  mallopt(M_TRIM_THRESHOLD, 1024 * 1024);
  const StopSignals signals;  // before any thread exists
  // Every watching agent holds a connection (a file descriptor): use the hard limit.
  if (auto fds = raiseOpenFileLimit(); !fds.ok()) {
    TQ_LOG(kWarn, "%s", fds.status().message().c_str());
  }
  std::unique_ptr<Policyd> d;
  return serveUntilStopped(
      "tenantqos-policyd", signals,
      [&]() -> Status {
        TQ_ASSIGN_OR_RETURN(d, Policyd::start(opt));
        return okStatus();
      },
      [&] {
        if (d) d->shutdown();
      });
}

}  // namespace tq::policy
