// The C entry points of every ABI version, as plain functions over the one Plugin.
//
// Each is an exception firewall (plugin.h firewall()): argument checks, a catch-all, the one
// Status -> ncclResult_t mapping. exports.cc (compiled into the shared object only) builds the
// exported ncclNetPlugin_vN tables from these; tests may call them directly.
//
// Versions: v12 and v11 share everything but getProperties; v10 keeps one process-wide context
// (created by its init) and takes the traffic class from connect's config; v9 has neither
// config nor profiler handles.
#pragma once

#include "nccl-plugin/abi/net_v10.h"
#include "nccl-plugin/abi/net_v11.h"
#include "nccl-plugin/abi/net_v12.h"
#include "nccl-plugin/abi/net_v9.h"

namespace tq::plugin::api {

// Shared by all versions.
ncclResult_t devices(int* ndev);
ncclResult_t accept(void* listen_comm, void** recv_comm, ncclNetDeviceHandle_v11_t** dev_comm);
ncclResult_t regMr(void* comm, void* data, size_t size, int type, void** mhandle);
ncclResult_t regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                         void** mhandle);
ncclResult_t deregMr(void* comm, void* mhandle);
ncclResult_t isend(void* send_comm, void* data, size_t size, int tag, void* mhandle, void* phandle,
                   void** request);
ncclResult_t irecv(void* recv_comm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                   void** phandles, void** request);
ncclResult_t iflush(void* recv_comm, int n, void** data, int* sizes, void** mhandles,
                    void** request);
ncclResult_t test(void* request, int* done, int* sizes);
ncclResult_t closeSend(void* send_comm);
ncclResult_t closeRecv(void* recv_comm);
ncclResult_t closeListen(void* listen_comm);

// v11 / v12
ncclResult_t initV11(void** ctx, uint64_t comm_id, ncclNetCommConfig_v11_t* config,
                     ncclDebugLogger_t logger, ncclProfilerCallback_t prof);
ncclResult_t getPropertiesV11(int dev, ncclNetProperties_v11_t* props);
ncclResult_t getPropertiesV12(int dev, ncclNetProperties_v12_t* props);
ncclResult_t listenV11(void* ctx, int dev, void* handle, void** listen_comm);
ncclResult_t connectV11(void* ctx, int dev, void* handle, void** send_comm,
                        ncclNetDeviceHandle_v11_t** dev_comm);
ncclResult_t finalizeV11(void* ctx);

// v10
ncclResult_t initV10(ncclDebugLogger_t logger, ncclProfilerCallback_t prof);
ncclResult_t getPropertiesV10(int dev, ncclNetProperties_v10_t* props);
ncclResult_t listenV10(int dev, void* handle, void** listen_comm);
ncclResult_t connectV10(int dev, ncclNetCommConfig_v10_t* config, void* handle, void** send_comm,
                        ncclNetDeviceHandle_v10_t** dev_comm);

// v9
ncclResult_t initV9(ncclDebugLogger_t logger);
ncclResult_t getPropertiesV9(int dev, ncclNetProperties_v9_t* props);
ncclResult_t connectV9(int dev, void* handle, void** send_comm,
                       ncclNetDeviceHandle_v9_t** dev_comm);
ncclResult_t isendV9(void* send_comm, void* data, size_t size, int tag, void* mhandle,
                     void** request);
ncclResult_t irecvV9(void* recv_comm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                     void** request);

}  // namespace tq::plugin::api
