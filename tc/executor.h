// Makes a device's tc tree equal to a DevicePlan, writing only the difference.
//
// read(): the device's actual state (root qdisc, and below OUR root: HTB classes with their
// parameters and counters, u32 filters with keys and classid).
// apply(): read, diff against the plan (diffDevice, pure), execute the ops in a safe order:
//   class creates/changes (parents first) -> filter deletes -> filter creates/changes ->
//   class deletes (children first; HTB refuses to delete a class a filter still points to).
// Re-applying the plan that is in place performs no netlink write at all (burst values are
// compared modulo libnl's µs rounding, see burstEquivalent). A changed tenant limit is one
// class change; a removed tenant is two filter deletes and one class delete.
//
// Ownership. The root qdisc is OURS when it is `htb 1:` with r2q == kOwnerR2q (plan.h). Then
// everything below it is ours: classes and filters the plan does not have are removed (a
// classifier of another kind or pref attached to our qdisc is removed whole). A kernel default
// root (handle 0: noqueue, pfifo_fast, mq) is replaced without asking. Any other root is
// FOREIGN: apply() fails with kFailedPrecondition naming it, unless
// ApplyOptions::replace_foreign_root is set (the agent's operator opts in per device); then it
// is deleted and our tree built. Devices other than plan.device are never read or written.
//
// Structural changes the kernel cannot do in place (HTB has no qdisc "change", so a different
// default class, e.g. switching between the tenant plan and makeLinkShaperPlan; or a class whose
// parent differs) rebuild the device: delete our root, build the new tree (traffic is unshaped
// for the few hundred microseconds in between).
//
// Nothing is half-applied: if a write fails, the executor restores the tree it read before the
// apply (the state reduced to what we own: our root, classes, u32 rules; see planFromState) by
// reconciling back to it, and if that fails too, by rebuilding it from scratch. If the device
// had no tree of ours before, "restore" means removing what the failed apply created. A FOREIGN
// root that the apply already deleted cannot be recreated (we do not know its parameters); the
// device is left with the kernel default root and the error says so. The error reads
//   "apply plan on dev eth0: create class 1:2b (tenant-b) on dev eth0: <reason>; rolled back"
// and when restoring failed too: "...; rollback failed: <second error>".
// Counters of classes that a rollback had to recreate restart at zero.
//
// Network namespaces: the executor works in the namespace of its TcNetlink's socket
// (openTcNetlink's NetlinkOptions::netns, or the caller's namespace, e.g. under `ip netns exec`).
// Thread-safety: thread-compatible; one reconcile thread owns an Executor and its TcNetlink.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "tc/netlink.h"
#include "tc/plan.h"

namespace tq::tc {

enum class RootOwner {
  kKernelDefault,  // handle 0: (noqueue, pfifo_fast, mq): free to replace
  kOurs,           // htb 1: with our marker
  kForeign,        // anything else: replaced only with ApplyOptions::replace_foreign_root
};
std::string_view rootOwnerName(RootOwner owner);

struct DeviceState {
  std::string device;
  int ifindex = 0;
  QdiscInfo root;  // the root qdisc (a device always has one, possibly the default)
  RootOwner owner = RootOwner::kKernelDefault;
  // Below our root only (empty unless owner == kOurs): HTB classes of major 1, filters at 1:.
  std::vector<ClassInfo> classes;
  std::vector<FilterInfo> filters;

  const ClassInfo* findClass(uint32_t classid) const;
};

struct ApplyOptions {
  bool replace_foreign_root = false;
};

// What an apply wrote: one count per netlink write request.
struct ApplyReport {
  int qdisc_creates = 0;
  int qdisc_deletes = 0;
  int class_creates = 0;
  int class_changes = 0;
  int class_deletes = 0;
  int filter_creates = 0;
  int filter_changes = 0;
  int filter_deletes = 0;
  bool rebuilt = false;  // the root qdisc was (re)created

  int writes() const {
    return qdisc_creates + qdisc_deletes + class_creates + class_changes + class_deletes +
           filter_creates + filter_changes + filter_deletes;
  }
  // "qdisc +1/-0 class +3/~0/-0 filter +4/~0/-0"
  std::string toString() const;
};

// One netlink write, as computed by diffDevice.
struct TcOp {
  enum class Kind {
    kCreateRoot,
    kDeleteRoot,
    kCreateClass,
    kChangeClass,
    kDeleteClass,
    kCreateFilter,
    kChangeFilter,
    kDeleteFilter,
  };
  Kind kind = Kind::kCreateRoot;
  HtbRoot root;          // kCreateRoot
  uint32_t handle = 0;   // kDeleteRoot: qdisc handle; kDeleteClass: classid
  HtbClass cls;          // kCreateClass / kChangeClass
  U32Filter filter;      // kCreateFilter / kChangeFilter
  FilterRef filter_ref;  // kDeleteFilter
  std::string label;     // tenant name etc., for messages

  // "create class 1:2b (tenant-b)", "delete filter ipv6 pref 2 handle 801::11a".
  std::string describe() const;
};

// The writes that turn `actual` into `plan`, in execution order. Empty when they already match.
// kFailedPrecondition for a foreign root without options.replace_foreign_root.
Result<std::vector<TcOp>> diffDevice(const DevicePlan& plan, const DeviceState& actual,
                                     const ApplyOptions& options = {});

// Our part of a device's state as a plan (root, classes with their read-back parameters, the u32
// rules of our classifiers with node-id handles). Precondition: state.owner == kOurs.
DevicePlan planFromState(const DeviceState& state);

class Executor {
 public:
  // `nl` must outlive the executor.
  explicit Executor(TcNetlink& nl) : nl_(nl) {}

  // kNotFound if the device does not exist.
  Result<DeviceState> read(std::string_view device);

  Result<ApplyReport> apply(const DevicePlan& plan, const ApplyOptions& options = {});

  // Deletes our root qdisc (and so every class and filter below it) if the device has one;
  // leaves any other root alone. A device that does not exist has nothing of ours: ok.
  Status removeAll(std::string_view device);

 private:
  Result<DeviceState> readIndex(std::string_view device, int ifindex);
  Status execute(const DeviceState& where, const std::vector<TcOp>& ops, ApplyReport* report);
  Status restore(const DeviceState& before);

  TcNetlink& nl_;
};

}  // namespace tq::tc
