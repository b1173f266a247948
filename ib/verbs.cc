#include "ib/verbs.h"

#include <dlfcn.h>
#include <poll.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include "common/log.h"

namespace tq::ib {
namespace {

template <typename Fn>
Status resolve(void* handle, const std::string& library, const char* name, Fn* out, bool required) {
  dlerror();
  void* sym = dlsym(handle, name);
  if (sym == nullptr) {
    if (!required) return okStatus();
    const char* err = dlerror();
    return unavailable("libibverbs " + library + ": missing symbol " + name + ": " +
                       (err != nullptr ? err : "not found"));
  }
  *out = reinterpret_cast<Fn>(sym);
  return okStatus();
}

// A verbs call that returns an errno value (0 on success), or -1 with errno set (some providers).
Status verbsErr(int rc, std::string_view what) {
  int err = rc > 0 ? rc : errno;
  if (err == 0) err = EIO;
  return errnoStatus(err, what);
}

std::string hex(uint32_t v) {
  char buf[16];
  snprintf(buf, sizeof(buf), "0x%x", v);
  return buf;
}

const char* deviceNameOf(const ibv_context* ctx) {
  return ctx != nullptr && ctx->device != nullptr ? ctx->device->name : "?";
}

}  // namespace

bool isFatalAsyncEvent(ibv_event_type type) {
  switch (type) {
    case IBV_EVENT_CQ_ERR:
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_DEVICE_FATAL:
    case IBV_EVENT_PORT_ERR:
    case IBV_EVENT_SRQ_ERR: return true;
    default: return false;
  }
}

std::string qpName(const ibv_qp* qp) {
  if (qp == nullptr) return "QP <null>";
  return std::string(deviceNameOf(qp->context)) + " QP " + hex(qp->qp_num);
}

// --- deleters ---------------------------------------------------------------------------------

void DeviceListDeleter::operator()(ibv_device** list) const {
  if (list != nullptr) verbs->fn().free_device_list(list);
}

void ContextDeleter::operator()(ibv_context* ctx) const {
  if (ctx == nullptr) return;
  std::string name = deviceNameOf(ctx);
  int rc = verbs->fn().close_device(ctx);
  if (rc != 0) TQ_LOG(kWarn, "%s", verbsErr(rc, "close RDMA device " + name).message().c_str());
}

void PdDeleter::operator()(ibv_pd* pd) const {
  if (pd == nullptr) return;
  std::string name = deviceNameOf(pd->context);
  int rc = verbs->fn().dealloc_pd(pd);
  if (rc != 0) TQ_LOG(kWarn, "%s", verbsErr(rc, "dealloc PD on " + name).message().c_str());
}

void MrDeleter::operator()(ibv_mr* mr) const {
  if (mr == nullptr) return;
  std::string what =
      std::string("deregister MR lkey ") + hex(mr->lkey) + " on " + deviceNameOf(mr->context);
  int rc = verbs->fn().dereg_mr(mr);
  if (rc != 0) TQ_LOG(kWarn, "%s", verbsErr(rc, what).message().c_str());
}

void CqDeleter::operator()(ibv_cq* cq) const {
  if (cq == nullptr) return;
  std::string name = deviceNameOf(cq->context);
  int rc = verbs->fn().destroy_cq(cq);
  if (rc != 0) TQ_LOG(kWarn, "%s", verbsErr(rc, "destroy CQ on " + name).message().c_str());
}

void QpDeleter::operator()(ibv_qp* qp) const {
  if (qp == nullptr) return;
  std::string name = qpName(qp);
  int rc = verbs->fn().destroy_qp(qp);
  if (rc != 0) TQ_LOG(kWarn, "%s", verbsErr(rc, "destroy " + name).message().c_str());
}

// --- loading ----------------------------------------------------------------------------------

// The required entry points resolved by name ("ibv_" + field), in one list for the loader and
// for the check of a given table.
// clang-format off
#define TQ_REQUIRED_VERBS(X)                                                              \
  X(get_device_list) X(free_device_list) X(get_device_name) X(open_device)                \
  X(close_device) X(query_device) X(query_port) X(query_gid) X(alloc_pd) X(dealloc_pd)    \
  X(reg_mr) X(dereg_mr) X(create_cq) X(destroy_cq) X(create_qp) X(modify_qp) X(query_qp)  \
  X(destroy_qp) X(get_async_event) X(ack_async_event) X(wc_status_str) X(event_type_str)
// clang-format on
#define TQ_DATA_PATH_VERBS(X) X(post_send) X(post_recv) X(poll_cq)

Result<std::unique_ptr<Verbs>> Verbs::load(std::string_view library) {
  const std::string lib =
      library.empty() ? std::string(kDefaultVerbsLibrary) : std::string(library);
  dlerror();
  void* handle = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = dlerror();
    return unavailable("load libibverbs " + lib + ": " + (err != nullptr ? err : "?"));
  }
  VerbsFunctions f;
  Status resolved = [&]() -> Status {
#define TQ_RESOLVE_REQUIRED(field) \
  TQ_RETURN_IF_ERROR(resolve(handle, lib, "ibv_" #field, &f.field, true));
    TQ_REQUIRED_VERBS(TQ_RESOLVE_REQUIRED)
#undef TQ_RESOLVE_REQUIRED
    TQ_RETURN_IF_ERROR(resolve(handle, lib, "ibv_reg_mr_iova2", &f.reg_mr_iova2, false));
    TQ_RETURN_IF_ERROR(resolve(handle, lib, "ibv_reg_dmabuf_mr", &f.reg_dmabuf_mr, false));
    return okStatus();
  }();
  if (!resolved.ok()) {
    dlclose(handle);
    return resolved;
  }
  // The inlines of <infiniband/verbs.h>: they go through the provider's ops in the context.
  f.post_send = [](ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
    return ibv_post_send(qp, wr, bad);
  };
  f.post_recv = [](ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
    return ibv_post_recv(qp, wr, bad);
  };
  f.poll_cq = [](ibv_cq* cq, int n, ibv_wc* wc) { return ibv_poll_cq(cq, n, wc); };
  auto v = fromFunctions(f, lib);
  if (!v.ok()) {
    dlclose(handle);
    return v.status();
  }
  (*v)->handle_ = handle;
  return v;
}

Result<std::unique_ptr<Verbs>> Verbs::fromFunctions(const VerbsFunctions& fn,
                                                    std::string_view name) {
#define TQ_CHECK_PRESENT(field)                                                           \
  if (fn.field == nullptr) {                                                              \
    return invalidArgument("verbs table " + std::string(name) + ": no " #field " entry"); \
  }
  TQ_REQUIRED_VERBS(TQ_CHECK_PRESENT)
  TQ_DATA_PATH_VERBS(TQ_CHECK_PRESENT)
#undef TQ_CHECK_PRESENT
  std::unique_ptr<Verbs> v(new Verbs());
  v->library_ = std::string(name);
  v->fn_ = fn;
  return v;
}

#undef TQ_DATA_PATH_VERBS
#undef TQ_REQUIRED_VERBS

Verbs::~Verbs() {
  if (handle_ != nullptr) dlclose(handle_);
}

Result<const Verbs*> sharedVerbs(std::string_view library) {
  static std::once_flag once;
  // Never destroyed, so libibverbs is never dlclose'd: as a static unique_ptr it was unloaded
  // by this library's static destructors (dlclose of the NCCL plugin, or exit) while providers
  // stayed registered and verbs objects of other users of it could still exist.
  static const Verbs* instance = nullptr;
  static Status load_error;
  std::call_once(once, [&] {
    auto r = Verbs::load(library);
    if (r.ok()) {
      instance = r->release();
    } else {
      load_error = r.status();
    }
  });
  if (!instance) return load_error;
  if (!library.empty() && library != instance->library()) {
    return failedPrecondition("libibverbs already loaded from " + instance->library() +
                              ", cannot switch to " + std::string(library));
  }
  return instance;
}

// --- devices ----------------------------------------------------------------------------------

Result<std::vector<std::string>> Verbs::deviceNames() const {
  int n = 0;
  errno = 0;
  DeviceListPtr list(fn_.get_device_list(&n), DeviceListDeleter{this});
  std::vector<std::string> names;
  if (!list) {
    // ENOSYS: no kernel RDMA support (no /sys/class/infiniband_verbs); ENODEV/ENOENT: none.
    int err = errno;
    if (err == 0 || err == ENOSYS || err == ENODEV || err == ENOENT) return names;
    return errnoStatus(err, "list RDMA devices (" + library_ + ")");
  }
  for (int i = 0; i < n; ++i) names.emplace_back(fn_.get_device_name(list.get()[i]));
  return names;
}

Result<ContextPtr> Verbs::openDevice(std::string_view name) const {
  int n = 0;
  errno = 0;
  DeviceListPtr list(fn_.get_device_list(&n), DeviceListDeleter{this});
  std::string seen;
  for (int i = 0; list && i < n; ++i) {
    const char* dev_name = fn_.get_device_name(list.get()[i]);
    if (name == dev_name) {
      errno = 0;
      ContextPtr ctx(fn_.open_device(list.get()[i]), ContextDeleter{this});
      if (!ctx) return errnoStatus(errno ? errno : ENODEV, "open RDMA device " + std::string(name));
      return ctx;
    }
    seen += (seen.empty() ? "" : ", ") + std::string(dev_name);
  }
  return notFound("RDMA device " + std::string(name) +
                  " not found (devices: " + (seen.empty() ? "none" : seen) + ")");
}

// --- queries ----------------------------------------------------------------------------------

Result<DeviceCaps> Verbs::queryDevice(ibv_context* ctx) const {
  DeviceCaps caps;
  ibv_device_attr_ex ex{};
  // Same logic as the ibv_query_device_ex inline, but the legacy fallback goes through our table.
  verbs_context* vctx = verbs_get_ctx_op(ctx, query_device_ex);
  int rc = EOPNOTSUPP;
  if (vctx != nullptr) rc = vctx->query_device_ex(ctx, nullptr, &ex, sizeof(ex));
  if (rc == 0) {
    caps.attr = ex.orig_attr;
    caps.has_ex = true;
    caps.packet_pacing.min_rate_kbps = ex.packet_pacing_caps.qp_rate_limit_min;
    caps.packet_pacing.max_rate_kbps = ex.packet_pacing_caps.qp_rate_limit_max;
    caps.packet_pacing.rc_qp_supported =
        (ex.packet_pacing_caps.supported_qpts & (1u << IBV_QPT_RC)) != 0 &&
        ex.packet_pacing_caps.qp_rate_limit_max > 0;
    return caps;
  }
  if (rc != EOPNOTSUPP && rc != ENOSYS) {
    return verbsErr(rc, std::string("query device (ex) ") + deviceNameOf(ctx));
  }
  rc = fn_.query_device(ctx, &caps.attr);
  if (rc != 0) return verbsErr(rc, std::string("query device ") + deviceNameOf(ctx));
  return caps;
}

Result<ibv_port_attr> Verbs::queryPort(ibv_context* ctx, uint8_t port) const {
  ibv_port_attr attr;
  memset(&attr, 0, sizeof(attr));
  verbs_context* vctx = verbs_get_ctx_op(ctx, query_port);
  int rc;
  if (vctx != nullptr) {
    rc = vctx->query_port(ctx, port, &attr, sizeof(attr));
  } else {
    rc = fn_.query_port(ctx, port, reinterpret_cast<_compat_ibv_port_attr*>(&attr));
  }
  if (rc != 0) {
    return verbsErr(rc,
                    std::string("query port ") + deviceNameOf(ctx) + ":" + std::to_string(port));
  }
  return attr;
}

Result<ibv_gid> Verbs::queryGid(ibv_context* ctx, uint8_t port, int index) const {
  ibv_gid gid;
  memset(&gid, 0, sizeof(gid));
  int rc = fn_.query_gid(ctx, port, index, &gid);
  if (rc != 0) {
    return verbsErr(rc, std::string("query GID ") + std::to_string(index) + " on " +
                            deviceNameOf(ctx) + ":" + std::to_string(port));
  }
  return gid;
}

// --- resources --------------------------------------------------------------------------------

Result<PdPtr> Verbs::allocPd(ibv_context* ctx) const {
  errno = 0;
  PdPtr pd(fn_.alloc_pd(ctx), PdDeleter{this});
  if (!pd) return verbsErr(0, std::string("allocate PD on ") + deviceNameOf(ctx));
  return pd;
}

Result<MrPtr> Verbs::regMr(ibv_pd* pd, void* addr, size_t length, int access) const {
  errno = 0;
  ibv_mr* raw;
  if ((access & IBV_ACCESS_OPTIONAL_RANGE) != 0 && fn_.reg_mr_iova2 != nullptr) {
    raw = fn_.reg_mr_iova2(pd, addr, length, reinterpret_cast<uintptr_t>(addr),
                           static_cast<unsigned>(access));
  } else {
    raw = fn_.reg_mr(pd, addr, length, access & ~IBV_ACCESS_OPTIONAL_RANGE);
  }
  MrPtr mr(raw, MrDeleter{this});
  if (!mr) {
    return verbsErr(
        0, "register MR of " + std::to_string(length) + " bytes on " + deviceNameOf(pd->context));
  }
  return mr;
}

Result<MrPtr> Verbs::regDmabufMr(ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova, int fd,
                                 int access) const {
  if (fn_.reg_dmabuf_mr == nullptr) {
    return unimplemented("register DMA-BUF MR: " + library_ + " has no ibv_reg_dmabuf_mr");
  }
  errno = 0;
  MrPtr mr(fn_.reg_dmabuf_mr(pd, offset, length, iova, fd, access), MrDeleter{this});
  if (!mr) {
    int err = errno ? errno : EIO;
    std::string what = "register DMA-BUF MR (fd " + std::to_string(fd) + ", " +
                       std::to_string(length) + " bytes) on " + deviceNameOf(pd->context);
    if (err == EOPNOTSUPP || err == EPROTONOSUPPORT) return unimplemented(what + ": not supported");
    return errnoStatus(err, what);
  }
  return mr;
}

Result<CqPtr> Verbs::createCq(ibv_context* ctx, int cqe) const {
  errno = 0;
  CqPtr cq(fn_.create_cq(ctx, cqe, nullptr, nullptr, 0), CqDeleter{this});
  if (!cq) {
    return verbsErr(0, "create CQ of " + std::to_string(cqe) + " entries on " + deviceNameOf(ctx));
  }
  return cq;
}

Result<QpPtr> Verbs::createQp(ibv_pd* pd, ibv_qp_init_attr* init) const {
  errno = 0;
  QpPtr qp(fn_.create_qp(pd, init), QpDeleter{this});
  if (!qp) {
    return verbsErr(0, "create QP (type " + std::to_string(init->qp_type) + ", send wr " +
                           std::to_string(init->cap.max_send_wr) + ", recv wr " +
                           std::to_string(init->cap.max_recv_wr) + ") on " +
                           deviceNameOf(pd->context));
  }
  return qp;
}

Status Verbs::modifyQp(ibv_qp* qp, ibv_qp_attr* attr, int mask, std::string_view what) const {
  int rc = fn_.modify_qp(qp, attr, mask);
  if (rc != 0) return verbsErr(rc, "modify " + qpName(qp) + " " + std::string(what));
  return okStatus();
}

Result<QpQuery> Verbs::queryQp(ibv_qp* qp, int mask) const {
  QpQuery q;
  int rc = fn_.query_qp(qp, &q.attr, mask, &q.init_attr);
  if (rc != 0) return verbsErr(rc, "query " + qpName(qp));
  return q;
}

Status Verbs::modifyQpRateLimit(ibv_qp* qp, const ibv_qp_rate_limit_attr& attr) const {
  ibv_qp_rate_limit_attr copy = attr;
  int rc = ibv_modify_qp_rate_limit(qp, &copy);  // inline: goes through the provider's ops
  if (rc == 0) return okStatus();
  std::string what =
      "set rate limit " + std::to_string(attr.rate_limit) + " kbit/s on " + qpName(qp);
  if (rc == EOPNOTSUPP || rc == ENOSYS)
    return unimplemented(what + ": not supported by the device");
  return verbsErr(rc, what);
}

// --- async events -----------------------------------------------------------------------------

Result<std::optional<AsyncEvent>> Verbs::pollAsyncEvent(ibv_context* ctx, int timeout_ms) const {
  pollfd pfd{ctx->async_fd, POLLIN, 0};
  int n = poll(&pfd, 1, timeout_ms);
  if (n < 0) {
    if (errno == EINTR) return std::optional<AsyncEvent>();
    return errnoStatus(std::string("poll async events of ") + deviceNameOf(ctx));
  }
  if (n == 0 || (pfd.revents & POLLIN) == 0) return std::optional<AsyncEvent>();
  ibv_async_event ev;
  if (fn_.get_async_event(ctx, &ev) != 0) {
    if (errno == EAGAIN || errno == EINTR) return std::optional<AsyncEvent>();
    return errnoStatus(std::string("get async event of ") + deviceNameOf(ctx));
  }
  AsyncEvent out;
  out.type = ev.event_type;
  out.fatal = isFatalAsyncEvent(ev.event_type);
  std::string text = std::string(fn_.event_type_str(ev.event_type)) + " on " + deviceNameOf(ctx);
  switch (ev.event_type) {
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED:
      out.qp_num = ev.element.qp->qp_num;
      text += " QP " + hex(out.qp_num);
      break;
    case IBV_EVENT_PORT_ACTIVE:
    case IBV_EVENT_PORT_ERR:
    case IBV_EVENT_LID_CHANGE:
    case IBV_EVENT_PKEY_CHANGE:
    case IBV_EVENT_SM_CHANGE:
    case IBV_EVENT_CLIENT_REREGISTER:
    case IBV_EVENT_GID_CHANGE:
      out.port = ev.element.port_num;
      text += " port " + std::to_string(out.port);
      break;
    default: break;
  }
  out.description = std::move(text);
  fn_.ack_async_event(&ev);
  return std::optional<AsyncEvent>(std::move(out));
}

const char* Verbs::wcStatusStr(ibv_wc_status status) const {
  const char* s = fn_.wc_status_str(status);
  return s != nullptr ? s : "unknown work completion status";
}

}  // namespace tq::ib
