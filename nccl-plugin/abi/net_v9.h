/* NCCL net-plugin ABI v9 (NCCL 2.24-2.25; still loaded by 2.26-2.30). Symbol: ncclNetPlugin_v9.
 * Differences from v10: init(logger) only, no traffic-class config on connect, no profiler
 * handles on isend/irecv. Properties are identical to v10. */
#ifndef TQ_NCCL_ABI_NET_V9_H_
#define TQ_NCCL_ABI_NET_V9_H_

#include "net_common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int ndevs;
  int devs[NCCL_NET_MAX_DEVS_PER_NIC];
} ncclNetVDeviceProps_v9_t;

typedef struct {
  char* name;    /* interface / device name, for logs */
  char* pciPath; /* realpath of the sysfs device, or NULL for a virtual NIC */
  uint64_t guid; /* NICs with the same guid are one port */
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed; /* Mbit/s */
  int port;
  float latency; /* us; 0 = NCCL's default */
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  ncclNetVDeviceProps_v9_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
} ncclNetProperties_v9_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v9_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm,
                          ncclNetDeviceHandle_v9_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm, ncclNetDeviceHandle_v9_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle,
                        void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags,
                        void** mhandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                         void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v9_t* props);
} ncclNet_v9_t;

TQ_ABI_STATIC_ASSERT(sizeof(ncclNetVDeviceProps_v9_t) == 20, "v9 vProps");
TQ_ABI_STATIC_ASSERT(offsetof(ncclNetProperties_v9_t, guid) == 16, "v9 props.guid");
TQ_ABI_STATIC_ASSERT(offsetof(ncclNetProperties_v9_t, latency) == 44, "v9 props.latency");
TQ_ABI_STATIC_ASSERT(offsetof(ncclNetProperties_v9_t, netDeviceType) == 56, "v9 props.netDeviceType");
TQ_ABI_STATIC_ASSERT(offsetof(ncclNetProperties_v9_t, vProps) == 64, "v9 props.vProps");
TQ_ABI_STATIC_ASSERT(offsetof(ncclNetProperties_v9_t, maxP2pBytes) == 88, "v9 props.maxP2pBytes");
TQ_ABI_STATIC_ASSERT(offsetof(ncclNetProperties_v9_t, maxCollBytes) == 96, "v9 props.maxCollBytes");
TQ_ABI_STATIC_ASSERT(sizeof(ncclNetProperties_v9_t) == 104, "v9 props size");
TQ_ABI_STATIC_ASSERT(offsetof(ncclNet_v9_t, isend) == 80, "v9 isend slot");
TQ_ABI_STATIC_ASSERT(offsetof(ncclNet_v9_t, makeVDevice) == 152, "v9 makeVDevice slot");
TQ_ABI_STATIC_ASSERT(sizeof(ncclNet_v9_t) == 160, "v9 function table size");

#ifdef __cplusplus
}
#endif

#endif /* TQ_NCCL_ABI_NET_V9_H_ */
