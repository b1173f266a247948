#include "nccl-plugin/api.h"

#include <atomic>
#include <cstdlib>
#include <mutex>

#include "common/thread_annotations.h"
#include "nccl-plugin/nccl_log.h"
#include "nccl-plugin/plugin.h"

namespace tq::plugin::api {
namespace {

// The plugin's lifetime. The first init makes it; it ends, with every thread and device of its
// transport, when the last context is finalized and the last comm closed (whichever comes
// last), so that after NCCL's last finalize nothing of the plugin runs and NCCL may dlclose it;
// a later init makes a new one. v9/v10 have no finalize: their process context ends when the
// library is unloaded or the process exits (unloadHook), provided no comm is open then (a
// comm NCCL still holds may still be in use by one of its threads: that plugin is left alone).
// g_life_mu orders init, finalize, the check after a close and the unload hook; the entry
// points on the data path only load g_plugin (NCCL calls nothing of a plugin it has finalized).
Mutex g_life_mu;  // trivially destructible: safe to lock from the unload hook
std::atomic<Plugin*> g_plugin{nullptr};
std::atomic<NetContext*> g_process_ctx{nullptr};  // v9/v10: one context per process

Result<Plugin*> plugin() {
  Plugin* p = g_plugin.load(std::memory_order_acquire);
  if (p == nullptr) return failedPrecondition("the plugin is not initialised (init not called)");
  return p;
}

void endPluginLocked() TQ_REQUIRES(g_life_mu) {
  Plugin* p = g_plugin.exchange(nullptr, std::memory_order_acq_rel);
  if (NetContext* c = g_process_ctx.exchange(nullptr, std::memory_order_acq_rel)) {
    (void)p->finalize(c);
  }
  delete p;  // joins the transport's threads (ib: the devices' async-event threads)
}

// Registered with atexit() from inside the shared object: glibc's atexit is
// __cxa_atexit(fn, NULL, __dso_handle), so it runs at dlclose of this library as well as at
// exit, and (registered after the first plugin was made) before the destructors of the statics
// that plugin uses. NCCL's logger is dropped first: at exit NCCL may be half torn down.
void unloadHook() {
  MutexLock lock(g_life_mu);
  Plugin* p = g_plugin.load(std::memory_order_acquire);
  if (p == nullptr || p->liveComms() != 0) return;
  installNcclLogger(nullptr);
  endPluginLocked();
}

// g_life_mu held.
Result<Plugin*> pluginForInit(ncclDebugLogger_t logger) TQ_REQUIRES(g_life_mu) {
  if (logger != nullptr) installNcclLogger(logger);
  if (Plugin* p = g_plugin.load(std::memory_order_acquire)) return p;
  TQ_ASSIGN_OR_RETURN(std::unique_ptr<Plugin> made, Plugin::fromEnvironment());
  static bool hooked = false;
  if (!hooked) {
    if (std::atexit(unloadHook) != 0) {
      return internalError("init: cannot register the plugin's unload hook (atexit)");
    }
    hooked = true;
  }
  Plugin* p = made.release();
  g_plugin.store(p, std::memory_order_release);
  return p;
}

// After a finalize or a close: the last one ends the plugin.
void endPluginIfIdle() {
  MutexLock lock(g_life_mu);
  Plugin* p = g_plugin.load(std::memory_order_acquire);
  if (p == nullptr || !p->idle()) return;
  TQ_LOG(kDebug, "last context finalized and last comm closed: the plugin's transport is stopped");
  endPluginLocked();
}

// v9/v10 listen and connect have no ctx: they use the process context made by init.
Result<NetContext*> processContext() {
  NetContext* c = g_process_ctx.load(std::memory_order_acquire);
  if (c == nullptr) return failedPrecondition("the plugin is not initialised (init not called)");
  return c;
}

Status initProcessContext(ncclDebugLogger_t logger) {
  MutexLock lock(g_life_mu);
  TQ_ASSIGN_OR_RETURN(Plugin * p, pluginForInit(logger));
  if (g_process_ctx.load(std::memory_order_acquire) != nullptr) return okStatus();
  TQ_ASSIGN_OR_RETURN(NetContext * c, p->newContext(0, NCCL_NET_TRAFFIC_CLASS_UNDEF));
  g_process_ctx.store(c, std::memory_order_release);
  return okStatus();
}

// A close, then the lifetime check.
template <typename F>
Status closeThenMaybeEnd(F&& close) {
  TQ_ASSIGN_OR_RETURN(Plugin * p, plugin());
  Status s = close(p);
  if (s.ok()) endPluginIfIdle();
  return s;
}

// Copies the version-neutral properties into any ABI version's struct.
template <typename Props, int kMaxDevs>
Status fillProperties(int dev, Props* props) {
  if (props == nullptr) return invalidArgument("getProperties: props is NULL");
  TQ_ASSIGN_OR_RETURN(Plugin * p, plugin());
  DeviceProperties d;
  TQ_RETURN_IF_ERROR(p->properties(dev, &d));
  *props = Props{};
  props->name = const_cast<char*>(d.name);
  props->pciPath = const_cast<char*>(d.pci_path);
  props->guid = d.guid;
  props->ptrSupport = d.ptr_support;
  props->regIsGlobal = d.reg_is_global ? 1 : 0;
  props->forceFlush = d.force_flush ? 1 : 0;
  props->speed = d.speed_mbps;
  props->port = d.port;
  props->latency = d.latency_us;
  props->maxComms = d.max_comms;
  props->maxRecvs = d.max_recvs;
  props->netDeviceType = NCCL_NET_DEVICE_HOST;
  props->netDeviceVersion = NCCL_NET_DEVICE_INVALID_VERSION;
  props->vProps.ndevs = 1;
  props->vProps.devs[0] = dev;
  static_assert(sizeof(props->vProps.devs) / sizeof(int) == kMaxDevs);
  props->maxP2pBytes = d.max_p2p_bytes;
  props->maxCollBytes = d.max_coll_bytes;
  // v12. A rail is at most kMaxRail (255), so it fits railId's int16_t.
  if constexpr (requires { props->railId; }) {
    props->railId = d.rail < 0 ? NCCL_NET_ID_UNDEF : static_cast<int16_t>(d.rail);
    props->planeId = NCCL_NET_ID_UNDEF;
  }
  return okStatus();
}

}  // namespace

ncclResult_t devices(int* ndev) {
  return firewall("devices", [&] {
    TQ_ASSIGN_OR_RETURN(Plugin * p, plugin());
    return p->devices(ndev);
  });
}

ncclResult_t accept(void* listen_comm, void** recv_comm, ncclNetDeviceHandle_v11_t** /*dev_comm*/) {
  return firewall("accept", [&] {
    TQ_ASSIGN_OR_RETURN(Plugin * p, plugin());
    return p->accept(listen_comm, recv_comm);
  });
}

ncclResult_t regMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  return firewall("regMr", [&] {
    TQ_ASSIGN_OR_RETURN(Plugin * p, plugin());
    return p->regMr(comm, data, size, type, mhandle);
  });
}

ncclResult_t regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                         void** mhandle) {
  return firewall("regMrDmaBuf", [&] {
    TQ_ASSIGN_OR_RETURN(Plugin * p, plugin());
    return p->regMrDmaBuf(comm, data, size, type, offset, fd, mhandle);
  });
}

ncclResult_t deregMr(void* comm, void* mhandle) {
  return firewall("deregMr", [&] {
    TQ_ASSIGN_OR_RETURN(Plugin * p, plugin());
    return p->deregMr(comm, mhandle);
  });
}

ncclResult_t isend(void* send_comm, void* data, size_t size, int tag, void* mhandle,
                   void* /*phandle*/, void** request) {
  return firewall("isend", [&] {
    TQ_ASSIGN_OR_RETURN(Plugin * p, plugin());
    return p->isend(send_comm, data, size, tag, mhandle, request);
  });
}

ncclResult_t irecv(void* recv_comm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                   void** /*phandles*/, void** request) {
  return firewall("irecv", [&] {
    TQ_ASSIGN_OR_RETURN(Plugin * p, plugin());
    return p->irecv(recv_comm, n, data, sizes, tags, mhandles, request);
  });
}

ncclResult_t iflush(void* recv_comm, int n, void** data, int* sizes, void** mhandles,
                    void** request) {
  return firewall("iflush", [&] {
    TQ_ASSIGN_OR_RETURN(Plugin * p, plugin());
    return p->iflush(recv_comm, n, data, sizes, mhandles, request);
  });
}

ncclResult_t test(void* request, int* done, int* sizes) {
  return firewall("test", [&] {
    TQ_ASSIGN_OR_RETURN(Plugin * p, plugin());
    return p->test(request, done, sizes);
  });
}

ncclResult_t closeSend(void* send_comm) {
  return firewall("closeSend", [&] {
    return closeThenMaybeEnd([&](Plugin* p) { return p->closeSend(send_comm); });
  });
}

ncclResult_t closeRecv(void* recv_comm) {
  return firewall("closeRecv", [&] {
    return closeThenMaybeEnd([&](Plugin* p) { return p->closeRecv(recv_comm); });
  });
}

ncclResult_t closeListen(void* listen_comm) {
  return firewall("closeListen", [&] {
    return closeThenMaybeEnd([&](Plugin* p) { return p->closeListen(listen_comm); });
  });
}

// ---- v11 / v12 ------------------------------------------------------------------------------

ncclResult_t initV11(void** ctx, uint64_t comm_id, ncclNetCommConfig_v11_t* config,
                     ncclDebugLogger_t logger, ncclProfilerCallback_t /*prof*/) {
  return firewall("init", [&]() -> Status {
    if (ctx == nullptr) return invalidArgument("init: ctx is NULL");
    *ctx = nullptr;
    MutexLock lock(g_life_mu);
    TQ_ASSIGN_OR_RETURN(Plugin * p, pluginForInit(logger));
    // `config` points at NCCL's stack temporary: copy what we need now.
    const int tc = config != nullptr ? config->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF;
    TQ_ASSIGN_OR_RETURN(NetContext * c, p->newContext(comm_id, tc));
    *ctx = c;
    return okStatus();
  });
}

ncclResult_t getPropertiesV11(int dev, ncclNetProperties_v11_t* props) {
  return firewall("getProperties", [&]() -> Status {
    TQ_RETURN_IF_ERROR(
        (fillProperties<ncclNetProperties_v11_t, NCCL_NET_MAX_DEVS_PER_NIC>(dev, props)));
    props->maxMultiRequestSize = 1;
    return okStatus();
  });
}

ncclResult_t getPropertiesV12(int dev, ncclNetProperties_v12_t* props) {
  return firewall("getProperties", [&]() -> Status {
    TQ_RETURN_IF_ERROR(
        (fillProperties<ncclNetProperties_v12_t, NCCL_NET_MAX_DEVS_PER_NIC_V12>(dev, props)));
    props->maxMultiRequestSize = 1;
    return okStatus();
  });
}

ncclResult_t listenV11(void* ctx, int dev, void* handle, void** listen_comm) {
  return firewall("listen", [&] {
    TQ_ASSIGN_OR_RETURN(Plugin * p, plugin());
    return p->listen(ctx, dev, handle, listen_comm);
  });
}

ncclResult_t connectV11(void* ctx, int dev, void* handle, void** send_comm,
                        ncclNetDeviceHandle_v11_t** /*dev_comm*/) {
  return firewall("connect", [&]() -> Status {
    TQ_ASSIGN_OR_RETURN(Plugin * p, plugin());
    if (ctx == nullptr) return invalidArgument("connect: ctx is NULL");
    const int tc = static_cast<NetContext*>(ctx)->traffic_class;
    return p->connect(ctx, tc, dev, handle, send_comm);
  });
}

ncclResult_t finalizeV11(void* ctx) {
  return firewall("finalize", [&] {
    // NCCL 2.28.9 calls finalize with the NULL context a failed init gave it back (2.30 no
    // longer does): nothing was made, so there is nothing to finalize and nothing to warn about.
    if (ctx == nullptr) return okStatus();
    TQ_ASSIGN_OR_RETURN(Plugin * p, plugin());
    TQ_RETURN_IF_ERROR(p->finalize(ctx));
    endPluginIfIdle();
    return okStatus();
  });
}

// ---- v10 -------------------------------------------------------------------------------------

ncclResult_t initV10(ncclDebugLogger_t logger, ncclProfilerCallback_t /*prof*/) {
  return firewall("init", [&] { return initProcessContext(logger); });
}

ncclResult_t getPropertiesV10(int dev, ncclNetProperties_v10_t* props) {
  return firewall("getProperties", [&] {
    return fillProperties<ncclNetProperties_v10_t, NCCL_NET_MAX_DEVS_PER_NIC>(dev, props);
  });
}

ncclResult_t listenV10(int dev, void* handle, void** listen_comm) {
  return firewall("listen", [&] {
    TQ_ASSIGN_OR_RETURN(Plugin * p, plugin());
    TQ_ASSIGN_OR_RETURN(NetContext * c, processContext());
    return p->listen(c, dev, handle, listen_comm);
  });
}

ncclResult_t connectV10(int dev, ncclNetCommConfig_v10_t* config, void* handle, void** send_comm,
                        ncclNetDeviceHandle_v10_t** /*dev_comm*/) {
  return firewall("connect", [&] {
    TQ_ASSIGN_OR_RETURN(Plugin * p, plugin());
    TQ_ASSIGN_OR_RETURN(NetContext * c, processContext());
    const int tc = config != nullptr ? config->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF;
    return p->connect(c, tc, dev, handle, send_comm);
  });
}

// ---- v9 --------------------------------------------------------------------------------------

ncclResult_t initV9(ncclDebugLogger_t logger) {
  return firewall("init", [&] { return initProcessContext(logger); });
}

ncclResult_t getPropertiesV9(int dev, ncclNetProperties_v9_t* props) {
  return firewall("getProperties", [&] {
    return fillProperties<ncclNetProperties_v9_t, NCCL_NET_MAX_DEVS_PER_NIC>(dev, props);
  });
}

ncclResult_t connectV9(int dev, void* handle, void** send_comm,
                       ncclNetDeviceHandle_v9_t** /*dev_comm*/) {
  return firewall("connect", [&] {
    TQ_ASSIGN_OR_RETURN(Plugin * p, plugin());
    TQ_ASSIGN_OR_RETURN(NetContext * c, processContext());
    return p->connect(c, NCCL_NET_TRAFFIC_CLASS_UNDEF, dev, handle, send_comm);
  });
}

ncclResult_t isendV9(void* send_comm, void* data, size_t size, int tag, void* mhandle,
                     void** request) {
  return isend(send_comm, data, size, tag, mhandle, nullptr, request);
}

ncclResult_t irecvV9(void* recv_comm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                     void** request) {
  return irecv(recv_comm, n, data, sizes, tags, mhandles, nullptr, request);
}

}  // namespace tq::plugin::api
