/* A forwarding libibverbs for tests: TENANTQOS_IBVERBS_LIB points the plugin at this library,
 * which forwards every entry point ib::Verbs resolves to the real libibverbs.so.1 and appends
 * one line per ibv_modify_qp to the file named by TQ_VERBS_RECORD:
 *
 *   modify_qp pid=<pid> qpn=0x<qpn> mask=0x<mask> state=<n> sl=<n> is_global=<0|1> tclass=<n>
 *             sgid_index=<n> rc=<n>
 *
 * Soft-RoCE drops ah_attr.sl (no VLAN/PCP and ibv_query_qp reads back 0), so this is where the
 * tests see the service level the plugin asked for. Data-path calls (post/poll) go through the
 * provider's ops table in the context and never reach this library. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>

/* verbs.h turns some names into macros over inline helpers; we define the real symbols. */
#undef ibv_query_port
#undef ibv_reg_mr
#undef ibv_query_device
#undef ibv_get_device_list

#define VIS __attribute__((visibility("default")))

static void* real(const char* name) {
  static void* lib = NULL;
  if (lib == NULL) {
    lib = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
      fprintf(stderr, "verbs_recorder: %s\n", dlerror());
      abort();
    }
  }
  void* f = dlsym(lib, name);
  if (f == NULL) {
    fprintf(stderr, "verbs_recorder: no %s in libibverbs.so.1\n", name);
    abort();
  }
  return f;
}

#define FORWARD(ret, name, params, args)             \
  VIS ret name params {                              \
    static ret(*fn) params = NULL;                   \
    if (fn == NULL) fn = (ret(*) params)real(#name); \
    return fn args;                                  \
  }

FORWARD(struct ibv_device**, ibv_get_device_list, (int* n), (n))
VIS void ibv_free_device_list(struct ibv_device** list) {
  static void (*fn)(struct ibv_device**) = NULL;
  if (fn == NULL) fn = (void (*)(struct ibv_device**))real("ibv_free_device_list");
  fn(list);
}
FORWARD(const char*, ibv_get_device_name, (struct ibv_device * d), (d))
FORWARD(struct ibv_context*, ibv_open_device, (struct ibv_device * d), (d))
FORWARD(int, ibv_close_device, (struct ibv_context * c), (c))
FORWARD(int, ibv_query_device, (struct ibv_context * c, struct ibv_device_attr* a), (c, a))
FORWARD(int, ibv_query_port, (struct ibv_context * c, uint8_t p, struct _compat_ibv_port_attr* a),
        (c, p, a))
FORWARD(int, ibv_query_gid, (struct ibv_context * c, uint8_t p, int i, union ibv_gid* g),
        (c, p, i, g))
FORWARD(struct ibv_pd*, ibv_alloc_pd, (struct ibv_context * c), (c))
FORWARD(int, ibv_dealloc_pd, (struct ibv_pd * pd), (pd))
FORWARD(struct ibv_mr*, ibv_reg_mr, (struct ibv_pd * pd, void* a, size_t l, int acc),
        (pd, a, l, acc))
FORWARD(struct ibv_mr*, ibv_reg_mr_iova2,
        (struct ibv_pd * pd, void* a, size_t l, uint64_t iova, unsigned int acc),
        (pd, a, l, iova, acc))
FORWARD(struct ibv_mr*, ibv_reg_dmabuf_mr,
        (struct ibv_pd * pd, uint64_t off, size_t l, uint64_t iova, int fd, int acc),
        (pd, off, l, iova, fd, acc))
FORWARD(int, ibv_dereg_mr, (struct ibv_mr * mr), (mr))
FORWARD(struct ibv_cq*, ibv_create_cq,
        (struct ibv_context * c, int cqe, void* ctx, struct ibv_comp_channel* ch, int v),
        (c, cqe, ctx, ch, v))
FORWARD(int, ibv_destroy_cq, (struct ibv_cq * cq), (cq))
FORWARD(struct ibv_qp*, ibv_create_qp, (struct ibv_pd * pd, struct ibv_qp_init_attr* a), (pd, a))
FORWARD(int, ibv_query_qp,
        (struct ibv_qp * qp, struct ibv_qp_attr* a, int mask, struct ibv_qp_init_attr* i),
        (qp, a, mask, i))
FORWARD(int, ibv_destroy_qp, (struct ibv_qp * qp), (qp))
FORWARD(int, ibv_get_async_event, (struct ibv_context * c, struct ibv_async_event* e), (c, e))
VIS void ibv_ack_async_event(struct ibv_async_event* e) {
  static void (*fn)(struct ibv_async_event*) = NULL;
  if (fn == NULL) fn = (void (*)(struct ibv_async_event*))real("ibv_ack_async_event");
  fn(e);
}
FORWARD(const char*, ibv_wc_status_str, (enum ibv_wc_status s), (s))
FORWARD(const char*, ibv_event_type_str, (enum ibv_event_type t), (t))

VIS int ibv_modify_qp(struct ibv_qp* qp, struct ibv_qp_attr* attr, int mask) {
  static int (*fn)(struct ibv_qp*, struct ibv_qp_attr*, int) = NULL;
  if (fn == NULL) fn = (int (*)(struct ibv_qp*, struct ibv_qp_attr*, int))real("ibv_modify_qp");
  const int rc = fn(qp, attr, mask);
  const char* path = getenv("TQ_VERBS_RECORD");
  if (path != NULL && path[0] != '\0') {
    char line[256];
    const int n = snprintf(line, sizeof line,
                           "modify_qp pid=%d qpn=0x%x mask=0x%x state=%d sl=%u is_global=%u "
                           "tclass=%u sgid_index=%u rc=%d\n",
                           (int)getpid(), qp->qp_num, (unsigned)mask, (int)attr->qp_state,
                           (unsigned)attr->ah_attr.sl, (unsigned)attr->ah_attr.is_global,
                           (unsigned)attr->ah_attr.grh.traffic_class,
                           (unsigned)attr->ah_attr.grh.sgid_index, rc);
    /* One write per line with O_APPEND: lines of several processes never interleave. */
    const int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
      if (write(fd, line, (size_t)n) != n) { /* best effort */
      }
      close(fd);
    }
  }
  return rc;
}
