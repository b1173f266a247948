// The version-neutral plugin layer: one process-wide Plugin behind every ABI version.
//
// What it owns: the parameters (read once), the transport, the tenant registry (one pacer per
// tenant), per-communicator contexts, and the opaque objects NCCL holds (listen/send/recv
// comms, each tagged with a magic so a wrong or stale pointer is reported instead of followed
// blindly). Pacing happens here, before the transport sees a message: isend asks the tenant's
// pacer for tokens and returns no request when refused. Receive completions are counted here.
//
// Errors: every method returns a Status; toNcclResult() is the ONE mapping to ncclResult_t,
// and firewall() wraps every C entry point (api.cc) so no exception ever crosses into NCCL.
//
// Thread-safety: NCCL calls init/devices/getProperties from its init thread, listen/connect/
// accept/regMr from a per-comm service thread and isend/irecv/test from a per-comm progress
// thread, concurrently across comms. Shared state is the registry (mutex, control path only)
// and the pacers (lock-free on the hot path).
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>

#include "common/clock.h"
#include "common/log.h"
#include "common/status.h"
#include "nccl-plugin/abi/net_common.h"
#include "nccl-plugin/params.h"
#include "nccl-plugin/tenant.h"
#include "nccl-plugin/transport.h"

namespace tq::plugin {

inline constexpr const char* kPluginName = "tenantqos";

// The only Status -> ncclResult_t mapping:
//   kInvalidArgument -> ncclInvalidArgument (bad pointer/argument from the caller)
//   kOutOfRange -> ncclInvalidUsage (send larger than the posted receive, bad sizes)
//   kFailedPrecondition, kUnimplemented, kInternal -> ncclInternalError (NCCL misused the
//       plugin: too many requests, CUDA memory on a host-only transport, broken invariant)
//   kAborted -> ncclRemoteError (the peer reported a failure)
//   everything else (network, OS, deadlines, missing files) -> ncclSystemError
ncclResult_t toNcclResult(const Status& s);

// Runs `body` (returning Status) with every exception caught: an exception becomes
// ncclInternalError with a log line naming the entry point. Non-ok statuses are logged (warn).
template <typename F>
ncclResult_t firewall(const char* entry, F&& body) noexcept {
  try {
    Status s = body();
    if (!s.ok()) TQ_LOG(kWarn, "%s: %s", entry, s.message().c_str());
    return toNcclResult(s);
  } catch (const std::exception& e) {
    TQ_LOG(kError, "%s: internal error (exception): %s", entry, e.what());
  } catch (...) {
    TQ_LOG(kError, "%s: internal error (unknown exception)", entry);
  }
  return ncclInternalError;
}

// A communicator's context: v11 makes one per init(); v9/v10 share one per process.
struct NetContext {
  static constexpr uint64_t kMagic = 0x5854434e51515154ULL;  // "TQQQNCTX"
  uint64_t magic = kMagic;
  uint64_t comm_id = 0;
  int traffic_class = NCCL_NET_TRAFFIC_CLASS_UNDEF;
  std::shared_ptr<TenantPacer> tenant;
  TenantSource source = TenantSource::kDefault;
};

class Plugin {
 public:
  // The plugin NCCL gets: parameters from the environment, the real clock; logs the transport
  // chosen. Fails, naming the variable, when a parameter is invalid or no device is usable.
  // Its lifetime (one per process at a time, ended by the last finalize) is api.cc's.
  static Result<std::unique_ptr<Plugin>> fromEnvironment();

  // For tests: a plugin over an explicit transport, parameters and clock.
  Plugin(PluginParams params, std::unique_ptr<Transport> transport, Clock& clock,
         TrafficClassLookup lookup = nullptr);
  // Picks the transport (TENANTQOS_TRANSPORT); *why (optional) says which and why, for the log.
  static Result<std::unique_ptr<Plugin>> create(const PluginParams& params, Clock& clock,
                                                std::string* why = nullptr);

  const PluginParams& params() const { return params_; }
  Transport& transport() { return *transport_; }
  TenantRegistry& tenants() { return tenants_; }

  Result<NetContext*> newContext(uint64_t comm_id, int traffic_class);
  Status finalize(void* ctx);
  // No context and no listen/send/recv comm is alive: destroying the plugin now stops all of
  // its threads and frees its devices, and nothing NCCL holds points into it any more.
  bool idle() const { return contexts_.load() == 0 && comms_.load() == 0; }
  int liveComms() const { return comms_.load(); }

  Status devices(int* ndev);
  // The transport's properties, and the rail of the device from the agent's map.
  Status properties(int dev, DeviceProperties* out);
  Status listen(void* ctx, int dev, void* handle, void** listen_comm);
  // `traffic_class`: the communicator's (v11: the ctx's; v10: connect's config).
  Status connect(void* ctx, int traffic_class, int dev, void* handle, void** send_comm);
  Status accept(void* listen_comm, void** recv_comm);
  Status regMr(void* comm, void* data, size_t size, int type, void** mhandle);
  Status regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                     void** mhandle);
  Status deregMr(void* comm, void* mhandle);
  Status isend(void* send_comm, void* data, size_t size, int tag, void* mhandle, void** request);
  Status irecv(void* recv_comm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
               void** request);
  Status iflush(void* recv_comm, int n, void** data, int* sizes, void** mhandles, void** request);
  Status test(void* request, int* done, int* sizes);
  Status closeSend(void* send_comm);
  Status closeRecv(void* recv_comm);
  Status closeListen(void* listen_comm);

  // The transport comm behind an opaque send/recv comm (tests: socket marking).
  static SendComm* sendCommOf(void* send_comm);
  static RecvComm* recvCommOf(void* recv_comm);
  // The tenant a comm was bound to.
  static TenantPacer* tenantOf(void* comm);

 private:
  // The rail of network device `netdev` in the agent's <run-dir>/fabric-peers map (read as
  // the pacers read it: root's or the agent's, nobody else's to write; tenant.h), -1 when the
  // map is absent, untrusted or says nothing of it. A problem is logged once per distinct
  // reason: NCCL asks for every device at every communicator's init.
  int agentRailOf(const char* netdev);

  const PluginParams params_;
  std::unique_ptr<Transport> transport_;
  TenantRegistry tenants_;
  std::atomic<int> contexts_{0};  // contexts made and not finalized
  std::atomic<int> comms_{0};     // listen/send/recv comms handed to NCCL and not closed
  Mutex rail_mu_;
  std::string rail_logged_ TQ_GUARDED_BY(rail_mu_);  // the last map problem logged
};

}  // namespace tq::plugin
