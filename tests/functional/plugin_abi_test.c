/* ABI test of libnccl-net-tenantqos.so, in C, the way NCCL uses it: dlopen with
 * RTLD_NOW|RTLD_LOCAL, dlsym the versioned tables, drive them through our own ABI headers only
 * (nccl-plugin/abi/), host memory, no NCCL, no GPU.
 *
 *   plugin_abi_test <path/to/libnccl-net-tenantqos.so> <case>
 *
 * One ctest test per case (see CMakeLists.txt). Every wait is bounded (kDeadlineSec).
 *
 * The same cases run over the ib transport inside the Soft-RoCE VM (tests/rxe, ctest names
 * plugin_abi_ib.*) with TENANTQOS_TRANSPORT=ib: listen on TQ_ABI_LISTEN_DEV, connect from
 * TQ_ABI_CONNECT_DEV (rxe1 and rxe0 there, so the traffic crosses the veth pair). Where the
 * transports legitimately differ the case checks the ib behaviour: maxRecvs 8, and a send
 * without a posted receive gets no request (no clear-to-send) instead of being queued. */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nccl-plugin/abi/net_v10.h"
#include "nccl-plugin/abi/net_v11.h"
#include "nccl-plugin/abi/net_v12.h"
#include "nccl-plugin/abi/net_v9.h"

#define kDeadlineSec 20.0

static const char* g_case = "";
static void* g_lib = NULL;
static ncclNet_v11_t* g_net = NULL;
static int g_log_lines = 0;
static int g_ib = 0;          /* TENANTQOS_TRANSPORT=ib */
static int g_listen_dev = 0;  /* TQ_ABI_LISTEN_DEV */
static int g_connect_dev = 0; /* TQ_ABI_CONNECT_DEV */
static int g_log_prefixed = 0;
static int g_log_warnings = 0;

#define FAIL(...)                                                     \
  do {                                                                \
    fprintf(stderr, "FAIL [%s] %s:%d: ", g_case, __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__);                                     \
    fputc('\n', stderr);                                              \
    exit(1);                                                          \
  } while (0)
#define CHECK(cond, ...)            \
  do {                              \
    if (!(cond)) FAIL(__VA_ARGS__); \
  } while (0)
#define NCCLCHECK(call)                                         \
  do {                                                          \
    ncclResult_t r_ = (call);                                   \
    CHECK(r_ == ncclSuccess, "%s returned %d", #call, (int)r_); \
  } while (0)

static double now_sec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void stub_logger(ncclDebugLogLevel level, unsigned long flags, const char* file, int line,
                        const char* fmt, ...) {
  char buf[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  g_log_lines++;
  if (level == NCCL_LOG_WARN) g_log_warnings++;
  if (strncmp(buf, "NET/tenantqos", 13) == 0) g_log_prefixed++;
  fprintf(stderr, "  [plugin level=%d flags=0x%lx %s:%d] %s\n", (int)level, flags, file, line, buf);
}

static int count_dir(const char* path) {
  DIR* d = opendir(path);
  int n = 0;
  struct dirent* e;
  if (d == NULL) return -1;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] != '.') n++;
  }
  closedir(d);
  return n;
}

static void* must_alloc(size_t n) {
  void* p = NULL;
  CHECK(posix_memalign(&p, 4096, n ? n : 1) == 0, "posix_memalign %zu", n);
  return p;
}

static unsigned char pattern(size_t i, unsigned seed) {
  return (unsigned char)((i * 2654435761u + seed * 40503u) >> 13);
}

static void load(void) {
  const char* path = getenv("TQ_ABI_PLUGIN");
  g_lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  CHECK(g_lib != NULL, "dlopen %s: %s", path, dlerror());
  g_net = (ncclNet_v11_t*)dlsym(g_lib, "ncclNetPlugin_v11");
  CHECK(g_net != NULL, "dlsym ncclNetPlugin_v11: %s", dlerror());
}

static void* init_ctx(int traffic_class) {
  void* ctx = NULL;
  ncclNetCommConfig_v11_t cfg = {traffic_class};
  NCCLCHECK(g_net->init(&ctx, 0x1234, &cfg, stub_logger, NULL));
  CHECK(ctx != NULL, "init returned a NULL ctx");
  return ctx;
}

/* listen in ctx_r, then poll connect (ctx_s) and accept alternately in this one thread. */
static void connect_pair(void* ctx_s, void* ctx_r, void** send, void** recv, void** listen) {
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  char wire[NCCL_NET_HANDLE_MAXSIZE];
  ncclNetDeviceHandle_v11_t* dev_s = NULL;
  ncclNetDeviceHandle_v11_t* dev_r = NULL;
  memset(handle, 0xab, sizeof handle);
  NCCLCHECK(g_net->listen(ctx_r, g_listen_dev, handle, listen));
  CHECK(*listen != NULL, "listen returned a NULL comm");
  memcpy(wire, handle, sizeof wire); /* "out of band" exchange */
  *send = *recv = NULL;
  double deadline = now_sec() + kDeadlineSec;
  int polls = 0;
  while (*send == NULL || *recv == NULL) {
    if (*send == NULL) NCCLCHECK(g_net->connect(ctx_s, g_connect_dev, wire, send, &dev_s));
    if (*recv == NULL) NCCLCHECK(g_net->accept(*listen, recv, &dev_r));
    polls++;
    CHECK(now_sec() < deadline, "connect/accept did not complete (%d polls)", polls);
  }
}

/* One message of `ssize` bytes into a receive of `rsize`; returns the receiver's result. */
static ncclResult_t transfer(void* send, void* recv, size_t ssize, size_t rsize, unsigned seed,
                             ncclResult_t* send_result) {
  unsigned char* sbuf = must_alloc(ssize);
  unsigned char* rbuf = must_alloc(rsize);
  void *smr = NULL, *rmr = NULL, *sreq = NULL, *rreq = NULL;
  size_t i;
  for (i = 0; i < ssize; i++) sbuf[i] = pattern(i, seed);
  memset(rbuf, 0x5a, rsize);
  NCCLCHECK(g_net->regMr(send, sbuf, ssize, NCCL_PTR_HOST, &smr));
  NCCLCHECK(g_net->regMr(recv, rbuf, rsize, NCCL_PTR_HOST, &rmr));
  void* rdata[1] = {rbuf};
  size_t rsizes[1] = {rsize};
  int tags[1] = {7};
  void* rmrs[1] = {rmr};
  NCCLCHECK(g_net->irecv(recv, 1, rdata, rsizes, tags, rmrs, NULL, &rreq));
  CHECK(rreq != NULL, "irecv returned no request");
  double deadline = now_sec() + kDeadlineSec;
  int sdone = 0, rdone = 0, got = -1, sent = -1;
  ncclResult_t rres = ncclSuccess, sres = ncclSuccess;
  while (sreq == NULL && sres == ncclSuccess) {
    sres = g_net->isend(send, sbuf, ssize, 7, smr, NULL, &sreq);
    CHECK(now_sec() < deadline, "isend never accepted the message");
  }
  while ((!sdone && sres == ncclSuccess) || (!rdone && rres == ncclSuccess)) {
    if (!sdone && sres == ncclSuccess) sres = g_net->test(sreq, &sdone, &sent);
    if (!rdone && rres == ncclSuccess) rres = g_net->test(rreq, &rdone, &got);
    CHECK(now_sec() < deadline,
          "transfer of %zu into %zu did not finish (send done %d, recv done %d)", ssize, rsize,
          sdone, rdone);
  }
  if (rres == ncclSuccess) {
    CHECK(got == (int)ssize, "receiver reports %d bytes, sent %zu", got, ssize);
    CHECK(sent == (int)ssize, "sender reports %d bytes, sent %zu", sent, ssize);
    for (i = 0; i < ssize; i++) {
      CHECK(rbuf[i] == sbuf[i], "byte %zu of %zu: got 0x%02x want 0x%02x", i, ssize, rbuf[i],
            sbuf[i]);
    }
    for (; i < rsize; i++) CHECK(rbuf[i] == 0x5a, "byte %zu beyond the message was written", i);
  }
  NCCLCHECK(g_net->deregMr(send, smr));
  NCCLCHECK(g_net->deregMr(recv, rmr));
  free(sbuf);
  free(rbuf);
  if (send_result) *send_result = sres;
  return rres;
}

static void close_all(void* send, void* recv, void* listen) {
  if (send) NCCLCHECK(g_net->closeSend(send));
  if (recv) NCCLCHECK(g_net->closeRecv(recv));
  if (listen) NCCLCHECK(g_net->closeListen(listen));
}

/* ---- cases ---------------------------------------------------------------------------------- */

static void case_symbols(void) {
  CHECK(strcmp(g_net->name, "tenantqos") == 0, "name is \"%s\"", g_net->name);
  ncclNet_v10_t* v10 = (ncclNet_v10_t*)dlsym(g_lib, "ncclNetPlugin_v10");
  ncclNet_v12_t* v12 = (ncclNet_v12_t*)dlsym(g_lib, "ncclNetPlugin_v12");
  ncclNet_v9_t* v9 = (ncclNet_v9_t*)dlsym(g_lib, "ncclNetPlugin_v9");
  CHECK(v10 != NULL && v12 != NULL && v9 != NULL, "missing v9/v10/v12 table");
  CHECK(strcmp(v10->name, "tenantqos") == 0 && strcmp(v9->name, "tenantqos") == 0, "names");
  CHECK(g_net->init && g_net->devices && g_net->getProperties && g_net->listen && g_net->connect &&
            g_net->accept && g_net->regMr && g_net->deregMr && g_net->isend && g_net->irecv &&
            g_net->iflush && g_net->test && g_net->closeSend && g_net->closeRecv &&
            g_net->closeListen && g_net->finalize,
        "a mandatory v11 function is NULL");
  CHECK(dlsym(g_lib, "ncclNetPlugin_v8") == NULL, "unexpected v8 table");
  /* Nothing but the tables is exported. */
  CHECK(dlsym(g_lib, "_ZN2tq6plugin3api7devicesEPi") == NULL, "internal symbol exported");
}

static void case_init_devices(void) {
  void* ctx = init_ctx(-1);
  CHECK(g_log_prefixed > 0,
        "init logged nothing through NCCL's logger with the NET/tenantqos prefix");
  int ndev = 0;
  NCCLCHECK(g_net->devices(&ndev));
  CHECK(ndev >= 1, "ndev = %d", ndev);
  for (int d = 0; d < ndev; d++) {
    ncclNetProperties_v11_t p;
    memset(&p, 0xff, sizeof p);
    NCCLCHECK(g_net->getProperties(d, &p));
    CHECK(p.name != NULL && p.name[0] != '\0', "device %d has no name", d);
    CHECK(p.ptrSupport == NCCL_PTR_HOST, "ptrSupport 0x%x", p.ptrSupport);
    CHECK(p.maxRecvs == (g_ib ? 8 : 1) && p.maxComms > 0, "maxRecvs %d maxComms %d", p.maxRecvs,
          p.maxComms);
    CHECK(p.regIsGlobal == g_ib, "regIsGlobal %d", p.regIsGlobal);
    CHECK(p.netDeviceType == NCCL_NET_DEVICE_HOST, "netDeviceType %d", (int)p.netDeviceType);
    CHECK(p.maxP2pBytes > 0 && p.maxP2pBytes <= NCCL_MAX_NET_SIZE_BYTES, "maxP2pBytes");
    CHECK(p.maxCollBytes > 0 && p.maxCollBytes <= NCCL_MAX_NET_SIZE_BYTES, "maxCollBytes");
    CHECK(p.maxMultiRequestSize == 1, "maxMultiRequestSize %d", p.maxMultiRequestSize);
    CHECK(p.vProps.ndevs == 1 && p.vProps.devs[0] == d, "vProps");
    CHECK(p.speed > 0, "speed %d", p.speed);
    fprintf(stderr, "device %d: %s speed %d Mbps pci %s\n", d, p.name, p.speed,
            p.pciPath ? p.pciPath : "(none)");
  }
  ncclNetProperties_v11_t p;
  CHECK(g_net->getProperties(ndev, &p) == ncclInvalidArgument, "device out of range accepted");
  CHECK(g_net->getProperties(0, NULL) == ncclInvalidArgument, "NULL props accepted");
  NCCLCHECK(g_net->finalize(ctx));
}

static void case_bad_args(void) {
  void* ctx = init_ctx(-1);
  void* req = (void*)1;
  int done = 0;
  CHECK(g_net->isend(NULL, NULL, 0, 0, NULL, NULL, &req) == ncclInvalidArgument, "isend(NULL)");
  CHECK(g_net->test(NULL, &done, NULL) == ncclInvalidArgument, "test(NULL)");
  CHECK(g_net->closeSend(NULL) == ncclInvalidArgument, "closeSend(NULL)");
  char junk[64];
  memset(junk, 0x42, sizeof junk);
  CHECK(g_net->closeRecv(junk) == ncclInvalidArgument, "closeRecv(junk)");
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  memset(handle, 0x11, sizeof handle);
  void* send = NULL;
  ncclNetDeviceHandle_v11_t* dev = NULL;
  CHECK(g_net->connect(ctx, 0, handle, &send, &dev) == ncclInvalidArgument && send == NULL,
        "connect to a garbage handle did not fail with ncclInvalidArgument");
  NCCLCHECK(g_net->finalize(ctx));
}

static void case_regmr(void) {
  void* ctx = init_ctx(-1);
  void *send, *recv, *listen, *mr = NULL;
  connect_pair(ctx, ctx, &send, &recv, &listen);
  char buf[64];
  NCCLCHECK(g_net->regMr(send, buf, sizeof buf, NCCL_PTR_HOST, &mr));
  CHECK(mr != NULL, "regMr gave no handle");
  NCCLCHECK(g_net->deregMr(send, mr));
  mr = NULL;
  ncclResult_t r = g_net->regMr(recv, buf, sizeof buf, NCCL_PTR_CUDA, &mr);
  CHECK(r == ncclInternalError && mr == NULL, "regMr(CUDA) returned %d", (int)r);
  /* iflush on host memory is a no-op: success and no request. */
  void* req = NULL;
  void* data[1] = {buf};
  int sizes[1] = {64};
  NCCLCHECK(g_net->iflush(recv, 1, data, sizes, NULL, &req));
  CHECK(req == NULL, "iflush returned a request for host memory");
  /* A region left registered is freed by close. */
  NCCLCHECK(g_net->regMr(recv, buf, sizeof buf, NCCL_PTR_HOST, &mr));
  close_all(send, recv, listen);
  NCCLCHECK(g_net->finalize(ctx));
}

static void case_transfers(void) {
  static const size_t sizes[] = {
      0,        1,        3, 127, 128, 4096, 65535, 65536, 65537, 262144 + 5, (1u << 20) + 7,
      4u << 20, 64u << 20};
  void* ctx_s = init_ctx(-1);
  void* ctx_r = init_ctx(-1);
  void *send, *recv, *listen;
  connect_pair(ctx_s, ctx_r, &send, &recv, &listen);
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    NCCLCHECK(transfer(send, recv, sizes[k], sizes[k], (unsigned)k, NULL));
    fprintf(stderr, "  %zu bytes ok\n", sizes[k]);
  }
  close_all(send, recv, listen);
  NCCLCHECK(g_net->finalize(ctx_s));
  NCCLCHECK(g_net->finalize(ctx_r));
}

static void case_recv_larger(void) {
  void* ctx = init_ctx(-1);
  void *send, *recv, *listen;
  connect_pair(ctx, ctx, &send, &recv, &listen);
  NCCLCHECK(transfer(send, recv, 1000, 1u << 20, 1, NULL));
  NCCLCHECK(transfer(send, recv, 0, 4096, 2, NULL));
  NCCLCHECK(transfer(send, recv, (2u << 20) + 1, 8u << 20, 3, NULL));
  close_all(send, recv, listen);
  NCCLCHECK(g_net->finalize(ctx));
}

static void send_larger(size_t ssize, size_t rsize) {
  void* ctx = init_ctx(-1);
  void *send, *recv, *listen;
  connect_pair(ctx, ctx, &send, &recv, &listen);
  ncclResult_t sres = ncclSuccess;
  ncclResult_t rres = transfer(send, recv, ssize, rsize, 9, &sres);
  CHECK(rres == ncclInvalidUsage,
        "receiver: send %zu > recv %zu returned %d, want ncclInvalidUsage", ssize, rsize,
        (int)rres);
  /* The sender learns it too: its request fails, or (already handed to the kernel) its next
   * call does, within the deadline. */
  double deadline = now_sec() + kDeadlineSec;
  while (sres == ncclSuccess) {
    void* req = NULL;
    char b = 0;
    sres = g_net->isend(send, &b, 0, 0, NULL, NULL, &req);
    if (sres == ncclSuccess && req != NULL) {
      int done = 0;
      while (sres == ncclSuccess && !done) {
        sres = g_net->test(req, &done, NULL);
        CHECK(now_sec() < deadline, "sender never learnt of the truncation");
      }
    }
    CHECK(now_sec() < deadline, "sender never learnt of the truncation");
  }
  CHECK(sres == ncclInvalidUsage, "sender got %d, want ncclInvalidUsage", (int)sres);
  close_all(send, recv, listen);
  NCCLCHECK(g_net->finalize(ctx));
}

static void case_send_larger(void) {
  send_larger(200, 100);                 /* inline path */
  send_larger((4u << 20) + 1, 1u << 20); /* striped path */
}

static void case_inflight32(void) {
  enum { N = NCCL_NET_MAX_REQUESTS, SZ = 100000 };
  void* ctx = init_ctx(-1);
  void *send, *recv, *listen;
  connect_pair(ctx, ctx, &send, &recv, &listen);
  unsigned char* sbuf = must_alloc((size_t)N * SZ);
  unsigned char* rbuf = must_alloc((size_t)(N + 1) * SZ);
  void *smr, *rmr;
  NCCLCHECK(g_net->regMr(send, sbuf, (size_t)N * SZ, NCCL_PTR_HOST, &smr));
  NCCLCHECK(g_net->regMr(recv, rbuf, (size_t)(N + 1) * SZ, NCCL_PTR_HOST, &rmr));
  for (size_t i = 0; i < (size_t)N * SZ; i++) sbuf[i] = pattern(i, 77);
  void* rreq[N + 1];
  void* sreq[N + 1];
  int tag = 0;
  for (int k = 0; k <= N; k++) {
    void* data[1] = {rbuf + (size_t)k * SZ};
    size_t size[1] = {SZ};
    void* mrs[1] = {rmr};
    rreq[k] = NULL;
    ncclResult_t r = g_net->irecv(recv, 1, data, size, &tag, mrs, NULL, &rreq[k]);
    if (k < N) {
      CHECK(r == ncclSuccess && rreq[k] != NULL, "irecv %d failed (%d)", k, (int)r);
    } else {
      CHECK(r != ncclSuccess && rreq[k] == NULL, "the 33rd irecv was not refused (%d)", (int)r);
    }
  }
  for (int k = 0; k <= N; k++) {
    sreq[k] = NULL;
    ncclResult_t r;
    double until = now_sec() + kDeadlineSec;
    do { /* ib: the receiver's clear-to-send may still be on its way */
      r = g_net->isend(send, k < N ? sbuf + (size_t)k * SZ : sbuf, SZ, tag, smr, NULL, &sreq[k]);
    } while (g_ib && k < N && r == ncclSuccess && sreq[k] == NULL && now_sec() < until);
    if (k < N) {
      CHECK(r == ncclSuccess && sreq[k] != NULL, "isend %d failed (%d)", k, (int)r);
    } else if (g_ib) {
      /* No 33rd receive was posted: no clear-to-send, so no request (NCCL retries). */
      CHECK(r == ncclSuccess && sreq[k] == NULL, "the 33rd isend got a request (%d)", (int)r);
    } else {
      CHECK(r != ncclSuccess && sreq[k] == NULL, "the 33rd isend was not refused (%d)", (int)r);
    }
  }
  int left = 2 * N;
  int sdone[N] = {0}, rdone[N] = {0};
  double deadline = now_sec() + kDeadlineSec;
  while (left > 0) {
    for (int k = 0; k < N; k++) {
      int size = -1;
      if (!sdone[k]) {
        NCCLCHECK(g_net->test(sreq[k], &sdone[k], &size));
        if (sdone[k]) left--;
      }
      if (!rdone[k]) {
        NCCLCHECK(g_net->test(rreq[k], &rdone[k], &size));
        if (rdone[k]) {
          CHECK(size == SZ, "request %d received %d bytes", k, size);
          left--;
        }
      }
    }
    CHECK(now_sec() < deadline, "32 in-flight requests did not complete (%d left)", left);
  }
  CHECK(memcmp(sbuf, rbuf, (size_t)N * SZ) == 0,
        "32 in-flight messages arrived corrupted or out of order");
  /* The refusals left the comms usable. */
  NCCLCHECK(transfer(send, recv, 12345, 12345, 5, NULL));
  NCCLCHECK(g_net->deregMr(send, smr));
  NCCLCHECK(g_net->deregMr(recv, rmr));
  close_all(send, recv, listen);
  free(sbuf);
  free(rbuf);
  NCCLCHECK(g_net->finalize(ctx));
}

/* Posts n receives and n sends of sz bytes (registered here, never deregistered: close frees
 * them) and tests none: n x 64 MiB cannot fit in socket buffers (nor cross rxe this fast), so
 * the requests are still in flight when the caller closes the comms (NCCL's abort path). */
static void post_untested(void* send, void* recv, unsigned char* sbuf, unsigned char* rbuf,
                          size_t sz, int n) {
  void *smr, *rmr, *req;
  NCCLCHECK(g_net->regMr(send, sbuf, sz, NCCL_PTR_HOST, &smr));
  NCCLCHECK(g_net->regMr(recv, rbuf, sz, NCCL_PTR_HOST, &rmr));
  for (int k = 0; k < n; k++) {
    void* data[1] = {rbuf};
    size_t size[1] = {sz};
    int tag = 0;
    req = NULL;
    NCCLCHECK(g_net->irecv(recv, 1, data, size, &tag, &rmr, NULL, &req));
    req = NULL;
    double until = now_sec() + kDeadlineSec;
    do { /* ib: wait for the clear-to-send without testing anything */
      NCCLCHECK(g_net->isend(send, sbuf, sz, 0, smr, NULL, &req));
    } while (g_ib && req == NULL && now_sec() < until);
    CHECK(req != NULL, "isend returned no request");
  }
}

static void case_close_inflight(void) {
  /* Counted before init: after the last finalize the plugin's own fds and threads (ib: the
   * devices' contexts and event threads) are gone too. */
  const int fds0 = count_dir("/proc/self/fd");
  const int threads0 = count_dir("/proc/self/task");
  void* ctx = init_ctx(-1);
  for (int round = 0; round < 3; round++) {
    void *send, *recv, *listen;
    connect_pair(ctx, ctx, &send, &recv, &listen);
    enum { N = 4 };
    const size_t sz = 64u << 20;
    unsigned char* sbuf = must_alloc(sz);
    unsigned char* rbuf = must_alloc(sz);
    memset(sbuf, 1, sz);
    post_untested(send, recv, sbuf, rbuf, sz, N);
    double t0 = now_sec();
    if (round == 1) {
      close_all(NULL, recv, NULL); /* receiver first */
      close_all(send, NULL, listen);
    } else {
      close_all(send, recv, listen);
    }
    double took = now_sec() - t0;
    CHECK(took < 5.0, "closing with requests in flight took %.2f s", took);
    free(sbuf);
    free(rbuf);
  }
  NCCLCHECK(g_net->finalize(ctx));
  double deadline = now_sec() + 5;
  while ((count_dir("/proc/self/fd") != fds0 || count_dir("/proc/self/task") != threads0) &&
         now_sec() < deadline) {
    usleep(10000);
  }
  CHECK(count_dir("/proc/self/fd") == fds0, "fd leak: %d before, %d after", fds0,
        count_dir("/proc/self/fd"));
  CHECK(count_dir("/proc/self/task") == threads0, "thread leak: %d before, %d after", threads0,
        count_dir("/proc/self/task"));
}

static void case_v10(void) {
  ncclNet_v10_t* v10 = (ncclNet_v10_t*)dlsym(g_lib, "ncclNetPlugin_v10");
  CHECK(v10 != NULL, "no v10 table");
  NCCLCHECK(v10->init(stub_logger, NULL));
  NCCLCHECK(v10->init(stub_logger, NULL)); /* NCCL may init more than once */
  int ndev = 0;
  NCCLCHECK(v10->devices(&ndev));
  CHECK(ndev >= 1, "v10 ndev %d", ndev);
  ncclNetProperties_v10_t props;
  NCCLCHECK(v10->getProperties(0, &props));
  CHECK(props.ptrSupport == NCCL_PTR_HOST && props.maxRecvs == (g_ib ? 8 : 1), "v10 props");
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void *listen = NULL, *send = NULL, *recv = NULL;
  ncclNetDeviceHandle_v10_t *ds = NULL, *dr = NULL;
  NCCLCHECK(v10->listen(g_listen_dev, handle, &listen));
  ncclNetCommConfig_v10_t cfg = {3};
  double deadline = now_sec() + kDeadlineSec;
  while (send == NULL || recv == NULL) {
    if (send == NULL) NCCLCHECK(v10->connect(g_connect_dev, &cfg, handle, &send, &ds));
    if (recv == NULL) NCCLCHECK(v10->accept(listen, &recv, &dr));
    CHECK(now_sec() < deadline, "v10 connect/accept did not complete");
  }
  char sbuf[3000], rbuf[3000];
  for (int i = 0; i < 3000; i++) sbuf[i] = (char)i;
  void *smr, *rmr, *sreq = NULL, *rreq = NULL;
  NCCLCHECK(v10->regMr(send, sbuf, sizeof sbuf, NCCL_PTR_HOST, &smr));
  NCCLCHECK(v10->regMr(recv, rbuf, sizeof rbuf, NCCL_PTR_HOST, &rmr));
  void* data[1] = {rbuf};
  size_t size[1] = {sizeof rbuf};
  int tag = 1, sdone = 0, rdone = 0, got = 0;
  NCCLCHECK(v10->irecv(recv, 1, data, size, &tag, &rmr, NULL, &rreq));
  while (sreq == NULL) NCCLCHECK(v10->isend(send, sbuf, sizeof sbuf, 1, smr, NULL, &sreq));
  while (!sdone || !rdone) {
    if (!sdone) NCCLCHECK(v10->test(sreq, &sdone, NULL));
    if (!rdone) NCCLCHECK(v10->test(rreq, &rdone, &got));
    CHECK(now_sec() < deadline, "v10 transfer did not finish");
  }
  CHECK(got == 3000 && memcmp(sbuf, rbuf, 3000) == 0, "v10 transfer corrupted");
  NCCLCHECK(v10->deregMr(send, smr));
  NCCLCHECK(v10->deregMr(recv, rmr));
  NCCLCHECK(v10->closeSend(send));
  NCCLCHECK(v10->closeRecv(recv));
  NCCLCHECK(v10->closeListen(listen));
}

/* Two processes, the handle passed through a pipe; each side init's its own plugin state. */
static void case_two_process(void) {
  static const size_t sizes[] = {0, 1, 4096, 65537, (3u << 20) + 1, 32u << 20};
  enum { K = sizeof sizes / sizeof sizes[0] };
  int pfd[2];
  CHECK(pipe(pfd) == 0, "pipe");
  pid_t child = fork();
  CHECK(child >= 0, "fork");
  if (child == 0) {
    /* receiver */
    close(pfd[0]);
    g_case = "two_process/child";
    void* ctx = init_ctx(-1);
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    void *listen = NULL, *recv = NULL;
    ncclNetDeviceHandle_v11_t* dr = NULL;
    NCCLCHECK(g_net->listen(ctx, g_listen_dev, handle, &listen));
    CHECK(write(pfd[1], handle, sizeof handle) == (ssize_t)sizeof handle, "write handle");
    close(pfd[1]);
    double deadline = now_sec() + kDeadlineSec;
    while (recv == NULL) {
      NCCLCHECK(g_net->accept(listen, &recv, &dr));
      CHECK(now_sec() < deadline, "child: accept did not complete");
    }
    for (int k = 0; k < K; k++) {
      unsigned char* rbuf = must_alloc(sizes[k] + 16);
      void *rmr, *rreq = NULL;
      NCCLCHECK(g_net->regMr(recv, rbuf, sizes[k] + 16, NCCL_PTR_HOST, &rmr));
      void* data[1] = {rbuf};
      size_t size[1] = {sizes[k] + 16};
      int tag = 0, done = 0, got = -1;
      NCCLCHECK(g_net->irecv(recv, 1, data, size, &tag, &rmr, NULL, &rreq));
      while (!done) {
        NCCLCHECK(g_net->test(rreq, &done, &got));
        CHECK(now_sec() < deadline, "child: receive %d did not finish", k);
      }
      CHECK(got == (int)sizes[k], "child: got %d bytes, want %zu", got, sizes[k]);
      for (size_t i = 0; i < sizes[k]; i++) {
        CHECK(rbuf[i] == pattern(i, (unsigned)k), "child: message %d byte %zu corrupted", k, i);
      }
      NCCLCHECK(g_net->deregMr(recv, rmr));
      free(rbuf);
    }
    close_all(NULL, recv, listen);
    NCCLCHECK(g_net->finalize(ctx));
    _exit(0);
  }
  close(pfd[1]);
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  size_t got = 0;
  while (got < sizeof handle) {
    ssize_t n = read(pfd[0], handle + got, sizeof handle - got);
    CHECK(n > 0, "read handle from child (child died?)");
    got += (size_t)n;
  }
  close(pfd[0]);
  void* ctx = init_ctx(-1);
  void* send = NULL;
  ncclNetDeviceHandle_v11_t* ds = NULL;
  double deadline = now_sec() + kDeadlineSec;
  while (send == NULL) {
    NCCLCHECK(g_net->connect(ctx, g_connect_dev, handle, &send, &ds));
    CHECK(now_sec() < deadline, "parent: connect did not complete");
  }
  for (int k = 0; k < K; k++) {
    unsigned char* sbuf = must_alloc(sizes[k]);
    for (size_t i = 0; i < sizes[k]; i++) sbuf[i] = pattern(i, (unsigned)k);
    void *smr, *sreq = NULL;
    int done = 0;
    NCCLCHECK(g_net->regMr(send, sbuf, sizes[k], NCCL_PTR_HOST, &smr));
    while (sreq == NULL) NCCLCHECK(g_net->isend(send, sbuf, sizes[k], 0, smr, NULL, &sreq));
    while (!done) {
      NCCLCHECK(g_net->test(sreq, &done, NULL));
      CHECK(now_sec() < deadline, "parent: send %d did not finish", k);
    }
    NCCLCHECK(g_net->deregMr(send, smr));
    free(sbuf);
  }
  int status = 0;
  while (waitpid(child, &status, WNOHANG) == 0) {
    if (now_sec() > deadline) {
      kill(child, SIGKILL);
      FAIL("child did not finish");
    }
    usleep(1000);
  }
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child failed (status 0x%x)", status);
  close_all(send, NULL, NULL);
  NCCLCHECK(g_net->finalize(ctx));
}

/* A peer that dies: the survivor's requests fail within the deadline instead of hanging. */
static void case_peer_dies(void) {
  int pfd[2];
  CHECK(pipe(pfd) == 0, "pipe");
  pid_t child = fork();
  CHECK(child >= 0, "fork");
  if (child == 0) {
    close(pfd[0]);
    void* ctx = init_ctx(-1);
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    void *listen = NULL, *recv = NULL;
    ncclNetDeviceHandle_v11_t* dr = NULL;
    NCCLCHECK(g_net->listen(ctx, g_listen_dev, handle, &listen));
    CHECK(write(pfd[1], handle, sizeof handle) == (ssize_t)sizeof handle, "write handle");
    while (recv == NULL) NCCLCHECK(g_net->accept(listen, &recv, &dr));
    _exit(0); /* dies with the connection open, nothing received */
  }
  close(pfd[1]);
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  CHECK(read(pfd[0], handle, sizeof handle) == (ssize_t)sizeof handle, "read handle");
  void* ctx = init_ctx(-1);
  void* send = NULL;
  ncclNetDeviceHandle_v11_t* ds = NULL;
  double deadline = now_sec() + kDeadlineSec;
  while (send == NULL) {
    NCCLCHECK(g_net->connect(ctx, g_connect_dev, handle, &send, &ds));
    CHECK(now_sec() < deadline, "connect did not complete");
  }
  waitpid(child, NULL, 0);
  const size_t sz = 32u << 20;
  unsigned char* sbuf = must_alloc(sz);
  memset(sbuf, 3, sz);
  ncclResult_t r = ncclSuccess;
  void* req = NULL;
  int done = 0;
  while (r == ncclSuccess && req == NULL) r = g_net->isend(send, sbuf, sz, 0, NULL, NULL, &req);
  while (r == ncclSuccess && !done) {
    r = g_net->test(req, &done, NULL);
    CHECK(now_sec() < deadline, "send to a dead peer neither failed nor finished");
  }
  CHECK(r == ncclSystemError, "send to a dead peer returned %d (done %d), want ncclSystemError",
        (int)r, done);
  NCCLCHECK(g_net->closeSend(send));
  free(sbuf);
  NCCLCHECK(g_net->finalize(ctx));
}

/* Multi-receive: one irecv of n buffers with distinct tags, matched by n isends in any tag
 * order, sizes reported per buffer; a second grouped receive queued behind the first. A
 * transport with maxRecvs 1 must refuse n = 2. */
static void case_multirecv(void) {
  void* ctx = init_ctx(-1);
  ncclNetProperties_v11_t props;
  NCCLCHECK(g_net->getProperties(g_listen_dev, &props));
  void *send, *recv, *listen;
  connect_pair(ctx, ctx, &send, &recv, &listen);
  enum { MAXN = 8, CAP = 300000 };
  unsigned char* sbuf = must_alloc((size_t)MAXN * CAP);
  unsigned char* rbuf = must_alloc((size_t)2 * MAXN * CAP);
  void *smr, *rmr;
  NCCLCHECK(g_net->regMr(send, sbuf, (size_t)MAXN * CAP, NCCL_PTR_HOST, &smr));
  NCCLCHECK(g_net->regMr(recv, rbuf, (size_t)2 * MAXN * CAP, NCCL_PTR_HOST, &rmr));
  if (props.maxRecvs < 2) {
    void* data[2] = {rbuf, rbuf + CAP};
    size_t sizes[2] = {CAP, CAP};
    int tags[2] = {1, 2};
    void* mrs[2] = {rmr, rmr};
    void* req = NULL;
    CHECK(g_net->irecv(recv, 2, data, sizes, tags, mrs, NULL, &req) != ncclSuccess && req == NULL,
          "a transport with maxRecvs %d accepted a 2-buffer irecv", props.maxRecvs);
  } else {
    static const int ns[] = {2, 4, 8, 3};
    for (size_t round = 0; round < sizeof ns / sizeof ns[0]; round++) {
      const int n = ns[round];
      /* Two grouped receives (A then B) of n buffers each; message i of group g has tag 100+i
       * and size sz(g, i) (one of them 0 bytes). */
      void* rreq[2] = {NULL, NULL};
      for (int g = 0; g < 2; g++) {
        void* data[MAXN];
        size_t sizes[MAXN];
        int tags[MAXN];
        void* mrs[MAXN];
        for (int i = 0; i < n; i++) {
          data[i] = rbuf + ((size_t)g * MAXN + (size_t)i) * CAP;
          sizes[i] = CAP;
          tags[i] = 100 + i;
          mrs[i] = rmr;
          memset(data[i], 0x5a, CAP);
        }
        double until = now_sec() + kDeadlineSec;
        while (rreq[g] == NULL) {
          NCCLCHECK(g_net->irecv(recv, n, data, sizes, tags, mrs, NULL, &rreq[g]));
          CHECK(now_sec() < until, "irecv of %d buffers never accepted", n);
        }
      }
      for (int g = 0; g < 2; g++) {
        /* Sends in reverse tag order: tags, not order, assign them to buffers. */
        void* sreq[MAXN];
        size_t ssz[MAXN];
        for (int i = n - 1; i >= 0; i--) {
          ssz[i] = i == 1 ? 0 : (size_t)(1000 * (i + 1) + 37 * g + (round % 2) * 150000);
          unsigned char* p = sbuf + (size_t)i * CAP;
          for (size_t b = 0; b < ssz[i]; b++) p[b] = pattern(b, (unsigned)(round * 31 + g * 7 + i));
          sreq[i] = NULL;
          double until = now_sec() + kDeadlineSec;
          while (sreq[i] == NULL) {
            NCCLCHECK(g_net->isend(send, p, ssz[i], 100 + i, smr, NULL, &sreq[i]));
            CHECK(now_sec() < until, "isend tag %d of a %d-buffer receive never accepted", 100 + i,
                  n);
          }
        }
        int left = n + 1, rdone = 0, sizes[MAXN];
        int sdone[MAXN] = {0};
        double until = now_sec() + kDeadlineSec;
        for (int i = 0; i < MAXN; i++) sizes[i] = -1;
        while (left > 0) {
          for (int i = 0; i < n; i++) {
            if (!sdone[i]) {
              NCCLCHECK(g_net->test(sreq[i], &sdone[i], NULL));
              if (sdone[i]) left--;
            }
          }
          if (!rdone) {
            NCCLCHECK(g_net->test(rreq[g], &rdone, sizes));
            if (rdone) left--;
          }
          CHECK(now_sec() < until, "%d-buffer receive %d did not complete (%d left)", n, g, left);
        }
        for (int i = 0; i < n; i++) {
          CHECK(sizes[i] == (int)ssz[i], "round %zu group %d buffer %d: size %d, sent %zu", round,
                g, i, sizes[i], ssz[i]);
          unsigned char* p = rbuf + ((size_t)g * MAXN + (size_t)i) * CAP;
          for (size_t b = 0; b < ssz[i]; b++) {
            CHECK(p[b] == pattern(b, (unsigned)(round * 31 + g * 7 + i)),
                  "round %zu group %d buffer %d byte %zu corrupted", round, g, i, b);
          }
          CHECK(p[ssz[i]] == 0x5a, "round %zu group %d buffer %d written past its message", round,
                g, i);
        }
      }
      fprintf(stderr, "  two %d-buffer receives ok\n", n);
    }
  }
  NCCLCHECK(g_net->deregMr(send, smr));
  NCCLCHECK(g_net->deregMr(recv, rmr));
  close_all(send, recv, listen);
  free(sbuf);
  free(rbuf);
  NCCLCHECK(g_net->finalize(ctx));
}

/* NCCL 2.28.9 calls finalize with the NULL context a failed init gave back: a quiet success,
 * before any init and after a failed one. The plugin still initialises afterwards. */
/* v12 railId: the rail the agent's fabric-peers map gives the device's network device; undefined
 * without a map, for a device the map does not name, and for a map others could have written
 * (then a warning). Read at every getProperties: NCCL asks at each communicator's init. */
static void write_map(const char* path, const char* text, mode_t mode) {
  char tmp[512];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE* f = fopen(tmp, "w");
  CHECK(f != NULL, "fopen %s: %s", tmp, strerror(errno));
  CHECK(fputs(text, f) >= 0 && fclose(f) == 0, "write %s", tmp);
  CHECK(chmod(tmp, mode) == 0 && rename(tmp, path) == 0, "install %s: %s", path, strerror(errno));
}

static int16_t rail_of_device0(ncclNet_v12_t* v12, const char** name) {
  ncclNetProperties_v12_t p;
  memset(&p, 0x5a, sizeof p);
  NCCLCHECK(v12->getProperties(0, &p));
  CHECK(p.planeId == NCCL_NET_ID_UNDEF, "planeId %d", p.planeId);
  CHECK(p.vProps.ndevs == 1 && p.vProps.devs[0] == 0, "vProps");
  if (name != NULL) *name = p.name;
  return p.railId;
}

static void case_v12_rail(void) {
  char dir[] = "/tmp/tqplg-abi-rail-XXXXXX";
  CHECK(mkdtemp(dir) != NULL, "mkdtemp: %s", strerror(errno));
  char path[400], uid[16], text[256];
  snprintf(path, sizeof path, "%s/fabric-peers", dir);
  snprintf(uid, sizeof uid, "%u", (unsigned)getuid());
  setenv("TENANTQOS_RUN_DIR", dir, 1);
  setenv("TENANTQOS_AGENT_UID", uid, 1); /* the map's owner when not run as root */
  ncclNet_v12_t* v12 = (ncclNet_v12_t*)dlsym(g_lib, "ncclNetPlugin_v12");
  CHECK(v12 != NULL, "no v12 table");
  void* ctx = NULL;
  ncclNetCommConfig_v12_t cfg = {-1};
  NCCLCHECK(v12->init(&ctx, 0x12, &cfg, stub_logger, NULL));
  const char* name = NULL;
  CHECK(rail_of_device0(v12, &name) == NCCL_NET_ID_UNDEF, "railId without a map");
  CHECK(name != NULL, "no name");

  snprintf(text, sizeof text,
           "tenantqos-fabric-peers 2\nlink 0 spine leaf1 3\ndevice eth-other 1\ndevice %s 3\n",
           name);
  write_map(path, text, 0644);
  int16_t rail = rail_of_device0(v12, NULL);
  CHECK(rail == 3, "railId %d, not the map's 3 for %s", rail, name);
  fprintf(stderr, "device 0 (%s): railId %d from %s\n", name, rail, path);

  write_map(path, "tenantqos-fabric-peers 2\nlink 0 spine leaf1 all\ndevice eth-other 1\n", 0644);
  CHECK(rail_of_device0(v12, NULL) == NCCL_NET_ID_UNDEF, "railId for a device the map omits");

  write_map(path, text, 0666);
  const int warnings = g_log_warnings;
  CHECK(rail_of_device0(v12, NULL) == NCCL_NET_ID_UNDEF, "railId from a map others can write");
  CHECK(rail_of_device0(v12, NULL) == NCCL_NET_ID_UNDEF, "railId from a map others can write");
  CHECK(g_log_warnings == warnings + 1, "%d warnings for an untrusted map asked twice (want 1)",
        g_log_warnings - warnings);

  write_map(path, "tenantqos-fabric-peers 2\ndevice no-rail-given\n", 0644);
  CHECK(rail_of_device0(v12, NULL) == NCCL_NET_ID_UNDEF, "railId from a malformed map");

  write_map(path, text, 0644);
  CHECK(rail_of_device0(v12, NULL) == 3, "railId once the map is good again");
  NCCLCHECK(v12->finalize(ctx));
  CHECK(unlink(path) == 0 && rmdir(dir) == 0, "cleanup of %s: %s", dir, strerror(errno));
}

static void case_finalize_null(void) {
  CHECK(g_net->finalize(NULL) == ncclSuccess, "finalize(NULL) before any init failed");
  const char* transport = getenv("TENANTQOS_TRANSPORT");
  char* saved = transport != NULL ? strdup(transport) : NULL;
  setenv("TENANTQOS_TRANSPORT", "carrier-pigeon", 1);
  void* ctx = (void*)&ctx;
  ncclNetCommConfig_v11_t cfg = {-1};
  CHECK(g_net->init(&ctx, 1, &cfg, stub_logger, NULL) != ncclSuccess,
        "init with TENANTQOS_TRANSPORT=carrier-pigeon succeeded");
  CHECK(ctx == NULL, "a failed init left a context behind");
  const int warnings = g_log_warnings;
  CHECK(g_net->finalize(ctx) == ncclSuccess, "finalize(NULL) after a failed init failed");
  CHECK(g_log_warnings == warnings, "finalize(NULL) logged %d warnings", g_log_warnings - warnings);
  if (saved != NULL) {
    setenv("TENANTQOS_TRANSPORT", saved, 1);
    free(saved);
  } else {
    unsetenv("TENANTQOS_TRANSPORT");
  }
  NCCLCHECK(g_net->finalize(init_ctx(-1)));
}

/* Waits (bounded) until the process runs as many threads and holds as many fds as before the
 * plugin was loaded: the plugin's threads are gone and its sockets and devices closed. */
static void expect_released(int threads0, int fds0, const char* when) {
  double deadline = now_sec() + 5;
  while ((count_dir("/proc/self/task") != threads0 || count_dir("/proc/self/fd") != fds0) &&
         now_sec() < deadline) {
    usleep(10000);
  }
  CHECK(count_dir("/proc/self/task") == threads0,
        "%s: %d threads run, %d before the plugin was loaded", when, count_dir("/proc/self/task"),
        threads0);
  CHECK(count_dir("/proc/self/fd") == fds0, "%s: %d fds open, %d before the plugin was loaded",
        when, count_dir("/proc/self/fd"), fds0);
}

/* One NCCL lifetime of the plugin, v11: two contexts, a pair that transfers, a pair closed with
 * requests in flight, every comm closed, every context finalized, then dlclose. */
static void lifecycle_v11(int threads0, int fds0) {
  void* ctx_s = init_ctx(-1);
  void* ctx_r = init_ctx(-1);
  void *send, *recv, *listen, *send2, *recv2, *listen2;
  connect_pair(ctx_s, ctx_r, &send, &recv, &listen);
  NCCLCHECK(transfer(send, recv, (1u << 20) + 7, (1u << 20) + 7, 3, NULL));
  connect_pair(ctx_s, ctx_r, &send2, &recv2, &listen2);
  const size_t sz = 64u << 20;
  unsigned char* sbuf = must_alloc(sz);
  unsigned char* rbuf = must_alloc(sz);
  memset(sbuf, 1, sz);
  post_untested(send2, recv2, sbuf, rbuf, sz, 2);
  close_all(send2, recv2, listen2);
  close_all(send, recv, listen);
  NCCLCHECK(g_net->finalize(ctx_s));
  NCCLCHECK(g_net->finalize(ctx_r));
  expect_released(threads0, fds0, "after finalize of the last context");
  free(sbuf);
  free(rbuf);
  CHECK(dlclose(g_lib) == 0, "dlclose: %s", dlerror());
  g_lib = NULL;
  g_net = NULL;
}

/* NCCL unloads its net plugin with dlclose when the last communicator is gone, and a process
 * may go on (a second process group): dlclose, a second dlopen and lifetime, then a v10
 * lifetime (no finalize in that ABI: dlclose itself tears down), then exit. All of it runs in a
 * child, so a crash at any step (a plugin thread or callback left running in unmapped code)
 * fails the test with the signal instead of killing it obscurely. */
static void case_lifecycle(void) {
  pid_t child = fork();
  CHECK(child >= 0, "fork");
  if (child == 0) {
    g_case = "lifecycle/child";
    CHECK(dlclose(g_lib) == 0, "dlclose: %s", dlerror());
    const int threads0 = count_dir("/proc/self/task");
    const int fds0 = count_dir("/proc/self/fd");
    for (int round = 0; round < 2; round++) {
      load();
      lifecycle_v11(threads0, fds0);
      fprintf(stderr, "  v11 lifetime %d: finalized, unloaded\n", round + 1);
    }
    load();
    case_v10();
    CHECK(dlclose(g_lib) == 0, "dlclose: %s", dlerror());
    expect_released(threads0, fds0, "after dlclose of a v10 lifetime");
    fprintf(stderr, "  v10 lifetime: unloaded\n");
    exit(0); /* through exit(): atexit handlers and destructors run as in a training process */
  }
  int status = 0;
  double deadline = now_sec() + 4 * kDeadlineSec;
  while (waitpid(child, &status, WNOHANG) == 0) {
    if (now_sec() > deadline) {
      kill(child, SIGKILL);
      FAIL("the child did not finish within %.0f s", 4 * kDeadlineSec);
    }
    usleep(10000);
  }
  CHECK(!WIFSIGNALED(status), "the child died of signal %d (%s)", WTERMSIG(status),
        strsignal(WTERMSIG(status)));
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child exited with %d",
        WEXITSTATUS(status));
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s <plugin.so> <case>\n", argv[0]);
    return 2;
  }
  g_case = argv[2];
  setenv("TQ_ABI_PLUGIN", argv[1], 1);
  /* Loopback only; no agent files; a short handshake deadline. Caller's values win. */
  setenv("TENANTQOS_SOCKET_IFNAME", "lo", 0);
  setenv("TENANTQOS_RUN_DIR", "/nonexistent/tqplg-abi", 0);
  setenv("TENANTQOS_HANDSHAKE_TIMEOUT_MS", "10000", 0);
  g_ib = getenv("TENANTQOS_TRANSPORT") != NULL && strcmp(getenv("TENANTQOS_TRANSPORT"), "ib") == 0;
  if (getenv("TQ_ABI_LISTEN_DEV") != NULL) g_listen_dev = atoi(getenv("TQ_ABI_LISTEN_DEV"));
  if (getenv("TQ_ABI_CONNECT_DEV") != NULL) g_connect_dev = atoi(getenv("TQ_ABI_CONNECT_DEV"));
  load();
  struct {
    const char* name;
    void (*fn)(void);
  } cases[] = {
      {"symbols", case_symbols},
      {"init_devices", case_init_devices},
      {"bad_args", case_bad_args},
      {"regmr", case_regmr},
      {"transfers", case_transfers},
      {"recv_larger", case_recv_larger},
      {"send_larger", case_send_larger},
      {"inflight32", case_inflight32},
      {"close_inflight", case_close_inflight},
      {"v10", case_v10},
      {"two_process", case_two_process},
      {"peer_dies", case_peer_dies},
      {"multirecv", case_multirecv},
      {"lifecycle", case_lifecycle},
      {"finalize_null", case_finalize_null},
      {"v12_rail", case_v12_rail},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (strcmp(cases[i].name, argv[2]) == 0) {
      double t0 = now_sec();
      cases[i].fn();
      fprintf(stderr, "PASS [%s] %.2f s (%d log lines)\n", argv[2], now_sec() - t0, g_log_lines);
      return 0;
    }
  }
  fprintf(stderr, "unknown case %s\n", argv[2]);
  return 2;
}
