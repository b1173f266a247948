// The reconciler's seam to the kernel's traffic control: everything it needs from tc/, as an
// interface so the reconcile logic is unit-tested with a fake and the real implementation
// (tc_executor_applier.h, libnl through tc/executor.h) stays small.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "agent/desired_state.h"
#include "common/status.h"

namespace tq::agent {

// Counters of one tc class, as the kernel reports them.
struct ClassStat {
  std::string device;
  std::string class_id;  // "1:10"
  std::string tenant;    // empty for the link and default classes
  uint64_t bytes = 0;
  uint64_t packets = 0;
  uint64_t drops = 0;
  uint64_t overlimits = 0;
  friend bool operator==(const ClassStat&, const ClassStat&) = default;
};

// Not thread-safe: used by the reconcile thread only.
class TcApplier {
 public:
  virtual ~TcApplier() = default;

  // Makes the device's tree match `desired` (an HTB tree: one class per tenant, DSCP filters,
  // a default class). Reads the kernel back and writes only the difference; returns the number
  // of netlink writes (0 when the kernel already matched). On failure the device keeps its
  // previous tree or has the new one — never a mix — and the Status names device, object,
  // operation and the kernel's reason.
  virtual Result<int> apply(const DesiredDevice& desired) = 0;

  // Removes the tree the agent created on `device`. An absent tree or device is success.
  virtual Status remove(const std::string& device) = 0;

  // Per-class counters of the agent's tree on `device` (empty if none).
  virtual Result<std::vector<ClassStat>> stats(const std::string& device) = 0;
};

}  // namespace tq::agent
