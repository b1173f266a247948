// The seam between the version-neutral plugin layer and a wire transport.
//
// The plugin layer (plugin.h) owns everything that is the same on every wire: the C ABI and its
// exception firewall, tenant resolution, pacing (the token bucket is consulted in isend BEFORE
// the transport sees the message), the shared-memory counters. A Transport owns devices,
// connection setup, the 128-byte handle format, requests and data movement, and the marking of
// its traffic with the QoS it is given. The socket transport (socket/) is the first; the
// InfiniBand verbs transport (ib/) is the second.
//
// Contracts every transport keeps (NCCL relies on them; docs/plugin.md):
//  * listen/connect/accept never block; connect/accept return ok with a null comm until done
//    and tolerate being polled in any interleaving; they fail with a message within the
//    handshake deadline when the peer misbehaves.
//  * isend/irecv/test never block, sleep or take a contended lock.
//  * Sends and receives on one connection match in posting order; a receive may be larger than
//    the send (test reports the real size); a larger send is an error (kOutOfRange) on both
//    ends; zero-byte messages complete.
//  * At most kMaxRequests requests in flight per comm; one more is refused (kFailedPrecondition)
//    without disturbing the comm.
//  * Destroying a comm with requests in flight neither hangs nor leaks.
//
// Pacing contract. The plugin layer paces each comm with its tenant's bucket of the comm's device
// and direction (tenant.h). A comm chooses how, per direction:
//  * whole messages (Comm::pacesItself() false; only sends): the plugin layer takes tokens for
//    the whole message in isend and calls the transport only when they were granted; the
//    transport never sees the pacer. Receives are then not paced.
//  * itself (pacesItself() true): right after connect/accept the plugin layer hands the comm a
//    Pacing (setPacing) and takes no tokens itself. The comm admits what it moves through
//    Admission objects, at most Admission::chunkBytes() at a time, before it moves it: ib sends
//    each chunk of a message (the first from isend: refused and nothing else in flight, isend
//    returns no request, exactly as without clear-to-send; the rest from test()/isend
//    progress); ib receives a clear-to-send (from irecv, else from test() progress); socket
//    helper threads each read and write of a stripe. Never blocking NCCL's thread: a transport
//    thread may sleep for Admission::waitNs().
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "common/status.h"
#include "nccl-plugin/abi/net_common.h"

namespace tq::plugin {

class TenantPacer;
struct PaceState;

inline constexpr size_t kHandleBytes = NCCL_NET_HANDLE_MAXSIZE;
inline constexpr int kMaxRequests = NCCL_NET_MAX_REQUESTS;
// Most buffers one irecv may carry on any transport (NCCL's own IB uses 8 as well).
inline constexpr int kMaxRecvs = 8;

// Version-neutral device properties. Each transport fills them in ONE function; the per-ABI
// entry points only copy fields. Strings point at storage that lives as long as the process.
struct DeviceProperties {
  const char* name = nullptr;
  const char* pci_path = nullptr;  // nullptr for a virtual NIC
  uint64_t guid = 0;
  int ptr_support = NCCL_PTR_HOST;
  bool reg_is_global = false;
  bool force_flush = false;
  int speed_mbps = 0;
  int port = 0;
  float latency_us = 0;  // 0 = NCCL's default
  int max_comms = 0;
  int max_recvs = 1;
  uint64_t max_p2p_bytes = 0;
  uint64_t max_coll_bytes = 0;
  int max_multi_request_size = 1;
  // The network device the traffic leaves by (its tenant's buckets are per device): the IP
  // interface, or a RoCE port's netdev; an InfiniBand port's device name.
  const char* netdev = nullptr;
  // The rail the agent's fabric-peers map gives `netdev` (its --device DEV=LINK,rail=N; Net ABI
  // v12 railId, which NCCL's topology search uses to keep rings on one rail); -1: not known.
  // Filled by Plugin::properties, not by the transport.
  int rail = -1;
};

// How the traffic of one connection is marked. Decided by the SENDING side's tenant; the
// receiving side adopts the sender's values so that its ACKs carry the same marking.
struct TrafficQos {
  int dscp = 0;                      // 0-63; IP TOS / IPv6 traffic class byte = dscp << 2
  int service_level = 0;             // IB SL 0-15
  std::optional<uint32_t> priority;  // SO_PRIORITY; nullopt = leave the socket's default
  std::string tenant;                // for logs and receiver-side accounting
};

enum class MemType { kHost, kCuda };

class MemRegion {
 public:
  virtual ~MemRegion() = default;
};

class Request {
 public:
  // Non-blocking. When *done becomes true, sizes[0..count) hold the transferred sizes (one per
  // buffer of a multi-receive; one for a send) and the request returns to its comm's pool: the
  // caller must not use the pointer again. An error also releases the request. `sizes` has room
  // for at least `count` entries.
  virtual Status test(bool* done, size_t* sizes) = 0;

  // Plugin-layer bookkeeping, set when the request is handed out.
  TenantPacer* tenant = nullptr;
  bool is_recv = false;
  PaceState* pace = nullptr;  // the comm's pacing state (sends: in-flight count; receives: rx)
  int count = 1;              // buffers of the irecv (n), 1 for a send

 protected:
  ~Request() = default;  // owned by its comm's pool
};

// One admitter of a comm's traffic in one direction over the tenant's bucket (see "Pacing
// contract"). Single-threaded: each thread that admits has its own (Pacing::newAdmission). Never
// blocks.
class Admission {
 public:
  virtual ~Admission() = default;
  // Takes tokens for `bytes` (true) or refuses (false: nothing taken, try again later).
  // `pending`: bytes waiting to be admitted by this admitter, these included — the demand the
  // agent sees (backlog) while it is refused.
  virtual bool tryAdmit(uint64_t bytes, uint64_t pending) = 0;
  // How long until `bytes` could be admitted (ns; 0: now): a transport thread may sleep that
  // long instead of polling.
  virtual int64_t waitNs(uint64_t bytes) const = 0;
  // Tokens taken for bytes that never came (a receive admitted at its posted size that carried
  // less) go back to the bucket.
  virtual void giveBack(uint64_t bytes) = 0;
  // Sends waited `ns` for their receiver (a closed TCP window): not demand at this end.
  virtual void peerWait(int64_t ns) = 0;
  // Largest piece one admission should cover: min(depth / 2, rate x TENANTQOS_PACE_CHUNK_US),
  // a multiple of 4 KiB; 0 when unpaced (move whole messages).
  virtual uint64_t chunkBytes() const = 0;
  // The bucket's current rate in bytes/s; 0 when unpaced. Hardware rate limiters follow it.
  virtual uint64_t rateBytesPerSecond() const = 0;
};

// A comm's pacing in one direction, from the plugin layer: it outlives the comm.
class Pacing {
 public:
  virtual ~Pacing() = default;
  // A new admitter (its own backlog entry and catch-up state), valid as long as the Pacing.
  // Control path, or a transport thread's start; thread-safe.
  virtual Admission* newAdmission() = 0;
};

// What send and receive comms share: memory registration (NCCL registers buffers on either).
class Comm {
 public:
  virtual ~Comm() = default;
  // See "Pacing contract". When true, setPacing() is called once, before the first isend or
  // irecv; `pacing` outlives the comm.
  virtual bool pacesItself() const { return false; }
  virtual void setPacing(Pacing* /*pacing*/) {}
  virtual Status regMr(void* data, size_t size, MemType type, MemRegion** out) = 0;
  // DMA-BUF registration of device memory (NCCL_PTR_DMABUF); transports without it refuse.
  virtual Status regMrDmaBuf(void* /*data*/, size_t /*size*/, uint64_t /*offset*/, int /*fd*/,
                             MemRegion** /*out*/) {
    return unimplemented("regMrDmaBuf: this transport cannot register DMA-BUF memory");
  }
  virtual Status deregMr(MemRegion* mr) = 0;
  // The peer's data-plane address, canonical (common/fabric_peers.h), for the shared links the
  // connection crosses; empty when unknown (then it is charged to every one, the safe side).
  virtual std::string peerAddress() const { return {}; }
};

class SendComm : public Comm {
 public:
  // True when isend would hand out no request now for a transport reason (e.g. no
  // clear-to-send credit). The plugin layer then returns NULL without taking tokens.
  virtual bool wouldBlock() const { return false; }
  virtual Status isend(void* data, size_t size, int tag, MemRegion* mr, Request** req) = 0;
  virtual std::string describe() const = 0;
};

class RecvComm : public Comm {
 public:
  // n buffers at most DeviceProperties::max_recvs; sizes are upper bounds.
  virtual Status irecv(int n, void** data, const size_t* sizes, const int* tags, MemRegion** mrs,
                       Request** req) = 0;
  // Makes data received into device memory visible to the GPU (GPUDirect flush). Leaves *req
  // null when there is nothing to flush (host memory).
  virtual Status iflush(int n, void** data, const int* sizes, MemRegion** mrs, Request** req) = 0;
  // The marking adopted from the sender (its tenant name included).
  virtual const TrafficQos& peerQos() const = 0;
  virtual std::string describe() const = 0;
};

class ListenComm {
 public:
  virtual ~ListenComm() = default;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;
  virtual int deviceCount() const = 0;
  virtual Status properties(int dev, DeviceProperties* out) const = 0;
  // Writes at most kHandleBytes into `handle`. Never blocks.
  virtual Status listen(int dev, const TrafficQos& qos, void* handle,
                        std::unique_ptr<ListenComm>* out) = 0;
  // Non-blocking: ok with *out == nullptr means "call again with the same handle buffer".
  virtual Status connect(int dev, const TrafficQos& qos, void* handle,
                         std::unique_ptr<SendComm>* out) = 0;
  // Non-blocking, like connect. One call returns at most one connection.
  virtual Status accept(ListenComm* listen, std::unique_ptr<RecvComm>* out) = 0;
};

}  // namespace tq::plugin
