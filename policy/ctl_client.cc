#include "policy/ctl_client.h"

#include <ostream>
#include <utility>

#include "common/endpoints.h"
#include "common/text.h"
#include "policy/wire.h"

namespace tq::policy::ctl {

namespace v1 = tenantqos::v1;

std::string codeName(grpc::StatusCode c) {
  switch (c) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS: return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED: return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS: return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED: return "UNAUTHENTICATED";
    default: return "UNKNOWN";
  }
}

Client::Client(std::string server, double timeout_s, rpc::TlsConfig tls, std::string server_from)
    : server_(std::move(server)),
      server_from_(std::move(server_from)),
      timeout_s_(timeout_s),
      tls_(std::move(tls)) {}

int Client::connect(std::ostream& err) {
  Result<std::shared_ptr<grpc::ChannelCredentials>> credentials = rpc::channelCredentials(tls_);
  if (!credentials.ok()) {
    err << "tenantqosctl: " << credentials.status().message()
        << " (flags or $TENANTQOS_TLS_CA, $TENANTQOS_TLS_CERT, $TENANTQOS_TLS_KEY)\n";
    return kExitUsage;
  }
  auto targets = splitEndpointList(server_, server_from_);
  if (!targets.ok()) {
    err << "tenantqosctl: " << targets.status().message() << "\n";
    return kExitUsage;
  }
  for (const std::string& target : *targets) {
    if (Result<HostPort> hp = parseHostPort(target); !hp.ok()) {
      err << "tenantqosctl: " << server_from_ << ": " << hp.status().message() << "\n";
      return kExitUsage;
    }
  }
  std::string why;
  for (const std::string& target : *targets) {
    if (connectTo(target, *credentials, &why)) return 0;
    if (targets->size() > 1) err << "tenantqosctl: " << why << "; trying the next server\n";
  }
  err << "tenantqosctl: " << why << " (is it running? set --server or TENANTQOS_SERVER; "
      << (tls_.insecure ? "a TLS server refuses --insecure clients"
                        : "or the TLS handshake failed: does its certificate chain to "
                          "--tls-ca and name this address, is yours signed by its CA "
                          "and valid?")
      << ")\n";
  return kExitUnreachable;
}

void Client::prepare(grpc::ClientContext* c) const {
  c->set_deadline(std::chrono::system_clock::now() +
                  std::chrono::milliseconds(static_cast<int64_t>(timeout_s_ * 1000)));
}

int Client::fail(const grpc::Status& s, const std::string& what, std::ostream& err) const {
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE ||
      s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    err << "tenantqosctl: " << what << ": tenantqos-policyd at " << server_ << " did not answer ("
        << codeName(s.error_code()) << ": " << escapeControl(s.error_message()) << ")\n";
    return kExitUnreachable;
  }
  err << "tenantqosctl: " << what << " failed (" << codeName(s.error_code()) << "):\n"
      << escapeControl(s.error_message(), /*keep_newlines=*/true) << "\n";
  return kExitRejected;
}

bool Client::connectTo(const std::string& target,
                       const std::shared_ptr<grpc::ChannelCredentials>& credentials,
                       std::string* why) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxResponseBytes);
  args.SetInt(GRPC_ARG_MAX_METADATA_SIZE, 64 * 1024);  // long error lists travel in trailers
  channel_ = grpc::CreateCustomChannel(target, credentials, args);
  stub_ = v1::PolicyService::NewStub(channel_);
  auto deadline = std::chrono::system_clock::now() + kConnectTimeout;
  grpc_connectivity_state state = channel_->GetState(/*try_to_connect=*/true);
  while (state != GRPC_CHANNEL_READY) {
    if (state == GRPC_CHANNEL_TRANSIENT_FAILURE || state == GRPC_CHANNEL_SHUTDOWN) {
      *why = "cannot reach tenantqos-policyd at " + target + ": connection failed";
      return false;
    }
    if (!channel_->WaitForStateChange(state, deadline)) {
      *why = "cannot reach tenantqos-policyd at " + target + ": no connection within " +
             std::to_string(kConnectTimeout.count()) + "s";
      return false;
    }
    state = channel_->GetState(false);
  }
  server_ = target;  // named in later messages
  return true;
}

int fetchPolicy(const Args& a, CtlContext& ctx, Client& client, const std::string& what,
                PolicyRecord* out) {
  v1::GetPolicyRequest req;
  if (a.values.count("--version")) {
    auto v = parseU64(a.values.at("--version"));
    if (!v || *v == 0) return usageError(a, ctx, "--version needs a version number >= 1");
    req.set_version(*v);
  }
  if (int rc = client.connect(ctx.err)) return rc;
  v1::PolicySnapshot snap;
  grpc::ClientContext c;
  client.prepare(&c);
  grpc::Status s = client.stub().GetPolicy(&c, req, &snap);
  if (!s.ok()) return client.fail(s, what, ctx.err);
  *out = fromSnapshot(snap);
  return kExitOk;
}

}  // namespace tq::policy::ctl
