// tenantqos-webhook: the Kubernetes admission webhook (docs/deploy.md#the-admission-webhook).
//
//   tenantqos-webhook --listen HOST:PORT --tls-cert F --tls-key F --policyd HOST:PORT
//                     (--insecure | --tls-ca F [--policyd-cert F --policyd-key F]) [recipe flags]
//
// One HTTPS listener serves POST /mutate and /validate (AdmissionReview v1 on Pods, see
// admission.h), GET /healthz (the process serves), /readyz (200 once a policy from policyd is
// held: before that every Pod review is refused, so the Service gets no endpoints until then)
// and /metrics (Prometheus text). The policy follows policyd through one WatchPolicy stream that
// reconnects with backoff; the last policy received stays in use while policyd is away.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/flags.h"
#include "common/policy.h"
#include "common/status.h"
#include "webhook/admission.h"

namespace grpc {
class Channel;
class ClientContext;
}  // namespace grpc

namespace tq::webhook {

struct WebhookConfig {
  std::string listen = "0.0.0.0:8443";
  std::string tls_cert, tls_key;  // the webhook's own serving certificate
  std::string policyd;            // HOST:PORT
  // The connection to policyd: plaintext (--insecure) or TLS verified with --tls-ca, with an
  // optional client certificate. The names follow the other clients' --tls-ca / --insecure;
  // the client certificate flags are --policyd-cert/--policyd-key here because --tls-cert and
  // --tls-key are the webhook's serving certificate.
  bool insecure = false;
  std::string tls_ca, policyd_cert, policyd_key;
  RecipeOptions recipe;
  int request_timeout_ms = 10'000;  // a whole connection, TLS handshake to response
  std::string port_file;  // written with the bound port once listening (tests use --listen :0)
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

// The latest policy from policyd, on its own thread. Thread-safety: current() and connected()
// from any thread.
class PolicyFollower {
 public:
  PolicyFollower(std::shared_ptr<grpc::Channel> channel, std::string target);
  ~PolicyFollower();  // stops the stream and joins the thread
  std::shared_ptr<const VersionedPolicy> current() const;
  bool connected() const { return connected_.load(); }

 private:
  void run();

  std::shared_ptr<grpc::Channel> channel_;
  std::string target_;
  std::atomic<bool> connected_{false};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;                          // guarded by mu_
  grpc::ClientContext* active_ = nullptr;          // guarded by mu_
  std::shared_ptr<const VersionedPolicy> policy_;  // guarded by mu_
  std::thread thread_;
};

// Credentials and channel for policyd from the config (keepalive as the agent's).
Result<std::shared_ptr<grpc::Channel>> makePolicydChannel(const WebhookConfig& config);

int webhookMain(int argc, char** argv);

}  // namespace tq::webhook
