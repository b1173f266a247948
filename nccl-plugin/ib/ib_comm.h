// The data path of the ib transport: one established connection end (send or receive).
//
// A connection is `nqps` RC queue pairs (TENANTQOS_IB_QPS_PER_CONN) between one port on each
// side, one completion queue per end, and two small rings in registered memory:
//  * the clear-to-send (CTS) ring lives in the SENDER's memory. irecv posts a receive work
//    request for the completing immediate, then RDMA-writes n CTS entries (buffer address,
//    rkey, posted size, tag, sequence) into slot seq % kCtsSlots of that ring. isend reads the
//    next slot: nothing there -> no request (NCCL retries); otherwise it matches the send to the
//    entry with its tag. So the receiver drives the flow and a sender never writes into a
//    buffer that is not posted.
//  * the sizes ring lives in the RECEIVER's memory: for a multi-receive (n > 1) the sender
//    writes the n message sizes there.
// Data: once all n sends of a slot are matched, the sender RDMA-WRITEs each message into its
// buffer in chunks, then completes the receive with a WRITE_WITH_IMM: for n == 1 it is the last
// chunk and the immediate is the size; for n > 1 it is the sizes write (immediate 0). A send
// larger than its posted buffer is refused: the immediate carries kImmRefused and both ends
// fail with kOutOfRange. A slot's work goes on QP slot % nqps, so both ends agree on where its
// immediate arrives and receive work requests match in order.
//
// Pacing (transport.h "Pacing contract"): every chunk a sender posts is admitted by the
// tenant's tx bucket (Admission::tryAdmit) before it is posted; chunks are at most
// Admission::chunkBytes(). isend admits the first chunk of a message when nothing else waits
// (refused: no request); later chunks are admitted and posted from test()/isend progress. Where
// the device supports per-QP packet pacing for RC QPs, the QPs are also rate-limited to the
// tenant's rate. A receiver's clear-to-send for n buffers goes out only when the tenant's rx
// bucket admits their posted sizes: from irecv, else from test()/irecv progress, in order,
// never blocking (irecv still returns its request); the sender, having no clear-to-send,
// waits. The charge is the posted sizes (capacities); a completion that carried less gives the
// rest back. A message arriving for a receive whose clear-to-send has not gone out, or larger
// than it allowed, fails the comm.
//
// Errors: a failed work completion fails the comm with the device, QP numbers, what the work
// request was and the completion status text; a fatal async event fails it through CommHealth;
// the out-of-band TCP connection of the handshake stays open as a liveness link, so a peer
// process that dies fails the comm within milliseconds instead of after the QP's retry timeout.
// After a failure every call returns the error and pending requests fail.
//
// Threads: isend/irecv/test run on NCCL's progress thread and take the comm's mutex
// (uncontended); regMr may run concurrently on the service thread (its own lock). Never blocks.
// Destruction with requests in flight destroys the QPs (outstanding work is flushed), then the
// CQ and the registrations: no hang, no leak.
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/fd.h"
#include "common/thread_annotations.h"
#include "ib/rc_qp.h"
#include "ib/sysfs.h"
#include "nccl-plugin/ib/ib_device.h"
#include "nccl-plugin/ib/ib_wire.h"
#include "nccl-plugin/oob/tcp.h"
#include "nccl-plugin/transport.h"

namespace tq::plugin::ib {

// One usable port: a plugin device of the ib transport. Owned by the transport (lives as long
// as the process); comms keep pointers to it.
struct IbPort {
  std::string name;    // device name, "rxe0"
  std::string netdev;  // RoCE: the port's network device ("rxeveth0"); InfiniBand: `name`
  int port = 1;
  tqib::LinkLayer link_layer = tqib::LinkLayer::kEthernet;
  int gid_index = 0;
  tqib::Gid gid;
  uint16_t lid = 0;
  int mtu_bytes = 1024;  // active MTU
  uint64_t max_msg_bytes = 1u << 30;
  std::string pci_path;  // empty for virtual devices (rxe)
  uint64_t guid = 0;
  int speed_mbps = 0;
  std::shared_ptr<IbDevice> dev;
  // "rxe0:1"
  std::string label() const { return name + ":" + std::to_string(port); }
  bool roce() const { return link_layer == tqib::LinkLayer::kEthernet; }
};

struct IbCommConfig {
  int qps_per_conn = 1;
  uint8_t timeout = 20;
  uint8_t retry_cnt = 7;
  std::optional<int> cts_dscp;               // receiver QPs' DSCP (RoCE); nullopt: the sender's
  int64_t liveness_interval_ns = 5'000'000;  // how often a waiting comm checks its peer
};

// Registered memory owned by one connection end (the rings), not shared with the cache.
struct RingMemory {
  RingMemory() = default;
  RingMemory(RingMemory&& o) noexcept
      : ptr(std::exchange(o.ptr, nullptr)), bytes(std::exchange(o.bytes, 0)), mr(std::move(o.mr)) {}
  RingMemory& operator=(RingMemory&& o) noexcept {
    if (this != &o) {
      release();
      ptr = std::exchange(o.ptr, nullptr);
      bytes = std::exchange(o.bytes, 0);
      mr = std::move(o.mr);
    }
    return *this;
  }
  ~RingMemory() { release(); }
  void release();
  uint8_t* ptr = nullptr;
  size_t bytes = 0;
  tqib::MrPtr mr;
};

// Everything one end creates before the handshake (its QP numbers go into it) and hands to the
// comm once the handshake completes. Destroying it releases all of it (failed connects leak
// nothing).
struct IbConnResources {
  const IbPort* port = nullptr;
  std::shared_ptr<IbDevice> dev;
  tqib::CqPtr cq;
  std::vector<tqib::QpPtr> qps;
  uint32_t psn = 0;
  RingMemory ring;   // sender: CTS ring (remote-writable); receiver: sizes ring (remote-writable)
  RingMemory stage;  // sender: sizes staging; receiver: CTS staging (local)
  // Receiver with GPUDirect: a QP connected to itself whose RDMA READ flushes PCIe writes.
  tqib::QpPtr flush_qp;
  RingMemory flush_scratch;

  IbEndpointInfo local() const;
  std::vector<uint32_t> qpNumbers() const;
};

enum class ConnSide { kSend, kRecv };

// Creates CQ, `nqps` QPs (RESET) and the rings for one end.
Result<std::unique_ptr<IbConnResources>> makeResources(const IbPort& port, ConnSide side, int nqps);
// Walks every QP to RTS towards `remote` with this service level and traffic class (DSCP << 2,
// RoCE only); the receiver also connects its flush QP to itself.
Status connectResources(IbConnResources* res, const IbEndpointInfo& remote, int service_level,
                        int dscp, const IbCommConfig& cfg);

// Per-comm memory handles: regMr/deregMr of NCCL plus implicit registrations of buffers NCCL
// passes without a handle. Everything left is released when the comm closes.
class CommMrs {
 public:
  explicit CommMrs(std::shared_ptr<IbDevice> dev) : dev_(std::move(dev)) {}
  Status reg(void* data, size_t size, MemType type, MemRegion** out);
  Status regDmabuf(void* data, size_t size, uint64_t offset, int fd, MemRegion** out);
  Status dereg(MemRegion* mr);
  // The registration to use for [data, data+size): `mr` when given (checked), else an implicit
  // one made through the cache and kept until the comm closes.
  Result<const IbMr*> resolve(MemRegion* mr, const void* data, size_t size);

 private:
  std::shared_ptr<IbDevice> dev_;
  Mutex mu_;
  std::vector<std::unique_ptr<IbMr>> handles_ TQ_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<IbMr>> implicit_ TQ_GUARDED_BY(mu_);
};

// Shared by both ends: QPs, CQ, health, liveness, error text.
class IbConnection {
 public:
  IbConnection(std::unique_ptr<IbConnResources> res, IbEndpointInfo remote, Fd oob,
               std::string peer, const IbCommConfig& cfg, Clock& clock);
  virtual ~IbConnection();
  IbConnection(const IbConnection&) = delete;
  IbConnection& operator=(const IbConnection&) = delete;

  // QPs of this end (tests: attributes read back with ibv_query_qp).
  std::vector<ibv_qp*> qps() const;
  std::string describe() const;
  const IbPort& port() const { return *res_->port; }

 protected:
  // "rxe0 QP 0x11 -> rxe1 QP 0x12 (peer 10.77.0.2:41234)"
  std::string qpText(int q) const;
  // Polls the CQ once (a batch); calls onCompletion for each; the first failed completion
  // fails the comm. Returns the comm's error, if any.
  Status pollCq() TQ_REQUIRES(mu_);
  virtual void onCompletion(const ibv_wc& wc) TQ_REQUIRES(mu_) = 0;
  // What a work request was, from its wr_id, for error messages.
  virtual std::string describeWr(uint64_t wr_id) const TQ_REQUIRES(mu_) = 0;
  // Work the peer still has to take part in (receives posted, sends queued or waiting for a
  // clear-to-send).
  virtual bool outstanding() const TQ_REQUIRES(mu_) = 0;
  // If outstanding() and the interval has passed: checks the out-of-band link; a closed or
  // reset link fails the comm (after collecting completions that arrived before).
  void checkPeer() TQ_REQUIRES(mu_);
  // Destroys the QPs (flushing their work) before anything they use; derived destructors call
  // it first, while their members still exist.
  void destroyQps();
  Status failure() const { return health_->status(); }
  bool failed() const { return health_->failed(); }
  void fail(const Status& s) { health_->fail(s); }
  Status postSend(int q, ibv_send_wr* wr) TQ_REQUIRES(mu_);

  std::unique_ptr<IbConnResources> res_;
  const IbEndpointInfo remote_;
  Fd oob_;
  const std::string peer_;
  const IbCommConfig cfg_;
  Clock& clock_;
  std::shared_ptr<CommHealth> health_;
  std::vector<uint32_t> sq_out_ TQ_GUARDED_BY(mu_);  // outstanding send work requests per QP
  uint32_t sq_depth_ TQ_GUARDED_BY(mu_) = 0;
  int64_t next_peer_check_ns_ TQ_GUARDED_BY(mu_) = 0;
  mutable Mutex mu_;  // caller side (isend/irecv/test)
};

// wr_id: kind (bits 56-63) | QP index (48-55) | slot sequence or request index (0-47).
enum class WrKind : uint8_t { kChunk = 1, kFinal = 2, kCts = 3, kRecv = 4, kFlush = 5 };
constexpr uint64_t makeWrId(WrKind k, int qp, uint64_t value) {
  return (static_cast<uint64_t>(k) << 56) | (static_cast<uint64_t>(qp & 0xff) << 48) |
         (value & 0xffffffffffffull);
}
constexpr WrKind wrKind(uint64_t id) { return static_cast<WrKind>(id >> 56); }
constexpr int wrQp(uint64_t id) { return static_cast<int>((id >> 48) & 0xff); }
constexpr uint64_t wrValue(uint64_t id) { return id & 0xffffffffffffull; }

class IbSendComm;
class IbRecvComm;

class IbSendRequest final : public Request {
 public:
  Status test(bool* done, size_t* sizes) override;
  IbSendComm* comm = nullptr;
  int index = 0;
  bool in_use = false;
  bool done = false;
  const uint8_t* data = nullptr;
  uint64_t size = 0;
  uint32_t lkey = 0;
};

class IbRecvRequest final : public Request {
 public:
  Status test(bool* done, size_t* sizes) override;
  IbRecvComm* comm = nullptr;
  int index = 0;
  bool in_use = false;
  bool done = false;
  bool flush = false;
  int n = 1;
  uint64_t slot = 0;
  int qp = 0;
  bool cts_sent = false;   // its clear-to-send went out (else it waits for the rx bucket)
  uint64_t cts_bytes = 0;  // the posted sizes, summed: what its clear-to-send allows
  uint64_t charged = 0;    // what the rx bucket was charged for it (0: unpaced)
  uint64_t posted[kMaxRecvs] = {};
  int tags[kMaxRecvs] = {};
  uint64_t got[kMaxRecvs] = {};
  Status error;
};

class IbSendComm final : public SendComm, public IbConnection {
 public:
  IbSendComm(std::unique_ptr<IbConnResources> res, const IbReply& reply, Fd oob, std::string peer,
             const IbCommConfig& cfg, Clock& clock);
  ~IbSendComm() override;

  Status regMr(void* data, size_t size, MemType type, MemRegion** out) override {
    return mrs_.reg(data, size, type, out);
  }
  Status regMrDmaBuf(void* data, size_t size, uint64_t offset, int fd, MemRegion** out) override {
    return mrs_.regDmabuf(data, size, offset, fd, out);
  }
  Status deregMr(MemRegion* mr) override { return mrs_.dereg(mr); }
  bool pacesItself() const override { return true; }
  void setPacing(Pacing* pacing) override { admission_ = pacing->newAdmission(); }
  Status isend(void* data, size_t size, int tag, MemRegion* mr, Request** req) override;
  std::string describe() const override { return "ib send comm " + IbConnection::describe(); }

  Status test(IbSendRequest* r, bool* done, size_t* sizes);

 private:
  struct Job {
    uint64_t slot = 0;
    int n = 0;
    int qp = 0;
    CtsEntry entries[kMaxRecvs] = {};
    IbSendRequest* reqs[kMaxRecvs] = {};
    int cur = 0;            // buffer being posted
    uint64_t off = 0;       // bytes of it posted
    uint64_t admitted = 0;  // admitted by isend, not posted yet
    bool final_posted = false;
    bool completed = false;
    bool refused = false;  // a send did not fit: post only the refusing immediate
    uint32_t refused_imm = 0;
  };

  Status progress() TQ_REQUIRES(mu_);
  Status postJobs() TQ_REQUIRES(mu_);
  void onCompletion(const ibv_wc& wc) override TQ_REQUIRES(mu_);
  std::string describeWr(uint64_t wr_id) const override TQ_REQUIRES(mu_);
  bool outstanding() const override TQ_REQUIRES(mu_) {
    return !jobs_.empty() || cts_waiting_ || slot_matched_ > 0;
  }
  void updateHwRate() TQ_REQUIRES(mu_);
  IbSendRequest* allocRequest() TQ_REQUIRES(mu_);
  void releaseRequest(IbSendRequest* r) TQ_REQUIRES(mu_);
  const CtsEntry* slotEntries(uint64_t slot) const TQ_REQUIRES(mu_);
  // The current slot is fully present (all n entries carry its sequence): copy it in.
  bool loadSlot() TQ_REQUIRES(mu_);

  CommMrs mrs_;
  Admission* admission_ = nullptr;
  const uint64_t sizes_addr_;  // the receiver's sizes ring
  const uint32_t sizes_rkey_;
  uint64_t max_wr_bytes_;

  std::vector<IbSendRequest> reqs_ TQ_GUARDED_BY(mu_);
  std::vector<int> free_ TQ_GUARDED_BY(mu_);
  uint64_t slot_seq_ TQ_GUARDED_BY(mu_) = 0;  // next CTS slot to match
  bool slot_loaded_ TQ_GUARDED_BY(mu_) = false;
  int slot_n_ TQ_GUARDED_BY(mu_) = 0;
  CtsEntry slot_entries_[kMaxRecvs] TQ_GUARDED_BY(mu_) = {};
  IbSendRequest* slot_reqs_[kMaxRecvs] TQ_GUARDED_BY(mu_) = {};
  int slot_matched_ TQ_GUARDED_BY(mu_) = 0;
  bool cts_waiting_ TQ_GUARDED_BY(mu_) = false;  // the last isend found no clear-to-send
  std::deque<Job> jobs_ TQ_GUARDED_BY(mu_);      // slot order; popped when completed
  size_t post_idx_ TQ_GUARDED_BY(mu_) = 0;       // first job not fully posted
  uint64_t unposted_bytes_ TQ_GUARDED_BY(mu_) = 0;
  uint64_t hw_rate_ TQ_GUARDED_BY(mu_) = 0;  // the rate the QPs are limited to (bytes/s), 0: none
  int64_t next_hw_check_ns_ TQ_GUARDED_BY(mu_) = 0;
  bool hw_rate_warned_ TQ_GUARDED_BY(mu_) = false;
};

class IbRecvComm final : public RecvComm, public IbConnection {
 public:
  IbRecvComm(std::unique_ptr<IbConnResources> res, const IbHello& hello, TrafficQos peer_qos,
             Fd oob, std::string peer, const IbCommConfig& cfg, Clock& clock);
  ~IbRecvComm() override;

  Status regMr(void* data, size_t size, MemType type, MemRegion** out) override {
    return mrs_.reg(data, size, type, out);
  }
  Status regMrDmaBuf(void* data, size_t size, uint64_t offset, int fd, MemRegion** out) override {
    return mrs_.regDmabuf(data, size, offset, fd, out);
  }
  Status deregMr(MemRegion* mr) override { return mrs_.dereg(mr); }
  bool pacesItself() const override { return true; }
  void setPacing(Pacing* pacing) override { admission_ = pacing->newAdmission(); }
  Status irecv(int n, void** data, const size_t* sizes, const int* tags, MemRegion** mrs,
               Request** req) override;
  Status iflush(int n, void** data, const int* sizes, MemRegion** mrs, Request** req) override;
  const TrafficQos& peerQos() const override { return peer_qos_; }
  std::string describe() const override { return "ib receive comm " + IbConnection::describe(); }

  Status test(IbRecvRequest* r, bool* done, size_t* sizes);

 private:
  void onCompletion(const ibv_wc& wc) override TQ_REQUIRES(mu_);
  std::string describeWr(uint64_t wr_id) const override TQ_REQUIRES(mu_);
  bool outstanding() const override TQ_REQUIRES(mu_) { return outstanding_ > 0; }
  IbRecvRequest* allocRequest(std::vector<IbRecvRequest>& pool, std::vector<int>& free_list)
      TQ_REQUIRES(mu_);
  // The rx bucket's admission of a waiting request's clear-to-send (true: it may go out now).
  bool admitCts(IbRecvRequest* r) TQ_REQUIRES(mu_);
  Status postCts(IbRecvRequest* r) TQ_REQUIRES(mu_);
  // Sends the waiting clear-to-send entries, in order, as long as the rx bucket admits them.
  Status flushCts() TQ_REQUIRES(mu_);

  CommMrs mrs_;
  Admission* admission_ = nullptr;  // the tenant's rx bucket for this device (setPacing)
  std::deque<int> cts_waiting_
      TQ_GUARDED_BY(mu_);  // requests whose clear-to-send waits for tokens, in order
  uint64_t cts_waiting_bytes_ TQ_GUARDED_BY(mu_) = 0;
  const TrafficQos peer_qos_;
  const uint64_t cts_addr_;  // the sender's CTS ring
  const uint32_t cts_rkey_;
  std::vector<IbRecvRequest> reqs_ TQ_GUARDED_BY(mu_);
  std::vector<int> free_ TQ_GUARDED_BY(mu_);
  std::vector<IbRecvRequest> flush_reqs_ TQ_GUARDED_BY(mu_);
  std::vector<int> flush_free_ TQ_GUARDED_BY(mu_);
  uint64_t recv_seq_ TQ_GUARDED_BY(mu_) = 0;
  std::array<bool, kCtsSlots> cts_busy_
      TQ_GUARDED_BY(mu_){};  // staging slot's CTS write not yet completed
  std::array<int, kCtsSlots> slot_req_ TQ_GUARDED_BY(mu_){};  // request index waiting on each slot
  int outstanding_ TQ_GUARDED_BY(mu_) = 0;
};

// The QPs of an ib comm (empty for other transports' comms). For tests of the marking.
std::vector<ibv_qp*> ibQpsOf(const SendComm* c);
std::vector<ibv_qp*> ibQpsOf(const RecvComm* c);

}  // namespace tq::plugin::ib
