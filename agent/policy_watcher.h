// The policy watch: one long-lived WatchPolicy stream to tenantqos-policyd, on a dedicated
// thread with a blocking reader.
//
// Why a thread and not a ClientReadReactor: the agent holds exactly one stream for its whole
// life, and the reconnect logic (wait for the channel, open the stream, read until it breaks,
// back off with jitter, repeat) reads top to bottom as a loop; a reactor would spread it over
// OnReadDone/OnDone callbacks plus a gRPC Alarm for the backoff, for no gain at one stream per
// process. Shutdown is prompt either way: stop() cancels the in-flight call (TryCancel, from a
// stop callback) and wakes the backoff wait; waiting for the channel is sliced in 50 ms. The
// backoff and "the stream lived" follow the injected Clock (tests move a FakeClock).
//
// Every snapshot received is persisted (SnapshotStore, atomic) BEFORE it is handed to the
// reconcile thread, so what the node enforces is always recoverable after a restart.
// tenantqos_policyd_connected (StateBoard) is 1 while the channel is READY and the stream open.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <functional>
#include <memory>
#include <stop_token>
#include <string>

#include "agent/agent_state.h"
#include "agent/backoff.h"
#include "agent/snapshot_store.h"
#include "common/clock.h"
#include "common/policy.h"
#include "common/worker.h"

namespace tq::agent {

// A channel to policyd whose own reconnect backoff is bounded like ours (gRPC's default grows
// to 120 s), with keepalive so a silently dead peer is noticed, on a subchannel of its own.
// `credentials`: from rpc::channelCredentials (mutual TLS, or insecure).
std::shared_ptr<grpc::Channel> makePolicydChannel(
    const std::string& target, const BackoffOptions& backoff,
    std::shared_ptr<grpc::ChannelCredentials> credentials);

// Makes a new channel to policyd. The watcher and the usage reporter take a fresh one for each
// attempt after a failure instead of waiting for the old one to reconnect: a gRPC 1.51 TLS
// channel whose handshakes had failed (policyd down, or a server with a certificate from
// another CA on the port) was seen never to become READY again once the real policyd was back
// ("tcp handshaker shutdown", "Handshake timed out"), while a new channel connects at once.
// Thread-safety: called from the watcher's and the reporter's threads.
using ChannelFactory = std::function<std::shared_ptr<grpc::Channel>()>;

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

  PolicyWatcher(ChannelFactory channels, Options options, SnapshotStore* store, StateBoard* board,
                OnSnapshot on_snapshot, Clock& clock);
  ~PolicyWatcher();

  void start();
  void stop();  // idempotent; returns after the thread has exited

  uint64_t streamsOpened() const { return streams_opened_.load(); }
  // Backoff waits so far (after an unreachable policyd or an ended stream).
  uint64_t backoffs() const { return backoffs_.load(); }
  const Worker& worker() const { return worker_; }

 private:
  void run(const std::stop_token& stop);
  bool waitChannelReady(const std::stop_token& stop);

  ChannelFactory channels_;
  std::shared_ptr<grpc::Channel> channel_;  // this attempt's; only the watch thread touches it
  Options options_;
  SnapshotStore* store_;
  StateBoard* board_;
  OnSnapshot on_snapshot_;
  Backoff backoff_;
  std::atomic<uint64_t> streams_opened_{0};
  std::atomic<uint64_t> backoffs_{0};
  Worker worker_;
};

}  // namespace tq::agent
