// TlsServer with real OpenSSL on loopback and certificates made by `openssl`: the certificate
// is re-read when its files change (cert-manager renews the Secret in place), a broken new pair
// keeps the old one, and the request bounds hold. Time is a FakeClock.
#include "webhook/tls_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace tq::webhook {
namespace {

namespace fs = std::filesystem;

// A self-signed certificate for `cn` at dir/name.crt, its key at dir/name.key.
void makeCert(const fs::path& dir, const std::string& name, const std::string& cn) {
  const std::string cmd =
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=" +
      cn + " -keyout " + (dir / (name + ".key")).string() + " -out " +
      (dir / (name + ".crt")).string() + " 2>/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

// Connects, returns the server certificate's CN and the whole response to `request`.
std::pair<std::string, std::string> fetch(int port, const std::string& request) {
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_client_method()),
                                                        &SSL_CTX_free);
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  SSL* ssl = SSL_new(ctx.get());
  SSL_set_fd(ssl, fd);
  std::string cn, response;
  if (SSL_connect(ssl) == 1) {
    X509* cert = SSL_get1_peer_certificate(ssl);
    char buf[256] = {};
    X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, buf, sizeof buf);
    cn = buf;
    X509_free(cert);
    SSL_write(ssl, request.data(), static_cast<int>(request.size()));
    char chunk[4096];
    for (int n; (n = SSL_read(ssl, chunk, sizeof chunk)) > 0;) response.append(chunk, n);
  }
  SSL_free(ssl);
  ::close(fd);
  ERR_clear_error();
  return {cn, response};
}

class TlsServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tq-tls-test-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    makeCert(dir_, "tls", "first");
    TlsServer::Options o;
    o.listen = "127.0.0.1:0";
    o.cert_file = (dir_ / "tls.crt").string();
    o.key_file = (dir_ / "tls.key").string();
    o.max_body_bytes = 1000;
    o.clock = &clock_;
    auto s = TlsServer::start(o, [](const HttpRequest& r) {
      return HttpResponse{200, "text/plain", r.method + " " + r.path + " " + r.body};
    });
    ASSERT_TRUE(s.ok()) << s.status().message();
    server_ = *std::move(s);
  }
  void TearDown() override {
    server_.reset();
    fs::remove_all(dir_);
  }
  // Replaces tls.crt/tls.key the way a Secret update does (new files renamed over the old).
  void rotate(const std::string& cn) {
    makeCert(dir_, "next", cn);
    fs::rename(dir_ / "next.key", dir_ / "tls.key");
    fs::rename(dir_ / "next.crt", dir_ / "tls.crt");
  }

  fs::path dir_;
  FakeClock clock_;
  std::unique_ptr<TlsServer> server_;
};

TEST_F(TlsServerTest, ServesAndReloadsTheCertificateWhenItsFilesChange) {
  auto [cn, resp] = fetch(server_->port(), "POST /a?x=1 HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi");
  EXPECT_EQ(cn, "first");
  EXPECT_NE(resp.find("HTTP/1.1 200 OK\r\n"), std::string::npos) << resp;
  EXPECT_NE(resp.find("\r\n\r\nPOST /a hi"), std::string::npos) << resp;  // query cut

  rotate("second");
  EXPECT_EQ(fetch(server_->port(), "GET / HTTP/1.1\r\n\r\n").first, "first")
      << "files are looked at every " << TlsServer::kReloadCheckMs << " ms, not per connection";
  clock_.advanceNs((TlsServer::kReloadCheckMs + 1) * kNsPerMs);
  EXPECT_EQ(fetch(server_->port(), "GET / HTTP/1.1\r\n\r\n").first, "second");

  // A half-written renewal (the certificate does not parse): the old pair stays in use.
  std::ofstream(dir_ / "tls.crt") << "-----BEGIN CERTIFICATE-----\ngarbage\n";
  clock_.advanceNs((TlsServer::kReloadCheckMs + 1) * kNsPerMs);
  EXPECT_EQ(fetch(server_->port(), "GET / HTTP/1.1\r\n\r\n").first, "second");
}

TEST_F(TlsServerTest, RequestBounds) {
  auto status = [&](const std::string& req) {
    std::string r = fetch(server_->port(), req).second;
    return r.substr(0, r.find("\r\n"));
  };
  EXPECT_EQ(status("POST / HTTP/1.1\r\nContent-Length: 1001\r\n\r\n"),
            "HTTP/1.1 413 Payload Too Large");
  EXPECT_EQ(status("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"),
            "HTTP/1.1 411 Length Required");
  EXPECT_EQ(status("POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nx"),
            "HTTP/1.1 400 Bad Request");
  EXPECT_EQ(
      status("GET / HTTP/1.1\r\nX: " + std::string(TlsServer::kMaxHeaderBytes, 'x') + "\r\n\r\n"),
      "HTTP/1.1 431 Request Header Fields Too Large");
  EXPECT_EQ(status("garbage\r\n\r\n"), "HTTP/1.1 400 Bad Request");
}

TEST(TlsServer, StartErrorsNameTheFile) {
  TlsServer::Options o;
  o.listen = "127.0.0.1:0";
  o.cert_file = "/nonexistent/tls.crt";
  o.key_file = "/nonexistent/tls.key";
  auto s = TlsServer::start(o, [](const HttpRequest&) { return HttpResponse{}; });
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("--tls-cert /nonexistent/tls.crt"), std::string::npos)
      << s.status().message();
  o.listen = "nonsense";
  EXPECT_NE(TlsServer::start(o, [](const HttpRequest&) { return HttpResponse{}; })
                .status()
                .message()
                .find("is not HOST:PORT"),
            std::string::npos);
}

}  // namespace
}  // namespace tq::webhook
