// The netlink seam of tc/: what the executor reads from and writes to the kernel, as our own
// structs, behind an interface; plus RAII owners for the libnl objects the real implementation
// uses.
//
// TcNetlink is the only place the executor touches the kernel. Tests put a decorator in front
// of the real implementation to count writes or fail the Nth one (tests/functional), or replace
// it with an in-memory fake (tests/unit/tc). The real implementation, openTcNetlink(), talks
// rtnetlink through libnl-route 3.7.
//
// Facts about libnl 3.7 this file handles (../docs and toolchain research):
// - rates go out through rtnl_htb_set_rate64/ceil64 (bytes/s, 64-bit);
// - libnl converts burst bytes to µs (truncating) and then to psched ticks, and back when
//   reading, so a burst reads back up to ~2 µs x rate smaller than written: compare with
//   burstEquivalent(), not ==;
// - libnl ignores the kernel's extended ack (the human-readable reason). We switch
//   NETLINK_EXT_ACK on and capture the message ourselves, so errors read
//   "Object busy (EBUSY); kernel: HTB class in use".
// - a top-level class reads back with parent TC_H_ROOT; we report the qdisc handle instead, the
//   same value a plan uses (libnl refuses to write parent TC_H_ROOT with a 1: classid).
//
// Thread-safety: a TcNetlink owns one netlink socket and is thread-compatible (one thread at a
// time). Blocking: every call is one synchronous netlink request and waits for the kernel's answer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "tc/plan.h"

// libnl's opaque types; only netlink.cc includes libnl's headers.
extern "C" {
struct nl_sock;
struct nl_cache;
struct rtnl_qdisc;
struct rtnl_class;
struct rtnl_cls;
}

namespace tq::tc {

// ---- RAII owners of libnl objects (ownership: the unique_ptr frees / drops its reference) ----
struct NlSockDeleter {
  void operator()(nl_sock* p) const noexcept;
};
struct NlCacheDeleter {
  void operator()(nl_cache* p) const noexcept;
};
struct RtnlQdiscDeleter {
  void operator()(rtnl_qdisc* p) const noexcept;
};
struct RtnlClassDeleter {
  void operator()(rtnl_class* p) const noexcept;
};
struct RtnlClsDeleter {
  void operator()(rtnl_cls* p) const noexcept;
};
using NlSockPtr = std::unique_ptr<nl_sock, NlSockDeleter>;
using NlCachePtr = std::unique_ptr<nl_cache, NlCacheDeleter>;
using RtnlQdiscPtr = std::unique_ptr<rtnl_qdisc, RtnlQdiscDeleter>;
using RtnlClassPtr = std::unique_ptr<rtnl_class, RtnlClassDeleter>;
using RtnlClsPtr = std::unique_ptr<rtnl_cls, RtnlClsDeleter>;

// ---- what reads return ------------------------------------------------------------------------

struct QdiscInfo {
  uint32_t handle = 0;  // 0 for the kernel's default root (noqueue, pfifo_fast, mq)
  uint32_t parent = 0;  // kTcRoot for the root qdisc
  std::string kind;
  HtbRoot htb;  // meaningful when kind == "htb"
};

// Counters as the kernel reports them for the class (monotonic while the class exists).
struct ClassStats {
  uint64_t bytes = 0;
  uint64_t packets = 0;
  uint64_t drops = 0;
  uint64_t overlimits = 0;
};

struct ClassInfo {
  std::string kind;  // "htb" for our classes; other qdiscs (mq, ...) have classes too
  HtbClass htb;      // classid/parent for every kind; the rest only for htb
  uint32_t level = 0;
  ClassStats stats;
};

struct FilterInfo {
  uint32_t parent = 0;
  std::string kind;        // "u32" for ours
  U32Filter u32;           // pref/protocol/handle for every kind; keys/classid for u32
  bool u32_table = false;  // a u32 hash table (node id 0), not a match rule
};

// How to name a filter to delete: handle 0 removes the whole classifier (pref, protocol).
struct FilterRef {
  uint16_t pref = 0;
  uint16_t protocol = 0;
  std::string kind;
  uint32_t handle = 0;
};

// True when two bursts (bytes) at `rate` (bytes/s) are the same bucket after libnl's and the
// kernel's rounding: within 4 µs x rate + 8 bytes.
bool burstEquivalent(uint32_t a, uint32_t b, uint64_t rate);

// ---- the seam ---------------------------------------------------------------------------------

class TcNetlink {
 public:
  virtual ~TcNetlink() = default;

  // Reads. kNotFound for a device that does not exist.
  virtual Result<int> linkIndex(std::string_view device) = 0;
  // The device's MTU in bytes (what the tenant plan's payload -> wire framing needs).
  virtual Result<uint32_t> linkMtu(std::string_view device) = 0;
  virtual Result<std::vector<QdiscInfo>> qdiscs(int ifindex) = 0;
  virtual Result<std::vector<ClassInfo>> classes(int ifindex) = 0;
  virtual Result<std::vector<FilterInfo>> filters(int ifindex, uint32_t parent) = 0;

  // Writes; each is one netlink request acknowledged by the kernel. Strict on purpose: create
  // fails if the object exists (NLM_F_EXCL), change fails if it does not, so a reconcile
  // racing another writer fails loudly instead of silently doing something else.
  // Creates our HTB root over the kernel's default root (fails if another root is installed).
  virtual Status createRoot(int ifindex, const HtbRoot& root) = 0;
  // Deletes the root qdisc if its handle is `handle` (with everything below it).
  virtual Status deleteRoot(int ifindex, uint32_t handle) = 0;
  virtual Status createClass(int ifindex, const HtbClass& cls) = 0;
  virtual Status changeClass(int ifindex, const HtbClass& cls) = 0;
  virtual Status deleteClass(int ifindex, uint32_t classid) = 0;
  // `filter.handle`: a node id lets the kernel pick the table; a full handle names the table.
  virtual Status createFilter(int ifindex, uint32_t parent, const U32Filter& filter) = 0;
  // Changes classid of an existing filter (full handle); the kernel keeps its keys.
  virtual Status changeFilter(int ifindex, uint32_t parent, const U32Filter& filter) = 0;
  virtual Status deleteFilter(int ifindex, uint32_t parent, const FilterRef& ref) = 0;
};

struct NetlinkOptions {
  // Network namespace to talk to: "" = the calling thread's, a name = /run/netns/<name> (as made
  // by `ip netns add`). The socket is bound to the namespace when opened and stays there; the
  // calling thread is back in its own namespace when openTcNetlink returns.
  std::string netns;
};

// The libnl-backed implementation. Errors: kNotFound if the namespace does not exist,
// kPermissionDenied without CAP_SYS_ADMIN/CAP_NET_ADMIN, else the libnl reason.
Result<std::unique_ptr<TcNetlink>> openTcNetlink(const NetlinkOptions& options = {});

}  // namespace tq::tc
