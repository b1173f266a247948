#include "nccl-plugin/ib/ib_transport.h"

#include <climits>
#include <cstdlib>
#include <cstring>
#include <map>

#include "common/log.h"
#include "common/units.h"
#include "ib/hca_filter.h"
#include "ib/sysfs.h"
#include "nccl-plugin/handle_state.h"
#include "nccl-plugin/ib/ib_factory.h"
#include "nccl-plugin/oob/handshake.h"
#include "nccl-plugin/oob/tcp.h"

namespace tq::plugin::ib {
namespace {

using oob::MessageIo;
using oob::msText;

constexpr uint64_t kMaxP2pBytes = 1ull << 30;  // sizes travel in 31 bits of the immediate
constexpr uint64_t kMaxCollBytes = 512ull << 20;

uint64_t parseGuid(const std::string& text) {
  uint64_t v = 0;
  for (char c : text) {
    int d = -1;
    if (c >= '0' && c <= '9') d = c - '0';
    if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    if (d >= 0) v = (v << 4) | static_cast<uint64_t>(d);
  }
  return v;
}

std::string realPath(const std::string& p) {
  char buf[PATH_MAX];
  return ::realpath(p.c_str(), buf) != nullptr ? std::string(buf) : std::string();
}

// ---- listen / accept state
// -----------------------------------------------------------------------

struct PendingAccept {
  enum class Phase { kReadHello, kSendReply, kAwaitReady };
  Fd fd;
  int64_t since = 0;
  std::string peer;
  Phase phase = Phase::kReadHello;
  MessageIo hello_in{kIbHelloBytes};
  IbHello hello;
  TrafficQos peer_qos;
  std::unique_ptr<IbConnResources> res;
  MessageIo reply_out{kIbReplyBytes};
  MessageIo ready_in{kIbReadyBytes};
};

class IbListenComm final : public ListenComm {
 public:
  Fd fd;
  IbHandle info;
  int dev = 0;
  TrafficQos qos;
  std::vector<std::unique_ptr<PendingAccept>> pending;
};

// Best effort: tell a rejected connector why before dropping it.
void sendRejection(int fd, IbReplyStatus status, uint64_t conn_id, const std::string& device,
                   const std::string& reason) {
  IbReply r;
  r.status = status;
  r.conn_id = conn_id;
  r.ep.device = device;
  r.reason = reason;
  uint8_t buf[kIbReplyBytes];
  encodeIbReply(r, buf);
  oob::sendBestEffort(fd, buf, sizeof buf);
}

// ---- connect state ----------------------------------------------------------------------------

struct ConnectState {
  const Transport* owner = nullptr;  // the transport that made it (HandleStates::eraseOwnedBy)
  enum class Phase { kTcpConnect, kSendHello, kAwaitReply, kSendReady };
  IbHandle target;
  TrafficQos qos;
  int dev = 0;
  int64_t start = 0;
  Phase phase = Phase::kTcpConnect;
  oob::Dial dial;
  std::unique_ptr<IbConnResources> res;
  uint64_t conn_id = 0;
  MessageIo hello_out{kIbHelloBytes};
  MessageIo reply_in{kIbReplyBytes};
  IbReply reply;
  MessageIo ready_out{kIbReadyBytes};
};

constexpr uint64_t kConnectGuard = 0x54534e4f43424954ULL;  // "TIBCONST"
using ConnectStates = HandleStates<ConnectState, kConnectGuard>;

const char* phaseText(ConnectState::Phase p) {
  switch (p) {
    case ConnectState::Phase::kTcpConnect: return "TCP connection not established";
    case ConnectState::Phase::kSendHello: return "handshake not sent (peer not reading)";
    case ConnectState::Phase::kAwaitReply:
      return "no handshake reply (the peer never accepted, or it is not a tenantqos ib plugin)";
    case ConnectState::Phase::kSendReady: return "ready message not sent";
  }
  return "?";
}

const char* phaseText(PendingAccept::Phase p) {
  switch (p) {
    case PendingAccept::Phase::kReadHello:
      return "incomplete hello (truncated, or not a tenantqos ib peer)";
    case PendingAccept::Phase::kSendReply: return "reply not taken by the peer";
    case PendingAccept::Phase::kAwaitReady:
      return "the connecting side never reported its QPs ready";
  }
  return "?";
}

}  // namespace

IbTransportConfig ibConfigFromParams(const PluginParams& p) {
  IbTransportConfig c;
  c.hca = p.ib_hca;
  c.gid_index = p.ib_gid_index.has_value() ? static_cast<int>(*p.ib_gid_index) : -1;
  c.verbs_library = p.ibverbs_lib;
  c.oob_ifname = p.socket_ifname;
  c.oob_family = p.socket_family;
  c.comm.qps_per_conn = static_cast<int>(p.ib_qps_per_conn);
  c.comm.timeout = static_cast<uint8_t>(p.ib_timeout);
  c.comm.retry_cnt = static_cast<uint8_t>(p.ib_retry_cnt);
  if (p.ib_cts_dscp.has_value()) c.comm.cts_dscp = static_cast<int>(*p.ib_cts_dscp);
  c.handshake_timeout_ns = p.handshake_timeout_ms * 1'000'000;
  return c;
}

Result<std::unique_ptr<IbTransport>> IbTransport::create(const PluginParams& p, Clock& clock) {
  return create(ibConfigFromParams(p), clock);
}

Result<std::unique_ptr<Transport>> makeIbTransport(const PluginParams& params, Clock& clock,
                                                   std::string* summary) {
  TQ_ASSIGN_OR_RETURN(auto t, IbTransport::create(params, clock));
  *summary = t->summary();
  return std::unique_ptr<Transport>(std::move(t));
}

Result<std::unique_ptr<IbTransport>> IbTransport::create(const IbTransportConfig& cfg,
                                                         Clock& clock) {
  auto filter = tqib::parseHcaFilter(cfg.hca);
  if (!filter.ok()) return filter.status().withContext("TENANTQOS_IB_HCA=" + cfg.hca);
  TQ_ASSIGN_OR_RETURN(auto devices, tqib::discoverDevices(cfg.sysfs_root));
  if (devices.empty()) {
    return notFound("no RDMA devices (" + cfg.sysfs_root + "/class/infiniband is empty or absent)");
  }
  std::vector<std::string> skipped;
  const std::vector<tqib::PortChoice> choices =
      tqib::selectPorts(devices, *filter, cfg.gid_index, &skipped);
  if (choices.empty()) {
    std::string why = "no active RDMA port";
    if (!cfg.hca.empty()) why += " matching TENANTQOS_IB_HCA=" + cfg.hca;
    for (const auto& s : skipped) why += "; " + s;
    return notFound(why);
  }
  TQ_ASSIGN_OR_RETURN(const tqib::Verbs* verbs, tqib::sharedVerbs(cfg.verbs_library));

  std::unique_ptr<IbTransport> t(new IbTransport(cfg, clock));
  std::map<std::string, std::shared_ptr<IbDevice>> opened;
  for (const tqib::PortChoice& c : choices) {
    auto& dev = opened[c.device];
    if (!dev) {
      auto d = IbDevice::open(*verbs, c.device);
      if (!d.ok()) return d.status().withContext("ib transport");
      dev = std::move(d).value();
      const tqib::PacketPacingCaps& pp = dev->caps().packet_pacing;
      if (pp.rc_qp_supported) {
        TQ_LOG(kInfo,
               "%s: per-QP packet pacing for RC QPs (%u-%u kbit/s): QPs are rate-limited to the "
               "tenant's rate in hardware, on top of the token bucket",
               c.device.c_str(), pp.min_rate_kbps, pp.max_rate_kbps);
      } else {
        TQ_LOG(kInfo,
               "%s: no per-QP packet pacing for RC QPs: pacing by the token bucket (software) only",
               c.device.c_str());
      }
    }
    auto attr = verbs->queryPort(dev->context(), static_cast<uint8_t>(c.port));
    if (!attr.ok()) return attr.status().withContext("ib transport");
    if (attr->state != IBV_PORT_ACTIVE) {
      TQ_LOG(kWarn, "%s:%d is active in sysfs but not for verbs (state %d): left out",
             c.device.c_str(), c.port, static_cast<int>(attr->state));
      continue;
    }
    auto port = std::make_unique<IbPort>();
    port->name = c.device;
    port->netdev = c.netdev.empty() ? c.device : c.netdev;
    port->port = c.port;
    port->link_layer = attr->link_layer == IBV_LINK_LAYER_INFINIBAND ? tqib::LinkLayer::kInfiniBand
                                                                     : tqib::LinkLayer::kEthernet;
    port->gid_index = c.gid_index;
    port->gid = c.gid;
    auto gid = verbs->queryGid(dev->context(), static_cast<uint8_t>(c.port), c.gid_index);
    if (gid.ok()) port->gid = tqib::fromIbvGid(*gid);
    port->lid = attr->lid;
    port->mtu_bytes = tqib::mtuBytes(attr->active_mtu);
    if (port->mtu_bytes == 0) port->mtu_bytes = 1024;
    port->max_msg_bytes = attr->max_msg_sz > 0 ? attr->max_msg_sz : (1ull << 30);
    port->pci_path = realPath(cfg.sysfs_root + "/class/infiniband/" + c.device + "/device");
    for (const auto& d : devices) {
      if (d.name == c.device) port->guid = parseGuid(d.node_guid);
    }
    port->speed_mbps = c.rate_bytes_per_second > 0
                           ? static_cast<int>(c.rate_bytes_per_second * 8 / 1'000'000)
                           : 10000;
    port->dev = dev;
    t->ports_.push_back(std::move(port));
  }
  if (t->ports_.empty()) return notFound("no RDMA port is active for verbs");
  auto oob = oob::findInterfaces(cfg.oob_ifname, cfg.oob_family);
  if (!oob.ok()) {
    return oob.status().withContext(
        "ib transport: interface for the out-of-band handshake "
        "(TENANTQOS_SOCKET_IFNAME)");
  }
  t->oob_ = oob->front();
  return t;
}

IbTransport::~IbTransport() { ConnectStates::eraseOwnedBy(this); }

std::string IbTransport::summary() const {
  std::string s = "[";
  for (size_t i = 0; i < ports_.size(); ++i) {
    const IbPort& p = *ports_[i];
    s += (i == 0 ? "" : ", ") + p.label() + (p.roce() ? " RoCE GID " : " IB GID ") +
         std::to_string(p.gid_index) + " " + p.gid.toString() + " mtu " +
         std::to_string(p.mtu_bytes);
  }
  return s + "], handshake on " + oob_.name + " " + oob_.addr.toString();
}

Status IbTransport::properties(int dev, DeviceProperties* out) const {
  if (dev < 0 || dev >= deviceCount()) {
    return invalidArgument("device " + std::to_string(dev) + " out of range [0, " +
                           std::to_string(deviceCount()) + ")");
  }
  const IbPort& p = *ports_[static_cast<size_t>(dev)];
  DeviceProperties d;
  d.name = p.name.c_str();
  d.pci_path = p.pci_path.empty() ? nullptr : p.pci_path.c_str();
  d.guid = p.guid;
  d.ptr_support = NCCL_PTR_HOST;
  if (p.dev->gdrSupported()) d.ptr_support |= NCCL_PTR_CUDA;
  if (p.dev->dmabufSupported()) d.ptr_support |= NCCL_PTR_CUDA | NCCL_PTR_DMABUF;
  d.reg_is_global = true;
  d.force_flush = false;
  d.speed_mbps = p.speed_mbps;
  d.port = p.port;
  d.latency_us = 0;
  d.max_comms = std::max(1, p.dev->caps().attr.max_qp / std::max(1, cfg_.comm.qps_per_conn));
  d.max_recvs = kMaxRecvs;
  d.max_p2p_bytes = std::min<uint64_t>(kMaxP2pBytes, p.max_msg_bytes * 1024);
  d.max_coll_bytes = kMaxCollBytes;
  d.max_multi_request_size = 1;
  d.netdev = p.netdev.c_str();
  *out = d;
  return okStatus();
}

Status IbTransport::listen(int dev, const TrafficQos& qos, void* handle,
                           std::unique_ptr<ListenComm>* out) {
  if (dev < 0 || dev >= deviceCount()) {
    return invalidArgument("listen: device " + std::to_string(dev) + " out of range");
  }
  auto lc = std::make_unique<IbListenComm>();
  oob::SocketAddress addr = oob_.addr;
  addr.setPort(0);
  auto fd = oob::listenTcp(&addr, qos, 16384);
  if (!fd.ok())
    return fd.status().withContext("listen on " + ports_[static_cast<size_t>(dev)]->label());
  lc->fd = std::move(fd).value();
  lc->info.addr = addr;
  lc->info.nonce = oob::randomU64();
  lc->dev = dev;
  lc->qos = qos;
  auto* h = static_cast<uint8_t*>(handle);
  std::memset(h, 0, kHandleBytes);
  encodeIbHandle(lc->info, h);
  TQ_LOG(kDebug, "ib: listening for %s on %s", ports_[static_cast<size_t>(dev)]->label().c_str(),
         addr.toString().c_str());
  *out = std::move(lc);
  return okStatus();
}

Status IbTransport::connect(int dev, const TrafficQos& qos, void* handle,
                            std::unique_ptr<SendComm>* out) {
  out->reset();
  if (dev < 0 || dev >= deviceCount()) {
    return invalidArgument("connect: device " + std::to_string(dev) + " out of range");
  }
  auto* h = static_cast<uint8_t*>(handle);
  const int64_t now = clock_.nowNs();
  ConnectState* st = ConnectStates::find(h);
  if (st == nullptr) {
    TQ_ASSIGN_OR_RETURN(IbHandle info, parseIbHandle(h, kHandleBytes));
    auto fresh = std::make_unique<ConnectState>();
    fresh->owner = this;
    fresh->target = info;
    fresh->qos = qos;
    fresh->dev = dev;
    fresh->start = now;
    fresh->conn_id = oob::randomU64();
    const IbPort& port = *ports_[static_cast<size_t>(dev)];
    auto res = makeResources(port, ConnSide::kSend, cfg_.comm.qps_per_conn);
    if (!res.ok()) {
      return res.status().withContext("connect " + port.label() + " to " + info.addr.toString());
    }
    fresh->res = std::move(res).value();
    IbHello hello;
    hello.nonce = info.nonce;
    hello.conn_id = fresh->conn_id;
    hello.dscp = qos.dscp;
    hello.service_level = qos.service_level;
    hello.tenant = qos.tenant.substr(0, kMaxTenantBytes);
    hello.ep = fresh->res->local();
    hello.cts_addr = reinterpret_cast<uintptr_t>(fresh->res->ring.ptr);
    hello.cts_rkey = fresh->res->ring.mr->rkey;
    encodeIbHello(hello, fresh->hello_out.data());
    st = fresh.release();
    ConnectStates::attach(h, st);
  }
  const IbPort& port = *ports_[static_cast<size_t>(st->dev)];
  const std::string peer = st->target.addr.toString();
  auto finish = [&](Status s) {
    ConnectStates::detach(h, st);  // frees QPs, CQ and rings made for this attempt
    return s.withContext("connect " + port.label() + " to " + peer);
  };

  if (st->phase == ConnectState::Phase::kTcpConnect) {
    auto connected = st->dial.step(st->target.addr, st->qos, now);
    if (!connected.ok()) return finish(connected.status());
    if (*connected) st->phase = ConnectState::Phase::kSendHello;
  }
  const int fd = st->dial.fd.get();
  if (st->phase == ConnectState::Phase::kSendHello) {
    Status sent = st->hello_out.sendStep(fd, "handshake");
    if (!sent.ok()) return finish(sent);
    if (st->hello_out.complete()) st->phase = ConnectState::Phase::kAwaitReply;
  }
  if (st->phase == ConnectState::Phase::kAwaitReply) {
    Status got = st->reply_in.recvStep(fd, "handshake reply");
    if (!got.ok()) return finish(got);
    if (st->reply_in.complete()) {
      auto rep = parseIbReply(st->reply_in.data(), kIbReplyBytes);
      if (!rep.ok()) return finish(rep.status());
      if (rep->status != IbReplyStatus::kAccepted) {
        return finish(failedPrecondition(
            "the peer" + (rep->ep.device.empty() ? "" : " (" + rep->ep.device + ")") +
            " rejected the connection: " + rep->reason));
      }
      if (rep->conn_id != st->conn_id) {
        return finish(dataLoss("handshake reply for another connection"));
      }
      st->reply = *rep;
      IbReady ready;
      ready.conn_id = st->conn_id;
      Status qp =
          connectResources(st->res.get(), rep->ep, st->qos.service_level, st->qos.dscp, cfg_.comm);
      if (!qp.ok()) {
        // Tell the acceptor, so it fails now rather than at its deadline.
        ready.ok = false;
        ready.reason = qp.message();
        encodeIbReady(ready, st->ready_out.data());
        oob::sendBestEffort(fd, st->ready_out.data(), kIbReadyBytes);
        return finish(qp.withContext("QPs towards " + rep->ep.device));
      }
      encodeIbReady(ready, st->ready_out.data());
      st->phase = ConnectState::Phase::kSendReady;
    }
  }
  if (st->phase == ConnectState::Phase::kSendReady) {
    Status sent = st->ready_out.sendStep(fd, "ready");
    if (!sent.ok()) return finish(sent);
    if (st->ready_out.complete()) {
      auto comm = std::make_unique<IbSendComm>(std::move(st->res), st->reply,
                                               std::move(st->dial.fd), peer, cfg_.comm, clock_);
      TQ_LOG(kDebug, "ib: connected %s, tenant %s, sl %d, dscp %d", comm->describe().c_str(),
             st->qos.tenant.c_str(), st->qos.service_level, st->qos.dscp);
      *out = std::move(comm);
      ConnectStates::detach(h, st);
      return okStatus();
    }
  }
  if (now - st->start > cfg_.handshake_timeout_ns) {
    return finish(deadlineExceeded(std::string(phaseText(st->phase)) + " within " +
                                   msText(cfg_.handshake_timeout_ns) + " (" +
                                   std::to_string(st->reply_in.done()) + " of " +
                                   std::to_string(kIbReplyBytes) + " reply bytes received)"));
  }
  return okStatus();
}

Status IbTransport::accept(ListenComm* listen, std::unique_ptr<RecvComm>* out) {
  out->reset();
  auto* lc = dynamic_cast<IbListenComm*>(listen);
  if (lc == nullptr) return invalidArgument("accept: not an ib listen comm");
  const int64_t now = clock_.nowNs();
  const IbPort& port = *ports_[static_cast<size_t>(lc->dev)];
  const std::string self = lc->info.addr.toString() + " (" + port.label() + ")";

  for (;;) {
    oob::SocketAddress peer;
    auto fd = oob::acceptTcp(lc->fd.get(), &peer);
    if (!fd.ok()) return fd.status().withContext("accept on " + self);
    if (!fd->valid()) break;
    auto p = std::make_unique<PendingAccept>();
    p->fd = std::move(fd).value();
    p->since = now;
    p->peer = peer.toString();
    lc->pending.push_back(std::move(p));
  }

  for (size_t i = 0; i < lc->pending.size();) {
    PendingAccept& p = *lc->pending[i];
    const std::string from = "connection from " + p.peer + " on " + self;
    auto drop = [&](Status s) {
      lc->pending.erase(lc->pending.begin() + static_cast<long>(i));
      return s.withContext(from);
    };
    if (p.phase == PendingAccept::Phase::kReadHello) {
      Status got = p.hello_in.recvStep(p.fd.get(), "hello");
      if (!got.ok()) return drop(got);
      if (p.hello_in.complete()) {
        auto hello = parseIbHello(p.hello_in.data(), kIbHelloBytes);
        IbReplyStatus why = IbReplyStatus::kBadHello;
        Status reject;
        if (!hello.ok()) {
          reject = hello.status();
        } else if (hello->version != kIbProtocolVersion) {
          why = IbReplyStatus::kBadVersion;
          reject = failedPrecondition("peer speaks ib protocol version " +
                                      std::to_string(hello->version) + ", this plugin speaks " +
                                      std::to_string(kIbProtocolVersion));
        } else if (hello->nonce != lc->info.nonce) {
          why = IbReplyStatus::kWrongListener;
          reject =
              failedPrecondition("the connection is meant for another listener (stale handle?)");
        }
        if (!reject.ok()) {
          sendRejection(p.fd.get(), why, hello.ok() ? hello->conn_id : 0, port.name,
                        reject.message());
          return drop(reject);
        }
        p.hello = *hello;
        // The receiver adopts the sender's marking: its QPs (CTS writes, ACKs of the data) and
        // the TCP link carry the sender's SL and DSCP, unless TENANTQOS_IB_CTS_DSCP says otherwise.
        p.peer_qos.dscp = p.hello.dscp;
        p.peer_qos.service_level = p.hello.service_level;
        p.peer_qos.tenant = p.hello.tenant;
        Status q = oob::applyQos(p.fd.get(), lc->info.addr.family(), p.peer_qos);
        if (!q.ok()) return drop(q);
        const int qp_dscp = cfg_.comm.cts_dscp.value_or(p.hello.dscp);
        auto res = makeResources(port, ConnSide::kRecv, p.hello.ep.nqps);
        Status setup = res.ok() ? okStatus() : res.status();
        if (setup.ok()) {
          p.res = std::move(res).value();
          setup =
              connectResources(p.res.get(), p.hello.ep, p.hello.service_level, qp_dscp, cfg_.comm);
        }
        if (!setup.ok()) {
          sendRejection(p.fd.get(), IbReplyStatus::kSetupFailed, p.hello.conn_id, port.name,
                        setup.message());
          return drop(setup.withContext("QPs towards " + p.hello.ep.device));
        }
        IbReply rep;
        rep.conn_id = p.hello.conn_id;
        rep.ep = p.res->local();
        rep.sizes_addr = reinterpret_cast<uintptr_t>(p.res->ring.ptr);
        rep.sizes_rkey = p.res->ring.mr->rkey;
        encodeIbReply(rep, p.reply_out.data());
        p.phase = PendingAccept::Phase::kSendReply;
      }
    }
    if (p.phase == PendingAccept::Phase::kSendReply) {
      Status sent = p.reply_out.sendStep(p.fd.get(), "reply");
      if (!sent.ok()) return drop(sent);
      if (p.reply_out.complete()) p.phase = PendingAccept::Phase::kAwaitReady;
    }
    if (p.phase == PendingAccept::Phase::kAwaitReady) {
      Status got = p.ready_in.recvStep(p.fd.get(), "ready (the connecting side's QPs)");
      if (!got.ok()) return drop(got);
      if (p.ready_in.complete()) {
        auto ready = parseIbReady(p.ready_in.data(), kIbReadyBytes);
        if (!ready.ok()) return drop(ready.status());
        if (ready->conn_id != p.hello.conn_id)
          return drop(dataLoss("ready for another connection"));
        if (!ready->ok) {
          return drop(unavailable("the connecting side (" + p.hello.ep.device +
                                  ") could not connect its QPs: " + ready->reason));
        }
        auto comm = std::make_unique<IbRecvComm>(std::move(p.res), p.hello, p.peer_qos,
                                                 std::move(p.fd), p.peer, cfg_.comm, clock_);
        TQ_LOG(kDebug, "ib: accepted %s, tenant %s, sl %d, dscp %d", comm->describe().c_str(),
               p.hello.tenant.c_str(), p.hello.service_level, p.hello.dscp);
        lc->pending.erase(lc->pending.begin() + static_cast<long>(i));
        *out = std::move(comm);
        return okStatus();
      }
    }
    if (now - p.since > cfg_.handshake_timeout_ns) {
      return drop(deadlineExceeded(std::string(phaseText(p.phase)) + " within " +
                                   msText(cfg_.handshake_timeout_ns)));
    }
    ++i;
  }
  return okStatus();
}

}  // namespace tq::plugin::ib
