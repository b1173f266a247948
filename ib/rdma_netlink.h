// The node's RDMA queue pairs and their owners, from RDMA netlink (NETLINK_RDMA, the "nldev"
// client) as `rdma resource show qp` (iproute2) lists them. The agent uses it to find QPs that
// processes opened without the tenantqos plugin (agent/ungoverned_qps.h).
//
// Three layers, each testable alone:
//   * the codec (namespace rdma_nl): builds the two dump requests and parses their replies.
//     Pure byte code, no sockets; every length is checked, so a short, truncated or garbled
//     datagram is an error (or a skipped attribute), never an out-of-bounds read.
//   * NetlinkTransport: sends a request and receives one datagram; the real one is a
//     NETLINK_RDMA socket (openRdmaNetlink), tests use a fake that replays datagrams.
//   * NetlinkQpSource: one listing = a device dump, then one QP dump per device (the kernel
//     requires RDMA_NLDEV_ATTR_DEV_INDEX on a QP dump: it answers EINVAL without one).
//
// Messages (uapi <rdma/rdma_netlink.h>; the kernel side is drivers/infiniband/core/nldev.c):
//
//   request: nlmsghdr{type = RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_GET),
//                     flags = NLM_F_REQUEST | NLM_F_DUMP}            (no attributes)
//   reply:   one message per device (NLM_F_MULTI), then NLMSG_DONE
//            nlmsghdr{type = RDMA_NL_GET_TYPE(NLDEV, CMD_GET)}
//            ├── RDMA_NLDEV_ATTR_DEV_INDEX  u32
//            ├── RDMA_NLDEV_ATTR_DEV_NAME   NUL-terminated string ("mlx5_0", "rxe0")
//            └── port count, capabilities, firmware, GUIDs ...        (ignored)
//
//   request: nlmsghdr{type = RDMA_NL_GET_TYPE(NLDEV, RDMA_NLDEV_CMD_RES_QP_GET),
//                     flags = NLM_F_REQUEST | NLM_F_DUMP}
//            └── RDMA_NLDEV_ATTR_DEV_INDEX  u32                      (required)
//   reply:   messages (NLM_F_MULTI), each holding a run of whole entries, then NLMSG_DONE
//            nlmsghdr{type = RDMA_NL_GET_TYPE(NLDEV, CMD_RES_QP_GET)}
//            ├── RDMA_NLDEV_ATTR_DEV_INDEX  u32
//            ├── RDMA_NLDEV_ATTR_DEV_NAME   string
//            └── RDMA_NLDEV_ATTR_RES_QP     nest (the kernel does not set NLA_F_NESTED)
//                ├── RDMA_NLDEV_ATTR_RES_QP_ENTRY  nest
//                │   ├── RDMA_NLDEV_ATTR_PORT_INDEX     u32  absent until the QP has a port
//                │   ├── RDMA_NLDEV_ATTR_RES_LQPN       u32  the QP number
//                │   ├── RDMA_NLDEV_ATTR_RES_PID        u32  user QP: its creator's pid in the
//                │   │                                       READER's pid namespace; absent
//                │   │                                       when not visible there (or zombie)
//                │   ├── RDMA_NLDEV_ATTR_RES_KERN_NAME  string  kernel QP: its owner module
//                │   ├── RDMA_NLDEV_ATTR_RES_TYPE       u8   IB_QPT_* (2 RC, 4 UD, ...)
//                │   ├── RDMA_NLDEV_ATTR_RES_STATE      u8   IB_QPS_* (0 RESET .. 3 RTS ..)
//                │   └── PDN, RQPN, PSNs, driver attributes            (ignored)
//                └── RDMA_NLDEV_ATTR_RES_QP_ENTRY ...
//   errors:  NLMSG_ERROR{int error = -errno, the request's header} instead of any reply; a
//            dump that fails after it started ends with NLMSG_DONE carrying a negative int.
//
// The pid is the creating THREAD's id (task_pid_vnr of the task that created the QP), which
// for a multi-threaded process (NCCL connects from its proxy thread) is not the process id:
// callers map it to the thread group (agent/ungoverned_qps.h does, through /proc).
// Namespaces: kernel 5.5+ lists every QP of the devices visible in the socket's network
// namespace (all of them in the default "shared" RDMA netns mode); a reader outside the owner's
// pid namespace gets the entry without RDMA_NLDEV_ATTR_RES_PID.
//
// Thread-safety: the codec is pure; a transport or source is used by one thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"

namespace tq::ib {

struct RdmaDevice {
  uint32_t index = 0;
  std::string name;
  friend bool operator==(const RdmaDevice&, const RdmaDevice&) = default;
};

struct RdmaQp {
  uint32_t device_index = 0;
  std::string device;
  uint32_t port = 0;  // 0: not bound to a port yet
  uint32_t qpn = 0;
  uint8_t type = 0;   // IB_QPT_*
  uint8_t state = 0;  // IB_QPS_*
  // A user QP whose creator is visible in the reader's pid namespace: that thread's id.
  std::optional<int32_t> pid;
  // A kernel QP (QP0/QP1 of ib_core, IPoIB, storage ULPs): the kernel's owner name. Empty for
  // user QPs.
  std::string kernel_owner;
  bool kernel() const { return !kernel_owner.empty(); }
  friend bool operator==(const RdmaQp&, const RdmaQp&) = default;
};

namespace rdma_nl {

// Strings taken from a reply are cut at this many bytes (IB_DEVICE_NAME_MAX and TASK_COMM_LEN
// are both below it).
inline constexpr size_t kMaxNameBytes = 64;

std::vector<uint8_t> deviceDumpRequest(uint32_t seq);
std::vector<uint8_t> qpDumpRequest(uint32_t seq, uint32_t device_index);

// Parses one received datagram of the reply to the dump with sequence number `seq`: appends
// what it carries to `out` and returns true once the dump's NLMSG_DONE was seen. Messages with
// another sequence number (a late reply to an earlier, abandoned dump) are skipped. An error
// reply, a malformed message or an unexpected message type is an error naming it; what was
// appended before stays. parseQpReply appends at most `max_qps` entries in all and fails with
// kResourceExhausted past that.
Result<bool> parseDeviceReply(std::span<const uint8_t> datagram, uint32_t seq,
                              std::vector<RdmaDevice>* out);
Result<bool> parseQpReply(std::span<const uint8_t> datagram, uint32_t seq, size_t max_qps,
                          std::vector<RdmaQp>* out);

}  // namespace rdma_nl

// One netlink conversation partner: the kernel's RDMA netlink (openRdmaNetlink) or a test fake.
class NetlinkTransport {
 public:
  virtual ~NetlinkTransport() = default;
  virtual Status send(std::span<const uint8_t> message) = 0;
  // The next datagram from the kernel; kDeadlineExceeded when none came within the transport's
  // receive timeout.
  virtual Result<std::vector<uint8_t>> receive() = 0;
};

// A NETLINK_RDMA socket in the caller's network namespace, receive timeout `timeout_ms`.
// kUnavailable (EPROTONOSUPPORT) on a kernel without RDMA (ib_core not loaded). Datagrams not
// sent by the kernel (source port id != 0) are dropped.
Result<std::unique_ptr<NetlinkTransport>> openRdmaNetlink(int timeout_ms);

struct QpListing {
  std::vector<RdmaDevice> devices;  // in the kernel's order (by index)
  std::vector<RdmaQp> qps;          // by device, in `devices` order, then in the kernel's order
  // Devices whose QP dump failed (their QPs are missing from `qps`), one line each.
  std::vector<std::string> device_errors;
  bool truncated = false;  // more than max_qps QPs: the listing stops there
};

class QpSource {
 public:
  virtual ~QpSource() = default;
  // Every QP of every RDMA device. An error only when nothing could be listed (no device dump).
  virtual Result<QpListing> listQps() = 0;
};

struct NetlinkQpSourceOptions {
  size_t max_qps = 262144;  // per listing (entries cost ~100 bytes each)
  size_t max_devices = 1024;
  size_t max_datagrams_per_dump = 65536;
  int64_t deadline_ns = 5'000'000'000;  // per listing, all dumps together
};

using NetlinkOpener = std::function<Result<std::unique_ptr<NetlinkTransport>>()>;

// listQps() over transports from `open`: a fresh one per listing, and a fresh one after a dump
// that failed half-way (the kernel keeps one dump per socket running until it is read to its
// end, and refuses a new one with EBUSY meanwhile). Opening per listing also picks up RDMA
// netlink once ib_core is loaded after the agent started. Not thread-safe.
class NetlinkQpSource final : public QpSource {
 public:
  NetlinkQpSource(NetlinkOpener open, Clock& clock, NetlinkQpSourceOptions options = {});
  Result<QpListing> listQps() override;

 private:
  template <typename Parse>
  Status dump(std::span<const uint8_t> request, uint32_t seq, int64_t deadline, const Parse& parse);
  template <typename Parse>
  Status dumpOn(NetlinkTransport& transport, std::span<const uint8_t> request, uint32_t seq,
                int64_t deadline, const Parse& parse);

  NetlinkOpener open_;
  std::unique_ptr<NetlinkTransport> transport_;
  Clock& clock_;
  NetlinkQpSourceOptions options_;
  uint32_t seq_ = 0;
};

}  // namespace tq::ib
