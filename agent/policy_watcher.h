// The policy watch: one long-lived WatchPolicy stream to tenantqos-policyd, on a dedicated
// thread with a blocking reader.
//
// Why a thread and not a ClientReadReactor: the agent holds exactly one stream for its whole
// life, and the reconnect logic (wait for the channel, open the stream, read until it breaks,
// back off with jitter, repeat) reads top to bottom as a loop; a reactor would spread it over
// OnReadDone/OnDone callbacks plus a gRPC Alarm for the backoff, for no gain at one stream per
// process. Shutdown is prompt either way: stop() cancels the in-flight call (TryCancel) and
// wakes the backoff wait.
//
// Every snapshot received is persisted (SnapshotStore, atomic) BEFORE it is handed to the
// reconcile thread, so what the node enforces is always recoverable after a restart.
// tenantqos_policyd_connected (StateBoard) is 1 while the channel is READY and the stream open.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "agent/agent_state.h"
#include "agent/backoff.h"
#include "agent/snapshot_store.h"
#include "common/policy.h"

namespace tq::agent {

// A channel to policyd whose own reconnect backoff is bounded like ours (gRPC's default grows
// to 120 s), with keepalive so a silently dead peer is noticed.
std::shared_ptr<grpc::Channel> makePolicydChannel(const std::string& target,
                                                  const BackoffOptions& backoff);

class PolicyWatcher {
 public:
  struct Options {
    std::string node;
    uint64_t known_version = 0;  // sent in WatchPolicyRequest; updated as snapshots arrive
    BackoffOptions backoff;      // between stream attempts
    uint64_t seed = 0;           // 0: random
  };
  // Called on the watch thread for each snapshot, after it was persisted.
  using OnSnapshot = std::function<void(VersionedPolicy)>;

  PolicyWatcher(std::shared_ptr<grpc::Channel> channel, Options options, SnapshotStore* store,
                StateBoard* board, OnSnapshot on_snapshot);
  ~PolicyWatcher();

  void start();
  void stop();  // idempotent; returns after the thread has exited

  uint64_t streamsOpened() const { return streams_opened_.load(); }

 private:
  void run();
  bool waitChannelReady();
  void sleepInterruptible(int64_t ns);

  std::shared_ptr<grpc::Channel> channel_;
  Options options_;
  SnapshotStore* store_;
  StateBoard* board_;
  OnSnapshot on_snapshot_;
  Backoff backoff_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  grpc::ClientContext* active_ = nullptr;  // guarded by mu_
  std::atomic<uint64_t> streams_opened_{0};
  std::thread thread_;
};

}  // namespace tq::agent
