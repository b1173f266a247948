// The agent's stream to the cluster allocator (PolicyService.Allocate, docs/fabric.md): the
// node's demand per (tenant, shared link) out, the node's caps in. A report goes out at once
// on a demand edge (a tenant starting or stopping, a large step: the reconcile thread tells the
// StateBoard, which wakes the writer), at most one per min_gap; smaller moves past the deadband
// at the next interval (100 ms); otherwise one a second (the heartbeat). DemandReportPacer is
// that rule, pure.
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
#include <optional>
#include <string>
#include <vector>

#include "agent/agent_state.h"
#include "agent/fabric_links.h"
#include "common/backoff.h"
#include "common/clock.h"
#include "common/thread_annotations.h"
#include "common/worker.h"
#include "proto/allocate_codec.h"
#include "rpc/channel_ring.h"
#include "rpc/stream_follower.h"
#include "tenantqos/v1/policy.pb.h"

namespace tq::agent {

// The data-plane addresses of `devices` (their IPv4 and global IPv6 addresses, canonical, at
// most 16), what the node reports so that its groups' other nodes know it.
std::vector<std::string> deviceAddresses(const std::vector<std::string>& devices);

// Whether `now` differs from `sent` by more than `deadband` (a fraction) in any entry, or to or
// from zero or backlogged, or in its entries or policy version: worth a report before the refresh.
bool demandMoved(const FabricDemand& sent, const FabricDemand& now, double deadband);

// Whether `now` is a demand *edge* against `before`: a tenant started or stopped (its entries,
// or an entry to or from zero), became backlogged or stopped being so, or an entry changed by
// more than `fraction` of the larger value (a large step): a move past a wide deadband. The
// reconcile thread tells the StateBoard of an edge after its pass; the writer reports it at
// once (DemandReportPacer).
using proto::kDemandEdgeFraction;
inline bool demandEdge(const FabricDemand& before, const FabricDemand& now,
                       double fraction = kDemandEdgeFraction) {
  return demandMoved(before, now, fraction);
}

// When the stream's writer sends the node's demand (times on the caller's clock, ns):
//   - an edge against the last report sent (demandEdge: a tenant started or stopped, became
//     backlogged or stopped being so, or moved by more than edge_fraction): at once, but never
//     within min_gap of the previous report. policyd drops a node's reports closer than 20 ms
//     (its flood bound, policy/allocator_service.h): 30 ms leaves 10 ms for the two reports'
//     delays to differ on the way;
//   - a move past the deadband (demandMoved): at most one per interval;
//   - nothing moved: one per refresh (the heartbeat: policyd forgets a node silent for 2 s).
// Thread-safety: a value, the writer's own.
class DemandReportPacer {
 public:
  struct Options {
    int64_t interval_ns = 100'000'000;
    int64_t refresh_ns = 1'000'000'000;
    int64_t min_gap_ns = 30'000'000;
    double deadband = 0.01;
    double edge_fraction = kDemandEdgeFraction;
  };
  explicit DemandReportPacer(Options options) : options_(options) {}

  // When `demand` is to be sent, given what was sent last: `now_ns` or earlier means now.
  // Without a report sent yet: now.
  int64_t dueNs(const FabricDemand& demand, int64_t now_ns) const;
  void sent(FabricDemand demand, int64_t now_ns) {
    last_ = std::move(demand);
    last_ns_ = now_ns;
  }

 private:
  Options options_;
  std::optional<FabricDemand> last_;
  int64_t last_ns_ = 0;
};

class FabricClient {
 public:
  struct Options {
    std::string node;
    // DemandReportPacer's (the board's edges wake the writer; the rest is looked at every
    // interval).
    int64_t interval_ns = 100'000'000;
    int64_t refresh_ns = 1'000'000'000;
    int64_t min_gap_ns = 30'000'000;
    double deadband = 0.01;
    double edge_fraction = kDemandEdgeFraction;
    BackoffOptions backoff;  // between stream attempts
    uint64_t seed = 0;       // of the backoff's jitter; 0: random
    // The node's addresses, asked at each stream's start.
    std::function<std::vector<std::string>()> addresses;
  };
  // `board` outlives this (its fabric edge listener is this client's from start() to stop()).
  // `on_caps` and `on_connected` run on the follower's thread.
  FabricClient(std::shared_ptr<rpc::ChannelRing> ring, Options options, StateBoard& board,
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

  // The board's edge listener: wakes the current stream's writer.
  void onEdge();

  std::shared_ptr<rpc::ChannelRing> ring_;
  const Options options_;
  StateBoard& board_;
  std::function<void(FabricCapsMessage)> on_caps_;
  std::function<void(bool)> on_connected_;
  Clock& clock_;
  std::atomic<uint64_t> sent_{0};
  std::atomic<uint64_t> received_{0};
  std::atomic<uint64_t> sequence_{0};
  std::atomic<bool> following_{false};
  std::atomic<uint64_t> edges_{0};  // edges the board told of
  Mutex writer_mu_;
  Worker* writer_ TQ_GUARDED_BY(writer_mu_) = nullptr;  // the open stream's writer, if any
  std::unique_ptr<rpc::StreamFollower> follower_;  // tq-fabric's (and stop()'s, once it exited)
  Worker worker_;
};

// The wire <-> domain translation of the stream (the edge where protobuf types stop).
tenantqos::v1::DemandReport toDemandReport(const std::string& node, const FabricDemand& demand,
                                           const std::vector<std::string>& addresses,
                                           uint64_t sequence);
FabricCapsMessage fromNodeCaps(const tenantqos::v1::NodeCaps& caps);

}  // namespace tq::agent
