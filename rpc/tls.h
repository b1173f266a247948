// TLS for every tenantqos gRPC connection: one helper for the server (policyd) and every client
// (agent, tenantqosctl, the webhook, the etcd store, benchmarks), so every process reads, checks
// and re-reads its certificates the same way.
//
// A process has a CA bundle (the CAs whose certificates it accepts from peers), its own
// certificate chain and its private key, all PEM files. Servers require and verify a client
// certificate; clients verify the server's chain against the CA and its name (SAN) against the
// address they dial. The files are re-read every kTlsReloadSeconds (gRPC's
// FileWatcherCertificateProvider), so a rotation (cert-manager replacing the files) takes
// effect for new connections without a restart; connections already open stay up.
// `insecure` is plaintext with no authentication at all (development on loopback only). A client
// whose server does not ask for a certificate (the webhook to a policyd that maps it by CA only,
// etcd without --client-cert-auth) may leave its own certificate out
// (ClientCertificate::kOptional): then only the CA file is watched.
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

// The flags a program sets the files with, for its messages (the webhook names its client
// certificate --policyd-cert, the etcd store --etcd-ca/--etcd-cert/--etcd-key).
struct TlsFlagNames {
  std::string ca = "--tls-ca";
  std::string cert = "--tls-cert";
  std::string key = "--tls-key";
  std::string insecure = "--insecure";
};

struct TlsConfig {
  std::string ca_file;    // --tls-ca: PEM CA bundle that peers' certificates must chain to
  std::string cert_file;  // --tls-cert: PEM certificate chain presented to peers
  std::string key_file;   // --tls-key: PEM private key of cert_file
  bool insecure = false;  // --insecure: plaintext, no authentication
  TlsFlagNames flags;     // how the program calls them
  std::string peer = "the server";  // who is dialled, for the plaintext warning ("etcd")
};

enum class ClientCertificate {
  kRequired,  // mutual TLS (every client of policyd but the webhook; the server always)
  kOptional,  // a CA alone verifies the server; a certificate is presented when given
};

// --tls-ca, --tls-cert, --tls-key and --insecure in a program's flag table, bound to `config`
// (one wording for every program). `peer` names the certificate --tls-ca checks ("every
// client's certificate"); `cert` says what this process's certificate must hold.
void addTlsFlags(FlagTable& table, TlsConfig* config, std::string_view peer, std::string_view cert);

// Sets the field named by `flag` ("--tls-ca", "--tls-cert", "--tls-key"; "--insecure" takes
// no value and ignores `value`). False if `flag` is none of them. (tenantqosctl's parser.)
bool setTlsFlag(TlsConfig* config, std::string_view flag, const std::string& value);

// kInvalidArgument unless either the files or `insecure` is given (not both): the CA, and the
// certificate with its key (both or, kOptional, neither); each file readable PEM, the key the
// certificate's, the certificate within its validity period. Messages name the flag and the file.
Status checkTlsConfig(const TlsConfig& config,
                      ClientCertificate client = ClientCertificate::kRequired);

// Credentials for a server that requires and verifies client certificates, or insecure ones
// (after logging a warning). Errors as checkTlsConfig.
Result<std::shared_ptr<grpc::ServerCredentials>> serverCredentials(const TlsConfig& config);
// Credentials for a channel that verifies the server's chain and name (its SAN must name the
// dialled host) and presents the certificate when there is one, re-reading the files every
// kTlsReloadSeconds; or insecure ones (after logging a warning naming config.peer).
Result<std::shared_ptr<grpc::ChannelCredentials>> channelCredentials(
    const TlsConfig& config, ClientCertificate client = ClientCertificate::kRequired);

struct PeerIdentity {
  bool authenticated = false;       // false: no verified certificate (insecure connection)
  std::string name;                 // the certificate's subject CN
  std::vector<std::string> groups;  // the subject's O values, in order
};

// The verified client certificate's identity; unauthenticated when there is none.
PeerIdentity peerIdentity(const grpc::AuthContext& context);

}  // namespace tq::rpc
