#include "tests/functional/etcd_cluster.h"

#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>

#include "common/endpoints.h"
#include "common/fd.h"
#include "etcd/rpc.grpc.pb.h"

namespace tq::test {
namespace {

std::string g_error;

}  // namespace

int freeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  close(fd);
  return port;
}

const std::string& EtcdCluster::error() { return g_error; }

std::unique_ptr<EtcdCluster> EtcdCluster::start(int members, std::chrono::milliseconds timeout) {
  if (access(kEtcdBinary, X_OK) != 0) {
    g_error =
        std::string(kEtcdBinary) + " is missing (scripts/install-deps.sh installs etcd-server)";
    return nullptr;
  }
  std::unique_ptr<EtcdCluster> c(new EtcdCluster());
  std::string tmpl = "/tmp/tq-etcd-" + std::to_string(getpid()) + "-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) {
    g_error = "mkdtemp failed";
    return nullptr;
  }
  c->dir_ = tmpl;
  for (int i = 0; i < members; ++i) {
    c->endpoints_.push_back("127.0.0.1:" + std::to_string(freeLoopbackPort()));
    c->peer_ports_.push_back(freeLoopbackPort());
  }
  c->procs_.resize(members);
  for (int i = 0; i < members; ++i) c->launch(i, /*existing=*/false);
  for (int i = 0; i < members; ++i) {
    if (!c->waitQuorum(i, timeout)) {
      g_error = "etcd member " + std::to_string(i) + " did not come up; its log:\n" + c->log(i);
      return nullptr;
    }
  }
  return c;
}

EtcdCluster::~EtcdCluster() {
  procs_.clear();  // SIGKILL by PID
  if (!dir_.empty() && std::system(("rm -rf " + dir_).c_str()) != 0) {
    // Left behind in /tmp; nothing else to do in a destructor.
  }
}

std::string EtcdCluster::endpointList() const {
  std::string out;
  for (const std::string& e : endpoints_) out += (out.empty() ? "" : ",") + e;
  return out;
}

std::string EtcdCluster::log(int member) const {
  return readWholeFile(dir_ + "/m" + std::to_string(member) + ".log");
}

void EtcdCluster::launch(int member, bool existing) {
  std::string cluster;
  for (size_t i = 0; i < peer_ports_.size(); ++i) {
    cluster += (i ? "," : "") + std::string("m") + std::to_string(i) +
               "=http://127.0.0.1:" + std::to_string(peer_ports_[i]);
  }
  const std::string name = "m" + std::to_string(member);
  const std::string client = "http://" + endpoints_[member];
  const std::string peer = "http://127.0.0.1:" + std::to_string(peer_ports_[member]);
  std::vector<std::string> argv = {
      kEtcdBinary, "--name", name, "--data-dir", dir_ + "/" + name, "--listen-client-urls", client,
      "--advertise-client-urls", client, "--listen-peer-urls", peer,
      "--initial-advertise-peer-urls", peer, "--initial-cluster", cluster,
      "--initial-cluster-token", "tq-test", "--initial-cluster-state",
      existing ? "existing" : "new",
      // Policies up to 4 MiB (docs/deploy.md); fast elections keep the tests short.
      "--max-request-bytes", "10485760", "--heartbeat-interval", "50", "--election-timeout", "500",
      "--logger", "zap", "--log-level", "warn"};
  procs_[member] = std::make_unique<ChildProcess>(argv, dir_ + "/" + name + ".log");
}

void EtcdCluster::kill(int member) { procs_[member].reset(); }

void EtcdCluster::restart(int member) { launch(member, /*existing=*/true); }

bool EtcdCluster::running(int member) const {
  return procs_[member] != nullptr && procs_[member]->running();
}

bool EtcdCluster::waitQuorum(int member, std::chrono::milliseconds timeout) {
  // A fresh channel (with its own subchannel) after every refused connection: gRPC 1.51 leaves
  // a channel whose first connect was refused (the member not listening yet) in
  // TRANSIENT_FAILURE for about 10 s, long after the member is up.
  std::unique_ptr<etcdserverpb::KV::Stub> stub;
  return pollUntil(
      [&] {
        if (stub == nullptr) {
          grpc::ChannelArguments args;
          args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
          stub = etcdserverpb::KV::NewStub(grpc::CreateCustomChannel(
              endpoints_[member], grpc::InsecureChannelCredentials(), args));
        }
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
        etcdserverpb::RangeRequest req;
        req.set_key("tq-health");
        etcdserverpb::RangeResponse resp;
        grpc::Status st = stub->Range(&ctx, req, &resp);
        if (st.error_code() == grpc::StatusCode::UNAVAILABLE) stub.reset();
        return st.ok();
      },
      timeout);
}

int EtcdCluster::leader() const {
  uint64_t leader_id = 0;
  std::vector<uint64_t> ids(endpoints_.size(), 0);
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    if (!running(static_cast<int>(i))) continue;
    auto stub = etcdserverpb::Maintenance::NewStub(
        grpc::CreateChannel(endpoints_[i], grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
    etcdserverpb::StatusResponse s;
    if (!stub->Status(&ctx, etcdserverpb::StatusRequest(), &s).ok()) continue;
    ids[i] = s.header().member_id();
    if (s.leader() != 0) leader_id = s.leader();
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    if (leader_id != 0 && ids[i] == leader_id) return static_cast<int>(i);
  }
  return -1;
}

int64_t EtcdCluster::txnsServed(int member) const {
  // GET /metrics over HTTP/1.0 (the member closes the connection after the body).
  const std::string& ep = endpoints_[member];
  Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  Result<HostPort> hp = parseHostPort(ep);
  if (!hp.ok()) return -1;
  a.sin_port = htons(hp->port);
  timeval tv{5, 0};
  setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return -1;
  const std::string req = "GET /metrics HTTP/1.0\r\nHost: " + ep + "\r\n\r\n";
  if (write(fd.get(), req.data(), req.size()) != static_cast<ssize_t>(req.size())) return -1;
  std::string body;
  char buf[65536];
  for (ssize_t n; (n = read(fd.get(), buf, sizeof buf)) > 0;) body.append(buf, n);
  // grpc_server_handled_total{grpc_code="OK",grpc_method="Txn",...} 20, one line per code.
  std::istringstream lines(body);
  int64_t total = 0;
  bool found = false;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("grpc_server_handled_total{", 0) != 0) continue;
    if (line.find("grpc_method=\"Txn\"") == std::string::npos) continue;
    total += std::atoll(line.substr(line.rfind(' ') + 1).c_str());
    found = true;
  }
  return found ? total : (body.find("grpc_server_handled_total") != std::string::npos ? 0 : -1);
}

}  // namespace tq::test
