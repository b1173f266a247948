// The agent's stream to the cluster allocator (PolicyService.Allocate, docs/fabric.md): the
// node's demand per (tenant, shared link) out every interval (100 ms), the node's caps in.
// The stream runs on rpc::StreamFollower (the policy watch's reconnect, jittered backoff and
// failover over the replicas, on the same channel ring): a standby replica refuses at once and
// the follower tries the next one. The stream is open only while the node is behind a shared
// link of the policy (the reconcile thread publishes its demand then, StateBoard); without
// one there is nothing to allocate and no stream.
//
// What the agent does with the caps, and without them (held, then the static split): the
// reconcile thread's FabricLinks (agent/fabric_links.h); this class posts every message there
// and says when the stream is up.
//
// Threads: tq-fabric (starts and stops the follower as the node gains or loses shared links),
// the follower's (reads caps), tq-demand per stream (writes reports). Times follow the injected
// Clock. Thread-safety: start()/stop() from the owner; counters from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "agent/agent_state.h"
#include "agent/fabric_links.h"
#include "common/backoff.h"
#include "common/clock.h"
#include "common/worker.h"
#include "rpc/channel_ring.h"
#include "rpc/stream_follower.h"
#include "tenantqos/v1/policy.pb.h"

namespace tq::agent {

// The data-plane addresses of `devices` (their IPv4 and global IPv6 addresses, canonical, at
// most 16), what the node reports so that its groups' other nodes know it.
std::vector<std::string> deviceAddresses(const std::vector<std::string>& devices);

class FabricClient {
 public:
  struct Options {
    std::string node;
    int64_t interval_ns = 100'000'000;  // between demand reports
    BackoffOptions backoff;             // between stream attempts
    uint64_t seed = 0;                  // of the backoff's jitter; 0: random
    // The node's addresses, asked at each stream's start.
    std::function<std::vector<std::string>()> addresses;
  };
  // `board` outlives this. `on_caps` and `on_connected` run on the follower's thread.
  FabricClient(std::shared_ptr<rpc::ChannelRing> ring, Options options, const StateBoard& board,
               std::function<void(FabricCapsMessage)> on_caps,
               std::function<void(bool)> on_connected, Clock& clock);
  ~FabricClient();  // stop()

  void start();
  void stop();  // idempotent

  uint64_t reportsSent() const { return sent_.load(); }
  uint64_t capsReceived() const { return received_.load(); }
  bool following() const { return following_.load(); }
  const Worker& worker() const { return worker_; }
  const rpc::StreamFollower* follower() const { return follower_.get(); }

 private:
  rpc::StreamFollower::StreamEnd session(const std::shared_ptr<grpc::Channel>& channel,
                                         grpc::ClientContext& ctx, const std::string& target);
  void run(const std::stop_token& stop);

  std::shared_ptr<rpc::ChannelRing> ring_;
  const Options options_;
  const StateBoard& board_;
  std::function<void(FabricCapsMessage)> on_caps_;
  std::function<void(bool)> on_connected_;
  Clock& clock_;
  std::atomic<uint64_t> sent_{0};
  std::atomic<uint64_t> received_{0};
  std::atomic<uint64_t> sequence_{0};
  std::atomic<bool> following_{false};
  std::unique_ptr<rpc::StreamFollower> follower_;  // tq-fabric's (and stop()'s, once it exited)
  Worker worker_;
};

// The wire <-> domain translation of the stream (the edge where protobuf types stop).
tenantqos::v1::DemandReport toDemandReport(const std::string& node, const FabricDemand& demand,
                                           const std::vector<std::string>& addresses,
                                           uint64_t sequence);
FabricCapsMessage fromNodeCaps(const tenantqos::v1::NodeCaps& caps);

}  // namespace tq::agent
