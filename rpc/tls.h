// Mutual TLS for every tenantqos gRPC connection: one helper for servers (policyd) and clients
// (agent, tenantqosctl, benchmarks), so every process reads and checks its certificates the same
// way.
//
// A process has a CA bundle (the CAs whose certificates it accepts from peers), its own
// certificate chain and its private key, all PEM files. Servers require and verify a client
// certificate; clients verify the server's chain against the CA and its name (SAN) against the
// address they dial. The files are re-read every kTlsReloadSeconds (gRPC's
// FileWatcherCertificateProvider), so a rotation (cert-manager replacing the files) takes
// effect for new connections without a restart; connections already open stay up.
// `insecure` is plaintext with no authentication at all (development on loopback only).
//
// Identity comes from the verified certificate only (never from a request field): the subject's
// CN is the identity, its O values are the groups (the Kubernetes convention).
// Thread-safety: the functions are pure or read files; the credentials are gRPC's (thread-safe).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/flags.h"
#include "common/status.h"

namespace grpc {
class AuthContext;
class ChannelCredentials;
class ServerCredentials;
}  // namespace grpc

namespace tq::rpc {

inline constexpr unsigned kTlsReloadSeconds = 2;

struct TlsConfig {
  std::string ca_file;    // --tls-ca: PEM CA bundle that peers' certificates must chain to
  std::string cert_file;  // --tls-cert: PEM certificate chain presented to peers
  std::string key_file;   // --tls-key: PEM private key of cert_file
  bool insecure = false;  // --insecure: plaintext, no authentication
};

// --tls-ca, --tls-cert, --tls-key and --insecure in a program's flag table, bound to `config`
// (one wording for every program). `peer` names the certificate --tls-ca checks ("every
// client's certificate"); `cert` says what this process's certificate must hold.
void addTlsFlags(FlagTable& table, TlsConfig* config, std::string_view peer, std::string_view cert);

// Sets the field named by `flag` ("--tls-ca", "--tls-cert", "--tls-key"; "--insecure" takes
// no value and ignores `value`). False if `flag` is none of them. (tenantqosctl's parser.)
bool setTlsFlag(TlsConfig* config, std::string_view flag, const std::string& value);

// kInvalidArgument unless either all three files or `insecure` is given (not both), each file
// is readable PEM, the key matches the certificate, and the certificate is within its validity
// period. Messages name the flag and the file.
Status checkTlsConfig(const TlsConfig& config);

// Credentials for a server that requires and verifies client certificates, or insecure ones
// (after logging a warning). Errors as checkTlsConfig.
Result<std::shared_ptr<grpc::ServerCredentials>> serverCredentials(const TlsConfig& config);
// Credentials for a channel that presents the certificate and verifies the server's chain and
// name, or insecure ones (after logging a warning).
Result<std::shared_ptr<grpc::ChannelCredentials>> channelCredentials(const TlsConfig& config);

struct PeerIdentity {
  bool authenticated = false;       // false: no verified certificate (insecure connection)
  std::string name;                 // the certificate's subject CN
  std::vector<std::string> groups;  // the subject's O values, in order
};

// The verified client certificate's identity; unauthenticated when there is none.
PeerIdentity peerIdentity(const grpc::AuthContext& context);

}  // namespace tq::rpc
