// Ungoverned RDMA traffic made visible: which processes on this node own RDMA queue pairs
// without being attached to the agent (so nothing paces or tags their traffic on a real RDMA
// NIC, where tc never sees it).
//
// Every scan lists the node's QPs through RDMA netlink (ib/rdma_netlink.h), maps each user QP's
// creator thread to its process (/proc: RDMA netlink reports the creating thread, and NCCL
// creates QPs from its proxy thread), and classifies the QP per device:
//   governed   — the process is attached to the agent (AttachedProcessesFn);
//   ungoverned — it is not;
//   kernel     — a kernel QP (ib_core's QP0/QP1, IPoIB, storage ULPs): not a tenant's traffic;
//   unknown    — the kernel gave no pid (the owner is outside the agent's pid namespace, or
//                exiting) or /proc no longer has the thread.
// The result is bounded for the metrics: per device, the `top_owners` processes with the most
// ungoverned QPs (ties: lower pid first) and one "other" sum for the rest.
//
// Logging: a process that newly owns ungoverned QPs gets one line (pid, name, QPs per device);
// at most `log_lines_per_window` such lines per `log_window_ns`, the rest summed in one line
// when the window ends. An owner that disappears and comes back is new again. Listing errors,
// per-device errors and the first "unknown" QPs are logged when they change, not per scan.
//
// Pid namespaces: RDMA netlink reports pids in the reader's pid namespace and none for owners
// outside it, and /proc must show the owners: the split by owner needs an agent in the host pid
// namespace (hostPID on Kubernetes). A containerised agent without it sees every user QP as
// "unknown" (and logs that once).
//
// Threads: UngovernedQpTracker is pure logic for one thread (the scanner's); the scanner owns
// its thread ("tq-qpscan"), reads the attached set through the injected function and publishes
// through StateBoard::publishRdmaQps. It never touches the reconcile thread's state.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "agent/agent_state.h"
#include "common/clock.h"
#include "common/worker.h"
#include "ib/rdma_netlink.h"

namespace tq::agent {

// The process (thread group) a thread belongs to and that process's name.
struct ProcessIdentity {
  int32_t pid = 0;
  std::string comm;
};

class ProcessTable {
 public:
  virtual ~ProcessTable() = default;
  // nullopt when the thread no longer exists. Called from the scan thread only.
  virtual std::optional<ProcessIdentity> identify(int32_t tid) const = 0;
};

// <proc_root>/<tid>/status ("Tgid:" line), then <proc_root>/<tgid>/comm. The name is a
// process's own choice (prctl PR_SET_NAME): cut to 15 bytes, anything outside printable ASCII
// replaced by '?', and only ever used as a label.
class ProcFsProcessTable final : public ProcessTable {
 public:
  explicit ProcFsProcessTable(std::string proc_root = "/proc") : root_(std::move(proc_root)) {}
  std::optional<ProcessIdentity> identify(int32_t tid) const override;

 private:
  std::string root_;
};

// pid (in the agent's pid namespace) -> tenant, for every process attached to the agent now.
using AttachedProcesses = std::unordered_map<int32_t, std::string>;
// Called once per scan, from the scan thread. nullopt while the agent does not know yet (no
// policy applied: the tenant files have not been read), and the scan is skipped.
using AttachedProcessesFn = std::function<std::optional<AttachedProcesses>()>;

struct UngovernedQpOptions {
  size_t top_owners = 10;  // per device; the "other" series takes the rest
  int64_t log_window_ns = 60'000'000'000;
  int log_lines_per_window = 5;
  size_t max_owner_lookups = 4096;  // distinct creator threads looked up in /proc per scan
};

class UngovernedQpTracker {
 public:
  UngovernedQpTracker(const ProcessTable& procs, UngovernedQpOptions options = {});

  // Classifies one listing: one entry per device, in the listing's order (a device without
  // QPs gets zeros). Logs new owners.
  std::vector<RdmaQpCounts> update(const ib::QpListing& listing, const AttachedProcesses& attached,
                                   int64_t now_ns);

 private:
  void logNewOwners(const std::map<int32_t, std::pair<std::string, std::string>>& owners,
                    int64_t now_ns);

  const ProcessTable& procs_;
  UngovernedQpOptions options_;
  std::set<int32_t> known_owners_;  // ungoverned owners of the previous scan
  bool unknown_logged_ = false;
  int64_t window_start_ns_ = 0;
  int window_lines_ = 0;
  int window_suppressed_ = 0;
};

class UngovernedQpScanner {
 public:
  // `board` and `clock` must outlive the scanner; the scan thread waits on `clock`.
  UngovernedQpScanner(std::unique_ptr<ib::QpSource> source, std::unique_ptr<ProcessTable> procs,
                      AttachedProcessesFn attached, StateBoard* board, Clock& clock,
                      int64_t interval_ns, UngovernedQpOptions options = {});
  ~UngovernedQpScanner();
  UngovernedQpScanner(const UngovernedQpScanner&) = delete;
  UngovernedQpScanner& operator=(const UngovernedQpScanner&) = delete;

  void start();  // a scan every interval, the first one interval after start
  void stop();   // idempotent; waits for a scan in progress (bounded by the source's deadline)
  const Worker& worker() const { return worker_; }

  // One scan: list, classify, publish (nullopt when the listing failed or the attached set is
  // not known yet). The thread's body; tests call it directly.
  void scanOnce();

 private:
  std::unique_ptr<ib::QpSource> source_;
  std::unique_ptr<ProcessTable> procs_;
  AttachedProcessesFn attached_;
  StateBoard* board_;
  int64_t interval_ns_;
  UngovernedQpTracker tracker_;
  std::optional<std::string> logged_error_;  // the listing error last logged
  std::set<std::string> logged_device_errors_;
  bool logged_truncated_ = false;
  Worker worker_;
};

}  // namespace tq::agent
