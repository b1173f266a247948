/* NCCL net-plugin ABI v11 (NCCL 2.28-2.30). Symbol: ncclNetPlugin_v11.
 * init(ctx, commId, config, ...) is called once PER COMMUNICATOR (config points at a stack
 * temporary: copy it); listen/connect take that ctx; accept does not (keep ctx in the listen
 * comm); finalize(ctx) ends it. setNetAttr may be NULL. Properties gain maxMultiRequestSize. */
#ifndef TQ_NCCL_ABI_NET_V11_H_
#define TQ_NCCL_ABI_NET_V11_H_

#include "net_common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int ndevs;
  int devs[NCCL_NET_MAX_DEVS_PER_NIC];
} ncclNetVDeviceProps_v11_t;

typedef struct {
  int trafficClass; /* plugin-specific; NCCL_NET_TRAFFIC_CLASS_UNDEF (-1) when unset */
} ncclNetCommConfig_v11_t;

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
  ncclNetVDeviceProps_v11_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize; /* NCCL's own transports set 1 */
} ncclNetProperties_v11_t;

#define NCCL_NET_ATTR_UNDEF -1

typedef struct {
  int32_t maxConcurrentPeers;
  int32_t minConcurrentPeers;
  int32_t maxFlowsPerPeer;
  int32_t minFlowsPerPeer;
} ncclNetCommAttr_v11_t;

typedef struct {
  ncclNetCommAttr_v11_t sendCommAttr;
  ncclNetCommAttr_v11_t recvCommAttr;
  uint32_t op;    /* bitmask of ncclFunc_t */
  uint32_t algo;  /* bitmask */
  uint32_t proto; /* bitmask */
} ncclNetAttr_v11_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t commId, ncclNetCommConfig_v11_t* config,
                       ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v11_t* props);
  ncclResult_t (*listen)(void* ctx, int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(void* ctx, int dev, void* handle, void** sendComm,
                          ncclNetDeviceHandle_v11_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm,
                         ncclNetDeviceHandle_v11_t** recvDevComm);
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
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v11_t* props);
  ncclResult_t (*finalize)(void* ctx);
  ncclResult_t (*setNetAttr)(void* ctx, ncclNetAttr_v11_t* netAttr);
} ncclNet_v11_t;

TQ_ABI_STATIC_ASSERT(sizeof(ncclNetCommConfig_v11_t) == 4, "v11 config");
TQ_ABI_STATIC_ASSERT(sizeof(ncclNetAttr_v11_t) == 44, "v11 net attr");
TQ_ABI_STATIC_ASSERT(offsetof(ncclNetProperties_v11_t, guid) == 16, "v11 props.guid");
TQ_ABI_STATIC_ASSERT(offsetof(ncclNetProperties_v11_t, latency) == 44, "v11 props.latency");
TQ_ABI_STATIC_ASSERT(offsetof(ncclNetProperties_v11_t, netDeviceType) == 56, "v11 props.netDeviceType");
TQ_ABI_STATIC_ASSERT(offsetof(ncclNetProperties_v11_t, vProps) == 64, "v11 props.vProps");
TQ_ABI_STATIC_ASSERT(offsetof(ncclNetProperties_v11_t, maxP2pBytes) == 88, "v11 props.maxP2pBytes");
TQ_ABI_STATIC_ASSERT(offsetof(ncclNetProperties_v11_t, maxCollBytes) == 96, "v11 props.maxCollBytes");
TQ_ABI_STATIC_ASSERT(offsetof(ncclNetProperties_v11_t, maxMultiRequestSize) == 104,
                     "v11 props.maxMultiRequestSize");
TQ_ABI_STATIC_ASSERT(sizeof(ncclNetProperties_v11_t) == 112, "v11 props size");
TQ_ABI_STATIC_ASSERT(offsetof(ncclNet_v11_t, connect) == 40, "v11 connect slot");
TQ_ABI_STATIC_ASSERT(offsetof(ncclNet_v11_t, isend) == 80, "v11 isend slot");
TQ_ABI_STATIC_ASSERT(offsetof(ncclNet_v11_t, test) == 104, "v11 test slot");
TQ_ABI_STATIC_ASSERT(offsetof(ncclNet_v11_t, finalize) == 160, "v11 finalize slot");
TQ_ABI_STATIC_ASSERT(offsetof(ncclNet_v11_t, setNetAttr) == 168, "v11 setNetAttr slot");
TQ_ABI_STATIC_ASSERT(sizeof(ncclNet_v11_t) == 176, "v11 function table size");

#ifdef __cplusplus
}
#endif

#endif /* TQ_NCCL_ABI_NET_V11_H_ */
