// rpc/tls: what checkTlsConfig accepts and how it names a problem (the program's own flag names),
// and the credentials it builds, with real certificates from scripts/tq-certs.sh (Debian's
// openssl): mutual-TLS handshakes over loopback on port 0, refused without a client certificate
// or against another CA. Rotation with real processes is
// in tests/functional/ (agent, webhook, etcd store).
#include "rpc/tls.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdlib>
#include <string>

#include "common/file_util.h"
#include "tenantqos/v1/policy.grpc.pb.h"

namespace tq::rpc {
namespace {

class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/tq-rpc-tls-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    const std::string certs = std::string(TQ_SOURCE_DIR) + "/scripts/tq-certs.sh ";
    ASSERT_EQ(std::system((certs + "cluster " + dir_ + " 127.0.0.1 node1").c_str()), 0);
    ASSERT_EQ(
        std::system((certs + "issue " + dir_ + " ca old node1 tenantqos:agents --days -1").c_str()),
        0);
    ASSERT_EQ(std::system((certs + "ca " + dir_ + " other-ca").c_str()), 0);
  }
  static void TearDownTestSuite() {
    if (std::system(("rm -rf " + dir_).c_str()) != 0) {
    }
  }
  static std::string f(const std::string& name) { return dir_ + "/" + name; }
  static TlsConfig config(const std::string& cert, const std::string& ca = "ca") {
    TlsConfig c;
    c.ca_file = f(ca + ".crt");
    if (!cert.empty()) {
      c.cert_file = f(cert + ".crt");
      c.key_file = f(cert + ".key");
    }
    return c;
  }
  static std::string error(const TlsConfig& c,
                           ClientCertificate client = ClientCertificate::kRequired) {
    Status s = checkTlsConfig(c, client);
    return s.ok() ? "" : s.message();
  }

  static std::string dir_;
};
std::string TlsTest::dir_;

TEST_F(TlsTest, AcceptsAMatchingValidSetAndInsecure) {
  EXPECT_EQ(error(config("agent-node1")), "");
  TlsConfig insecure;
  insecure.insecure = true;
  EXPECT_EQ(error(insecure), "");
  // A client whose server does not ask for a certificate: the CA alone.
  EXPECT_EQ(error(config(""), ClientCertificate::kOptional), "");
}

TEST_F(TlsTest, RefusalsNameTheFlagAndTheFile) {
  EXPECT_EQ(error(config("")),
            "mutual TLS needs --tls-ca, --tls-cert and --tls-key (or --insecure for plaintext "
            "without authentication)");
  TlsConfig both = config("agent-node1");
  both.insecure = true;
  EXPECT_EQ(error(both), "--insecure excludes --tls-ca, --tls-cert and --tls-key");
  TlsConfig swapped = config("agent-node1");
  swapped.key_file = f("admin.key");
  EXPECT_EQ(error(swapped), "--tls-key " + f("admin.key") + " is not the key of --tls-cert " +
                                f("agent-node1.crt"));
  EXPECT_EQ(error(config("old")), "--tls-cert " + f("old.crt") + " has expired (peers refuse it)");
  TlsConfig missing = config("agent-node1");
  missing.ca_file = f("nope.crt");
  EXPECT_NE(error(missing).find("--tls-ca: "), std::string::npos) << error(missing);
  EXPECT_NE(error(missing).find("nope.crt"), std::string::npos) << error(missing);
  TlsConfig not_pem = config("agent-node1");
  not_pem.ca_file = f("ca.key");
  EXPECT_NE(error(not_pem).find("--tls-ca " + f("ca.key") + ": no PEM certificate"),
            std::string::npos)
      << error(not_pem);
  TlsConfig half = config("");
  half.cert_file = f("admin.crt");
  EXPECT_EQ(error(half, ClientCertificate::kOptional), "--tls-cert and --tls-key go together");
}

TEST_F(TlsTest, MessagesUseTheProgramsFlagNames) {
  TlsConfig c = config("");
  c.flags = {"--etcd-ca", "--etcd-cert", "--etcd-key", "--insecure"};
  c.cert_file = f("admin.crt");
  EXPECT_EQ(error(c, ClientCertificate::kOptional), "--etcd-cert and --etcd-key go together");
  c.cert_file.clear();
  c.ca_file.clear();
  EXPECT_EQ(error(c, ClientCertificate::kOptional),
            "TLS needs --etcd-ca (or --insecure for plaintext without authentication)");
}

// Real handshakes on loopback: the server requires a client certificate that chains to its CA,
// and the client checks the server's chain and name.
TEST_F(TlsTest, MutualTlsHandshakes) {
  auto server_creds = serverCredentials(config("policyd"));
  ASSERT_TRUE(server_creds.ok()) << server_creds.status().toString();
  tenantqos::v1::PolicyService::Service unimplemented;  // a server needs one service
  grpc::ServerBuilder b;
  int port = 0;
  b.AddListeningPort("127.0.0.1:0", *server_creds, &port);
  b.RegisterService(&unimplemented);
  std::unique_ptr<grpc::Server> server = b.BuildAndStart();
  ASSERT_TRUE(server && port > 0);
  auto call = [&](const TlsConfig& c, ClientCertificate client) {
    auto creds = channelCredentials(c, client);
    EXPECT_TRUE(creds.ok()) << creds.status().toString();
    auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(port), *creds);
    return channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(5));
  };
  EXPECT_TRUE(call(config("agent-node1"), ClientCertificate::kRequired));
  // Without a certificate the server refuses the handshake; with another CA's server check the
  // client refuses policyd.
  EXPECT_FALSE(call(config(""), ClientCertificate::kOptional));
  EXPECT_FALSE(call(config("agent-node1", "other-ca"), ClientCertificate::kRequired));
  server->Shutdown();
}

}  // namespace
}  // namespace tq::rpc
