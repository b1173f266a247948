#include "rpc/tls.h"

#include <grpcpp/security/auth_context.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_certificate_verifier.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "common/file_util.h"
#include "common/log.h"

namespace tq::rpc {
namespace {

constexpr uint64_t kMaxPemBytes = 1 << 20;

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;

BioPtr memBio(const std::string& text) {
  return BioPtr(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

std::string opensslError() {
  unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "no PEM data";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

X509Ptr firstCertificate(const std::string& pem) {
  BioPtr bio = memBio(pem);
  return X509Ptr(bio ? PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr) : nullptr);
}

// The UTF-8 values of `nid` entries in `name`, in order.
std::vector<std::string> nameEntries(const X509_NAME* name, int nid) {
  std::vector<std::string> out;
  for (int i = X509_NAME_get_index_by_NID(name, nid, -1); i >= 0;
       i = X509_NAME_get_index_by_NID(name, nid, i)) {
    const ASN1_STRING* data = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, i));
    unsigned char* utf8 = nullptr;
    int n = ASN1_STRING_to_UTF8(&utf8, data);
    if (n >= 0) out.emplace_back(reinterpret_cast<char*>(utf8), static_cast<size_t>(n));
    OPENSSL_free(utf8);
  }
  return out;
}

Result<std::string> readPem(const std::string& flag, const std::string& path) {
  Result<std::string> text = readFile(path, kMaxPemBytes);
  if (!text.ok()) return invalidArgument(flag + ": " + text.status().message());
  return text;
}

// Re-reads the files every kTlsReloadSeconds (a rotation needs no restart); the CA alone when
// there is no certificate to present.
std::shared_ptr<grpc::experimental::FileWatcherCertificateProvider> watcher(const TlsConfig& c) {
  if (c.cert_file.empty()) {
    return std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(c.ca_file,
                                                                                kTlsReloadSeconds);
  }
  return std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      c.key_file, c.cert_file, c.ca_file, kTlsReloadSeconds);
}

}  // namespace

void addTlsFlags(FlagTable& table, TlsConfig* c, std::string_view peer, std::string_view cert) {
  table
      .nonEmpty("--tls-ca", "FILE", &c->ca_file,
                "mutual TLS: the PEM CA bundle that " + std::string(peer) + " must chain to")
      .requiredWhen("unless --insecure");
  table
      .nonEmpty("--tls-cert", "FILE", &c->cert_file,
                "this process's PEM certificate (chain): " + std::string(cert))
      .requiredWhen("unless --insecure");
  table
      .nonEmpty("--tls-key", "FILE", &c->key_file,
                "its PEM private key. The three files are re-read every " +
                    std::to_string(kTlsReloadSeconds) +
                    " s: a rotation takes effect for new connections without a restart")
      .requiredWhen("unless --insecure");
  table.toggle("--insecure", &c->insecure,
               "plaintext gRPC without authentication instead of mutual TLS (logs a warning; a "
               "loopback sandbox only)");
}

bool setTlsFlag(TlsConfig* config, std::string_view flag, const std::string& value) {
  if (flag == "--tls-ca") {
    config->ca_file = value;
  } else if (flag == "--tls-cert") {
    config->cert_file = value;
  } else if (flag == "--tls-key") {
    config->key_file = value;
  } else if (flag == "--insecure") {
    config->insecure = true;
  } else {
    return false;
  }
  return true;
}

Status checkTlsConfig(const TlsConfig& c, ClientCertificate client) {
  const TlsFlagNames& f = c.flags;
  const bool any_file = !c.ca_file.empty() || !c.cert_file.empty() || !c.key_file.empty();
  if (c.insecure) {
    if (any_file) {
      return invalidArgument(f.insecure + " excludes " + f.ca + ", " + f.cert + " and " + f.key);
    }
    return okStatus();
  }
  const bool has_cert = !c.cert_file.empty() || !c.key_file.empty();
  if (c.ca_file.empty() ||
      (client == ClientCertificate::kRequired && (c.cert_file.empty() || c.key_file.empty()))) {
    if (client == ClientCertificate::kOptional) {
      return invalidArgument("TLS needs " + f.ca + " (or " + f.insecure +
                             " for plaintext without authentication)");
    }
    return invalidArgument("mutual TLS needs " + f.ca + ", " + f.cert + " and " + f.key + " (or " +
                           f.insecure + " for plaintext without authentication)");
  }
  if (has_cert && (c.cert_file.empty() || c.key_file.empty())) {
    return invalidArgument(f.cert + " and " + f.key + " go together");
  }
  TQ_ASSIGN_OR_RETURN(std::string ca, readPem(f.ca, c.ca_file));
  if (!firstCertificate(ca)) {
    return invalidArgument(f.ca + " " + c.ca_file + ": no PEM certificate (" + opensslError() +
                           ")");
  }
  if (!has_cert) return okStatus();
  TQ_ASSIGN_OR_RETURN(std::string cert, readPem(f.cert, c.cert_file));
  TQ_ASSIGN_OR_RETURN(std::string key, readPem(f.key, c.key_file));
  X509Ptr x = firstCertificate(cert);
  if (!x) {
    return invalidArgument(f.cert + " " + c.cert_file + ": no PEM certificate (" + opensslError() +
                           ")");
  }
  BioPtr kb = memBio(key);
  PkeyPtr pkey(kb ? PEM_read_bio_PrivateKey(kb.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!pkey) {
    return invalidArgument(f.key + " " + c.key_file + ": no PEM private key (" + opensslError() +
                           ")");
  }
  if (X509_check_private_key(x.get(), pkey.get()) != 1) {
    ERR_clear_error();
    return invalidArgument(f.key + " " + c.key_file + " is not the key of " + f.cert + " " +
                           c.cert_file);
  }
  if (X509_cmp_current_time(X509_get0_notAfter(x.get())) <= 0) {
    return invalidArgument(f.cert + " " + c.cert_file + " has expired (peers refuse it)");
  }
  if (X509_cmp_current_time(X509_get0_notBefore(x.get())) > 0) {
    return invalidArgument(f.cert + " " + c.cert_file + " is not valid yet (peers refuse it)");
  }
  return okStatus();
}

Result<std::shared_ptr<grpc::ServerCredentials>> serverCredentials(const TlsConfig& c) {
  TQ_RETURN_IF_ERROR(checkTlsConfig(c, ClientCertificate::kRequired));
  if (c.insecure) {
    TQ_LOG(kWarn,
           "%s: serving plaintext gRPC WITHOUT authentication; anyone who can reach the port has "
           "every role",
           c.flags.insecure.c_str());
    return grpc::InsecureServerCredentials();
  }
  grpc::experimental::TlsServerCredentialsOptions options(watcher(c));
  options.watch_root_certs();
  options.watch_identity_key_cert_pairs();
  options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  return grpc::experimental::TlsServerCredentials(options);
}

Result<std::shared_ptr<grpc::ChannelCredentials>> channelCredentials(const TlsConfig& c,
                                                                     ClientCertificate client) {
  TQ_RETURN_IF_ERROR(checkTlsConfig(c, client));
  if (c.insecure) {
    TQ_LOG(kWarn, "%s: plaintext gRPC to %s; it is NOT authenticated", c.flags.insecure.c_str(),
           c.peer.c_str());
    return grpc::InsecureChannelCredentials();
  }
  grpc::experimental::TlsChannelCredentialsOptions options;
  options.set_certificate_provider(watcher(c));
  options.watch_root_certs();
  if (!c.cert_file.empty()) options.watch_identity_key_cert_pairs();
  options.set_verify_server_certs(true);
  options.set_certificate_verifier(
      std::make_shared<grpc::experimental::HostNameCertificateVerifier>());
  return grpc::experimental::TlsCredentials(options);
}

PeerIdentity peerIdentity(const grpc::AuthContext& context) {
  PeerIdentity id;
  if (!context.IsPeerAuthenticated()) return id;
  std::vector<grpc::string_ref> pem = context.FindPropertyValues(GRPC_X509_PEM_CERT_PROPERTY_NAME);
  if (pem.empty()) return id;
  X509Ptr x = firstCertificate(std::string(pem.front().data(), pem.front().size()));
  if (!x) return id;
  const X509_NAME* subject = X509_get_subject_name(x.get());
  std::vector<std::string> cn = nameEntries(subject, NID_commonName);
  if (cn.empty() || cn.front().empty()) return id;
  id.authenticated = true;
  id.name = cn.front();
  id.groups = nameEntries(subject, NID_organizationName);
  return id;
}

}  // namespace tq::rpc
