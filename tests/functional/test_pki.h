// Test helper: real certificates for mutual TLS, made in the test's directory by
// scripts/tq-certs.sh (the same script the demo and the testbed use), with Debian's openssl.
#pragma once

#include <grpcpp/security/credentials.h>
#include <stdlib.h>

#include <string>
#include <vector>

#include "rpc/tls.h"

namespace tq::test {

class TestPki {
 public:
  // `script`: scripts/tq-certs.sh. Makes DIR/{ca,policyd,admin,viewer,agent-NODE}.{crt,key}:
  // policyd's certificate names `server_ip`, 127.0.0.1 and localhost.
  TestPki(std::string script, std::string dir, const std::vector<std::string>& nodes = {},
          const std::string& server_ip = "127.0.0.1")
      : script_(std::move(script)), dir_(std::move(dir)) {
    std::string cmd = script_ + " cluster " + dir_ + " " + server_ip;
    for (const std::string& n : nodes) cmd += " " + n;
    ok_ = std::system(cmd.c_str()) == 0;
  }
  bool ok() const { return ok_; }
  const std::string& dir() const { return dir_; }

  // Another certificate NAME for CN with O=groups, signed by CA (a name in dir); `extra` is
  // passed on ("--days -1" = already expired, "--san IP:127.0.0.1").
  bool issue(const std::string& name, const std::string& cn, const std::vector<std::string>& groups,
             const std::string& ca = "ca", const std::string& extra = "") const {
    std::string cmd = script_ + " issue " + dir_ + " " + ca + " " + name + " " + cn;
    for (const std::string& g : groups) cmd += " " + g;
    return std::system((cmd + " " + extra).c_str()) == 0;
  }
  bool newCa(const std::string& name) const {
    return std::system((script_ + " ca " + dir_ + " " + name).c_str()) == 0;
  }

  std::string crt(const std::string& name) const { return dir_ + "/" + name + ".crt"; }
  std::string key(const std::string& name) const { return dir_ + "/" + name + ".key"; }

  rpc::TlsConfig config(const std::string& name, const std::string& ca = "ca") const {
    rpc::TlsConfig c;
    c.ca_file = crt(ca);
    c.cert_file = crt(name);
    c.key_file = key(name);
    return c;
  }
  // --tls-* flags for a process presenting certificate `name`.
  std::vector<std::string> flags(const std::string& name, const std::string& ca = "ca") const {
    return {"--tls-ca", crt(ca), "--tls-cert", crt(name), "--tls-key", key(name)};
  }
  // tenantqosctl's environment for certificate `name`.
  std::vector<std::string> env(const std::string& name) const {
    return {"TENANTQOS_TLS_CA=" + crt("ca"), "TENANTQOS_TLS_CERT=" + crt(name),
            "TENANTQOS_TLS_KEY=" + key(name)};
  }
  // Channel credentials through the shared helper (what every client uses).
  std::shared_ptr<grpc::ChannelCredentials> credentials(const std::string& name,
                                                        const std::string& ca = "ca") const {
    auto c = rpc::channelCredentials(config(name, ca));
    return c.ok() ? *c : nullptr;
  }

 private:
  std::string script_;
  std::string dir_;
  bool ok_ = false;
};

}  // namespace tq::test
