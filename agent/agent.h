// tenantqos-agent wired together: metrics server, persisted snapshot (fail-static start),
// reconcile thread, policy watch thread, usage report thread. main.cc only parses flags,
// handles signals and calls this.
//
// Threads: tq-reconcile (owns all enforcement state), tq-watch (gRPC stream, persists
// snapshots), tq-report (ReportUsage), tq-fabric and tq-allocate/tq-demand (the cluster
// allocator's stream, agent/fabric_client.h), tq-qpscan (RDMA QPs of processes not attached to the
// agent), tq-http (/metrics, /healthz, /readyz, reading the StateBoard only).
#pragma once

#include <atomic>
#include <memory>

#include "agent/agent_state.h"
#include "agent/attach_server.h"
#include "agent/config.h"
#include "agent/fabric_client.h"
#include "agent/http_server.h"
#include "agent/policy_watcher.h"
#include "agent/reconcile_loop.h"
#include "agent/reconciler.h"
#include "agent/snapshot_store.h"
#include "agent/tc_applier.h"
#include "agent/ungoverned_qps.h"
#include "agent/usage_reporter.h"

namespace tq::agent {

class Agent {
 public:
  Agent(AgentConfig config, std::unique_ptr<TcApplier> tc);
  ~Agent();

  // Starts everything; the persisted snapshot (if intact) is queued to the reconcile thread
  // before the watch thread starts, so it is enforced before policyd is reached.
  Status start();
  // Stops all threads. Enforcement (tc trees, shm files) stays in place: fail-static.
  void stop();

  int metricsPort() const { return http_ ? http_->port() : 0; }
  StateBoard& board() { return board_; }
  AttachServer* attach() { return attach_.get(); }

  // /healthz fails when the reconcile thread has not finished a pass for this many periods
  // (and at least kMinStuckNs): a liveness probe then restarts a stuck agent.
  static constexpr int64_t kStuckPeriods = 100;
  static constexpr int64_t kMinStuckNs = 2'000'000'000;
  ReconcileLoop* loop() { return loop_.get(); }

 private:
  AgentConfig config_;
  std::unique_ptr<TcApplier> tc_;
  StateBoard board_;
  SnapshotStore store_;
  std::unique_ptr<AttachServer> attach_;
  std::unique_ptr<Reconciler> reconciler_;
  std::unique_ptr<ReconcileLoop> loop_;
  std::unique_ptr<HttpServer> http_;
  std::shared_ptr<rpc::ChannelRing> endpoints_;  // the policyd replicas
  std::unique_ptr<PolicyWatcher> watcher_;
  // The watcher once it exists, for /metrics (the HTTP thread runs before it is made); it lives
  // until the Agent does, after the HTTP server.
  std::atomic<const PolicyWatcher*> watch_counters_{nullptr};
  std::unique_ptr<UsageReporter> reporter_;
  std::unique_ptr<FabricClient> fabric_;
  std::unique_ptr<UngovernedQpScanner> qp_scanner_;
  bool stopped_ = false;
};

// The fabric's lines of /readyz (the node stays ready: it enforces the held caps or the static
// split; the lines say which and why).
std::string fabricReadiness(const FabricStatus& fabric);

// --cleanup: removes the tc trees on the configured devices, every tenant file in the run
// directory and the persisted snapshot. Continues past errors; returns the first one.
Status runCleanup(const AgentConfig& config, TcApplier* tc);

// The kernel TcApplier (tc/ executor over libnl, in the agent's network namespace), keeping
// its class-id file in `state_dir`. Defined in tc_executor_applier.cc.
Result<std::unique_ptr<TcApplier>> makeKernelTcApplier(const std::string& state_dir);

}  // namespace tq::agent
