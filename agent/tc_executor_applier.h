// The kernel TcApplier: desired device state -> tc/plan.h DevicePlan -> tc/executor.h (libnl).
//
// htb mode: makeDevicePlan (HTB root, link class at capacity, default class, one class per
// tenant: rate = guarantee, ceil = limit, quantum by weight, DSCP u32 filters).
// none mode ("RDMA-like"): no tc at all — tc cannot see RDMA, so tenants are separated by the
// plugin's pacing and the allocator alone. A tree the agent built earlier (htb mode) is removed;
// a foreign root qdisc (e.g. a link emulation) is left untouched.
//
// Class ids are stable per tenant: the tenant -> class minor map of each device is kept in
// memory and persisted in <state_dir>/tc-classes (so an agent restart never renumbers a class,
// which would reset its counters and cost writes). Format, one line per tenant class:
//   "tenantqos-agent-tc-classes 1" header, then "<device> <tenant> <minor as 4 hex digits>".
// A corrupt file is ignored with a warning (minors then fall back to the name hash).
// Thread-compatible: owned by the reconcile thread.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "agent/tc_applier.h"
#include "tc/executor.h"
#include "tc/netlink.h"
#include "tc/plan.h"

namespace tq::agent {

inline constexpr char kTcClassesFileName[] = "tc-classes";

class TcExecutorApplier final : public TcApplier {
 public:
  // `state_dir` "" = do not persist class ids. `netns` "" = the agent's own namespace.
  static Result<std::unique_ptr<TcExecutorApplier>> open(const std::string& state_dir,
                                                         const std::string& netns = "");
  // For tests: any TcNetlink (e.g. a recording decorator over the real one).
  TcExecutorApplier(std::unique_ptr<tc::TcNetlink> nl, std::string state_dir);

  Result<int> apply(const DesiredDevice& desired) override;
  Status remove(const std::string& device) override;
  Result<std::vector<ClassStat>> stats(const std::string& device) override;

  // The plan apply() would install (for logs, tests and the benchmark).
  Result<tc::DevicePlan> planFor(const DesiredDevice& desired) const;
  const tc::ClassMinorMap& minors(const std::string& device) const;

  // Encoding of the tc-classes file (tests).
  static std::string encodeMinors(const std::map<std::string, tc::ClassMinorMap>& minors);
  static Result<std::map<std::string, tc::ClassMinorMap>> decodeMinors(const std::string& text);

 private:
  void persistMinors();

  std::unique_ptr<tc::TcNetlink> nl_;
  tc::Executor executor_;
  std::string path_;                                               // "" = not persisted
  std::map<std::string, tc::ClassMinorMap> minors_;                // device -> tenant -> minor
  std::map<std::string, std::map<uint32_t, std::string>> labels_;  // device -> classid -> label
};

}  // namespace tq::agent
