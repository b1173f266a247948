/* NCCL net-plugin ABI v10 (NCCL 2.26-2.27; still loaded by 2.28-2.30). Symbol:
 * ncclNetPlugin_v10. init(logger, profiler) is called once per process; the per-communicator
 * traffic class reaches the plugin only through connect()'s config (listen/accept never see it).
 */
#ifndef TQ_NCCL_ABI_NET_V10_H_
#define TQ_NCCL_ABI_NET_V10_H_

#include "net_common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int ndevs;
  int devs[NCCL_NET_MAX_DEVS_PER_NIC];
} ncclNetVDeviceProps_v10_t;

typedef struct {
  int trafficClass; /* plugin-specific; NCCL_NET_TRAFFIC_CLASS_UNDEF (-1) when unset */
} ncclNetCommConfig_v10_t;

typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed; /* Mbit/s */
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  ncclNetVDeviceProps_v10_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
} ncclNetProperties_v10_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v10_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, ncclNetCommConfig_v10_t* config, void* handle, void** sendComm,
                          ncclNetDeviceHandle_v10_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm,
                         ncclNetDeviceHandle_v10_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle,
                        void* phandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags,
                        void** mhandles, void** phandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                         void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v10_t* props);
} ncclNet_v10_t;

TQ_ABI_STATIC_ASSERT(sizeof(ncclNetCommConfig_v10_t) == 4, "v10 config");
TQ_ABI_STATIC_ASSERT(sizeof(ncclNetVDeviceProps_v10_t) == 20, "v10 vProps");
TQ_ABI_STATIC_ASSERT(offsetof(ncclNetProperties_v10_t, guid) == 16, "v10 props.guid");
TQ_ABI_STATIC_ASSERT(offsetof(ncclNetProperties_v10_t, latency) == 44, "v10 props.latency");
TQ_ABI_STATIC_ASSERT(offsetof(ncclNetProperties_v10_t, netDeviceType) == 56, "v10 props.netDeviceType");
TQ_ABI_STATIC_ASSERT(offsetof(ncclNetProperties_v10_t, vProps) == 64, "v10 props.vProps");
TQ_ABI_STATIC_ASSERT(offsetof(ncclNetProperties_v10_t, maxP2pBytes) == 88, "v10 props.maxP2pBytes");
TQ_ABI_STATIC_ASSERT(offsetof(ncclNetProperties_v10_t, maxCollBytes) == 96, "v10 props.maxCollBytes");
TQ_ABI_STATIC_ASSERT(sizeof(ncclNetProperties_v10_t) == 104, "v10 props size");
TQ_ABI_STATIC_ASSERT(offsetof(ncclNet_v10_t, connect) == 40, "v10 connect slot");
TQ_ABI_STATIC_ASSERT(offsetof(ncclNet_v10_t, isend) == 80, "v10 isend slot");
TQ_ABI_STATIC_ASSERT(offsetof(ncclNet_v10_t, test) == 104, "v10 test slot");
TQ_ABI_STATIC_ASSERT(offsetof(ncclNet_v10_t, makeVDevice) == 152, "v10 makeVDevice slot");
TQ_ABI_STATIC_ASSERT(sizeof(ncclNet_v10_t) == 160, "v10 function table size");

#ifdef __cplusplus
}
#endif

#endif /* TQ_NCCL_ABI_NET_V10_H_ */
