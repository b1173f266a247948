/* Types and constants shared by every version of NCCL's net-plugin ABI.
 *
 * Our own declarations, written from the documented layout (NCCL 2.28.9 ext-net and
 * src/include/plugin; see docs/plugin.md). No NCCL header is copied or needed. Plain C11 so the
 * ABI test (a C program) and the C++ plugin include the same file. Layouts are for LP64 Linux,
 * the only target NCCL supports; the static assertions below fail the build if a compiler lays
 * them out differently.
 */
#ifndef TQ_NCCL_ABI_NET_COMMON_H_
#define TQ_NCCL_ABI_NET_COMMON_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#define TQ_ABI_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
extern "C" {
#else
#define TQ_ABI_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

/* Return codes. Values 0-6 are what plugins return; 7-8 exist only in NCCL's core header. */
typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,   /* OS, library or network failure */
  ncclInternalError = 3, /* NCCL misused the plugin (e.g. too many requests) */
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,  /* user / configuration error, e.g. message larger than the receive */
  ncclRemoteError = 6,   /* the peer failed */
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;

typedef enum {
  NCCL_LOG_NONE = 0,
  NCCL_LOG_VERSION = 1,
  NCCL_LOG_WARN = 2,
  NCCL_LOG_INFO = 3,
  NCCL_LOG_ABORT = 4,
  NCCL_LOG_TRACE = 5
} ncclDebugLogLevel;

/* Subsystem flags passed with each log line (NCCL_DEBUG_SUBSYS filters on them). */
typedef enum {
  NCCL_INIT = 1,
  NCCL_COLL = 2,
  NCCL_P2P = 4,
  NCCL_SHM = 8,
  NCCL_NET = 16,
  NCCL_GRAPH = 32,
  NCCL_TUNING = 64,
  NCCL_ENV = 128,
  NCCL_ALLOC = 256,
  NCCL_CALL = 512,
  NCCL_PROXY = 1024,
  NCCL_NVLS = 2048,
  NCCL_BOOTSTRAP = 4096,
  NCCL_REG = 8192,
  NCCL_ALL = ~0
} ncclDebugLogSubSys;

typedef void (*ncclDebugLogger_t)(ncclDebugLogLevel level, unsigned long flags, const char* file,
                                  int line, const char* fmt, ...);

/* Profiler callback handed to init since v10; may be NULL. We never call it. */
typedef ncclResult_t (*ncclProfilerCallback_t)(void** eHandle, int type, void* pHandle,
                                               int64_t pluginId, void* extData);

#define NCCL_NET_HANDLE_MAXSIZE 128
#define NCCL_NET_MAX_REQUESTS 32 /* in-flight requests per send or recv comm */

#define NCCL_PTR_HOST 0x1
#define NCCL_PTR_CUDA 0x2
#define NCCL_PTR_DMABUF 0x4

/* Hint NCCL may leave in *request on entry to irecv (LL/LL128 with n == 1). */
#define NCCL_NET_OPTIONAL_RECV_COMPLETION 0x1
#define NCCL_NET_MULTI_REQUEST 0x2

#define NCCL_NET_MAX_DEVS_PER_NIC 4 /* v9-v11; v12 has 8 */
#define NCCL_NET_TRAFFIC_CLASS_UNDEF -1
#define NCCL_MAX_NET_SIZE_BYTES (1ull << 40) /* upper bound for maxP2pBytes / maxCollBytes */

typedef enum { NCCL_NET_DEVICE_HOST = 0, NCCL_NET_DEVICE_UNPACK = 1 } ncclNetDeviceType;
#define NCCL_NET_DEVICE_INVALID_VERSION 0x0

/* Device-offload handle (connect/accept out-parameter since v7). Host plugins leave it alone. */
typedef struct {
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  void* handle;
  size_t size;
  int needsProxyProgress;
} ncclNetDeviceHandle_v11_t;
typedef ncclNetDeviceHandle_v11_t ncclNetDeviceHandle_v9_t;
typedef ncclNetDeviceHandle_v11_t ncclNetDeviceHandle_v10_t;
typedef ncclNetDeviceHandle_v11_t ncclNetDeviceHandle_v12_t;

TQ_ABI_STATIC_ASSERT(sizeof(ncclResult_t) == 4, "ncclResult_t is an int-sized enum");
TQ_ABI_STATIC_ASSERT(sizeof(ncclNetDeviceType) == 4, "ncclNetDeviceType is an int-sized enum");
TQ_ABI_STATIC_ASSERT(sizeof(ncclNetDeviceHandle_v11_t) == 32, "ncclNetDeviceHandle layout");
TQ_ABI_STATIC_ASSERT(offsetof(ncclNetDeviceHandle_v11_t, handle) == 8, "ncclNetDeviceHandle.handle");
TQ_ABI_STATIC_ASSERT(offsetof(ncclNetDeviceHandle_v11_t, needsProxyProgress) == 24,
                     "ncclNetDeviceHandle.needsProxyProgress");

#ifdef __cplusplus
}
#endif

#endif /* TQ_NCCL_ABI_NET_COMMON_H_ */
