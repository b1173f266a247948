// The seam between the version-neutral plugin layer and a wire transport.
//
// The plugin layer (plugin.h) owns everything that is the same on every wire: the C ABI and its
// exception firewall, tenant resolution, pacing (the token bucket is consulted in isend BEFORE
// the transport sees the message), the shared-memory counters. A Transport owns devices,
// connection setup, the 128-byte handle format, requests and data movement, and the marking of
// its traffic with the QoS it is given. The socket transport (socket/) is the first; the
// InfiniBand verbs transport slots in beside it.
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
  // Non-blocking. When *done becomes true, *bytes holds the transferred size and the request
  // returns to its comm's pool: the caller must not use the pointer again. An error also
  // releases the request.
  virtual Status test(bool* done, size_t* bytes) = 0;

  // Plugin-layer bookkeeping, set when the request is handed out.
  TenantPacer* tenant = nullptr;
  bool is_recv = false;
  PaceState* pace = nullptr;  // sends: the comm's pacing state (in-flight count)

 protected:
  ~Request() = default;  // owned by its comm's pool
};

class SendComm {
 public:
  virtual ~SendComm() = default;
  virtual Status regMr(void* data, size_t size, MemType type, MemRegion** out) = 0;
  virtual Status deregMr(MemRegion* mr) = 0;
  // True when isend would hand out no request now for a transport reason (e.g. no
  // clear-to-send credit). The plugin layer then returns NULL without taking tokens.
  virtual bool wouldBlock() const { return false; }
  virtual Status isend(void* data, size_t size, int tag, MemRegion* mr, Request** req) = 0;
  virtual std::string describe() const = 0;
};

class RecvComm {
 public:
  virtual ~RecvComm() = default;
  virtual Status regMr(void* data, size_t size, MemType type, MemRegion** out) = 0;
  virtual Status deregMr(MemRegion* mr) = 0;
  // n buffers at most DeviceProperties::max_recvs; sizes are upper bounds.
  virtual Status irecv(int n, void** data, const size_t* sizes, const int* tags, MemRegion** mrs,
                       Request** req) = 0;
  // Leaves *req null when there is nothing to flush (host memory).
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
