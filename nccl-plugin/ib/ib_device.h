// One opened RDMA device (HCA) of the ib transport, shared by every comm on its ports: the verbs
// context and protection domain, the registration cache (regIsGlobal), the device's
// capabilities (GPUDirect, DMA-BUF, packet pacing), and the async-event thread that turns fatal
// events into errors on the comms they affect.
//
// Ownership: IbDevice objects are shared_ptr-owned by the transport's port list and by every
// comm and registration made on them, so a device outlives all its users. Destruction stops and
// joins the event thread (it wakes every 100 ms).
// Thread-safety: every method may be called from any thread (registration cache and the watch
// list are locked; verbs resources are thread-safe per libibverbs).
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "common/thread_annotations.h"
#include "ib/verbs.h"
#include "nccl-plugin/transport.h"

namespace tq::plugin::ib {

namespace tqib = ::tq::ib;

// The health of one comm, failed by the comm itself (bad work completion, lost peer) or by the
// device's event thread (fatal QP, port or device event). The first failure wins.
class CommHealth {
 public:
  void fail(const Status& s);
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  Status status() const;

 private:
  std::atomic<bool> failed_{false};
  mutable Mutex mu_;
  Status status_ TQ_GUARDED_BY(mu_);
};

// A registration in the device's cache. The cache keeps weak references: the region is
// deregistered when the last MemRegion handle using it is gone.
struct CachedMr {
  uintptr_t start = 0;  // the registered range [start, end): whole pages for host memory
  uintptr_t end = 0;
  bool dmabuf = false;
  tqib::MrPtr mr;
};

// What regMr hands NCCL: a view of a cached registration.
class IbMr final : public MemRegion {
 public:
  std::shared_ptr<CachedMr> cached;
  uintptr_t addr = 0;
  size_t size = 0;
  MemType type = MemType::kHost;
  uint32_t lkey() const { return cached->mr->lkey; }
  uint32_t rkey() const { return cached->mr->rkey; }
  bool covers(const void* p, size_t n) const {
    const auto a = reinterpret_cast<uintptr_t>(p);
    return a >= cached->start && a + n <= cached->end;
  }
};

class IbDevice {
 public:
  // Opens `name`, allocates its PD, probes GPUDirect / DMA-BUF support, starts the event thread.
  static Result<std::shared_ptr<IbDevice>> open(const tqib::Verbs& verbs, const std::string& name);
  ~IbDevice();
  IbDevice(const IbDevice&) = delete;
  IbDevice& operator=(const IbDevice&) = delete;

  const std::string& name() const { return name_; }
  const tqib::Verbs& verbs() const { return verbs_; }
  ibv_context* context() const { return ctx_.get(); }
  ibv_pd* pd() const { return pd_.get(); }
  const tqib::DeviceCaps& caps() const { return caps_; }
  // nvidia-peermem (or the legacy nv_peer_mem) is loaded: ibv_reg_mr accepts CUDA pointers.
  bool gdrSupported() const { return gdr_; }
  // ibv_reg_dmabuf_mr exists and the provider does not refuse it outright.
  bool dmabufSupported() const { return dmabuf_; }

  // Registration cache: host memory is registered in whole pages; a range inside a live
  // registration reuses it (regIsGlobal). `type` kCuda needs gdrSupported().
  Result<std::shared_ptr<CachedMr>> regMem(void* data, size_t size, MemType type);
  // DMA-BUF memory is never shared (the fd/offset pair identifies it, not the address).
  Result<std::shared_ptr<CachedMr>> regDmabuf(void* data, size_t size, uint64_t offset, int fd);
  // Live registrations in the cache (tests: no leak).
  size_t cachedRegions();

  // Fatal async events fail the comms they concern: a QP event the comm owning that QP, a port
  // event every comm on that port, a device or CQ event every comm on the device.
  void watch(const std::shared_ptr<CommHealth>& health, int port,
             const std::vector<uint32_t>& qpns);
  void unwatch(const std::vector<uint32_t>& qpns);

 private:
  IbDevice(const tqib::Verbs& verbs, std::string name) : verbs_(verbs), name_(std::move(name)) {}
  void eventLoop();
  void failWatched(int port, const Status& s);  // port 0: every port

  const tqib::Verbs& verbs_;
  const std::string name_;
  tqib::ContextPtr ctx_;
  tqib::PdPtr pd_;
  tqib::DeviceCaps caps_;
  bool gdr_ = false;
  bool dmabuf_ = false;

  Mutex mr_mu_;
  std::vector<std::weak_ptr<CachedMr>> mrs_ TQ_GUARDED_BY(mr_mu_);

  struct Watched {
    std::weak_ptr<CommHealth> health;
    int port = 0;
  };
  Mutex watch_mu_;
  std::unordered_map<uint32_t, Watched> by_qpn_ TQ_GUARDED_BY(watch_mu_);

  std::atomic<bool> stop_{false};
  std::thread events_;
};

}  // namespace tq::plugin::ib
