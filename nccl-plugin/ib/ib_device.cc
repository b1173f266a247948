#include "nccl-plugin/ib/ib_device.h"

#include <pthread.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "common/log.h"
#include "common/thread_annotations.h"

namespace tq::plugin::ib {
namespace {

constexpr int kEventPollMs = 100;  // how fast the event thread notices that it must stop
constexpr int kMrAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

uintptr_t pageSize() {
  static const uintptr_t p = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  return p;
}

bool exists(const char* path) { return ::access(path, F_OK) == 0; }

}  // namespace

void CommHealth::fail(const Status& s) {
  MutexLock lock(mu_);
  if (failed_.load(std::memory_order_relaxed)) return;
  status_ = s;
  failed_.store(true, std::memory_order_release);
}

Status CommHealth::status() const {
  MutexLock lock(mu_);
  return status_;
}

Result<std::shared_ptr<IbDevice>> IbDevice::open(const tqib::Verbs& verbs,
                                                 const std::string& name) {
  std::shared_ptr<IbDevice> d(new IbDevice(verbs, name));
  TQ_ASSIGN_OR_RETURN(d->ctx_, verbs.openDevice(name));
  TQ_ASSIGN_OR_RETURN(d->pd_, verbs.allocPd(d->ctx_.get()));
  TQ_ASSIGN_OR_RETURN(d->caps_, verbs.queryDevice(d->ctx_.get()));
  // GPUDirect RDMA through the peer-memory client, as NCCL's IB transport detects it.
  d->gdr_ = exists("/sys/kernel/mm/memory_peers/nv_mem/version") ||
            exists("/sys/module/nvidia_peermem/version") ||
            exists("/sys/module/nv_peer_mem/version");
  // DMA-BUF: a registration of fd -1 fails with EBADF where the path exists, with
  // EOPNOTSUPP/EPROTONOSUPPORT where it does not (NCCL probes the same way).
  if (verbs.hasDmabufMr()) {
    auto probe = verbs.regDmabufMr(d->pd_.get(), 0, 4096, 0, -1, IBV_ACCESS_LOCAL_WRITE);
    d->dmabuf_ = !probe.ok() && probe.status().code() != StatusCode::kUnimplemented;
  }
  d->events_ = std::thread([raw = d.get()] { raw->eventLoop(); });
  return d;
}

IbDevice::~IbDevice() {
  stop_.store(true, std::memory_order_release);
  if (events_.joinable()) events_.join();
}

void IbDevice::eventLoop() {
  pthread_setname_np(pthread_self(), "tq-ib-events");
  bool warned = false;
  while (!stop_.load(std::memory_order_acquire)) {
    auto ev = verbs_.pollAsyncEvent(ctx_.get(), kEventPollMs);
    if (!ev.ok()) {
      if (!warned) {
        TQ_LOG(kWarn, "async events of %s: %s", name_.c_str(), ev.status().message().c_str());
        warned = true;
      }
      ::usleep(kEventPollMs * 1000);
      continue;
    }
    if (!ev->has_value()) continue;
    const tqib::AsyncEvent& e = **ev;
    if (!e.fatal) {
      TQ_LOG(kDebug, "async event: %s", e.description.c_str());
      continue;
    }
    TQ_LOG(kWarn, "fatal async event: %s", e.description.c_str());
    const Status s = unavailable("fatal RDMA event: " + e.description);
    switch (e.type) {
      case IBV_EVENT_QP_FATAL:
      case IBV_EVENT_QP_REQ_ERR:
      case IBV_EVENT_QP_ACCESS_ERR:
      case IBV_EVENT_PATH_MIG_ERR: {
        MutexLock lock(watch_mu_);
        auto it = by_qpn_.find(e.qp_num);
        if (it != by_qpn_.end()) {
          if (auto h = it->second.health.lock()) h->fail(s);
        }
        break;
      }
      case IBV_EVENT_PORT_ERR: failWatched(e.port, s); break;
      default: failWatched(0, s); break;  // device fatal, CQ/SRQ error: everything on the device
    }
  }
}

void IbDevice::failWatched(int port, const Status& s) {
  MutexLock lock(watch_mu_);
  for (auto& [qpn, w] : by_qpn_) {
    if (port != 0 && w.port != port) continue;
    char q[16];
    snprintf(q, sizeof q, "0x%x", qpn);
    if (auto h = w.health.lock()) {
      h->fail(Status(s.code(), s.message() + " (affects " + name_ + " QP " + q + ")"));
    }
  }
}

void IbDevice::watch(const std::shared_ptr<CommHealth>& health, int port,
                     const std::vector<uint32_t>& qpns) {
  MutexLock lock(watch_mu_);
  for (uint32_t q : qpns) by_qpn_[q] = Watched{health, port};
}

void IbDevice::unwatch(const std::vector<uint32_t>& qpns) {
  MutexLock lock(watch_mu_);
  for (uint32_t q : qpns) by_qpn_.erase(q);
}

Result<std::shared_ptr<CachedMr>> IbDevice::regMem(void* data, size_t size, MemType type) {
  if (type == MemType::kCuda && !gdr_) {
    return unimplemented("regMr: " + name_ +
                         " cannot register CUDA memory (no GPUDirect RDMA: nvidia-peermem is not "
                         "loaded); the plugin advertises host memory only here");
  }
  const uintptr_t page = pageSize();
  const auto a = reinterpret_cast<uintptr_t>(data);
  const uintptr_t start = a & ~(page - 1);
  const uintptr_t end = (a + std::max<size_t>(size, 1) + page - 1) & ~(page - 1);
  MutexLock lock(mr_mu_);
  for (size_t i = 0; i < mrs_.size();) {
    std::shared_ptr<CachedMr> m = mrs_[i].lock();
    if (!m) {
      mrs_[i] = std::move(mrs_.back());
      mrs_.pop_back();
      continue;
    }
    if (!m->dmabuf && m->start <= start && end <= m->end) return m;
    ++i;
  }
  auto m = std::make_shared<CachedMr>();
  m->start = start;
  m->end = end;
  auto mr = verbs_.regMr(pd_.get(), reinterpret_cast<void*>(start), end - start, kMrAccess);
  if (!mr.ok()) {
    return mr.status().withContext("regMr of " + std::to_string(size) + " bytes at " +
                                   std::to_string(a));
  }
  m->mr = std::move(mr).value();
  mrs_.push_back(m);
  return m;
}

Result<std::shared_ptr<CachedMr>> IbDevice::regDmabuf(void* data, size_t size, uint64_t offset,
                                                      int fd) {
  if (!dmabuf_) {
    return unimplemented("regMrDmaBuf: " + name_ + " does not support DMA-BUF registration");
  }
  auto m = std::make_shared<CachedMr>();
  m->start = reinterpret_cast<uintptr_t>(data);
  m->end = m->start + size;
  m->dmabuf = true;
  TQ_ASSIGN_OR_RETURN(m->mr, verbs_.regDmabufMr(pd_.get(), offset, size, m->start, fd, kMrAccess));
  return m;
}

size_t IbDevice::cachedRegions() {
  MutexLock lock(mr_mu_);
  size_t n = 0;
  for (auto& w : mrs_) n += w.expired() ? 0 : 1;
  return n;
}

}  // namespace tq::plugin::ib
