// libibverbs loaded at run time (dlopen) behind a narrow, typed table of entry points.
//
// Why: the NCCL plugin must load and work (socket transport) on hosts without libibverbs, so
// nothing in tenantqos may carry a DT_NEEDED on it. <infiniband/verbs.h> is needed at build time
// only, for the types and for the data-path inlines (ibv_post_send, ibv_post_recv, ibv_poll_cq,
// ibv_req_notify_cq, ibv_modify_qp_rate_limit), which go through the provider's ops table in
// the context and therefore work with a dlopen'ed library. verbs.h inlines and macros that call
// library symbols (ibv_query_port, ibv_query_device_ex, ibv_reg_mr with optional access flags)
// must not be used directly: Verbs wraps them. A ctest check (ib_no_direct_verbs_symbols) fails
// the build's tests if tq_ib references any ibv_* symbol.
//
// Lifetime: every RAII handle below keeps a pointer to the Verbs that made it; the Verbs object
// must outlive its handles. sharedVerbs() returns a process-wide instance that is never unloaded
// (unloading libibverbs while providers are registered is unsafe).
// Thread-safety: a Verbs object is immutable after load(); its methods may be called from any
// thread as far as libibverbs allows for the objects passed in.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tq::ib {

inline constexpr char kDefaultVerbsLibrary[] = "libibverbs.so.1";

// The entry points a Verbs calls: load() resolves the library's with dlsym and fills the data path
// with the verbs.h inlines; a test builds one of its own (Verbs::fromFunctions) to drive the
// transports without a kernel. Required ones are non-null in every Verbs; the optional ones are
// null when the library predates them (reg_dmabuf_mr: rdma-core 34; reg_mr_iova2: 29).
struct VerbsFunctions {
  decltype(&::ibv_get_device_list) get_device_list = nullptr;
  decltype(&::ibv_free_device_list) free_device_list = nullptr;
  decltype(&::ibv_get_device_name) get_device_name = nullptr;
  decltype(&::ibv_open_device) open_device = nullptr;
  decltype(&::ibv_close_device) close_device = nullptr;
  decltype(&::ibv_query_device) query_device = nullptr;
  // The legacy symbol taking struct _compat_ibv_port_attr: use Verbs::queryPort().
  decltype(&::ibv_query_port) query_port = nullptr;
  decltype(&::ibv_query_gid) query_gid = nullptr;
  decltype(&::ibv_alloc_pd) alloc_pd = nullptr;
  decltype(&::ibv_dealloc_pd) dealloc_pd = nullptr;
  decltype(&::ibv_reg_mr) reg_mr = nullptr;
  decltype(&::ibv_dereg_mr) dereg_mr = nullptr;
  decltype(&::ibv_create_cq) create_cq = nullptr;
  decltype(&::ibv_destroy_cq) destroy_cq = nullptr;
  decltype(&::ibv_create_qp) create_qp = nullptr;
  decltype(&::ibv_modify_qp) modify_qp = nullptr;
  decltype(&::ibv_query_qp) query_qp = nullptr;
  decltype(&::ibv_destroy_qp) destroy_qp = nullptr;
  decltype(&::ibv_get_async_event) get_async_event = nullptr;
  decltype(&::ibv_ack_async_event) ack_async_event = nullptr;
  decltype(&::ibv_wc_status_str) wc_status_str = nullptr;
  decltype(&::ibv_event_type_str) event_type_str = nullptr;
  // Data path (required): load() fills them with the verbs.h inlines, which call the provider's
  // ops in the context (no library symbol). Same signatures as ibv_post_send/_recv, ibv_poll_cq.
  int (*post_send)(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) = nullptr;
  int (*post_recv)(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) = nullptr;
  int (*poll_cq)(ibv_cq* cq, int num_entries, ibv_wc* wc) = nullptr;
  // Optional.
  decltype(&::ibv_reg_mr_iova2) reg_mr_iova2 = nullptr;
  decltype(&::ibv_reg_dmabuf_mr) reg_dmabuf_mr = nullptr;
};

class Verbs;

// Deleters for the C handles. Destroy errors cannot be returned from a destructor: they are
// logged (kWarn) with the object and errno text.
struct DeviceListDeleter {
  const Verbs* verbs = nullptr;
  void operator()(ibv_device** list) const;
};
struct ContextDeleter {
  const Verbs* verbs = nullptr;
  void operator()(ibv_context* ctx) const;
};
struct PdDeleter {
  const Verbs* verbs = nullptr;
  void operator()(ibv_pd* pd) const;
};
struct MrDeleter {
  const Verbs* verbs = nullptr;
  void operator()(ibv_mr* mr) const;
};
struct CqDeleter {
  const Verbs* verbs = nullptr;
  void operator()(ibv_cq* cq) const;
};
struct QpDeleter {
  const Verbs* verbs = nullptr;
  void operator()(ibv_qp* qp) const;
};
using DeviceListPtr = std::unique_ptr<ibv_device*, DeviceListDeleter>;
using ContextPtr = std::unique_ptr<ibv_context, ContextDeleter>;
using PdPtr = std::unique_ptr<ibv_pd, PdDeleter>;
using MrPtr = std::unique_ptr<ibv_mr, MrDeleter>;
using CqPtr = std::unique_ptr<ibv_cq, CqDeleter>;
using QpPtr = std::unique_ptr<ibv_qp, QpDeleter>;

// ibv_device_attr_ex::packet_pacing_caps, flattened. Rates in kbit/s as the verbs API uses them.
struct PacketPacingCaps {
  uint32_t min_rate_kbps = 0;
  uint32_t max_rate_kbps = 0;
  bool rc_qp_supported = false;  // supported_qpts has IBV_QPT_RC
};

struct DeviceCaps {
  ibv_device_attr attr{};
  bool has_ex = false;  // the provider answered query_device_ex
  PacketPacingCaps packet_pacing;
};

struct QpQuery {
  ibv_qp_attr attr{};
  ibv_qp_init_attr init_attr{};
};

struct AsyncEvent {
  ibv_event_type type{};
  bool fatal = false;       // see isFatalAsyncEvent()
  uint32_t qp_num = 0;      // QP events
  int port = 0;             // port events
  std::string description;  // "QP fatal error on QP 0x11", "port error on port 1", ...
};

// Events after which the affected QP/CQ/port/device cannot carry traffic: the transport must
// fail the requests that depend on it.
bool isFatalAsyncEvent(ibv_event_type type);

class Verbs {
 public:
  // dlopen(library, RTLD_NOW | RTLD_LOCAL) and resolve the table. `library` is a soname or a
  // path (TENANTQOS_IBVERBS_LIB); empty means kDefaultVerbsLibrary. kUnavailable with dlerror()
  // text when the library or a required symbol is missing.
  static Result<std::unique_ptr<Verbs>> load(std::string_view library = {});
  // A Verbs over a given table (tests: a fake device); `name` stands for the library in
  // messages. kInvalidArgument naming the first required entry that is null.
  static Result<std::unique_ptr<Verbs>> fromFunctions(const VerbsFunctions& fn,
                                                      std::string_view name);
  ~Verbs();
  Verbs(const Verbs&) = delete;
  Verbs& operator=(const Verbs&) = delete;

  const VerbsFunctions& fn() const { return fn_; }
  const std::string& library() const { return library_; }

  // --- devices -------------------------------------------------------------------------------
  // Names of the RDMA devices. A host without RDMA (no kernel support, ENOSYS, or no devices)
  // yields an empty list: that is a normal answer, not an error.
  Result<std::vector<std::string>> deviceNames() const;
  // kNotFound naming the devices that exist when `name` is not one of them.
  Result<ContextPtr> openDevice(std::string_view name) const;

  // --- queries (wrappers of verbs.h inlines that would reference library symbols) ---------
  Result<DeviceCaps> queryDevice(ibv_context* ctx) const;
  Result<ibv_port_attr> queryPort(ibv_context* ctx, uint8_t port) const;
  Result<ibv_gid> queryGid(ibv_context* ctx, uint8_t port, int index) const;

  // --- resources ------------------------------------------------------------------------------
  Result<PdPtr> allocPd(ibv_context* ctx) const;
  // Uses reg_mr_iova2 when `access` has optional flags (IBV_ACCESS_RELAXED_ORDERING) and the
  // library has it, else reg_mr.
  Result<MrPtr> regMr(ibv_pd* pd, void* addr, size_t length, int access) const;
  bool hasDmabufMr() const { return fn_.reg_dmabuf_mr != nullptr; }
  // kUnimplemented when the library has no ibv_reg_dmabuf_mr.
  Result<MrPtr> regDmabufMr(ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova, int fd,
                            int access) const;
  // No completion channel: the transport polls.
  Result<CqPtr> createCq(ibv_context* ctx, int cqe) const;
  Result<QpPtr> createQp(ibv_pd* pd, ibv_qp_init_attr* init) const;
  // `what` names the transition for the error ("to RTR (dgid ::ffff:10.77.0.2, sl 3)").
  Status modifyQp(ibv_qp* qp, ibv_qp_attr* attr, int mask, std::string_view what) const;
  Result<QpQuery> queryQp(ibv_qp* qp, int mask) const;
  // Per-QP hardware rate limit (packet pacing). kUnimplemented when the provider lacks it
  // (EOPNOTSUPP: rxe, and mlx5 for RC QPs).
  Status modifyQpRateLimit(ibv_qp* qp, const ibv_qp_rate_limit_attr& attr) const;

  // --- async events ----------------------------------------------------------------------------
  // Waits up to timeout_ms (0: just check) for an async event on the context, acknowledges it
  // and returns it; nullopt when none arrived. One consumer per context.
  Result<std::optional<AsyncEvent>> pollAsyncEvent(ibv_context* ctx, int timeout_ms) const;

  // --- data path (hot: one indirect call, no checks) ------------------------------------------
  // The verbs calls' return values: 0, or an errno value; pollCq: completions (>= 0) or < 0.
  int postSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) const {
    return fn_.post_send(qp, wr, bad);
  }
  int postRecv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) const {
    return fn_.post_recv(qp, wr, bad);
  }
  int pollCq(ibv_cq* cq, int num_entries, ibv_wc* wc) const {
    return fn_.poll_cq(cq, num_entries, wc);
  }

  // "transport retry counter exceeded"; never null.
  const char* wcStatusStr(ibv_wc_status status) const;

 private:
  Verbs() = default;

  void* handle_ = nullptr;
  std::string library_;
  VerbsFunctions fn_;
};

// The process-wide instance, loaded on first use (std::call_once semantics: a failed load is
// remembered and returned again). `library` empty means "whatever is loaded, else the default".
// A later call naming a different library than the loaded one fails with kFailedPrecondition.
Result<const Verbs*> sharedVerbs(std::string_view library = {});

// "mlx5_0 port 1 QP 0x1a3"-style names used in errors.
std::string qpName(const ibv_qp* qp);

}  // namespace tq::ib
