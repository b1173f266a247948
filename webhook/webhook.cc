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
#include <memory>

#include "common/daemon.h"
#include "common/file_util.h"
#include "common/flags.h"
#include "common/log.h"
#include "common/tenant_shm.h"  // isDns1123Label
#include "common/thread_annotations.h"
#include "rpc/runtime.h"
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
  t.hostPortList("--policyd", &c->policyd_endpoints,
                 "tenantqos-policyd replicas whose policy the webhook follows (WatchPolicy); on "
                 "failure it moves to the next",
                 &c->policyd)
      .mandatory();
  t.toggle("--insecure", &c->policyd_tls.insecure, "plaintext to policyd");
  t.nonEmpty("--tls-ca", "FILE", &c->policyd_tls.ca_file,
             "TLS to policyd, verified with this CA bundle (PEM)")
      .requiredWhen("unless --insecure");
  t.nonEmpty("--policyd-cert", "FILE", &c->policyd_tls.cert_file,
             "client certificate for policyd (PEM; with --policyd-key; --tls-cert is the serving "
             "certificate)");
  t.nonEmpty("--policyd-key", "FILE", &c->policyd_tls.key_file,
             "its private key (the three files are re-read every 2 s: a rotation needs no "
             "restart)");
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
  const rpc::TlsConfig& tls = a.config.policyd_tls;
  if (tls.insecure == !tls.ca_file.empty()) {
    return invalidArgument("choose --insecure (plaintext to policyd) or --tls-ca FILE");
  }
  if (tls.cert_file.empty() != tls.key_file.empty() || (tls.insecure && !tls.cert_file.empty())) {
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

rpc::PolicyFollower::Handlers PolicyHolder::handlers() {
  rpc::PolicyFollower::Handlers h;
  h.on_policy = [this](VersionedPolicy p, rpc::SnapshotVerdict verdict,
                       const rpc::HeldPolicy& replaced) {
    TQ_LOG(kInfo, "webhook: deciding with policy v%llu of store %s (%zu tenants)",
           static_cast<unsigned long long>(p.version), p.store_epoch.c_str(),
           p.policy.tenants.size());
    auto fresh = std::make_shared<const VersionedPolicy>(std::move(p));
    MutexLock lock(mu_);
    if (verdict == rpc::SnapshotVerdict::kTakeNewStore) {
      // The follower logged it too; /readyz keeps saying it until the next store change.
      store_notice_ = "adopted a re-created policy store " + fresh->store_epoch + " (v" +
                      std::to_string(fresh->version) + "), replacing v" +
                      std::to_string(replaced.version) + " of store " + replaced.store_epoch;
    } else if (store_notice_.rfind("policyd ", 0) == 0) {
      store_notice_.clear();  // an older-version notice ends with a newer version
    }
    policy_ = std::move(fresh);
  };
  h.on_older = [this](const VersionedPolicy&, const std::string& notice) {
    MutexLock lock(mu_);
    store_notice_ = notice;
  };
  h.on_connected = [this](bool up) { connected_ = up; };
  return h;
}

std::shared_ptr<const VersionedPolicy> PolicyHolder::current() const {
  MutexLock lock(mu_);
  return policy_;
}

std::pair<int, std::string> PolicyHolder::readiness(const std::string& policyd) const {
  MutexLock lock(mu_);
  if (!policy_) return {503, "no policy from " + policyd + " yet\n"};
  std::string body = "ready: policy v" + std::to_string(policy_->version) + " of store " +
                     (policy_->store_epoch.empty() ? "-" : policy_->store_epoch) + " from " +
                     policyd + "\n";
  if (!store_notice_.empty()) body += store_notice_ + "\n";
  return {200, body};
}

int webhookMain(int argc, char** argv) {
  rpc::configureGrpcRuntime();  // first: before any gRPC object (rpc/runtime.h)
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
  PolicyHolder holder;
  Metrics metrics;
  const RecipeOptions recipe = config->recipe;
  auto handler = [&](const HttpRequest& req) -> HttpResponse {
    const std::shared_ptr<const VersionedPolicy> policy = holder.current();
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
      auto [code, body] = holder.readiness(config->policyd);
      return {code, "text/plain; charset=utf-8", std::move(body)};
    }
    if (req.path == "/metrics") {
      metrics.version.Set(policy ? static_cast<double>(policy->version) : 0);
      metrics.connected.Set(holder.connected() ? 1 : 0);
      return {200, "text/plain; version=0.0.4; charset=utf-8",
              prometheus::TextSerializer().Serialize(metrics.registry.Collect())};
    }
    return {404, "text/plain; charset=utf-8", "not found\n"};
  };
  std::unique_ptr<rpc::PolicyFollower> follower;
  std::unique_ptr<TlsServer> server;
  return serveUntilStopped(
      "tenantqos-webhook", signals,
      [&]() -> Status {
        auto credentials =
            rpc::channelCredentials(config->policyd_tls, rpc::ClientCertificate::kOptional);
        if (!credentials.ok()) return credentials.status().withContext("policyd credentials");
        rpc::PolicyFollower::Options follow;
        follow.node = "tenantqos-webhook";
        follower = std::make_unique<rpc::PolicyFollower>(
            rpc::makeChannelRing(config->policyd_endpoints, follow.backoff, *credentials), follow,
            holder.handlers(), realClock());
        follower->start();
        TlsServer::Options options;
        options.listen = config->listen;
        options.cert_file = config->tls_cert;
        options.key_file = config->tls_key;
        options.max_body_bytes = kMaxReviewBytes;
        options.connection_timeout_ms = config->request_timeout_ms;
        TQ_ASSIGN_OR_RETURN(server, TlsServer::start(options, handler));
        if (!config->port_file.empty()) {
          TQ_RETURN_IF_ERROR(
              writeFileAtomic(config->port_file, std::to_string(server->port()) + "\n")
                  .withContext("--port-file"));
        }
        TQ_LOG(kInfo, "webhook: serving https on %s (port %d), policy from %s",
               options.listen.c_str(), server->port(), config->policyd.c_str());
        return okStatus();
      },
      [&] {
        server.reset();  // no request is answered after this
        follower.reset();
      });
}

}  // namespace tq::webhook
