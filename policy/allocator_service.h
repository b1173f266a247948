// The cluster allocator as policyd runs it (docs/fabric.md): the agents' demand streams in, one
// allocation round every period while this replica is the elected active allocator
// (policy/allocator_election.h), each node's caps streamed back. The round itself is
// tq::fabric::allocateRound() (fabric/cluster_allocator.h), on a FabricModel built once per
// policy version. Free of gRPC: the Allocate stream (grpc_service.cc) is a CapsSink per node.
//
// Reports (DemandReport) are hostile input, checked once on receipt (checkReport):
//   - the node must be the caller's certificate CN (agents; admins may report for any node);
//   - every entry must name a tenant of the policy on a shared link class whose groups hold the
//     node (the node "hosts" it there): anything else is refused with kPermissionDenied, an
//     audit line, and the end of the stream, except while the agent enforces another policy
//     version than the allocator's (a rollout in progress): then the entries the allocator's
//     version does not know are skipped and counted, not refused;
//   - at most 16 addresses (IP literals) and kMaxDemandEntries entries; demand is clamped to the
//     tenant's limit on the class by the round;
//   - the table holds the latest report per node (a newer one replaces it), at most
//     kMaxUsageNodes nodes and max_entries entries over all nodes (kResourceExhausted for more),
//     and a node's entries leave it when its stream ends or it has not reported for
//     stale_after; a report closer than min_report_interval to the last taken is read,
//     counted, and waits (the node's newest such replaces the one waiting) for the first round
//     after that interval: a flood costs its parse and one report's room per node (counted in
//     max_entries), never a round more than min_round_gap allows, and a late report is never
//     lost.
// Rounds: one every period, and one soon after a report that is an edge of a node's demand
// (AllocatorOptions::coalesce_ns, at most one per min_round_gap_ns).
// Caps: a node gets the caps of its own reports only, after every round that changed them and
// at least every keepalive interval (its hold timer's heartbeat), with the addresses of its
// groups' other nodes when they changed. An address two nodes claim is in no map.
// A replica that is not active refuses new streams (kUnavailable naming the holder) and, when it
// steps down, ends every open one.
//
// Thread-safety: report()/attach()/detach() from gRPC threads, onPolicy() from the applying
// thread, the round on the service's own thread (tq-allocate); one mutex guards the table and
// the sinks, released while a round computes, while its messages are built and while sinks are
// written to.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "common/worker.h"
#include "fabric/cluster_allocator.h"
#include "fabric/model.h"
#include "policy/allocator_election.h"
#include "policy/authz.h"
#include "policy/store.h"
#include "tenantqos/v1/policy.pb.h"

namespace tq::policy {

class AuditLog;
class PolicydMetrics;

inline constexpr size_t kMaxDemandEntries = 4096 * 64;  // tenants per agent x classes
inline constexpr size_t kMaxNodeAddresses = 16;

struct AllocatorOptions {
  int64_t period_ns = 100'000'000;  // one round per period, whatever else
  // An accepted report that is a demand edge for its node (proto::kDemandEdgeFraction: a
  // tenant starting, stopping or jumping) asks for a round soon: coalesce_ns after it (the other
  // nodes of an all-reduce that starts or stops report the same edge within a few ms: one round for
  // all), never within min_round_gap_ns of the previous round (at most 1 / min_round_gap early
  // rounds a second, however many agents report). 0: no early rounds (--allocator-coalesce-ms 0).
  int64_t coalesce_ns = 5'000'000;
  int64_t min_round_gap_ns = 20'000'000;
  // How long an agent keeps caps without a newer message (NodeCaps.hold_ms): longer than a
  // failover (the lease TTL plus a reconnect), short enough that caps computed for old demand
  // do not outlive it by much.
  int64_t hold_ns = 3'000'000'000;
  int64_t keepalive_ns = 1'000'000'000;         // unchanged caps are re-sent this often
  int64_t stale_after_ns = 2'000'000'000;       // a node silent this long has no demand
  int64_t min_report_interval_ns = 20'000'000;  // closer reports wait (the newest)
  size_t max_entries = 1'000'000;               // demand entries over all nodes
  uint32_t hierarchy_passes = 1;                // fabric::RoundOptions
};

// Where a node's caps go: the Allocate stream of that node.
class CapsSink {
 public:
  virtual ~CapsSink() = default;
  // Queues `caps` (replacing any not yet written). Any thread; never blocks.
  virtual void sendCaps(std::shared_ptr<const tenantqos::v1::NodeCaps> caps) = 0;
  // Ends the stream with `status`. Idempotent.
  virtual void close(const Status& status) = 0;
};

class AllocatorService {
 public:
  // `clock`, `metrics` and `audit` (both may be null) must outlive the service.
  AllocatorService(Clock& clock, PolicydMetrics* metrics, AuditLog* audit,
                   AllocatorOptions options = {});
  ~AllocatorService();  // stop()

  // Starts `election` (which must outlive the service) and the round thread. Before, the
  // service is a standby.
  void start(AllocatorElection& election);
  void stop();  // idempotent: ends every stream, resigns

  // A new policy version (the publisher of PolicyCore): the model of later rounds.
  void onPolicy(const std::shared_ptr<const PolicyRecord>& record);

  // A node's stream opened with its first report naming `node`: kPermissionDenied (audited)
  // unless `caller` may report for it, kUnavailable unless this replica is active; the stream
  // is then to be ended with that status. A node already attached has its older stream ended
  // (kAborted): the newest stream of a node wins (an agent reconnecting after a half-dead
  // connection is never locked out). The service keeps `sink` until detach().
  Status attach(const Caller& caller, const std::string& node, std::shared_ptr<CapsSink> sink);
  // The stream ended (any reason): the node's demand leaves the table.
  void detach(const std::string& node, const CapsSink* sink);
  // One DemandReport of `caller` on `sink`'s stream (attached). Not ok: end the stream with it.
  Status report(const Caller& caller, const CapsSink* sink,
                const tenantqos::v1::DemandReport& report);

  // Runs one round now (tests, bench; the thread calls it every period). Returns the caps
  // messages handed to sinks.
  size_t runRound();

  bool active() const;
  uint64_t term() const;
  size_t streams() const;
  size_t nodesWithDemand() const;
  uint64_t rounds() const { return rounds_.load(); }
  // The monotonic time the last round's caps were computed (0: none yet).
  int64_t lastRoundNs() const { return last_round_ns_.load(); }
  const Worker& worker() const { return worker_; }

 private:
  struct Entry {
    std::string tenant, link;
    uint64_t tx = 0, rx = 0;
  };
  struct Report {
    std::vector<Entry> entries;  // checked names
    std::vector<std::string> addresses;
    uint64_t policy_version = 0;
    uint64_t sequence = 0;
  };
  struct NodeState {
    std::shared_ptr<CapsSink> sink;
    std::vector<Entry> entries;  // checked names
    std::vector<std::string> addresses;
    uint64_t policy_version = 0;
    uint64_t sequence = 0;
    int64_t received_ns = 0;
    int64_t reports_dropped = 0;  // reports that came too soon (waited, or were replaced)
    // The newest report that came within min_report_interval of the last taken: taken by the
    // first round after that interval (its entries count in entries_).
    std::optional<Report> waiting;
    // Last sent (round thread): to send only what changed.
    std::shared_ptr<const tenantqos::v1::NodeCaps> sent;
    int64_t sent_ns = 0;
    std::string peers_sent;  // the serialised peers of the last message that carried them
  };
  struct Model {
    uint64_t version = 0;
    std::shared_ptr<const fabric::FabricModel> fabric;  // null: the policy has no topology
    std::string problem;                                // why the model could not be built
  };

  void run(const std::stop_token& stop);
  // Makes `report` the node's demand (received at `now`); true if it is an edge there.
  // entries_ must already count the report's entries; the node's old ones leave it here.
  bool take(NodeState& n, Report report, int64_t now) TQ_REQUIRES(mu_);
  // Asks the round thread for a round at `at_ns` (or earlier, if one is asked for already).
  void askRound(int64_t at_ns);
  void onElection(bool active, uint64_t term);
  // Refuses with kPermissionDenied and an audit line (rate-limited per identity).
  Status refuse(const Caller& caller, const std::string& node, const std::string& why);
  void closeAll(const Status& status);

  std::atomic<AllocatorElection*> election_{nullptr};  // set by start()
  Clock& clock_;
  PolicydMetrics* metrics_;
  AuditLog* audit_;
  const AllocatorOptions options_;

  mutable Mutex mu_;
  Model model_ TQ_GUARDED_BY(mu_);
  std::map<std::string, NodeState> nodes_ TQ_GUARDED_BY(mu_);  // attached or with demand
  size_t entries_ TQ_GUARDED_BY(mu_) = 0;                      // demand entries over nodes_
  uint64_t round_ TQ_GUARDED_BY(mu_) = 0;
  // Bumped whenever every node's peers must be resent.
  uint64_t peers_generation_ TQ_GUARDED_BY(mu_) = 0;
  std::map<std::string, int64_t> audited_ns_ TQ_GUARDED_BY(mu_);  // identity -> last refusal line
  std::map<std::string, uint64_t> audit_suppressed_ TQ_GUARDED_BY(mu_);

  // Monotonic time at which a round is asked for by a report that changed demand (0: none);
  // set by report(), taken by the round thread (it waits on worker_ for it).
  std::atomic<int64_t> round_wanted_ns_{0};
  // The round's buffers, kept between rounds (the round thread, or a test's runRound()).
  Mutex workspace_mu_;
  fabric::RoundWorkspace workspace_ TQ_GUARDED_BY(workspace_mu_);
  std::atomic<uint64_t> rounds_{0};
  std::atomic<int64_t> last_round_ns_{0};
  std::atomic<bool> started_{false};
  std::atomic<bool> stopped_{false};
  Worker worker_;
};

}  // namespace tq::policy
