// tenantqos-perf's view of an NCCL net plugin, loaded exactly as NCCL loads it:
// dlopen(RTLD_NOW | RTLD_LOCAL) of the name as given, else libnccl-net-<name>.so; then
// dlsym("ncclNetPlugin_v11"), falling back to "ncclNetPlugin_v10". Works with any plugin that
// exports those tables (ours, or another one for comparison).
//
// Not thread-safe: one NetPlugin per rank process, used from one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "nccl-plugin/abi/net_v10.h"
#include "nccl-plugin/abi/net_v11.h"

namespace tq::perf {

struct NetHandle {
  char bytes[NCCL_NET_HANDLE_MAXSIZE];
};

class NetPlugin {
 public:
  // `name`: a path, a file name, or a short name (tenantqos -> libnccl-net-tenantqos.so).
  // `search_dirs`: extra directories tried last (e.g. the build tree's lib/).
  // `abi`: 0 = v11 if exported else v10; 10 or 11 to force one.
  static Result<std::unique_ptr<NetPlugin>> load(const std::string& name,
                                                 const std::vector<std::string>& search_dirs,
                                                 int abi);
  ~NetPlugin();

  const std::string& path() const { return path_; }
  int abi() const { return abi_; }
  const char* name() const;

  // v11: init(ctx, commId, {trafficClass}); v10: init() once and trafficClass on connect.
  Status init(uint64_t comm_id, int traffic_class);
  Result<int> devices();
  Result<std::string> deviceName(int dev);
  Status listen(int dev, NetHandle* handle, void** listen_comm);
  // Non-blocking: *send_comm stays null until done (call again with the same handle).
  Status connect(int dev, NetHandle* handle, void** send_comm);
  Status accept(void* listen_comm, void** recv_comm);
  Status regMr(void* comm, void* data, size_t size, void** mhandle);
  Status deregMr(void* comm, void* mhandle);
  // *request null: the plugin asks to retry later (e.g. paced).
  Status isend(void* send_comm, void* data, size_t size, int tag, void* mhandle, void** request);
  Status irecv(void* recv_comm, void* data, size_t size, int tag, void* mhandle, void** request);
  Status test(void* request, bool* done, int* size);
  Status closeSend(void* c);
  Status closeRecv(void* c);
  Status closeListen(void* c);
  Status finalize();

 private:
  NetPlugin() = default;
  Status check(ncclResult_t r, const char* call) const;

  void* lib_ = nullptr;
  std::string path_;
  int abi_ = 0;
  const ncclNet_v11_t* v11_ = nullptr;
  const ncclNet_v10_t* v10_ = nullptr;
  void* ctx_ = nullptr;
  int traffic_class_ = NCCL_NET_TRAFFIC_CLASS_UNDEF;
};

// Prints plugin log lines: warnings always, info when NCCL_DEBUG=INFO (or TRACE).
void setPluginLogPrefix(const std::string& prefix);

}  // namespace tq::perf
