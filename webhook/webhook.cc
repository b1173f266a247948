#include "webhook/webhook.h"

#include <grpcpp/grpcpp.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <charconv>
#include <chrono>
#include <iostream>

#include "common/daemon.h"
#include "common/file_util.h"
#include "common/flags.h"
#include "common/log.h"
#include "common/tenant_shm.h"  // isDns1123Label
#include "proto/convert.h"
#include "tenantqos/v1/policy.grpc.pb.h"
#include "webhook/tls_server.h"

namespace tq::webhook {
namespace {

constexpr const char* kUsageHead =
    R"(Usage: tenantqos-webhook --tls-cert FILE --tls-key FILE --policyd HOST:PORT
                         (--insecure | --tls-ca FILE [--policyd-cert FILE --policyd-key FILE])
                         [--listen HOST:PORT] [recipe flags]

The tenantqos admission webhook: AdmissionReview v1 on Pods over HTTPS at /mutate (adds the
tenant's pod recipe as a JSONPatch) and /validate (refuses tenantqos settings that contradict
the pod's tenant); GET /healthz, /readyz (200 once a policy is held), /metrics. A pod's tenant:
its namespace in a tenant's namespaces; in a namespace of --queue-namespaces, its Volcano queue
(annotation scheduling.volcano.sh/queue-name) in a tenant's volcanoQueues; else the policy's
default tenant. A queue annotation naming another tenant than that is refused.

Flags (the recipe's are described in docs/deploy.md):
)";

constexpr const char* kUsageTail = R"(
Exit codes: 0 after SIGTERM/SIGINT, 1 cannot start, 2 usage error.
)";

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

void addWebhookFlags(FlagTable& t, WebhookConfig* c) {
  t.hostPort("--listen", &c->listen, "HTTPS address");
  t.nonEmpty("--tls-cert", "FILE", &c->tls_cert,
             "the webhook's serving certificate (PEM, chain allowed); re-read when the files "
             "change")
      .mandatory();
  t.nonEmpty("--tls-key", "FILE", &c->tls_key, "its private key (PEM)").mandatory();
  t.hostPort("--policyd", &c->policyd,
             "tenantqos-policyd, whose policy the webhook follows (WatchPolicy)")
      .mandatory();
  t.toggle("--insecure", &c->insecure, "plaintext to policyd");
  t.nonEmpty("--tls-ca", "FILE", &c->tls_ca, "TLS to policyd, verified with this CA bundle (PEM)")
      .requiredWhen("unless --insecure");
  t.nonEmpty("--policyd-cert", "FILE", &c->policyd_cert,
             "client certificate for policyd (PEM; with --policyd-key; --tls-cert is the serving "
             "certificate)");
  t.nonEmpty("--policyd-key", "FILE", &c->policyd_key, "its private key");
  t.nonEmpty("--plugin-image", "REF", &c->recipe.image, "the image with the plugin");
  t.add("--run-dir", "DIR", "the agents' --run-dir (an absolute path)",
        [c](std::string_view v) -> Status {
          std::string dir(v);
          if (dir.empty() || dir.front() != '/') return invalidArgument("not an absolute path");
          while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
          c->recipe.run_dir = std::move(dir);
          return okStatus();
        })
      .defaultValue(c->recipe.run_dir);
  t.add("--group", "GID|none",
        "supplemental group of pods whose tenant has no numeric unixGroup (a numeric unixGroup "
        "is used instead); never one that is a tenant's unixGroup (such pods are refused)",
        [c](std::string_view v) -> Status {
          if (v == "none") {
            c->recipe.group.reset();
            return okStatus();
          }
          uint32_t g = 0;
          auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), g);
          if (v.empty() || ec != std::errc() || end != v.data() + v.size()) {
            return invalidArgument("\"" + std::string(v) + "\" is not a group id or \"none\"");
          }
          c->recipe.group = g;
          return okStatus();
        })
      .defaultValue(c->recipe.group ? std::to_string(*c->recipe.group) : "none");
  t.add("--queue-namespaces", "NS,...",
        "namespaces of no tenant where a pod's Volcano queue picks its tenant (Volcano jobs of "
        "several tenants in one namespace)",
        [c](std::string_view v) -> Status {
          c->recipe.queue_namespaces.clear();
          for (size_t at = 0; at <= v.size();) {
            const size_t comma = std::min(v.find(',', at), v.size());
            const std::string ns(v.substr(at, comma - at));
            if (!isDns1123Label(ns)) {
              return invalidArgument("\"" + ns + "\" is not a namespace name (a DNS-1123 label)");
            }
            c->recipe.queue_namespaces.push_back(ns);
            at = comma + 1;
          }
          return okStatus();
        })
      .defaultText("none");
  t.text("--default-ld-library-path", "PATHS", &c->recipe.default_ld_library_path,
         "after the plugin's directory when a container sets no LD_LIBRARY_PATH");
  t.integer("--request-timeout-ms", "MS", &c->request_timeout_ms, 100, 60'000,
            "a connection's whole exchange, TLS handshake to response");
  t.text("--port-file", "FILE", &c->port_file,
         "write the bound port there once listening (for --listen HOST:0)");
}

Result<WebhookArgs> parseWebhookArgs(const std::vector<std::string>& args) {
  WebhookArgs a;
  FlagTable t("tenantqos-webhook");
  addWebhookFlags(t, &a.config);
  TQ_ASSIGN_OR_RETURN(FlagTable::Parsed parsed, t.parse(args));
  a.help = parsed.help;
  if (a.help) return a;
  const WebhookConfig& c = a.config;
  if (c.insecure == !c.tls_ca.empty()) {
    return invalidArgument("choose --insecure (plaintext to policyd) or --tls-ca FILE");
  }
  if (c.policyd_cert.empty() != c.policyd_key.empty() || (c.insecure && !c.policyd_cert.empty())) {
    return invalidArgument("--policyd-cert and --policyd-key go together, with --tls-ca");
  }
  return a;
}

std::string webhookUsage() {
  return kUsageHead + flagDocs("tenantqos-webhook", addWebhookFlags).usage + kUsageTail;
}

std::string webhookFlagsMarkdown() {
  return flagDocs("tenantqos-webhook", addWebhookFlags).markdown;
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
  auto args = parseWebhookArgs(std::vector<std::string>(argv + 1, argv + argc));
  if (!args.ok()) {
    std::cerr << usageErrorText("tenantqos-webhook", args.status());
    return 2;
  }
  if (args->help) {
    std::cout << webhookUsage();
    return 0;
  }
  const WebhookConfig* config = &args->config;
  const StopSignals signals;  // before any thread starts
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
  const int sig = signals.wait();
  TQ_LOG(kInfo, "tenantqos-webhook: %s received, stopping", std::string(signalName(sig)).c_str());
  return 0;
}

}  // namespace tq::webhook
