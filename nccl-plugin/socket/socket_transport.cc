#include "nccl-plugin/socket/socket_transport.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_set>

#include "common/log.h"
#include "common/thread_annotations.h"
#include "nccl-plugin/handle_state.h"
#include "nccl-plugin/oob/handshake.h"
#include "nccl-plugin/oob/tcp.h"
#include "nccl-plugin/socket/socket_comm.h"
#include "nccl-plugin/socket/wire.h"

namespace tq::plugin::socket {
namespace {

using oob::MessageIo;
using oob::msText;

// ---------------------------------------------------------------------------------------------
// Memory registration: host memory only; the socket transport reads and writes user buffers
// directly. Regions are tracked so a comm closed without deregMr frees them.

class SockMr final : public MemRegion {
 public:
  SockMr(void* d, size_t s) : data(d), size(s) {}
  void* data;
  size_t size;
};

class MrTable {
 public:
  Status reg(void* data, size_t size, MemType type, MemRegion** out) {
    if (type != MemType::kHost) {
      return unimplemented(
          "regMr: the socket transport moves host memory only (NCCL_PTR_HOST); "
          "CUDA buffers are not supported");
    }
    auto mr = std::make_unique<SockMr>(data, size);
    MutexLock lock(mu_);
    *out = mr.get();
    regions_.insert(mr.release());
    return okStatus();
  }
  Status dereg(MemRegion* mr) {
    MutexLock lock(mu_);
    auto it = regions_.find(static_cast<SockMr*>(mr));
    if (it == regions_.end()) return invalidArgument("deregMr: unknown memory handle");
    delete *it;
    regions_.erase(it);
    return okStatus();
  }
  ~MrTable() {
    for (SockMr* m : regions_) delete m;
  }

 private:
  Mutex mu_;  // regMr may run on NCCL's service thread while its progress thread tests
  std::unordered_set<SockMr*> regions_ TQ_GUARDED_BY(mu_);
};

class SocketSendComm final : public SendComm {
 public:
  explicit SocketSendComm(std::unique_ptr<SocketComm> c) : comm_(std::move(c)) {}
  Status regMr(void* data, size_t size, MemType type, MemRegion** out) override {
    return mrs_.reg(data, size, type, out);
  }
  Status deregMr(MemRegion* mr) override { return mrs_.dereg(mr); }
  bool pacesItself() const override { return true; }
  void setPacing(Pacing* pacing) override { comm_->setPacing(pacing); }
  Status isend(void* data, size_t size, int /*tag*/, MemRegion* /*mr*/, Request** req) override {
    return comm_->isend(data, size, req);
  }
  std::string describe() const override { return "socket send comm to " + comm_->peer(); }
  std::string peerAddress() const override { return oob::peerAddressOf(comm_->fds().back()); }
  SocketComm& comm() const { return *comm_; }

 private:
  std::unique_ptr<SocketComm> comm_;  // destroyed first: helpers stop before regions go
  MrTable mrs_;
};

class SocketRecvComm final : public RecvComm {
 public:
  SocketRecvComm(std::unique_ptr<SocketComm> c, TrafficQos peer)
      : comm_(std::move(c)), peer_(std::move(peer)) {}
  Status regMr(void* data, size_t size, MemType type, MemRegion** out) override {
    return mrs_.reg(data, size, type, out);
  }
  Status deregMr(MemRegion* mr) override { return mrs_.dereg(mr); }
  bool pacesItself() const override { return true; }
  void setPacing(Pacing* pacing) override { comm_->setPacing(pacing); }
  Status irecv(int n, void** data, const size_t* sizes, const int* /*tags*/, MemRegion** /*mrs*/,
               Request** req) override {
    if (n != 1) {
      return invalidArgument("irecv: " + std::to_string(n) +
                             " buffers, the socket transport receives one at a time (maxRecvs 1)");
    }
    return comm_->irecv(data[0], sizes[0], req);
  }
  Status iflush(int /*n*/, void** /*data*/, const int* /*sizes*/, MemRegion** /*mrs*/,
                Request** req) override {
    *req = nullptr;  // host memory: nothing to flush
    return okStatus();
  }
  const TrafficQos& peerQos() const override { return peer_; }
  std::string describe() const override { return "socket receive comm from " + comm_->peer(); }
  std::string peerAddress() const override { return oob::peerAddressOf(comm_->fds().back()); }
  SocketComm& comm() const { return *comm_; }

 private:
  std::unique_ptr<SocketComm> comm_;
  TrafficQos peer_;
  MrTable mrs_;
};

// ---------------------------------------------------------------------------------------------
// listen / accept

class SocketListenComm final : public ListenComm {
 public:
  struct Pending {
    Fd fd;
    int64_t since = 0;
    std::string peer;
    MessageIo hello{kHelloBytes};
  };
  struct Group {
    std::vector<Fd> socks;  // nsocks data streams, then the control stream
    int have = 0;
    Hello control;
    int64_t since = 0;
    std::string peer;
    bool acking = false;
    MessageIo ack{kAckBytes};
  };

  Fd fd;
  HandleInfo info;
  TrafficQos qos;
  std::vector<Pending> pending;
  std::map<uint64_t, Group> groups;
};

// Best effort: tell a rejected connector why before closing (it reads replies on its control
// stream only, but any stream of a broken connection is worth a try).
void sendReject(int fd, AckStatus status, uint64_t conn_id, const std::string& reason) {
  uint8_t buf[kAckBytes];
  encodeAck({kProtocolVersion, status, conn_id, reason}, buf);
  oob::sendBestEffort(fd, buf, sizeof buf);
}

// ---------------------------------------------------------------------------------------------
// connect: the state lives in a heap object whose address is kept in the private half of the
// handle buffer (NCCL calls connect again with the same buffer), validated against a registry
// so a stale or copied handle can never make us dereference a dangling pointer.

enum class ConnectPhase { kConnecting, kSendingHello, kAwaitAck };

struct ConnectState {
  const Transport* owner = nullptr;  // the transport that made it (HandleStates::eraseOwnedBy)
  struct Sock {
    oob::Dial dial;
    MessageIo hello{kHelloBytes};
  };
  HandleInfo target;
  TrafficQos qos;
  uint64_t conn_id = 0;
  int64_t start = 0;
  ConnectPhase phase = ConnectPhase::kConnecting;
  std::vector<Sock> socks;
  MessageIo ack{kAckBytes};
};

constexpr uint64_t kPrivateGuard = 0x54534e4e4f435154ULL;  // "TQCONNST"
using ConnectStates = HandleStates<ConnectState, kPrivateGuard>;

}  // namespace

SocketTransportConfig socketConfigFromParams(const PluginParams& p) {
  SocketTransportConfig c;
  c.nsocks = static_cast<int>(p.nsocks);
  c.nthreads = static_cast<int>(p.socket_nthreads);
  c.inline_max = p.socket_inline;
  c.min_chunk = p.socket_min_chunk;
  c.handshake_timeout_ns = p.handshake_timeout_ms * 1'000'000;
  c.window_ns = p.socket_window_us * 1000;
  c.window_min = p.socket_window_min;
  c.window_rtt = p.socket_window_rtt != 0;
  return c;
}

SocketTransport::SocketTransport(std::vector<oob::NetInterface> devices, SocketTransportConfig cfg,
                                 Clock& clock)
    : devices_(std::move(devices)), cfg_(cfg), clock_(clock) {}

SocketTransport::~SocketTransport() { ConnectStates::eraseOwnedBy(this); }

Result<std::unique_ptr<SocketTransport>> SocketTransport::create(const PluginParams& p,
                                                                 Clock& clock) {
  TQ_ASSIGN_OR_RETURN(auto devs, oob::findInterfaces(p.socket_ifname, p.socket_family));
  return std::make_unique<SocketTransport>(std::move(devs), socketConfigFromParams(p), clock);
}

Status SocketTransport::properties(int dev, DeviceProperties* out) const {
  if (dev < 0 || dev >= deviceCount()) {
    return invalidArgument("device " + std::to_string(dev) + " out of range [0, " +
                           std::to_string(deviceCount()) + ")");
  }
  const oob::NetInterface& ni = devices_[static_cast<size_t>(dev)];
  DeviceProperties p;
  p.name = ni.name.c_str();
  p.pci_path = ni.pci_path.empty() ? nullptr : ni.pci_path.c_str();
  p.guid = static_cast<uint64_t>(dev);
  p.ptr_support = NCCL_PTR_HOST;
  p.reg_is_global = false;
  p.force_flush = false;
  p.speed_mbps = ni.speed_mbps;
  p.port = 0;
  p.latency_us = 0;
  p.max_comms = 65536;
  p.max_recvs = 1;
  p.max_p2p_bytes = NCCL_MAX_NET_SIZE_BYTES;
  p.max_coll_bytes = 512ull << 20;  // NCCL's own socket transport value
  p.max_multi_request_size = 1;
  p.netdev = ni.name.c_str();
  *out = p;
  return okStatus();
}

Status SocketTransport::listen(int dev, const TrafficQos& qos, void* handle,
                               std::unique_ptr<ListenComm>* out) {
  if (dev < 0 || dev >= deviceCount()) {
    return invalidArgument("listen: device " + std::to_string(dev) + " out of range");
  }
  const oob::NetInterface& ni = devices_[static_cast<size_t>(dev)];
  auto lc = std::make_unique<SocketListenComm>();
  // The listener's marking applies to SYN-ACKs; accepted streams then adopt the sender's.
  oob::SocketAddress addr = ni.addr;
  addr.setPort(0);
  auto fd = oob::listenTcp(&addr, qos, 16384);
  if (!fd.ok()) return fd.status().withContext("listen on " + ni.name);
  lc->fd = std::move(fd).value();
  lc->info.addr = addr;
  lc->info.nsocks = cfg_.nsocks;
  lc->info.nonce = oob::randomU64();
  lc->qos = qos;
  auto* h = static_cast<uint8_t*>(handle);
  std::memset(h, 0, kHandleBytes);
  encodeHandle(lc->info, h);
  TQ_LOG(kDebug, "listening on %s (%s), %d data streams", addr.toString().c_str(), ni.name.c_str(),
         cfg_.nsocks);
  *out = std::move(lc);
  return okStatus();
}

Status SocketTransport::connect(int /*dev*/, const TrafficQos& qos, void* handle,
                                std::unique_ptr<SendComm>* out) {
  out->reset();
  auto* h = static_cast<uint8_t*>(handle);
  const int64_t now = clock_.nowNs();
  ConnectState* st = ConnectStates::find(h);
  if (st == nullptr) {
    TQ_ASSIGN_OR_RETURN(HandleInfo info, parseHandle(h, kHandleBytes));
    st = new ConnectState();
    st->owner = this;
    st->target = info;
    st->qos = qos;
    st->conn_id = oob::randomU64();
    st->start = now;
    st->socks.resize(static_cast<size_t>(info.nsocks) + 1);
    for (size_t i = 0; i < st->socks.size(); ++i) {
      Hello hello;
      hello.index = static_cast<int>(i);
      hello.nsocks = info.nsocks;
      hello.dscp = qos.dscp;
      hello.service_level = qos.service_level;
      hello.has_priority = qos.priority.has_value();
      hello.priority = qos.priority.value_or(0);
      hello.nonce = info.nonce;
      hello.conn_id = st->conn_id;
      hello.tenant = qos.tenant.substr(0, kMaxTenantBytes);
      hello.min_chunk = static_cast<uint32_t>(std::min<uint64_t>(cfg_.min_chunk, UINT32_MAX));
      encodeHello(hello, st->socks[i].hello.data());
    }
    ConnectStates::attach(h, st);
  }
  const std::string peer = st->target.addr.toString();

  auto finish = [&](Status s) {
    ConnectStates::detach(h, st);
    return s.withContext("connect to " + peer);
  };

  bool all_sent = true;
  bool all_connected = true;
  for (ConnectState::Sock& s : st->socks) {
    auto connected = s.dial.step(st->target.addr, st->qos, now);
    if (!connected.ok()) return finish(connected.status());
    if (*connected) {
      Status sent = s.hello.sendStep(s.dial.fd.get(), "handshake");
      if (!sent.ok()) return finish(sent);
    }
    all_connected = all_connected && *connected;
    all_sent = all_sent && s.hello.complete();
  }
  if (all_sent) {
    st->phase = ConnectPhase::kAwaitAck;
  } else if (all_connected) {
    st->phase = ConnectPhase::kSendingHello;
  }

  if (st->phase == ConnectPhase::kAwaitAck) {
    ConnectState::Sock& ctl = st->socks.back();
    Status got = st->ack.recvStep(ctl.dial.fd.get(), "handshake reply");
    if (!got.ok()) return finish(got);
    if (st->ack.complete()) {
      auto ack = parseAck(st->ack.data(), kAckBytes);
      if (!ack.ok()) return finish(ack.status());
      if (ack->status != AckStatus::kAccepted) {
        return finish(failedPrecondition("the peer rejected the connection: " + ack->reason));
      }
      if (ack->conn_id != st->conn_id) {
        return finish(dataLoss("handshake reply for another connection"));
      }
      std::vector<Fd> data;
      for (int i = 0; i < st->target.nsocks; ++i) {
        data.push_back(std::move(st->socks[static_cast<size_t>(i)].dial.fd));
      }
      SocketCommConfig cc{cfg_.nthreads,  cfg_.inline_max, cfg_.min_chunk,  peer,
                          cfg_.window_ns, cfg_.window_min, cfg_.window_rtt, &clock_};
      auto comm = std::make_unique<SocketComm>(SocketComm::Side::kSend, std::move(ctl.dial.fd),
                                               std::move(data), cc);
      Status started = comm->start();
      if (!started.ok()) return finish(started);
      TQ_LOG(kDebug, "connected to %s: %d data streams, dscp %d, tenant %s", peer.c_str(),
             st->target.nsocks, st->qos.dscp, st->qos.tenant.c_str());
      *out = std::make_unique<SocketSendComm>(std::move(comm));
      ConnectStates::detach(h, st);
      return okStatus();
    }
  }

  if (now - st->start > cfg_.handshake_timeout_ns) {
    const char* what = st->phase == ConnectPhase::kConnecting ? "TCP connections not established"
                       : st->phase == ConnectPhase::kSendingHello
                           ? "handshake not sent (peer not reading)"
                           : "no handshake reply (the peer never accepted, or it is not a "
                             "tenantqos plugin)";
    return finish(deadlineExceeded(std::string(what) + " within " +
                                   msText(cfg_.handshake_timeout_ns) + " (" +
                                   std::to_string(st->ack.done()) + " of " +
                                   std::to_string(kAckBytes) + " reply bytes received)"));
  }
  return okStatus();
}

Status SocketTransport::accept(ListenComm* listen, std::unique_ptr<RecvComm>* out) {
  out->reset();
  auto* lc = dynamic_cast<SocketListenComm*>(listen);
  if (lc == nullptr) return invalidArgument("accept: not a socket listen comm");
  const int64_t now = clock_.nowNs();
  const std::string self = lc->info.addr.toString();
  const int nstreams = lc->info.nsocks + 1;

  // 1. Take every connection the kernel completed.
  for (;;) {
    oob::SocketAddress peer;
    auto fd = oob::acceptTcp(lc->fd.get(), &peer);
    if (!fd.ok()) return fd.status().withContext("accept on " + self);
    if (!fd->valid()) break;
    SocketListenComm::Pending p;
    p.fd = std::move(fd).value();
    p.since = now;
    p.peer = peer.toString();
    lc->pending.push_back(std::move(p));
  }

  // 2. Read hellos; a bad or late one fails this call (the offending stream is dropped).
  for (size_t i = 0; i < lc->pending.size();) {
    SocketListenComm::Pending& p = lc->pending[i];
    const std::string from = "handshake from " + p.peer + " on " + self;
    Status got = p.hello.recvStep(p.fd.get(), "hello");
    if (!got.ok()) {
      lc->pending.erase(lc->pending.begin() + static_cast<long>(i));
      return got.withContext(from);
    }
    if (!p.hello.complete()) {
      if (now - p.since > cfg_.handshake_timeout_ns) {
        Status s = deadlineExceeded(from + ": received " + std::to_string(p.hello.done()) + " of " +
                                    std::to_string(kHelloBytes) + " bytes in " +
                                    msText(cfg_.handshake_timeout_ns) +
                                    " (truncated, or not a tenantqos peer)");
        lc->pending.erase(lc->pending.begin() + static_cast<long>(i));
        return s;
      }
      ++i;
      continue;
    }
    auto hello = parseHello(p.hello.data(), kHelloBytes);
    Status reject;
    AckStatus why = AckStatus::kBadHello;
    if (!hello.ok()) {
      reject = hello.status();
    } else if (hello->version != kProtocolVersion) {
      why = AckStatus::kBadVersion;
      reject = failedPrecondition("peer speaks protocol version " + std::to_string(hello->version) +
                                  ", this plugin speaks " + std::to_string(kProtocolVersion));
    } else if (hello->nonce != lc->info.nonce) {
      why = AckStatus::kWrongListener;
      reject = failedPrecondition("the connection is meant for another listener (stale handle?)");
    } else if (hello->nsocks != lc->info.nsocks) {
      why = AckStatus::kBadStreams;
      reject =
          failedPrecondition("peer announces " + std::to_string(hello->nsocks) +
                             " data streams, the handle said " + std::to_string(lc->info.nsocks));
    }
    if (!reject.ok()) {
      sendReject(p.fd.get(), why, hello.ok() ? hello->conn_id : 0, reject.message());
      lc->pending.erase(lc->pending.begin() + static_cast<long>(i));
      return reject.withContext(from);
    }
    SocketListenComm::Group& g = lc->groups[hello->conn_id];
    if (g.socks.empty()) {
      g.socks.resize(static_cast<size_t>(nstreams));
      g.since = p.since;
      g.peer = p.peer;
    }
    Fd& slot = g.socks[static_cast<size_t>(hello->index)];
    if (slot.valid()) {
      lc->pending.erase(lc->pending.begin() + static_cast<long>(i));
      return dataLoss(from + ": stream " + std::to_string(hello->index) + " announced twice");
    }
    slot = std::move(p.fd);
    ++g.have;
    if (hello->index == lc->info.nsocks) g.control = *hello;
    lc->pending.erase(lc->pending.begin() + static_cast<long>(i));
  }

  // 3. Complete groups: adopt the sender's marking, reply, hand out one connection.
  for (auto it = lc->groups.begin(); it != lc->groups.end(); ++it) {
    SocketListenComm::Group& g = it->second;
    const std::string from = "connection from " + g.peer + " on " + self;
    if (g.have < nstreams) {
      if (now - g.since > cfg_.handshake_timeout_ns) {
        Status s = deadlineExceeded(from + ": " + std::to_string(g.have) + " of " +
                                    std::to_string(nstreams) + " streams arrived within " +
                                    msText(cfg_.handshake_timeout_ns));
        lc->groups.erase(it);
        return s;
      }
      continue;
    }
    TrafficQos peer_qos;
    peer_qos.dscp = g.control.dscp;
    peer_qos.service_level = g.control.service_level;
    if (g.control.has_priority) peer_qos.priority = g.control.priority;
    peer_qos.tenant = g.control.tenant;
    if (!g.acking) {
      const int family = lc->info.addr.family();
      for (Fd& fd : g.socks) {
        Status q = oob::applyQos(fd.get(), family, peer_qos);
        if (!q.ok()) {
          lc->groups.erase(it);
          return q.withContext(from);
        }
      }
      encodeAck({kProtocolVersion, AckStatus::kAccepted, it->first, ""}, g.ack.data());
      g.acking = true;
    }
    Status sent = g.ack.sendStep(g.socks.back().get(), "handshake reply");
    if (!sent.ok()) {
      lc->groups.erase(it);
      return sent.withContext(from);
    }
    if (!g.ack.complete()) continue;
    std::vector<Fd> data;
    for (int i = 0; i < lc->info.nsocks; ++i)
      data.push_back(std::move(g.socks[static_cast<size_t>(i)]));
    SocketCommConfig cc{cfg_.nthreads,  cfg_.inline_max, g.control.min_chunk, g.peer,
                        cfg_.window_ns, cfg_.window_min, cfg_.window_rtt,     &clock_};
    auto comm = std::make_unique<SocketComm>(SocketComm::Side::kRecv, std::move(g.socks.back()),
                                             std::move(data), cc);
    lc->groups.erase(it);
    TQ_RETURN_IF_ERROR_CTX(comm->start(), from);
    TQ_LOG(kDebug, "accepted %s: tenant %s, dscp %d", from.c_str(), peer_qos.tenant.c_str(),
           peer_qos.dscp);
    *out = std::make_unique<SocketRecvComm>(std::move(comm), std::move(peer_qos));
    return okStatus();
  }
  return okStatus();
}

std::vector<int> socketFdsOf(const SendComm* c) {
  auto* s = dynamic_cast<const SocketSendComm*>(c);
  return s != nullptr ? s->comm().fds() : std::vector<int>{};
}

std::vector<int> socketFdsOf(const RecvComm* c) {
  auto* s = dynamic_cast<const SocketRecvComm*>(c);
  return s != nullptr ? s->comm().fds() : std::vector<int>{};
}

}  // namespace tq::plugin::socket
