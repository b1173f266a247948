// The agent's policy watch: rpc::PolicyFollower (one WatchPolicy stream over the policyd
// replicas: reconnect with jitter and backoff, failover, store identity) plus what the node
// needs around it.
//
// Every snapshot taken is persisted (SnapshotStore, atomic) BEFORE it is handed to the reconcile
// thread, so what the node enforces is always recoverable after a restart.
// tenantqos_policyd_connected (StateBoard) is 1 while the stream is open. While every replica is
// down the node keeps enforcing what it holds (fail-static). Store identity: a snapshot of
// another store epoch is adopted whatever its version and counted
// (tenantqos_policy_store_epoch_changes_total); an older version of the same store is never
// taken: the node keeps what it enforces and reports it (log, metric, /readyz detail).
#pragma once

#include <functional>
#include <memory>

#include "agent/agent_state.h"
#include "agent/snapshot_store.h"
#include "common/clock.h"
#include "common/policy.h"
#include "rpc/channel_ring.h"
#include "rpc/policy_follower.h"

namespace tq::agent {

class PolicyWatcher {
 public:
  using Options = rpc::PolicyFollower::Options;
  // Called on the watch thread for each snapshot, after it was persisted.
  using OnSnapshot = std::function<void(VersionedPolicy)>;

  // `replicas`: rpc::makeChannelRing over --policyd.
  PolicyWatcher(std::shared_ptr<rpc::ChannelRing> replicas, Options options, SnapshotStore* store,
                StateBoard* board, OnSnapshot on_snapshot, Clock& clock);
  ~PolicyWatcher();

  void start();
  void stop();  // idempotent; returns after the thread has exited

  uint64_t streamsOpened() const { return follower_.stream().streamsOpened(); }
  // Backoff waits so far (after an unreachable policyd or an ended stream).
  uint64_t backoffs() const { return follower_.stream().backoffs(); }
  const Worker& worker() const { return follower_.stream().worker(); }

 private:
  rpc::PolicyFollower::Handlers handlers();

  SnapshotStore* store_;
  StateBoard* board_;
  OnSnapshot on_snapshot_;
  rpc::PolicyFollower follower_;  // last: its thread uses the members above
};

}  // namespace tq::agent
