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
//
// Several replicas (--policyd A,B,C): the watch uses one at a time and moves to the next when it
// cannot connect or its stream breaks, sending the (epoch, version) it holds, so the new replica
// sends only what is newer: nothing is lost or reordered. While every replica is down the node
// keeps enforcing what it holds (fail-static), as with one.
//
// Store identity (judgeSnapshot): a snapshot of another store epoch is adopted whatever its
// version (a new store starts again at 1) and said so; an older version of the same store is
// never taken: the node keeps what it enforces and reports it (log, metric, /readyz detail).
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <functional>
#include <memory>
#include <stop_token>
#include <string>
#include <vector>

#include "agent/agent_state.h"
#include "agent/backoff.h"
#include "agent/snapshot_store.h"
#include "common/clock.h"
#include "common/policy.h"
#include "common/worker.h"
#include "proto/channel_ring.h"

namespace tq::agent {

// A channel to policyd whose own reconnect backoff is bounded like ours (gRPC's default grows
// to 120 s), with keepalive so a silently dead peer is noticed, on a subchannel of its own.
// `credentials`: from rpc::channelCredentials (mutual TLS, or insecure).
std::shared_ptr<grpc::Channel> makePolicydChannel(
    const std::string& target, const BackoffOptions& backoff,
    std::shared_ptr<grpc::ChannelCredentials> credentials);

// The policyd replicas (--policyd A,B,C), channels made with makePolicydChannel.
using PolicydEndpoints = proto::ChannelRing;
std::shared_ptr<PolicydEndpoints> makePolicydEndpoints(
    std::vector<std::string> targets, const BackoffOptions& backoff,
    std::shared_ptr<grpc::ChannelCredentials> credentials);

enum class SnapshotVerdict {
  kTake,          // a newer (or equal) version of the store held, or nothing held
  kTakeNewStore,  // another store epoch: adopt its latest, whatever the version numbers
  kKeepOlder,     // an older version of the same store: not taken, reported
};
// `held_epoch` "" (nothing held, or a snapshot from before epochs) compares versions only.
SnapshotVerdict judgeSnapshot(const std::string& held_epoch, uint64_t held_version,
                              const std::string& epoch, uint64_t version);

class PolicyWatcher {
 public:
  struct Options {
    std::string node;
    uint64_t known_version = 0;     // sent in WatchPolicyRequest; updated as snapshots arrive
    std::string known_store_epoch;  // the store of known_version ("" = unknown)
    BackoffOptions backoff;         // between stream attempts
    uint64_t seed = 0;              // 0: random
  };
  // Called on the watch thread for each snapshot, after it was persisted.
  using OnSnapshot = std::function<void(VersionedPolicy)>;

  PolicyWatcher(std::shared_ptr<PolicydEndpoints> endpoints, Options options, SnapshotStore* store,
                StateBoard* board, OnSnapshot on_snapshot, Clock& clock);
  ~PolicyWatcher();

  void start();
  void stop();  // idempotent; returns after the thread has exited

  uint64_t streamsOpened() const { return streams_opened_.load(); }
  // Backoff waits so far (after an unreachable policyd or an ended stream).
  uint64_t backoffs() const { return backoffs_.load(); }
  const Worker& worker() const { return worker_; }

 private:
  void run(const std::stop_token& stop);
  bool waitChannelReady(grpc::Channel& channel, const std::stop_token& stop);
  // Judges a received snapshot; true if it is to be persisted and enforced.
  bool accept(const VersionedPolicy& offered);

  std::shared_ptr<PolicydEndpoints> endpoints_;
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
