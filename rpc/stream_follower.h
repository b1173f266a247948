// The reconnect discipline of a long-lived server stream to a replicated service, one for every
// client that follows policyd (the agent's and the webhook's policy watch, rpc/policy_follower.h;
// the cluster allocator's stream next):
//
//   wait for the current replica's channel to be READY (sliced, so stop() is prompt)
//   open the stream and read it until it ends (the Session does the reading)
//   back off with jitter (common/backoff.h: a fleet does not reconnect in lockstep), the backoff
//     starting over after a stream that lived or delivered something
//   fail over to the next replica, on a fresh channel (ChannelRing::failover says why)
//
// Why a thread and not a ClientReadReactor: each client holds one stream for its whole life, and
// this loop reads top to bottom; a reactor would spread it over OnReadDone/OnDone callbacks plus a
// gRPC Alarm for the backoff, for no gain at one stream per process. stop() cancels the call in
// flight (TryCancel, from a stop callback) and ends the backoff wait at once. The backoff, and
// "the stream lived", follow the injected Clock: tests move a FakeClock to
// worker().sleepingUntilNs() instead of sleeping.
//
// Thread-safety: start()/stop() from the owner; the counters from any thread; the Session and
// the OnConnected callback run on the follower's thread.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <stop_token>
#include <string>

#include "common/backoff.h"
#include "common/clock.h"
#include "common/worker.h"
#include "rpc/channel_ring.h"

namespace tq::rpc {

class StreamFollower {
 public:
  struct Options {
    std::string what = "stream";       // in log lines: "policy watch"
    std::string thread = "tq-follow";  // the thread's name (at most 15 characters)
    BackoffOptions backoff;            // between stream attempts
    uint64_t seed = 0;                 // of the backoff's jitter; 0: random
    int64_t lived_ns = 1'000'000'000;  // a stream open this long counts as a success
  };
  struct StreamEnd {
    grpc::Status status;
    bool delivered = false;  // at least one message arrived
  };
  // One stream: opens it on `channel` with `ctx` (which stop() cancels) and reads it until it
  // ends. `target` is the replica's address, for messages.
  using Session = std::function<StreamEnd(const std::shared_ptr<grpc::Channel>& channel,
                                          grpc::ClientContext& ctx, const std::string& target)>;
  // true when a stream was opened, false when it ended (and once at stop).
  using OnConnected = std::function<void(bool connected)>;

  StreamFollower(std::shared_ptr<ChannelRing> ring, Options options, Session session,
                 OnConnected on_connected, Clock& clock);
  ~StreamFollower();  // stop()
  StreamFollower(const StreamFollower&) = delete;
  StreamFollower& operator=(const StreamFollower&) = delete;

  void start();
  void stop();  // idempotent; returns after the thread has exited

  uint64_t streamsOpened() const { return streams_opened_.load(); }
  // Backoff waits so far (after an unreachable replica or an ended stream).
  uint64_t backoffs() const { return backoffs_.load(); }
  const Worker& worker() const { return worker_; }
  // The replica in use (or tried next).
  std::string currentTarget() const { return ring_->currentTarget(); }
  size_t replicas() const { return ring_->size(); }

 private:
  void run(const std::stop_token& stop);
  bool waitChannelReady(grpc::Channel& channel, const std::stop_token& stop);

  std::shared_ptr<ChannelRing> ring_;
  Options options_;
  Session session_;
  OnConnected on_connected_;
  Backoff backoff_;  // follower thread only
  std::atomic<uint64_t> streams_opened_{0};
  std::atomic<uint64_t> backoffs_{0};
  Worker worker_;
};

}  // namespace tq::rpc
