// tenantqos-webhook: the Kubernetes admission webhook (docs/deploy.md#the-admission-webhook).
//
//   tenantqos-webhook --listen HOST:PORT --tls-cert F --tls-key F --policyd HOST:PORT[,...]
//                     (--insecure | --tls-ca F [--policyd-cert F --policyd-key F]) [recipe flags]
//
// One HTTPS listener serves POST /mutate and /validate (AdmissionReview v1 on Pods, see
// admission.h), GET /healthz (the process serves), /readyz (200 once a policy from policyd is
// held: before that every Pod review is refused, so the Service gets no endpoints until then;
// the body names the policy and store, and says when a re-created store was adopted) and
// /metrics (Prometheus text). The policy follows policyd through rpc::PolicyFollower (the
// agent's follower: store epoch, jitter, backoff, failover over the replicas); the last policy
// received stays in use while policyd is away.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/flags.h"
#include "common/policy.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "rpc/policy_follower.h"
#include "rpc/tls.h"
#include "webhook/admission.h"

namespace tq::webhook {

struct WebhookConfig {
  std::string listen = "0.0.0.0:8443";
  std::string tls_cert, tls_key;  // the webhook's own serving certificate
  std::string policyd;            // --policyd as given: HOST:PORT[,HOST:PORT...] (replicas)
  std::vector<std::string> policyd_endpoints;  // its entries
  // The connection to policyd: plaintext (--insecure) or TLS verified with --tls-ca, with an
  // optional client certificate. The names follow the other clients' --tls-ca / --insecure;
  // the client certificate flags are --policyd-cert/--policyd-key here because --tls-cert and
  // --tls-key are the webhook's serving certificate.
  rpc::TlsConfig policyd_tls = policydTls();
  RecipeOptions recipe;
  int request_timeout_ms = 10'000;  // a whole connection, TLS handshake to response
  std::string port_file;  // written with the bound port once listening (tests use --listen :0)

  static rpc::TlsConfig policydTls() {
    rpc::TlsConfig t;
    t.flags = {"--tls-ca", "--policyd-cert", "--policyd-key", "--insecure"};
    t.peer = "policyd";
    return t;
  }
};

// The command line: every flag in one table (common/flags.h), which also writes --help and the
// flag table of docs/deploy.md.
struct WebhookArgs {
  WebhookConfig config;
  bool help = false;
};
void addWebhookFlags(FlagTable& table, WebhookConfig* config);
// Parses argv (without the program name). Usage errors name the flag.
Result<WebhookArgs> parseWebhookArgs(const std::vector<std::string>& args);
std::string webhookUsage();
std::string webhookFlagsMarkdown();

// What the webhook decides with: the latest policy its follower took, and what /readyz says
// about it. Thread-safety: every method from any thread (the follower's thread takes, the HTTP
// workers read).
class PolicyHolder {
 public:
  // rpc::PolicyFollower's handlers, filling this holder.
  rpc::PolicyFollower::Handlers handlers();

  std::shared_ptr<const VersionedPolicy> current() const;
  bool connected() const { return connected_.load(); }
  // /readyz: 200 with "ready: policy vN of store E (from policyd)" once a policy is held, plus a
  // line when a re-created store was adopted or an older version was refused; else 503.
  std::pair<int, std::string> readiness(const std::string& policyd) const;

 private:
  mutable Mutex mu_;
  std::shared_ptr<const VersionedPolicy> policy_ TQ_GUARDED_BY(mu_);
  std::string store_notice_ TQ_GUARDED_BY(mu_);
  std::atomic<bool> connected_{false};
};

int webhookMain(int argc, char** argv);

}  // namespace tq::webhook
