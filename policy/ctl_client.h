// tenantqosctl's connection to tenantqos-policyd: one of the --server replicas (the first that
// answers, in order), each call under --timeout, and a failed call turned into the exit code and
// message the commands share (3 when the server did not answer, 1 when it refused).
// Thread-safety: one command's; not shared.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <iosfwd>
#include <memory>
#include <string>

#include "policy/ctl_args.h"
#include "policy/store.h"
#include "rpc/tls.h"
#include "tenantqos/v1/policy.grpc.pb.h"

namespace tq::policy::ctl {

// How long connect() waits for each replica.
inline constexpr auto kConnectTimeout = std::chrono::seconds(3);
// The largest answer taken (a policy is at most 4 MiB; a usage page is smaller).
inline constexpr int kMaxResponseBytes = 16 << 20;

// "UNAVAILABLE", "PERMISSION_DENIED", ...
std::string codeName(grpc::StatusCode c);

class Client {
 public:
  // `server` may list several policyd replicas (A,B,C); `server_from` names where it came from
  // ("--server", "$TENANTQOS_SERVER") in the message about a malformed list.
  Client(std::string server, double timeout_s, rpc::TlsConfig tls,
         std::string server_from = "--server");

  // 0 when connected to one of the replicas (tried in order); else the exit code after printing
  // why: kExitUsage for unusable TLS files or a malformed list (every entry must be HOST:PORT),
  // kExitUnreachable if no replica can be reached within kConnectTimeout each.
  int connect(std::ostream& err);

  // The deadline of one call: --timeout from now.
  void prepare(grpc::ClientContext* c) const;

  // Maps a failed call to an exit code and prints why, naming `what`.
  int fail(const grpc::Status& s, const std::string& what, std::ostream& err) const;

  tenantqos::v1::PolicyService::Stub& stub() { return *stub_; }
  // The list as given before connect(); the replica connected to after.
  const std::string& server() const { return server_; }

 private:
  bool connectTo(const std::string& target,
                 const std::shared_ptr<grpc::ChannelCredentials>& credentials, std::string* why);

  std::string server_;
  std::string server_from_;
  double timeout_s_;
  rpc::TlsConfig tls_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<tenantqos::v1::PolicyService::Stub> stub_;
};

// The policy of --version N (a usage error unless N >= 1), else the latest, from the server:
// 0, or the exit code after saying why (`what` names the operation in the message).
int fetchPolicy(const Args& a, CtlContext& ctx, Client& client, const std::string& what,
                PolicyRecord* out);

}  // namespace tq::policy::ctl
