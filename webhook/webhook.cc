#include "webhook/webhook.h"

#include <grpcpp/grpcpp.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#include <signal.h>

#include <charconv>
#include <chrono>
#include <iostream>

#include "common/file_util.h"
#include "common/log.h"
#include "common/tenant_shm.h"  // isDns1123Label
#include "proto/convert.h"
#include "tenantqos/v1/policy.grpc.pb.h"
#include "webhook/tls_server.h"

namespace tq::webhook {
namespace {

constexpr const char* kHelp =
    R"(Usage: tenantqos-webhook --tls-cert FILE --tls-key FILE --policyd HOST:PORT
                         (--insecure | --tls-ca FILE [--policyd-cert FILE --policyd-key FILE])
                         [--listen HOST:PORT] [recipe flags]

The tenantqos admission webhook: AdmissionReview v1 on Pods over HTTPS at /mutate (adds the
tenant's pod recipe as a JSONPatch) and /validate (refuses tenantqos settings that contradict
the pod's tenant); GET /healthz, /readyz (200 once a policy is held), /metrics. A pod's tenant:
its namespace in a tenant's namespaces; in a namespace of --queue-namespaces, its Volcano queue
(annotation scheduling.volcano.sh/queue-name) in a tenant's volcanoQueues; else the policy's
default tenant. A queue annotation naming another tenant than that is refused.

  --listen HOST:PORT        HTTPS address (default 0.0.0.0:8443)
  --tls-cert FILE           the webhook's serving certificate (PEM, chain allowed); re-read
  --tls-key FILE            its private key (PEM)         when the files change
  --policyd HOST:PORT       tenantqos-policyd, whose policy the webhook follows (WatchPolicy)
  --insecure                plaintext to policyd
  --tls-ca FILE             TLS to policyd, verified with this CA bundle (PEM)
  --policyd-cert FILE       client certificate for policyd (PEM; with --policyd-key)
  --policyd-key FILE        its private key
Recipe (docs/deploy.md; defaults in brackets):
  --plugin-image REF        image with the plugin [registry.example.com/tenantqos/tenantqos:0.1.0]
  --run-dir DIR             the agents' --run-dir [/run/tenantqos]
  --group GID|none          supplemental group of pods whose tenant has no numeric
                            unixGroup (a numeric unixGroup is used instead); never one
                            that is a tenant's unixGroup (such pods are refused) [none]
  --queue-namespaces NS,... namespaces of no tenant where a pod's Volcano queue picks its
                            tenant (Volcano jobs of several tenants in one namespace) [none]
  --default-ld-library-path PATHS
                            after the plugin's directory when a container sets no
                            LD_LIBRARY_PATH [/usr/local/nvidia/lib64:/usr/local/cuda/lib64]
  --request-timeout-ms N    a connection's whole exchange, TLS handshake to response
                            (default 10000, 100..60000)
  --port-file FILE          write the bound port there once listening (for --listen HOST:0)
  -h, --help                this help
Exit codes: 0 after SIGTERM/SIGINT, 1 cannot start, 2 usage error.
)";

Result<uint32_t> parseGid(const std::string& v) {
  uint32_t g = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), g);
  if (v.empty() || ec != std::errc() || end != v.data() + v.size()) {
    return invalidArgument("--group: \"" + v + "\" is not a group id or \"none\"");
  }
  return g;
}

struct Metrics {
  prometheus::Registry registry;
  prometheus::Family<prometheus::Counter>& requests =
      prometheus::BuildCounter()
          .Name("tenantqos_webhook_reviews_total")
          .Help(
              "Admission reviews answered, by endpoint and outcome (mutated, unchanged, "
              "allowed, refused, error).")
          .Register(registry);
  prometheus::Gauge& version = prometheus::BuildGauge()
                                   .Name("tenantqos_webhook_policy_version")
                                   .Help("The policy version the webhook decides with (0: none).")
                                   .Register(registry)
                                   .Add({});
  prometheus::Gauge& connected = prometheus::BuildGauge()
                                     .Name("tenantqos_webhook_policyd_connected")
                                     .Help("1 while the watch stream to policyd is up.")
                                     .Register(registry)
                                     .Add({});
};

}  // namespace

Result<WebhookConfig> parseWebhookArgs(const std::vector<std::string>& args) {
  WebhookConfig c;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i], value;
    bool inline_value = false;
    if (arg.rfind("--", 0) == 0 && arg.find('=') != std::string::npos) {
      value = arg.substr(arg.find('=') + 1);
      arg = arg.substr(0, arg.find('='));
      inline_value = true;
    }
    auto need = [&]() -> Result<std::string> {
      if (inline_value) return value;
      if (i + 1 >= args.size()) return invalidArgument(arg + " needs a value");
      return args[++i];
    };
    std::string* target = nullptr;
    if (arg == "--listen") target = &c.listen;
    if (arg == "--tls-cert") target = &c.tls_cert;
    if (arg == "--tls-key") target = &c.tls_key;
    if (arg == "--policyd") target = &c.policyd;
    if (arg == "--tls-ca") target = &c.tls_ca;
    if (arg == "--policyd-cert") target = &c.policyd_cert;
    if (arg == "--policyd-key") target = &c.policyd_key;
    if (arg == "--plugin-image") target = &c.recipe.image;
    if (arg == "--run-dir") target = &c.recipe.run_dir;
    if (arg == "--default-ld-library-path") target = &c.recipe.default_ld_library_path;
    if (arg == "--port-file") target = &c.port_file;
    if (target != nullptr) {
      TQ_ASSIGN_OR_RETURN(*target, need());
    } else if (arg == "--group") {
      TQ_ASSIGN_OR_RETURN(std::string v, need());
      if (v == "none") {
        c.recipe.group.reset();
      } else {
        TQ_ASSIGN_OR_RETURN(c.recipe.group, parseGid(v));
      }
    } else if (arg == "--queue-namespaces") {
      TQ_ASSIGN_OR_RETURN(std::string v, need());
      c.recipe.queue_namespaces.clear();
      for (size_t at = 0; at <= v.size();) {
        const size_t comma = std::min(v.find(',', at), v.size());
        const std::string ns = v.substr(at, comma - at);
        if (!isDns1123Label(ns)) {
          return invalidArgument("--queue-namespaces: \"" + ns +
                                 "\" is not a namespace name (a DNS-1123 label)");
        }
        c.recipe.queue_namespaces.push_back(ns);
        at = comma + 1;
      }
    } else if (arg == "--request-timeout-ms") {
      TQ_ASSIGN_OR_RETURN(std::string v, need());
      int ms = 0;
      auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), ms);
      if (v.empty() || ec != std::errc() || end != v.data() + v.size() || ms < 100 || ms > 60'000) {
        return invalidArgument("--request-timeout-ms: \"" + v + "\" is not 100..60000");
      }
      c.request_timeout_ms = ms;
    } else if (arg == "--insecure" && !inline_value) {
      c.insecure = true;
    } else {
      return invalidArgument("unknown argument " + args[i]);
    }
  }
  if (c.tls_cert.empty() || c.tls_key.empty()) {
    return invalidArgument(
        "--tls-cert and --tls-key are required (the API server calls over "
        "HTTPS only)");
  }
  if (c.policyd.empty()) return invalidArgument("--policyd HOST:PORT is required");
  if (c.insecure == !c.tls_ca.empty()) {
    return invalidArgument("choose --insecure (plaintext to policyd) or --tls-ca FILE");
  }
  if (c.policyd_cert.empty() != c.policyd_key.empty() || (c.insecure && !c.policyd_cert.empty())) {
    return invalidArgument("--policyd-cert and --policyd-key go together, with --tls-ca");
  }
  if (c.recipe.run_dir.empty() || c.recipe.run_dir.front() != '/') {
    return invalidArgument("--run-dir must be an absolute path");
  }
  while (c.recipe.run_dir.size() > 1 && c.recipe.run_dir.back() == '/') c.recipe.run_dir.pop_back();
  return c;
}

Result<std::shared_ptr<grpc::Channel>> makePolicydChannel(const WebhookConfig& config) {
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (config.insecure) {
    creds = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions o;
    TQ_ASSIGN_OR_RETURN(o.pem_root_certs, readFile(config.tls_ca, 1 << 20));
    if (!config.policyd_cert.empty()) {
      TQ_ASSIGN_OR_RETURN(o.pem_cert_chain, readFile(config.policyd_cert, 1 << 20));
      TQ_ASSIGN_OR_RETURN(o.pem_private_key, readFile(config.policyd_key, 1 << 20));
    }
    creds = grpc::SslCredentials(o);
  }
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 10'000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30'000);  // as the agent's (policyd allows 10 s)
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10'000);
  args.SetMaxReceiveMessageSize(16 << 20);
  return grpc::CreateCustomChannel(config.policyd, creds, args);
}

PolicyFollower::PolicyFollower(std::shared_ptr<grpc::Channel> channel, std::string target)
    : channel_(std::move(channel)), target_(std::move(target)) {
  thread_ = std::thread([this] { run(); });
}

PolicyFollower::~PolicyFollower() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    if (active_ != nullptr) active_->TryCancel();
  }
  cv_.notify_all();
  thread_.join();
}

std::shared_ptr<const VersionedPolicy> PolicyFollower::current() const {
  std::lock_guard<std::mutex> lock(mu_);
  return policy_;
}

void PolicyFollower::run() {
  auto stub = tenantqos::v1::PolicyService::NewStub(channel_);
  int64_t backoff_ms = 250;
  for (;;) {
    grpc::ClientContext ctx;
    tenantqos::v1::WatchPolicyRequest req;
    req.set_node("tenantqos-webhook");
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      if (policy_) req.set_known_version(policy_->version);
      active_ = &ctx;
    }
    ctx.set_wait_for_ready(true);  // a stream attempt waits for policyd instead of failing
    auto reader = stub->WatchPolicy(&ctx, req);
    tenantqos::v1::PolicySnapshot snap;
    while (reader->Read(&snap)) {
      connected_ = true;
      backoff_ms = 250;
      auto fresh = std::make_shared<const VersionedPolicy>(proto::fromSnapshot(snap));
      TQ_LOG(kInfo, "webhook: policy version %llu from %s (%zu tenants)",
             static_cast<unsigned long long>(fresh->version), target_.c_str(),
             fresh->policy.tenants.size());
      std::lock_guard<std::mutex> lock(mu_);
      policy_ = std::move(fresh);
    }
    grpc::Status st = reader->Finish();
    connected_ = false;
    std::unique_lock<std::mutex> lock(mu_);
    active_ = nullptr;
    if (stopping_) return;
    TQ_LOG(kWarn, "webhook: policy watch on %s ended: %s; retrying in %lld ms", target_.c_str(),
           st.error_message().c_str(), static_cast<long long>(backoff_ms));
    cv_.wait_for(lock, std::chrono::milliseconds(backoff_ms), [&] { return stopping_; });
    backoff_ms = std::min<int64_t>(backoff_ms * 2, 10'000);
  }
}

int webhookMain(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  for (const std::string& a : args) {
    if (a == "-h" || a == "--help") {
      std::cout << kHelp;
      return 0;
    }
  }
  auto config = parseWebhookArgs(args);
  if (!config.ok()) {
    std::cerr << "tenantqos-webhook: " << config.status().message() << "\n" << kHelp;
    return 2;
  }
  ::signal(SIGPIPE, SIG_IGN);  // a peer closing mid-response must not end the process
  // SIGTERM/SIGINT are taken by sigwait below: blocked before any thread starts, so that every
  // thread inherits the mask and none is ended by them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  auto channel = makePolicydChannel(*config);
  if (!channel.ok()) {
    std::cerr << "tenantqos-webhook: policyd credentials: " << channel.status().message() << "\n";
    return 1;
  }
  PolicyFollower follower(*channel, config->policyd);
  Metrics metrics;
  const RecipeOptions recipe = config->recipe;
  auto handler = [&](const HttpRequest& req) -> HttpResponse {
    const std::shared_ptr<const VersionedPolicy> policy = follower.current();
    if (req.path == "/mutate" || req.path == "/validate") {
      if (req.method != "POST") return {405, "text/plain; charset=utf-8", "POST only\n"};
      const bool mutate = req.path == "/mutate";
      ReviewResult r =
          review(mutate ? Endpoint::kMutate : Endpoint::kValidate, req.body, policy.get(), recipe);
      metrics.requests.Add({{"endpoint", req.path.substr(1)}, {"outcome", r.outcome}}).Increment();
      if (!r.message.empty()) {
        TQ_LOG(kInfo, "webhook: %s %s: %s", req.path.c_str(), r.outcome.c_str(), r.message.c_str());
      }
      return {r.http_status, r.content_type, std::move(r.body)};
    }
    if (req.method != "GET") return {405, "text/plain; charset=utf-8", "GET only\n"};
    if (req.path == "/healthz") return {200, "text/plain; charset=utf-8", "ok\n"};
    if (req.path == "/readyz") {
      if (policy) return {200, "text/plain; charset=utf-8", "ready\n"};
      return {503, "text/plain; charset=utf-8", "no policy from " + config->policyd + " yet\n"};
    }
    if (req.path == "/metrics") {
      metrics.version.Set(policy ? static_cast<double>(policy->version) : 0);
      metrics.connected.Set(follower.connected() ? 1 : 0);
      return {200, "text/plain; version=0.0.4; charset=utf-8",
              prometheus::TextSerializer().Serialize(metrics.registry.Collect())};
    }
    return {404, "text/plain; charset=utf-8", "not found\n"};
  };
  TlsServer::Options options;
  options.listen = config->listen;
  options.cert_file = config->tls_cert;
  options.key_file = config->tls_key;
  options.max_body_bytes = kMaxReviewBytes;
  options.connection_timeout_ms = config->request_timeout_ms;
  auto server = TlsServer::start(options, handler);
  if (!server.ok()) {
    std::cerr << "tenantqos-webhook: " << server.status().message() << "\n";
    return 1;
  }
  if (!config->port_file.empty()) {
    Status st = writeFileAtomic(config->port_file, std::to_string((*server)->port()) + "\n");
    if (!st.ok()) {
      std::cerr << "tenantqos-webhook: --port-file: " << st.message() << "\n";
      return 1;
    }
  }
  TQ_LOG(kInfo, "webhook: serving https on %s (port %d), policy from %s", options.listen.c_str(),
         (*server)->port(), config->policyd.c_str());
  int sig = 0;
  sigwait(&set, &sig);
  TQ_LOG(kInfo, "webhook: signal %d, stopping", sig);
  return 0;
}

}  // namespace tq::webhook
