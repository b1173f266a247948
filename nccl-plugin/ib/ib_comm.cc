#include "nccl-plugin/ib/ib_comm.h"

#include <arpa/inet.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/log.h"
#include "common/thread_annotations.h"
#include "common/units.h"

namespace tq::plugin::ib {
namespace {

constexpr uint32_t kSqDepth = 256;           // send work requests per QP
constexpr uint32_t kRqDepth = kMaxRequests;  // one receive per outstanding irecv
constexpr int kPollBatch = 16;
constexpr int64_t kHwRateCheckNs = 100'000'000;
constexpr size_t kCtsRingBytes = sizeof(CtsEntry) * kCtsSlots * kMaxRecvs;
constexpr size_t kSizesRingBytes = sizeof(uint32_t) * kCtsSlots * kMaxRecvs;

std::string hex(uint64_t v) {
  char buf[24];
  snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

uint32_t randomPsn() {
  uint32_t v = 0;
  if (::getrandom(&v, sizeof v, 0) != sizeof v) v = static_cast<uint32_t>(::getpid()) * 2654435761u;
  return v & 0xffffff;
}

Result<RingMemory> makeRing(const IbDevice& dev, size_t bytes, int access) {
  RingMemory r;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  r.bytes = (bytes + page - 1) / page * page;
  r.ptr = static_cast<uint8_t*>(std::aligned_alloc(page, r.bytes));
  if (r.ptr == nullptr) return resourceExhausted("allocate " + std::to_string(r.bytes) + " bytes");
  std::memset(r.ptr, 0, r.bytes);
  TQ_ASSIGN_OR_RETURN(r.mr, dev.verbs().regMr(dev.pd(), r.ptr, r.bytes, access));
  return r;
}

}  // namespace

void RingMemory::release() {
  mr.reset();  // deregister before the memory goes
  std::free(ptr);
  ptr = nullptr;
  bytes = 0;
}

// ---- resources ---------------------------------------------------------------------------------

IbEndpointInfo IbConnResources::local() const {
  IbEndpointInfo ep;
  ep.link_layer = port->roce() ? LinkLayerCode::kEthernet : LinkLayerCode::kInfiniBand;
  ep.port = port->port;
  ep.lid = port->lid;
  ep.mtu_bytes = port->mtu_bytes;
  ep.gid = port->gid;
  ep.psn = psn;
  ep.nqps = static_cast<int>(qps.size());
  for (size_t i = 0; i < qps.size() && i < static_cast<size_t>(kMaxQpsPerConn); ++i) {
    ep.qpn[i] = qps[i]->qp_num;
  }
  ep.device = port->name;
  return ep;
}

std::vector<uint32_t> IbConnResources::qpNumbers() const {
  std::vector<uint32_t> v;
  for (const auto& q : qps) v.push_back(q->qp_num);
  if (flush_qp) v.push_back(flush_qp->qp_num);
  return v;
}

Result<std::unique_ptr<IbConnResources>> makeResources(const IbPort& port, ConnSide side,
                                                       int nqps) {
  if (nqps < 1 || nqps > kMaxQpsPerConn) {
    return invalidArgument("QPs per connection " + std::to_string(nqps) + " out of range 1-" +
                           std::to_string(kMaxQpsPerConn));
  }
  auto res = std::make_unique<IbConnResources>();
  res->port = &port;
  res->dev = port.dev;
  const IbDevice& dev = *port.dev;
  const tqib::Verbs& verbs = dev.verbs();
  const int cqe = nqps * static_cast<int>(kSqDepth + kRqDepth) + 2 * kMaxRequests + 16;
  TQ_ASSIGN_OR_RETURN(res->cq, verbs.createCq(dev.context(), cqe));
  for (int i = 0; i < nqps; ++i) {
    TQ_ASSIGN_OR_RETURN(auto qp, tqib::createRcQp(verbs, dev.pd(), res->cq.get(), kSqDepth,
                                                  side == ConnSide::kRecv ? kRqDepth : 1));
    res->qps.push_back(std::move(qp));
  }
  res->psn = randomPsn();
  const int remote = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  if (side == ConnSide::kSend) {
    TQ_ASSIGN_OR_RETURN(res->ring, makeRing(dev, kCtsRingBytes, remote));
    TQ_ASSIGN_OR_RETURN(res->stage, makeRing(dev, kSizesRingBytes, IBV_ACCESS_LOCAL_WRITE));
  } else {
    TQ_ASSIGN_OR_RETURN(res->ring, makeRing(dev, kSizesRingBytes, remote));
    TQ_ASSIGN_OR_RETURN(res->stage, makeRing(dev, kCtsRingBytes, IBV_ACCESS_LOCAL_WRITE));
    if (dev.gdrSupported() || dev.dmabufSupported()) {
      TQ_ASSIGN_OR_RETURN(res->flush_qp,
                          tqib::createRcQp(verbs, dev.pd(), res->cq.get(), kMaxRequests + 1, 1));
      TQ_ASSIGN_OR_RETURN(res->flush_scratch, makeRing(dev, 64, IBV_ACCESS_LOCAL_WRITE));
    }
  }
  return res;
}

Status connectResources(IbConnResources* res, const IbEndpointInfo& remote, int service_level,
                        int dscp, const IbCommConfig& cfg) {
  const IbPort& port = *res->port;
  if (static_cast<size_t>(remote.nqps) != res->qps.size()) {
    return failedPrecondition("the peer has " + std::to_string(remote.nqps) + " QPs, this end " +
                              std::to_string(res->qps.size()));
  }
  const bool remote_roce = remote.link_layer == LinkLayerCode::kEthernet;
  if (remote_roce != port.roce()) {
    return failedPrecondition(std::string("link layers differ: ") + port.label() + " is " +
                              (port.roce() ? "Ethernet (RoCE)" : "InfiniBand") + ", the peer's " +
                              remote.device + " is " + (remote_roce ? "Ethernet" : "InfiniBand"));
  }
  tqib::RcQpOptions o;
  o.port = static_cast<uint8_t>(port.port);
  o.roce = port.roce();
  o.sgid_index = static_cast<uint8_t>(port.gid_index);
  o.service_level = static_cast<uint8_t>(service_level & 15);
  o.traffic_class = port.roce() ? tqib::trafficClassForDscp(dscp) : 0;
  o.timeout = cfg.timeout;
  o.retry_cnt = cfg.retry_cnt;
  o.rnr_retry = 7;
  o.access_flags = IBV_ACCESS_REMOTE_WRITE;
  const tqib::Verbs& verbs = res->dev->verbs();
  for (size_t i = 0; i < res->qps.size(); ++i) {
    tqib::QpEndpoint local{res->qps[i]->qp_num, res->psn, port.lid, port.gid, port.mtu_bytes};
    tqib::QpEndpoint peer{remote.qpn[i], remote.psn, remote.lid, remote.gid, remote.mtu_bytes};
    TQ_RETURN_IF_ERROR(tqib::connectRcQp(verbs, res->qps[i].get(), o, local, peer));
  }
  if (res->flush_qp) {
    // GPUDirect flush: an RC QP connected to itself; its 1-byte RDMA READ of a received buffer
    // completes only after earlier PCIe writes into GPU memory are visible.
    tqib::RcQpOptions f = o;
    f.access_flags = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_LOCAL_WRITE;
    tqib::QpEndpoint self{res->flush_qp->qp_num, res->psn, port.lid, port.gid, port.mtu_bytes};
    TQ_RETURN_IF_ERROR_CTX(tqib::connectRcQp(verbs, res->flush_qp.get(), f, self, self),
                           "GPUDirect flush QP");
  }
  return okStatus();
}

// ---- memory handles ----------------------------------------------------------------------------

Status CommMrs::reg(void* data, size_t size, MemType type, MemRegion** out) {
  if (data == nullptr && size > 0) return invalidArgument("regMr: NULL buffer");
  TQ_ASSIGN_OR_RETURN(auto cached, dev_->regMem(data, size, type));
  auto h = std::make_unique<IbMr>();
  h->cached = std::move(cached);
  h->addr = reinterpret_cast<uintptr_t>(data);
  h->size = size;
  h->type = type;
  MutexLock lock(mu_);
  *out = h.get();
  handles_.push_back(std::move(h));
  return okStatus();
}

Status CommMrs::regDmabuf(void* data, size_t size, uint64_t offset, int fd, MemRegion** out) {
  TQ_ASSIGN_OR_RETURN(auto cached, dev_->regDmabuf(data, size, offset, fd));
  auto h = std::make_unique<IbMr>();
  h->cached = std::move(cached);
  h->addr = reinterpret_cast<uintptr_t>(data);
  h->size = size;
  h->type = MemType::kCuda;
  MutexLock lock(mu_);
  *out = h.get();
  handles_.push_back(std::move(h));
  return okStatus();
}

Status CommMrs::dereg(MemRegion* mr) {
  MutexLock lock(mu_);
  auto it = std::find_if(handles_.begin(), handles_.end(),
                         [mr](const std::unique_ptr<IbMr>& h) { return h.get() == mr; });
  if (it == handles_.end()) return invalidArgument("deregMr: unknown memory handle");
  handles_.erase(it);  // the device deregisters when no handle uses the region any more
  return okStatus();
}

Result<const IbMr*> CommMrs::resolve(MemRegion* mr, const void* data, size_t size) {
  if (mr != nullptr) {
    auto* h = dynamic_cast<IbMr*>(mr);
    if (h == nullptr) return invalidArgument("memory handle is not an ib registration");
    if (!h->covers(data, size)) {
      return invalidArgument("buffer of " + std::to_string(size) +
                             " bytes lies outside its memory registration");
    }
    return h;
  }
  MutexLock lock(mu_);
  for (const auto& h : implicit_) {
    if (h->covers(data, size)) return h.get();
  }
  TQ_ASSIGN_OR_RETURN(auto cached, dev_->regMem(const_cast<void*>(data), size, MemType::kHost));
  auto h = std::make_unique<IbMr>();
  h->cached = std::move(cached);
  h->addr = reinterpret_cast<uintptr_t>(data);
  h->size = size;
  implicit_.push_back(std::move(h));
  return implicit_.back().get();
}

// ---- connection --------------------------------------------------------------------------------

IbConnection::IbConnection(std::unique_ptr<IbConnResources> res, IbEndpointInfo remote, Fd oob,
                           std::string peer, const IbCommConfig& cfg, Clock& clock)
    : res_(std::move(res)),
      remote_(std::move(remote)),
      oob_(std::move(oob)),
      peer_(std::move(peer)),
      cfg_(cfg),
      clock_(clock),
      health_(std::make_shared<CommHealth>()) {
  sq_out_.assign(res_->qps.size(), 0);
  sq_depth_ = kSqDepth;
  res_->dev->watch(health_, res_->port->port, res_->qpNumbers());
}

IbConnection::~IbConnection() { destroyQps(); }

void IbConnection::destroyQps() {
  if (res_ == nullptr || res_->qps.empty()) return;
  res_->dev->unwatch(res_->qpNumbers());
  // QPs first: outstanding work is flushed before any memory it uses is deregistered.
  res_->flush_qp.reset();
  res_->qps.clear();
}

std::vector<ibv_qp*> IbConnection::qps() const {
  std::vector<ibv_qp*> v;
  for (const auto& q : res_->qps) v.push_back(q.get());
  return v;
}

std::string IbConnection::describe() const {
  std::string s = res_->port->label();
  for (size_t i = 0; i < res_->qps.size(); ++i) {
    s += (i == 0 ? " QP " : ",") + hex(res_->qps[i]->qp_num);
  }
  s += " <-> " + remote_.device + " QP";
  for (int i = 0; i < remote_.nqps; ++i) s += (i == 0 ? " " : ",") + hex(remote_.qpn[i]);
  return s + " (peer " + peer_ + ")";
}

std::string IbConnection::qpText(int q) const {
  const uint32_t mine = q >= 0 && static_cast<size_t>(q) < res_->qps.size()
                            ? res_->qps[static_cast<size_t>(q)]->qp_num
                            : 0;
  const uint32_t theirs = q >= 0 && q < remote_.nqps ? remote_.qpn[q] : 0;
  return res_->port->name + " QP " + hex(mine) + " -> " + remote_.device + " QP " + hex(theirs) +
         " (peer " + peer_ + ")";
}

Status IbConnection::postSend(int q, ibv_send_wr* wr) {
  ibv_send_wr* bad = nullptr;
  const int rc = res_->dev->verbs().postSend(res_->qps[static_cast<size_t>(q)].get(), wr, &bad);
  if (rc != 0) {
    Status s = errnoStatus(rc, "post " + describeWr(wr->wr_id) + " on " + qpText(q));
    fail(s);
    return s;
  }
  ++sq_out_[static_cast<size_t>(q)];
  return okStatus();
}

Status IbConnection::pollCq() {
  ibv_wc wc[kPollBatch];
  for (;;) {
    const int n = res_->dev->verbs().pollCq(res_->cq.get(), kPollBatch, wc);
    if (n < 0) {
      fail(internalError("poll the completion queue of " + res_->port->label() + " failed (" +
                         std::to_string(n) + ")"));
      break;
    }
    for (int i = 0; i < n; ++i) {
      const ibv_wc& w = wc[i];
      const int q = wrQp(w.wr_id);
      if (wrKind(w.wr_id) != WrKind::kRecv && wrKind(w.wr_id) != WrKind::kFlush &&
          static_cast<size_t>(q) < sq_out_.size() && sq_out_[static_cast<size_t>(q)] > 0) {
        --sq_out_[static_cast<size_t>(q)];
      }
      if (w.status != IBV_WC_SUCCESS) {
        if (!failed()) {
          fail(unavailable(qpText(q) + ": " + describeWr(w.wr_id) +
                           ": work completion error: " + res_->dev->verbs().wcStatusStr(w.status) +
                           " (status " + std::to_string(static_cast<int>(w.status)) +
                           ", vendor error " + hex(w.vendor_err) + ")"));
        }
        continue;
      }
      onCompletion(w);
    }
    if (n < kPollBatch) break;
  }
  return failed() ? failure() : okStatus();
}

void IbConnection::checkPeer() {
  if (!outstanding() || !oob_.valid() || failed()) return;
  const int64_t now = clock_.nowNs();
  if (now < next_peer_check_ns_) return;
  next_peer_check_ns_ = now + cfg_.liveness_interval_ns;
  int err = 0;
  const oob::IoResult r = oob::peekAlive(oob_.get(), &err);
  if (r == oob::IoResult::kClosed || r == oob::IoResult::kError) {
    (void)pollCq();  // completions that arrived before the peer left still count
    if (failed() || !outstanding()) return;
    const std::string what = "peer " + peer_ + " (" + remote_.device + ") ";
    fail(r == oob::IoResult::kClosed
             ? unavailable(what + "closed the connection with work outstanding on " +
                           res_->port->label() + " (the remote process exited or closed its comm)")
             : oob::netError(err, what + "connection lost"));
  }
}

// ---- send --------------------------------------------------------------------------------------

Status IbSendRequest::test(bool* d, size_t* sizes) { return comm->test(this, d, sizes); }
Status IbRecvRequest::test(bool* d, size_t* sizes) { return comm->test(this, d, sizes); }

IbSendComm::IbSendComm(std::unique_ptr<IbConnResources> res, const IbReply& reply, Fd oob,
                       std::string peer, const IbCommConfig& cfg, Clock& clock)
    : IbConnection(std::move(res), reply.ep, std::move(oob), std::move(peer), cfg, clock),
      mrs_(res_->dev),
      sizes_addr_(reply.sizes_addr),
      sizes_rkey_(reply.sizes_rkey),
      max_wr_bytes_(std::min<uint64_t>(res_->port->max_msg_bytes, 1ull << 30)),
      reqs_(static_cast<size_t>(kMaxRequests * kMaxRecvs)) {
  for (size_t i = 0; i < reqs_.size(); ++i) {
    reqs_[i].comm = this;
    reqs_[i].index = static_cast<int>(i);
    free_.push_back(static_cast<int>(reqs_.size() - 1 - i));
  }
}

IbSendComm::~IbSendComm() { destroyQps(); }

IbSendRequest* IbSendComm::allocRequest() {
  if (free_.empty()) return nullptr;
  IbSendRequest* r = &reqs_[static_cast<size_t>(free_.back())];
  free_.pop_back();
  r->in_use = true;
  r->done = false;
  return r;
}

void IbSendComm::releaseRequest(IbSendRequest* r) {
  if (!r->in_use) return;
  r->in_use = false;
  free_.push_back(r->index);
}

const CtsEntry* IbSendComm::slotEntries(uint64_t slot) const {
  return reinterpret_cast<const CtsEntry*>(res_->ring.ptr) +
         static_cast<size_t>(slot % kCtsSlots) * kMaxRecvs;
}

bool IbSendComm::loadSlot() {
  const CtsEntry* e = slotEntries(slot_seq_);
  const uint64_t want = slot_seq_ + 1;
  if (__atomic_load_n(&e[0].seq, __ATOMIC_ACQUIRE) != want) return false;
  const uint32_t n = __atomic_load_n(&e[0].n, __ATOMIC_RELAXED);
  if (n < 1 || n > static_cast<uint32_t>(kMaxRecvs)) {
    fail(dataLoss("clear-to-send slot " + std::to_string(slot_seq_) + " from " + peer_ +
                  " announces " + std::to_string(n) + " buffers"));
    return false;
  }
  for (uint32_t i = 1; i < n; ++i) {
    if (__atomic_load_n(&e[i].seq, __ATOMIC_ACQUIRE) != want) return false;  // still landing
  }
  for (uint32_t i = 0; i < n; ++i) {
    std::memcpy(&slot_entries_[i], &e[i], sizeof(CtsEntry));
    slot_reqs_[i] = nullptr;
  }
  slot_n_ = static_cast<int>(n);
  slot_matched_ = 0;
  slot_loaded_ = true;
  return true;
}

Status IbSendComm::isend(void* data, size_t size, int tag, MemRegion* mr, Request** out) {
  *out = nullptr;
  MutexLock lock(mu_);
  TQ_RETURN_IF_ERROR(progress());
  if (!slot_loaded_ && !loadSlot()) {
    if (failed()) return failure();
    cts_waiting_ = true;
    checkPeer();  // no clear-to-send: is the receiver still there?
    return failed() ? failure() : okStatus();
  }
  cts_waiting_ = false;
  // Which buffer of the slot: tags assign the sends of a multi-receive; a single buffer takes
  // the next send whatever its tag (as every NCCL transport does).
  int r = -1;
  for (int i = 0; i < slot_n_; ++i) {
    if (slot_reqs_[i] == nullptr && (slot_n_ == 1 || slot_entries_[i].tag == tag)) {
      r = i;
      break;
    }
  }
  if (r < 0) return okStatus();  // this send belongs to a later receive: NCCL retries
  const CtsEntry& e = slot_entries_[r];
  const uint64_t slot = slot_seq_;
  if (size > e.size) {
    Job j;
    j.slot = slot;
    j.n = slot_n_;
    j.qp = static_cast<int>(slot % res_->qps.size());
    j.refused = true;
    j.refused_imm = kImmRefused | static_cast<uint32_t>(std::min<uint64_t>(size, kImmSizeMask));
    jobs_.push_back(j);
    slot_seq_++;
    slot_loaded_ = false;
    (void)postJobs();
    Status s =
        outOfRange("isend of " + std::to_string(size) + " bytes (tag " + std::to_string(tag) +
                   ") on " + describe() + ": the receiver posted a buffer of only " +
                   std::to_string(e.size) + " bytes (message truncated)");
    fail(s);
    return s;
  }
  uint32_t lkey = 0;
  if (size > 0) {
    auto h = mrs_.resolve(mr, data, size);
    if (!h.ok()) return h.status().withContext("isend on " + describe());
    lkey = (*h)->lkey();
  }
  IbSendRequest* req = allocRequest();
  if (req == nullptr) {
    return failedPrecondition("isend: " + std::to_string(reqs_.size()) +
                              " sends are in flight on " + describe());
  }
  req->data = static_cast<const uint8_t*>(data);
  req->size = size;
  req->lkey = lkey;
  slot_reqs_[r] = req;
  ++slot_matched_;
  if (slot_matched_ < slot_n_) {
    *out = req;  // the other sends of this multi-receive follow
    return okStatus();
  }
  Job j;
  j.slot = slot;
  j.n = slot_n_;
  j.qp = static_cast<int>(slot % res_->qps.size());
  uint64_t total = 0;
  for (int i = 0; i < slot_n_; ++i) {
    j.entries[i] = slot_entries_[i];
    j.reqs[i] = slot_reqs_[i];
    total += slot_reqs_[i]->size;
  }
  if (post_idx_ == jobs_.size() && total > 0 && admission_ != nullptr) {
    // Nothing else waits for the wire: admit the first chunk now, or hand out no request.
    uint64_t first = 0;
    for (int i = 0; i < slot_n_ && first == 0; ++i) first = slot_reqs_[i]->size;
    uint64_t len = std::min(first, max_wr_bytes_);
    if (const uint64_t chunk = admission_->chunkBytes(); chunk > 0) len = std::min(len, chunk);
    if (!admission_->tryAdmit(len, total)) {
      slot_reqs_[r] = nullptr;
      --slot_matched_;
      releaseRequest(req);
      return okStatus();
    }
    j.admitted = len;
  }
  jobs_.push_back(j);
  unposted_bytes_ += total;
  slot_seq_++;
  slot_loaded_ = false;
  TQ_RETURN_IF_ERROR(postJobs());
  *out = req;
  return okStatus();
}

Status IbSendComm::postJobs() {
  while (post_idx_ < jobs_.size()) {
    Job& j = jobs_[post_idx_];
    const int q = j.qp;
    const size_t qi = static_cast<size_t>(q);
    if (j.refused) {
      if (sq_out_[qi] >= sq_depth_) return okStatus();
      ibv_send_wr wr{};
      wr.wr_id = makeWrId(WrKind::kFinal, q, j.slot);
      wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
      wr.send_flags = IBV_SEND_SIGNALED;
      wr.imm_data = htonl(j.refused_imm);
      wr.wr.rdma.remote_addr = sizes_addr_;
      wr.wr.rdma.rkey = sizes_rkey_;
      TQ_RETURN_IF_ERROR(postSend(q, &wr));
      j.final_posted = true;
      ++post_idx_;
      continue;
    }
    while (j.cur < j.n) {
      IbSendRequest* r = j.reqs[j.cur];
      const uint64_t left = r->size - j.off;
      if (left == 0) {
        ++j.cur;
        j.off = 0;
        continue;
      }
      if (sq_out_[qi] >= sq_depth_) return okStatus();
      uint64_t len = std::min(left, max_wr_bytes_);
      if (j.admitted > 0) {
        len = std::min(len, j.admitted);
      } else if (admission_ != nullptr) {
        if (const uint64_t chunk = admission_->chunkBytes(); chunk > 0) len = std::min(len, chunk);
        if (!admission_->tryAdmit(len, unposted_bytes_)) return okStatus();  // wait for tokens
      }
      const bool last = j.n == 1 && len == left;
      ibv_sge sge{reinterpret_cast<uintptr_t>(r->data) + j.off, static_cast<uint32_t>(len),
                  r->lkey};
      ibv_send_wr wr{};
      wr.wr_id = makeWrId(last ? WrKind::kFinal : WrKind::kChunk, q, j.slot);
      wr.sg_list = &sge;
      wr.num_sge = 1;
      wr.opcode = last ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
      wr.send_flags = IBV_SEND_SIGNALED;
      if (last) wr.imm_data = htonl(static_cast<uint32_t>(r->size));
      wr.wr.rdma.remote_addr = j.entries[j.cur].addr + j.off;
      wr.wr.rdma.rkey = j.entries[j.cur].rkey;
      TQ_RETURN_IF_ERROR(postSend(q, &wr));
      j.admitted = j.admitted > len ? j.admitted - len : 0;
      j.off += len;
      unposted_bytes_ -= len;
      if (last) j.final_posted = true;
      if (j.off == r->size) {
        ++j.cur;
        j.off = 0;
      }
    }
    if (!j.final_posted) {
      if (sq_out_[qi] >= sq_depth_) return okStatus();
      ibv_send_wr wr{};
      ibv_sge sge{};
      wr.wr_id = makeWrId(WrKind::kFinal, q, j.slot);
      wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
      wr.send_flags = IBV_SEND_SIGNALED;
      if (j.n == 1) {
        // A zero-byte message: the immediate alone completes the receive.
        wr.imm_data = htonl(0);
        wr.wr.rdma.remote_addr = j.entries[0].addr;
        wr.wr.rdma.rkey = j.entries[0].rkey;
      } else {
        // The sizes staging slot is reused every kCtsSlots slots: wait until the job that used
        // it last has completed (its write could otherwise still be retransmitted from it).
        if (!jobs_.empty() && jobs_.front().slot + kCtsSlots <= j.slot) return okStatus();
        const size_t at = static_cast<size_t>(j.slot % kCtsSlots) * kMaxRecvs;
        auto* sizes = reinterpret_cast<uint32_t*>(res_->stage.ptr) + at;
        for (int i = 0; i < j.n; ++i) sizes[i] = static_cast<uint32_t>(j.reqs[i]->size);
        sge = {reinterpret_cast<uintptr_t>(sizes), static_cast<uint32_t>(4 * j.n),
               res_->stage.mr->lkey};
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.imm_data = htonl(0);
        wr.wr.rdma.remote_addr = sizes_addr_ + at * sizeof(uint32_t);
        wr.wr.rdma.rkey = sizes_rkey_;
      }
      TQ_RETURN_IF_ERROR(postSend(q, &wr));
      j.final_posted = true;
    }
    ++post_idx_;
  }
  return okStatus();
}

void IbSendComm::onCompletion(const ibv_wc& wc) {
  if (wrKind(wc.wr_id) != WrKind::kFinal || jobs_.empty()) return;
  const uint64_t slot = wrValue(wc.wr_id);
  const uint64_t first = jobs_.front().slot & 0xffffffffffffull;
  const uint64_t idx = (slot - first) & 0xffffffffffffull;
  if (idx >= jobs_.size()) return;
  Job& j = jobs_[static_cast<size_t>(idx)];
  j.completed = true;
  for (int i = 0; i < j.n; ++i) {
    if (j.reqs[i] != nullptr) j.reqs[i]->done = true;
  }
  while (!jobs_.empty() && jobs_.front().completed) {
    jobs_.pop_front();
    if (post_idx_ > 0) --post_idx_;
  }
}

std::string IbSendComm::describeWr(uint64_t wr_id) const {
  const std::string slot = " of message " + std::to_string(wrValue(wr_id));
  switch (wrKind(wr_id)) {
    case WrKind::kChunk: return "RDMA WRITE" + slot;
    case WrKind::kFinal: return "RDMA WRITE_WITH_IMM" + slot;
    default: return "work request " + hex(wr_id);
  }
}

void IbSendComm::updateHwRate() {
  const tqib::PacketPacingCaps& pp = res_->dev->caps().packet_pacing;
  if (!pp.rc_qp_supported || admission_ == nullptr || hw_rate_warned_) return;
  const int64_t now = clock_.nowNs();
  if (now < next_hw_check_ns_) return;
  next_hw_check_ns_ = now + kHwRateCheckNs;
  const uint64_t rate = admission_->rateBytesPerSecond();
  if (rate == hw_rate_) return;
  // The tenant's rate split over the QPs, in kbit/s within the device's range; 0 = no limit.
  uint64_t kbps = rate * 8 / 1000 / res_->qps.size();
  if (rate > 0) kbps = std::clamp<uint64_t>(kbps, pp.min_rate_kbps, pp.max_rate_kbps);
  for (const auto& qp : res_->qps) {
    ibv_qp_rate_limit_attr a{};
    a.rate_limit = static_cast<uint32_t>(std::min<uint64_t>(kbps, UINT32_MAX));
    a.typical_pkt_sz = static_cast<uint16_t>(res_->port->mtu_bytes);
    Status s = res_->dev->verbs().modifyQpRateLimit(qp.get(), a);
    if (!s.ok()) {
      TQ_LOG(kWarn, "per-QP rate limit on %s failed, pacing in software only: %s",
             describe().c_str(), s.message().c_str());
      hw_rate_warned_ = true;
      return;
    }
  }
  TQ_LOG(kDebug, "%s: QPs rate-limited in hardware to %s", describe().c_str(),
         rate > 0 ? formatRate(rate).c_str() : "unlimited");
  hw_rate_ = rate;
}

Status IbSendComm::progress() {
  if (failed()) return failure();
  TQ_RETURN_IF_ERROR(pollCq());
  updateHwRate();
  return postJobs();
}

Status IbSendComm::test(IbSendRequest* r, bool* done, size_t* sizes) {
  *done = false;
  MutexLock lock(mu_);
  if (!r->in_use) return invalidArgument("test: request already completed (reused pointer?)");
  Status s = progress();
  if (!s.ok()) {
    releaseRequest(r);
    return s;
  }
  if (r->done) {
    sizes[0] = r->size;
    *done = true;
    releaseRequest(r);
    return okStatus();
  }
  checkPeer();
  if (failed()) {
    releaseRequest(r);
    return failure();
  }
  return okStatus();
}

// ---- receive -----------------------------------------------------------------------------------

IbRecvComm::IbRecvComm(std::unique_ptr<IbConnResources> res, const IbHello& hello,
                       TrafficQos peer_qos, Fd oob, std::string peer, const IbCommConfig& cfg,
                       Clock& clock)
    : IbConnection(std::move(res), hello.ep, std::move(oob), std::move(peer), cfg, clock),
      mrs_(res_->dev),
      peer_qos_(std::move(peer_qos)),
      cts_addr_(hello.cts_addr),
      cts_rkey_(hello.cts_rkey),
      reqs_(kMaxRequests),
      flush_reqs_(kMaxRequests) {
  for (size_t i = 0; i < reqs_.size(); ++i) {
    reqs_[i].comm = this;
    reqs_[i].index = static_cast<int>(i);
    reqs_[i].is_recv = true;
    free_.push_back(static_cast<int>(reqs_.size() - 1 - i));
    flush_reqs_[i].comm = this;
    flush_reqs_[i].index = static_cast<int>(i);
    flush_reqs_[i].flush = true;
    flush_free_.push_back(static_cast<int>(reqs_.size() - 1 - i));
  }
}

IbRecvComm::~IbRecvComm() { destroyQps(); }

IbRecvRequest* IbRecvComm::allocRequest(std::vector<IbRecvRequest>& pool,
                                        std::vector<int>& free_list) {
  if (free_list.empty()) return nullptr;
  IbRecvRequest* r = &pool[static_cast<size_t>(free_list.back())];
  free_list.pop_back();
  r->in_use = true;
  r->done = false;
  r->error = okStatus();
  return r;
}

Status IbRecvComm::irecv(int n, void** data, const size_t* sizes, const int* tags, MemRegion** mrs,
                         Request** out) {
  *out = nullptr;
  if (n < 1 || n > kMaxRecvs) {
    return invalidArgument("irecv: " + std::to_string(n) + " buffers (1-" +
                           std::to_string(kMaxRecvs) + ")");
  }
  MutexLock lock(mu_);
  if (failed()) return failure();
  TQ_RETURN_IF_ERROR(pollCq());
  const size_t slot = static_cast<size_t>(recv_seq_ % kCtsSlots);
  if (cts_busy_[slot]) return okStatus();  // the slot's previous CTS write is still in flight
  IbRecvRequest* r = allocRequest(reqs_, free_);
  if (r == nullptr) {
    return failedPrecondition("irecv: " + std::to_string(kMaxRequests) +
                              " receives are already in flight on " + describe() +
                              " (NCCL_NET_MAX_REQUESTS)");
  }
  auto* stage = reinterpret_cast<CtsEntry*>(res_->stage.ptr) + slot * kMaxRecvs;
  for (int i = 0; i < n; ++i) {
    uint32_t rkey = 0;
    if (sizes[i] > 0) {
      auto h = mrs_.resolve(mrs != nullptr ? mrs[i] : nullptr, data[i], sizes[i]);
      if (!h.ok()) {
        r->in_use = false;
        free_.push_back(r->index);
        return h.status().withContext("irecv on " + describe());
      }
      rkey = (*h)->rkey();
    }
    CtsEntry& e = stage[i];
    std::memset(&e, 0, sizeof e);
    e.addr = reinterpret_cast<uintptr_t>(data[i]);
    e.size = sizes[i];
    e.rkey = rkey;
    e.n = static_cast<uint32_t>(n);
    e.tag = tags != nullptr ? tags[i] : 0;
    e.seq = recv_seq_ + 1;
    r->posted[i] = sizes[i];
    r->tags[i] = e.tag;
    r->got[i] = 0;
  }
  r->n = n;
  r->slot = recv_seq_;
  r->qp = static_cast<int>(recv_seq_ % res_->qps.size());
  r->cts_sent = false;
  r->charged = 0;
  r->cts_bytes = 0;
  for (int i = 0; i < n; ++i) r->cts_bytes += sizes[i];
  const int q = r->qp;
  // The receive for the completing immediate goes first, so it is there when the data lands.
  ibv_recv_wr rwr{};
  rwr.wr_id = makeWrId(WrKind::kRecv, q, static_cast<uint64_t>(r->index));
  ibv_recv_wr* bad_r = nullptr;
  const int rc = res_->dev->verbs().postRecv(res_->qps[static_cast<size_t>(q)].get(), &rwr, &bad_r);
  if (rc != 0) {
    Status s = errnoStatus(rc, "post receive on " + qpText(q));
    fail(s);
    return s;
  }
  slot_req_[slot] = r->index;
  ++outstanding_;
  ++recv_seq_;
  // Its clear-to-send goes out now if none waits before it and the rx bucket has its bytes;
  // else it waits (flushCts, from test() and irecv). The request is NCCL's either way.
  cts_waiting_.push_back(r->index);
  cts_waiting_bytes_ += r->cts_bytes;
  *out = r;
  return flushCts();
}

bool IbRecvComm::admitCts(IbRecvRequest* r) {
  // Unpaced (or no pacing yet): nothing to take; received bytes are counted at completion.
  if (admission_ == nullptr || r->cts_bytes == 0 || admission_->chunkBytes() == 0) return true;
  // The backlog the agent sees: every receive still waiting for its clear-to-send.
  if (!admission_->tryAdmit(r->cts_bytes, cts_waiting_bytes_)) return false;
  r->charged = r->cts_bytes;
  return true;
}

Status IbRecvComm::postCts(IbRecvRequest* r) {
  const size_t slot = static_cast<size_t>(r->slot % kCtsSlots);
  const int q = r->qp;
  auto* stage = reinterpret_cast<CtsEntry*>(res_->stage.ptr) + slot * kMaxRecvs;
  ibv_sge sge{reinterpret_cast<uintptr_t>(stage), static_cast<uint32_t>(sizeof(CtsEntry) * r->n),
              res_->stage.mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = makeWrId(WrKind::kCts, q, slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = cts_addr_ + slot * kMaxRecvs * sizeof(CtsEntry);
  wr.wr.rdma.rkey = cts_rkey_;
  TQ_RETURN_IF_ERROR(postSend(q, &wr));
  cts_busy_[slot] = true;
  r->cts_sent = true;
  return okStatus();
}

Status IbRecvComm::flushCts() {
  while (!cts_waiting_.empty() && !failed()) {
    IbRecvRequest* r = &reqs_[static_cast<size_t>(cts_waiting_.front())];
    if (!r->in_use) {  // released (its comm failed): nothing to clear
      cts_waiting_.pop_front();
      continue;
    }
    if (!admitCts(r)) break;
    cts_waiting_.pop_front();
    cts_waiting_bytes_ -= r->cts_bytes;
    TQ_RETURN_IF_ERROR(postCts(r));
  }
  return failed() ? failure() : okStatus();
}

Status IbRecvComm::iflush(int n, void** data, const int* sizes, MemRegion** mrs, Request** out) {
  *out = nullptr;
  if (!res_->flush_qp || mrs == nullptr) return okStatus();  // host memory only: nothing to do
  // The last non-empty buffer in device memory: one read of it orders all earlier writes.
  int last = -1;
  for (int i = 0; i < n; ++i) {
    auto* h = dynamic_cast<IbMr*>(mrs[i]);
    if (h != nullptr && h->type == MemType::kCuda && sizes[i] > 0) last = i;
  }
  if (last < 0) return okStatus();
  MutexLock lock(mu_);
  if (failed()) return failure();
  IbRecvRequest* r = allocRequest(flush_reqs_, flush_free_);
  if (r == nullptr) {
    return failedPrecondition("iflush: " + std::to_string(kMaxRequests) + " flushes in flight on " +
                              describe());
  }
  auto* h = static_cast<IbMr*>(mrs[last]);
  ibv_sge sge{reinterpret_cast<uintptr_t>(res_->flush_scratch.ptr), 1,
              res_->flush_scratch.mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = makeWrId(WrKind::kFlush, 0, static_cast<uint64_t>(r->index));
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_READ;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(data[last]);
  wr.wr.rdma.rkey = h->rkey();
  ibv_send_wr* bad = nullptr;
  if (const int rc = res_->dev->verbs().postSend(res_->flush_qp.get(), &wr, &bad); rc != 0) {
    r->in_use = false;
    flush_free_.push_back(r->index);
    return errnoStatus(rc, "post GPUDirect flush on " + describe());
  }
  r->n = 1;
  *out = r;
  return okStatus();
}

void IbRecvComm::onCompletion(const ibv_wc& wc) {
  const uint64_t v = wrValue(wc.wr_id);
  switch (wrKind(wc.wr_id)) {
    case WrKind::kCts:
      if (v < kCtsSlots) cts_busy_[static_cast<size_t>(v)] = false;
      return;
    case WrKind::kFlush:
      if (v < flush_reqs_.size()) {
        IbRecvRequest& f = flush_reqs_[static_cast<size_t>(v)];
        f.done = true;
        f.got[0] = 0;
      }
      return;
    case WrKind::kRecv: break;
    default: return;
  }
  if (v >= reqs_.size()) return;
  IbRecvRequest& r = reqs_[static_cast<size_t>(v)];
  if (!r.in_use) return;
  --outstanding_;
  r.done = true;
  if (!r.cts_sent) {
    r.error = dataLoss("a message from " + peer_ + " completed a receive on " + describe() +
                       " whose clear-to-send had not been sent (the peer wrote without one)");
    fail(r.error);
    return;
  }
  if ((wc.wc_flags & IBV_WC_WITH_IMM) == 0) {
    r.error = dataLoss("receive on " + describe() + " completed without immediate data");
    fail(r.error);
    return;
  }
  const uint32_t imm = ntohl(wc.imm_data);
  if ((imm & kImmRefused) != 0) {
    r.error = outOfRange("message of " + std::to_string(imm & kImmSizeMask) + " bytes from " +
                         peer_ + " does not fit the posted receive (" +
                         std::to_string(r.posted[0]) + (r.n > 1 ? " bytes, first of " : " bytes") +
                         (r.n > 1 ? std::to_string(r.n) + " buffers" : "") + ") on " + describe() +
                         ": message truncated");
    fail(r.error);
    return;
  }
  if (r.n == 1) {
    r.got[0] = imm;
  } else {
    const auto* ring = reinterpret_cast<const uint32_t*>(res_->ring.ptr) +
                       static_cast<size_t>(r.slot % kCtsSlots) * kMaxRecvs;
    for (int i = 0; i < r.n; ++i) r.got[i] = ring[i];
  }
  uint64_t total = 0;
  for (int i = 0; i < r.n; ++i) {
    if (r.got[i] > r.posted[i]) {
      r.error =
          outOfRange("message " + std::to_string(i) + " of " + std::to_string(r.got[i]) +
                     " bytes from " + peer_ + " exceeds the " + std::to_string(r.posted[i]) +
                     " bytes its clear-to-send allowed (the posted receive) on " + describe());
      fail(r.error);
      return;
    }
    total += r.got[i];
  }
  // The clear-to-send was charged at the posted sizes (capacities): give back what did not come.
  if (admission_ != nullptr && r.charged > total) admission_->giveBack(r.charged - total);
}

std::string IbRecvComm::describeWr(uint64_t wr_id) const {
  switch (wrKind(wr_id)) {
    case WrKind::kCts:
      return "clear-to-send RDMA WRITE (slot " + std::to_string(wrValue(wr_id)) + ")";
    case WrKind::kRecv: return "receive of the completing immediate";
    case WrKind::kFlush: return "GPUDirect flush RDMA READ";
    default: return "work request " + hex(wr_id);
  }
}

Status IbRecvComm::test(IbRecvRequest* r, bool* done, size_t* sizes) {
  *done = false;
  MutexLock lock(mu_);
  if (!r->in_use) return invalidArgument("test: request already completed (reused pointer?)");
  auto release = [&] {
    r->in_use = false;
    (r->flush ? flush_free_ : free_).push_back(r->index);
  };
  (void)pollCq();
  (void)flushCts();
  if (r->done) {
    Status e = r->error;
    if (!e.ok()) {
      release();
      return e;
    }
    for (int i = 0; i < r->n; ++i) sizes[i] = r->got[i];
    *done = true;
    release();
    return okStatus();
  }
  checkPeer();
  if (failed()) {
    if (!r->flush) --outstanding_;
    release();
    return failure();
  }
  return okStatus();
}

// ---- accessors for tests -----------------------------------------------------------------------

std::vector<ibv_qp*> ibQpsOf(const SendComm* c) {
  auto* s = dynamic_cast<const IbSendComm*>(c);
  return s != nullptr ? s->qps() : std::vector<ibv_qp*>{};
}

std::vector<ibv_qp*> ibQpsOf(const RecvComm* c) {
  auto* r = dynamic_cast<const IbRecvComm*>(c);
  return r != nullptr ? r->qps() : std::vector<ibv_qp*>{};
}

}  // namespace tq::plugin::ib
