#include "nccl-plugin/plugin.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

#include "common/attach_protocol.h"
#include "common/fabric_peers.h"
#include "common/fd.h"
#include "common/log.h"
#include "common/tenant_shm.h"
#include "common/thread_annotations.h"
#include "nccl-plugin/ib/ib_factory.h"
#include "nccl-plugin/socket/socket_transport.h"

namespace tq::plugin {
namespace {

constexpr uint32_t kListenMagic = 0x4c505154;  // "TQPL"
constexpr uint32_t kSendMagic = 0x53505154;    // "TQPS"
constexpr uint32_t kRecvMagic = 0x52505154;    // "TQPR"

struct ListenObj {
  uint32_t magic = kListenMagic;
  std::unique_ptr<ListenComm> comm;
  std::shared_ptr<TenantPacer> tenant;
  TenantSource source = TenantSource::kDefault;
  int dev = 0;
};

// One admitter over a tenant's bucket (transport.h): its own PaceState.
class TenantAdmission final : public Admission {
 public:
  TenantAdmission(TenantPacer* tenant, int channel) : tenant_(tenant) { pace_.channel = channel; }
  ~TenantAdmission() override { tenant_->release(&pace_); }
  bool tryAdmit(uint64_t bytes, uint64_t pending) override {
    return tenant_->admit(bytes, &pace_, pending);
  }
  int64_t waitNs(uint64_t bytes) const override { return tenant_->waitNs(bytes, pace_); }
  void giveBack(uint64_t bytes) override { tenant_->giveBack(bytes, &pace_); }
  void peerWait(int64_t ns) override { tenant_->onPeerWait(pace_, ns); }
  uint64_t chunkBytes() const override { return tenant_->chunkBytes(pace_.channel); }
  uint64_t rateBytesPerSecond() const override {
    return tenant_->rateBytesPerSecond(pace_.channel);
  }

 private:
  TenantPacer* tenant_;
  PaceState pace_;
};

// A comm's pacing in one direction: the admissions its threads asked for.
class TenantPacing final : public Pacing {
 public:
  TenantPacing(TenantPacer* tenant, int channel) : tenant_(tenant), channel_(channel) {}
  Admission* newAdmission() override {
    MutexLock lock(mu_);
    admissions_.push_back(std::make_unique<TenantAdmission>(tenant_, channel_));
    return admissions_.back().get();
  }

 private:
  TenantPacer* tenant_;
  const int channel_;
  Mutex mu_;
  std::vector<std::unique_ptr<TenantAdmission>> admissions_ TQ_GUARDED_BY(mu_);
};

// The network device of a transport device, for its tenant's per-device buckets.
std::string netdevOf(Transport& t, int dev) {
  DeviceProperties props;
  if (!t.properties(dev, &props).ok()) return "";
  if (props.netdev != nullptr) return props.netdev;
  return props.name != nullptr ? props.name : "";
}

struct SendObj {
  SendObj(std::shared_ptr<TenantPacer> t, int channel)
      : tenant(std::move(t)), pacing(tenant.get(), channel) {
    pace.channel = channel;
  }
  uint32_t magic = kSendMagic;
  std::shared_ptr<TenantPacer> tenant;
  PaceState pace;  // whole-message admission and the busy time of sends in flight
  TenantPacing pacing;
  std::unique_ptr<SendComm> comm;  // last: destroyed first, while `pacing` still exists
};
struct RecvObj {
  RecvObj(std::shared_ptr<TenantPacer> t, int channel)
      : tenant(std::move(t)), pacing(tenant.get(), channel) {
    pace.channel = channel;
  }
  uint32_t magic = kRecvMagic;
  std::shared_ptr<TenantPacer> tenant;
  PaceState pace;  // received bytes
  TenantPacing pacing;
  std::unique_ptr<RecvComm> comm;  // last: destroyed first
};

uint32_t magicOf(void* p) {
  uint32_t m = 0;
  std::memcpy(&m, p, sizeof m);
  return m;
}

template <typename T, uint32_t kMagic>
Result<T*> objectOf(void* p, const char* what) {
  if (p == nullptr) return invalidArgument(std::string(what) + " is NULL");
  if (magicOf(p) != kMagic) {
    return invalidArgument(std::string(what) + " is not a live tenantqos " + what +
                           " (wrong pointer or already closed)");
  }
  return static_cast<T*>(p);
}

// The comm behind a send or receive handle, for what both do (memory registration). The one
// place that tells the two apart by their magic number.
Result<Comm*> registrarOf(void* comm, const char* op) {
  switch (magicOf(comm)) {
    case kSendMagic: return static_cast<Comm*>(static_cast<SendObj*>(comm)->comm.get());
    case kRecvMagic: return static_cast<Comm*>(static_cast<RecvObj*>(comm)->comm.get());
    default:
      return invalidArgument(std::string(op) + ": not a live tenantqos send or receive comm");
  }
}

Result<NetContext*> contextOf(void* ctx) {
  if (ctx == nullptr) return invalidArgument("net context is NULL (init not called?)");
  auto* c = static_cast<NetContext*>(ctx);
  if (c->magic != NetContext::kMagic) return invalidArgument("not a live tenantqos net context");
  return c;
}

Status checkParams(const PluginParams& p) {
  if (!p.tenant.empty() && !isDns1123Label(p.tenant)) {
    return invalidArgument("TENANTQOS_TENANT=" + p.tenant + ": not a DNS-1123 label");
  }
  if (!isDns1123Label(p.default_tenant)) {
    return invalidArgument("TENANTQOS_DEFAULT_TENANT=" + p.default_tenant +
                           ": not a DNS-1123 label");
  }
  if (p.transport != "auto" && p.transport != "socket" && p.transport != "ib") {
    return invalidArgument("TENANTQOS_TRANSPORT=" + p.transport + ": expected auto, ib or socket");
  }
  auto level = parseLogLevel(p.log_level);
  if (!level.ok()) return level.status().withContext("TENANTQOS_LOG_LEVEL");
  if (p.require_agent != 0 && !attach::nodeIsGoverned(p.run_dir)) {
    return failedPrecondition("TENANTQOS_REQUIRE_AGENT=1 but there is no agent on this node (" +
                              p.run_dir + " does not exist)");
  }
  return okStatus();
}

}  // namespace

ncclResult_t toNcclResult(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk: return ncclSuccess;
    case StatusCode::kInvalidArgument: return ncclInvalidArgument;
    case StatusCode::kOutOfRange: return ncclInvalidUsage;
    case StatusCode::kFailedPrecondition:
    case StatusCode::kUnimplemented:
    case StatusCode::kInternal: return ncclInternalError;
    case StatusCode::kAborted: return ncclRemoteError;
    default: return ncclSystemError;
  }
}

Plugin::Plugin(PluginParams params, std::unique_ptr<Transport> transport, Clock& clock,
               TrafficClassLookup lookup)
    : params_(std::move(params)),
      transport_(std::move(transport)),
      tenants_(params_, clock, std::move(lookup)) {}

Result<std::unique_ptr<Transport>> makeTransport(const PluginParams& params, Clock& clock,
                                                 std::string* why) {
  if (params.transport == "socket") {
    *why = "TENANTQOS_TRANSPORT=socket";
    TQ_ASSIGN_OR_RETURN(auto t, socket::SocketTransport::create(params, clock));
    return std::unique_ptr<Transport>(std::move(t));
  }
  std::string summary;
  auto ibt = ib::makeIbTransport(params, clock, &summary);
  if (ibt.ok()) {
    *why = (params.transport == "ib" ? "TENANTQOS_TRANSPORT=ib" : "auto: active RDMA ports") +
           std::string(" ") + summary;
    return std::move(ibt).value();
  }
  if (params.transport == "ib") return ibt.status().withContext("TENANTQOS_TRANSPORT=ib");
  // auto: no usable RDMA port is the normal case on hosts without RDMA; anything else (a port
  // exists but cannot be opened) deserves a warning before falling back.
  if (ibt.status().code() != StatusCode::kNotFound) {
    TQ_LOG(kWarn, "the ib transport is unusable here, using socket: %s",
           ibt.status().message().c_str());
  }
  *why = "auto: " + ibt.status().message();
  TQ_ASSIGN_OR_RETURN(auto t, socket::SocketTransport::create(params, clock));
  return std::unique_ptr<Transport>(std::move(t));
}

Result<std::unique_ptr<Plugin>> Plugin::create(const PluginParams& params, Clock& clock,
                                               std::string* why) {
  TQ_RETURN_IF_ERROR(checkParams(params));
  std::string reason;
  TQ_ASSIGN_OR_RETURN(auto transport, makeTransport(params, clock, &reason));
  if (why != nullptr) *why = std::move(reason);
  return std::make_unique<Plugin>(params, std::move(transport), clock);
}

Result<std::unique_ptr<Plugin>> Plugin::fromEnvironment() {
  const EnvLookup env = processEnv();
  TQ_ASSIGN_OR_RETURN(PluginParams params, loadParams(env));
  if (auto level = parseLogLevel(params.log_level); level.ok()) setLogLevel(*level);
  std::string why;
  TQ_ASSIGN_OR_RETURN(auto p, create(params, realClock(), &why));
  std::string devs;
  for (int d = 0; d < p->transport().deviceCount(); ++d) {
    DeviceProperties props;
    if (p->transport().properties(d, &props).ok()) {
      devs += (devs.empty() ? "" : ", ") + std::to_string(d) + ":" + props.name;
    }
  }
  const std::string settings = describeNonDefault(env);
  TQ_LOG(kInfo, "%s plugin: transport %s (%s), devices [%s]%s%s", kPluginName,
         p->transport().name(), why.c_str(), devs.c_str(),
         settings.empty() ? "" : ", settings: ", settings.c_str());
  return p;
}

Result<NetContext*> Plugin::newContext(uint64_t comm_id, int traffic_class) {
  auto ctx = std::make_unique<NetContext>();
  ctx->comm_id = comm_id;
  ctx->traffic_class = traffic_class;
  ctx->tenant = tenants_.forTrafficClass(traffic_class, &ctx->source);
  contexts_.fetch_add(1);
  return ctx.release();
}

Status Plugin::finalize(void* ctx) {
  TQ_ASSIGN_OR_RETURN(NetContext * c, contextOf(ctx));
  c->magic = 0;
  delete c;
  contexts_.fetch_sub(1);
  return okStatus();
}

Status Plugin::devices(int* ndev) {
  if (ndev == nullptr) return invalidArgument("devices: ndev is NULL");
  *ndev = transport_->deviceCount();
  return okStatus();
}

Status Plugin::properties(int dev, DeviceProperties* out) {
  TQ_RETURN_IF_ERROR(transport_->properties(dev, out));
  out->rail = agentRailOf(out->netdev);
  return okStatus();
}

int Plugin::agentRailOf(const char* netdev) {
  if (netdev == nullptr) return -1;
  const std::string path = attach::fabricPeersPath(params_.run_dir);
  auto problem = [&](const std::string& why) {
    MutexLock lock(rail_mu_);
    if (why != rail_logged_) {
      TQ_LOG(kWarn, "%s: %s; NCCL is told no rail for the devices (railId undefined)", path.c_str(),
             why.c_str());
      rail_logged_ = why;
    }
    return -1;
  };
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  if (!fd.valid()) {
    // No map: the node is behind no shared link, or the agent has not written it yet.
    if (errno == ENOENT) return -1;
    return problem(std::string("open: ") + std::strerror(errno));
  }
  Result<FabricPeerMap> map = readAgentFabricPeers(fd.get(), static_cast<uid_t>(params_.agent_uid));
  if (!map.ok()) return problem(map.status().message());
  const std::optional<uint32_t> rail = railOf(*map, netdev);
  return rail ? static_cast<int>(*rail) : -1;
}

Status Plugin::listen(void* ctx, int dev, void* handle, void** listen_comm) {
  TQ_ASSIGN_OR_RETURN(NetContext * c, contextOf(ctx));
  if (handle == nullptr || listen_comm == nullptr) return invalidArgument("listen: NULL argument");
  *listen_comm = nullptr;
  auto obj = std::make_unique<ListenObj>();
  obj->tenant = c->tenant;
  obj->source = c->source;
  obj->dev = dev;
  TQ_RETURN_IF_ERROR(transport_->listen(dev, c->tenant->qos(), handle, &obj->comm));
  *listen_comm = obj.release();
  comms_.fetch_add(1);
  return okStatus();
}

Status Plugin::connect(void* ctx, int traffic_class, int dev, void* handle, void** send_comm) {
  TQ_ASSIGN_OR_RETURN(NetContext * c, contextOf(ctx));
  if (handle == nullptr || send_comm == nullptr) return invalidArgument("connect: NULL argument");
  *send_comm = nullptr;
  std::shared_ptr<TenantPacer> tenant =
      traffic_class == c->traffic_class ? c->tenant : tenants_.forTrafficClass(traffic_class);
  std::unique_ptr<SendComm> comm;
  TQ_RETURN_IF_ERROR(transport_->connect(dev, tenant->qos(), handle, &comm));
  if (comm == nullptr) return okStatus();  // in progress: NCCL calls again
  const int channel = tenant->channel(shm::kTx, netdevOf(*transport_, dev), comm->peerAddress());
  auto obj = std::make_unique<SendObj>(std::move(tenant), channel);
  obj->comm = std::move(comm);
  if (obj->comm->pacesItself()) obj->comm->setPacing(&obj->pacing);
  *send_comm = obj.release();
  comms_.fetch_add(1);
  return okStatus();
}

Status Plugin::accept(void* listen_comm, void** recv_comm) {
  TQ_ASSIGN_OR_RETURN(ListenObj * l,
                      (objectOf<ListenObj, kListenMagic>(listen_comm, "listen comm")));
  if (recv_comm == nullptr) return invalidArgument("accept: recvComm is NULL");
  *recv_comm = nullptr;
  std::unique_ptr<RecvComm> comm;
  TQ_RETURN_IF_ERROR(transport_->accept(l->comm.get(), &comm));
  if (comm == nullptr) return okStatus();
  std::shared_ptr<TenantPacer> tenant = l->tenant;
  // A listener that only knows the default tenant (v9/v10 listen has no config) accounts the
  // received bytes to the sender's tenant, which the handshake carried.
  const std::string& peer = comm->peerQos().tenant;
  if (l->source == TenantSource::kDefault && !peer.empty() && peer != l->tenant->tenant() &&
      isDns1123Label(peer)) {
    tenant = tenants_.byName(peer);
  }
  const int channel = tenant->channel(shm::kRx, netdevOf(*transport_, l->dev), comm->peerAddress());
  auto obj = std::make_unique<RecvObj>(std::move(tenant), channel);
  obj->comm = std::move(comm);
  if (obj->comm->pacesItself()) obj->comm->setPacing(&obj->pacing);
  *recv_comm = obj.release();
  comms_.fetch_add(1);
  return okStatus();
}

Status Plugin::regMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  if (comm == nullptr || mhandle == nullptr) return invalidArgument("regMr: NULL argument");
  *mhandle = nullptr;
  if (type != NCCL_PTR_HOST && type != NCCL_PTR_CUDA) {
    return invalidArgument("regMr: unknown pointer type " + std::to_string(type));
  }
  const MemType mt = type == NCCL_PTR_HOST ? MemType::kHost : MemType::kCuda;
  TQ_ASSIGN_OR_RETURN(Comm * c, registrarOf(comm, "regMr"));
  MemRegion* mr = nullptr;
  TQ_RETURN_IF_ERROR(c->regMr(data, size, mt, &mr));
  *mhandle = mr;
  return okStatus();
}

Status Plugin::regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                           void** mhandle) {
  if (comm == nullptr || mhandle == nullptr) return invalidArgument("regMrDmaBuf: NULL argument");
  *mhandle = nullptr;
  if (type != NCCL_PTR_CUDA) {
    return invalidArgument("regMrDmaBuf: pointer type " + std::to_string(type) +
                           " (only NCCL_PTR_CUDA memory comes as DMA-BUF)");
  }
  TQ_ASSIGN_OR_RETURN(Comm * c, registrarOf(comm, "regMrDmaBuf"));
  MemRegion* mr = nullptr;
  TQ_RETURN_IF_ERROR(c->regMrDmaBuf(data, size, offset, fd, &mr));
  *mhandle = mr;
  return okStatus();
}

Status Plugin::deregMr(void* comm, void* mhandle) {
  if (comm == nullptr || mhandle == nullptr) return invalidArgument("deregMr: NULL argument");
  TQ_ASSIGN_OR_RETURN(Comm * c, registrarOf(comm, "deregMr"));
  return c->deregMr(static_cast<MemRegion*>(mhandle));
}

Status Plugin::isend(void* send_comm, void* data, size_t size, int tag, void* mhandle,
                     void** request) {
  TQ_ASSIGN_OR_RETURN(SendObj * s, (objectOf<SendObj, kSendMagic>(send_comm, "send comm")));
  if (request == nullptr) return invalidArgument("isend: request is NULL");
  if (data == nullptr && size > 0) return invalidArgument("isend: NULL buffer");
  *request = nullptr;
  if (s->comm->wouldBlock()) return okStatus();
  // Whole-message pacing; a comm that paces itself admits through its Admissions.
  if (!s->comm->pacesItself() && !s->tenant->admit(size, &s->pace)) {
    return okStatus();  // over budget: NCCL retries
  }
  Request* r = nullptr;
  TQ_RETURN_IF_ERROR(s->comm->isend(data, size, tag, static_cast<MemRegion*>(mhandle), &r));
  if (r != nullptr) {
    r->tenant = s->tenant.get();
    r->pace = &s->pace;
    s->tenant->onSendStarted(&s->pace);
  }
  *request = r;
  return okStatus();
}

Status Plugin::irecv(void* recv_comm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                     void** request) {
  TQ_ASSIGN_OR_RETURN(RecvObj * r, (objectOf<RecvObj, kRecvMagic>(recv_comm, "receive comm")));
  if (request == nullptr || data == nullptr || sizes == nullptr) {
    return invalidArgument("irecv: NULL argument");
  }
  if (n < 1) return invalidArgument("irecv: n = " + std::to_string(n));
  // *request may hold NCCL_NET_OPTIONAL_RECV_COMPLETION on entry: a hint we do not need.
  *request = nullptr;
  Request* req = nullptr;
  TQ_RETURN_IF_ERROR(
      r->comm->irecv(n, data, sizes, tags, reinterpret_cast<MemRegion**>(mhandles), &req));
  if (req != nullptr) {
    req->tenant = r->tenant.get();
    req->pace = &r->pace;
    req->count = n;
  }
  *request = req;
  return okStatus();
}

Status Plugin::iflush(void* recv_comm, int n, void** data, int* sizes, void** mhandles,
                      void** request) {
  TQ_ASSIGN_OR_RETURN(RecvObj * r, (objectOf<RecvObj, kRecvMagic>(recv_comm, "receive comm")));
  if (request == nullptr) return invalidArgument("iflush: request is NULL");
  *request = nullptr;
  Request* req = nullptr;
  TQ_RETURN_IF_ERROR(
      r->comm->iflush(n, data, sizes, reinterpret_cast<MemRegion**>(mhandles), &req));
  *request = req;
  return okStatus();
}

Status Plugin::test(void* request, int* done, int* sizes) {
  if (request == nullptr || done == nullptr) return invalidArgument("test: NULL argument");
  auto* r = static_cast<Request*>(request);
  // Read before test(): a completed request returns to its pool.
  TenantPacer* tenant = r->tenant;
  const bool is_recv = r->is_recv;
  PaceState* pace = r->pace;
  const int count = r->count < 1 ? 1 : (r->count > kMaxRecvs ? kMaxRecvs : r->count);
  bool d = false;
  size_t bytes[kMaxRecvs] = {};
  *done = 0;
  Status st = r->test(&d, bytes);
  if (!is_recv && tenant != nullptr && pace != nullptr && (!st.ok() || d)) {
    tenant->onSendFinished(pace);  // completed, or failed (a failed request is released)
  }
  TQ_RETURN_IF_ERROR(st);
  if (!d) return okStatus();
  *done = 1;
  uint64_t total = 0;
  for (int i = 0; i < count; ++i) {
    if (sizes != nullptr) sizes[i] = bytes[i] > INT_MAX ? INT_MAX : static_cast<int>(bytes[i]);
    total += bytes[i];
  }
  if (is_recv && tenant != nullptr && pace != nullptr) tenant->onReceived(total, *pace);
  return okStatus();
}

Status Plugin::closeSend(void* send_comm) {
  TQ_ASSIGN_OR_RETURN(SendObj * s, (objectOf<SendObj, kSendMagic>(send_comm, "send comm")));
  s->magic = 0;
  s->tenant->release(&s->pace);
  s->tenant->onSendFinished(&s->pace, s->pace.in_flight.load(std::memory_order_relaxed));
  delete s;
  comms_.fetch_sub(1);
  return okStatus();
}

Status Plugin::closeRecv(void* recv_comm) {
  TQ_ASSIGN_OR_RETURN(RecvObj * r, (objectOf<RecvObj, kRecvMagic>(recv_comm, "receive comm")));
  r->magic = 0;
  delete r;
  comms_.fetch_sub(1);
  return okStatus();
}

Status Plugin::closeListen(void* listen_comm) {
  TQ_ASSIGN_OR_RETURN(ListenObj * l,
                      (objectOf<ListenObj, kListenMagic>(listen_comm, "listen comm")));
  l->magic = 0;
  delete l;
  comms_.fetch_sub(1);
  return okStatus();
}

SendComm* Plugin::sendCommOf(void* send_comm) {
  auto s = objectOf<SendObj, kSendMagic>(send_comm, "send comm");
  return s.ok() ? (*s)->comm.get() : nullptr;
}

RecvComm* Plugin::recvCommOf(void* recv_comm) {
  auto r = objectOf<RecvObj, kRecvMagic>(recv_comm, "receive comm");
  return r.ok() ? (*r)->comm.get() : nullptr;
}

TenantPacer* Plugin::tenantOf(void* comm) {
  if (comm == nullptr) return nullptr;
  switch (magicOf(comm)) {
    case kSendMagic: return static_cast<SendObj*>(comm)->tenant.get();
    case kRecvMagic: return static_cast<RecvObj*>(comm)->tenant.get();
    case kListenMagic: return static_cast<ListenObj*>(comm)->tenant.get();
    default: return nullptr;
  }
}

}  // namespace tq::plugin
