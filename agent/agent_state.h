// What the reconcile thread publishes for the other threads (metrics, usage reports): a plain
// value copied under a mutex. The reconcile thread's own state is never read from elsewhere.
//
// AgentState is published at most every ~100 ms (and right after every reconcile); the
// policyd-connected flag is owned by the watch thread and kept separately (atomic).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "agent/fabric_links.h"
#include "agent/tc_applier.h"
#include "common/thread_annotations.h"

namespace tq::agent {

// One of a tenant's buckets (a device and a direction).
struct BucketStatus {
  std::string device;                       // the device, or the shared link class (fabric_link)
  bool fabric_link = false;                 // a shared fabric link's bucket (docs/fabric.md)
  bool receive = false;                     // direction rx (else tx)
  uint64_t bytes = 0;                       // sent (tx) / received (rx)
  uint64_t throttled_ns = 0;                // process-time refused by the bucket
  uint64_t backlog_bytes = 0;               // waiting for tokens now
  uint64_t allocated_bytes_per_second = 0;  // the bucket's rate
  uint64_t depth_bytes = 0;
  uint64_t demand_bytes_per_second = 0;  // the estimate; kUnboundedDemand when backlogged
  uint64_t overrun_bytes = 0;            // used beyond what it was allowed (agent/fence.h)
  bool fenced = false;                   // its rate is lowered while that is paid back
};

struct TenantStatus {
  std::string name;
  std::string link;
  uint64_t transmit_bytes = 0;  // over every device
  uint64_t receive_bytes = 0;
  uint64_t throttled_ns = 0;                // sends
  uint64_t backlog_bytes = 0;               // sends
  uint64_t allocated_bytes_per_second = 0;  // the tx buckets' rates, summed over devices
  uint64_t guarantee_bytes_per_second = 0;
  uint64_t limit_bytes_per_second = 0;
  uint32_t processes = 0;
  std::vector<BucketStatus> buckets;
};

// One RDMA port's state and counters as last read from sysfs (agent/rdma_ports.h). A counter
// the device does not have is nullopt (rxe has no PMA counters, so no byte counts).
struct RdmaPortStat {
  std::string device;      // "mlx5_0", "rxe0"
  int port = 0;            // 1-based
  std::string netdev;      // RoCE: the port's netdev; empty on InfiniBand
  std::string link_layer;  // "InfiniBand", "Ethernet", "unknown"
  bool up = false;         // logical state ACTIVE
  std::optional<uint64_t> transmit_bytes;
  std::optional<uint64_t> receive_bytes;
  std::optional<uint64_t> transmit_packets;
  std::optional<uint64_t> receive_packets;
  friend bool operator==(const RdmaPortStat&, const RdmaPortStat&) = default;
};

// A process attached to the agent (connected to an attach socket), by pid in the agent's
// pid namespace. What the ungoverned-QP scan (agent/ungoverned_qps.h) checks QP owners against.
struct AttachedProcess {
  int32_t pid = 0;
  std::string tenant;
  friend bool operator==(const AttachedProcess&, const AttachedProcess&) = default;
};

// One process owning RDMA QPs without being attached to the agent.
struct UngovernedOwner {
  int32_t pid = 0;   // thread group id in the agent's pid namespace
  std::string comm;  // its name (/proc/<pid>/comm, printable ASCII): a label, never identity
  uint64_t qps = 0;
  friend bool operator==(const UngovernedOwner&, const UngovernedOwner&) = default;
};

// The QPs of one RDMA device by owner, from RDMA netlink (agent/ungoverned_qps.h).
struct RdmaQpCounts {
  std::string device;
  uint64_t governed = 0;    // user QPs of processes attached to the agent
  uint64_t ungoverned = 0;  // user QPs of processes not attached
  uint64_t kernel = 0;      // kernel QPs (ib_core's QP0/QP1, IPoIB, storage ULPs)
  uint64_t unknown = 0;     // user QPs whose owner the agent cannot see (other pid namespace)
  uint64_t ungoverned_owners = 0;
  std::vector<UngovernedOwner> top;  // the owners with the most ungoverned QPs, bounded
  uint64_t other_ungoverned = 0;     // ungoverned QPs of the owners not in `top`
  friend bool operator==(const RdmaQpCounts&, const RdmaQpCounts&) = default;
};

// A cumulative-bucket duration histogram with fixed bounds (seconds). Value type; not
// thread-safe (the reconcile thread observes into its own copy and publishes copies).
class DurationHistogram {
 public:
  static constexpr std::array<double, 14> kBounds = {0.00001, 0.00005, 0.0001, 0.00025, 0.0005,
                                                     0.001,   0.0025,  0.005,  0.01,    0.025,
                                                     0.05,    0.1,     0.5,    2.5};
  void observe(double seconds) {
    for (size_t i = 0; i < kBounds.size(); ++i) {
      if (seconds <= kBounds[i]) cumulative_[i]++;
    }
    count_++;
    sum_ += seconds;
  }
  // counts()[i] = observations <= kBounds[i] (cumulative); count() includes +Inf.
  const std::array<uint64_t, kBounds.size()>& cumulative() const { return cumulative_; }
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::array<uint64_t, kBounds.size()> cumulative_{};
  uint64_t count_ = 0;
  double sum_ = 0;
};

struct AgentState {
  std::string node;
  std::string tc_mode;
  bool ready = false;  // a policy (persisted or received) has been applied
  std::string not_ready_reason = "no policy yet";
  uint64_t policy_version = 0;            // the version enforced (0 = none)
  uint64_t latest_seen_version = 0;       // the newest version received (may be failing)
  std::vector<TenantStatus> tenants;      // sorted by name
  std::vector<ClassStat> classes;         // refreshed about every second
  std::vector<RdmaPortStat> rdma_ports;   // refreshed about every second; by device, port
  std::vector<AttachedProcess> attached;  // by pid
  // Published by the QP scan thread, not the reconcile thread (StateBoard::publishRdmaQps);
  // nullopt while RDMA netlink cannot be read (no RDMA on the node, scan disabled).
  std::optional<std::vector<RdmaQpCounts>> rdma_qps;
  std::vector<std::string> errors;  // unresolved reconcile errors (empty when healthy)
  uint64_t reconcile_errors_total = 0;
  // Reads of the kernel's counters (tc classes, RDMA ports), one per --stats interval: a test
  // that shows what does NOT happen over several reads waits on this instead of sleeping.
  uint64_t stats_reads_total = 0;
  // QP scans finished (StateBoard::publishRdmaQps), listed or not.
  uint64_t qp_scans_total = 0;
  DurationHistogram reconcile_duration;
  DurationHistogram allocation_duration;
  int64_t published_at_ns = 0;  // monotonic
  FabricStatus fabric;          // the cluster allocator's caps and the mode they are in
};

// What the watch thread reports (metrics, /readyz).
struct WatchStatus {
  bool connected = false;               // the watch stream to a policyd is up
  uint64_t store_epoch_changes = 0;     // snapshots of a new store adopted
  uint64_t older_versions_offered = 0;  // older versions of the held store refused
  uint64_t older_offered_version = 0;   // the last one refused
  std::string store_notice;  // why the last offered version was refused; "" once resolved
  // Backoff waits of the watch so far (a replica unreachable, a stream ended): the attempts it
  // made while disconnected.
  uint64_t reconnect_waits = 0;
};

class StateBoard {
 public:
  void publish(AgentState state) {
    MutexLock lock(mu_);
    state_ = std::move(state);
  }
  // The QP scan thread's result, merged into every snapshot.
  void publishRdmaQps(std::optional<std::vector<RdmaQpCounts>> qps) {
    MutexLock lock(mu_);
    rdma_qps_ = std::move(qps);
    ++qp_scans_;
  }
  AgentState snapshot() const {
    MutexLock lock(mu_);
    AgentState s = state_;
    s.rdma_qps = rdma_qps_;
    s.qp_scans_total = qp_scans_;
    return s;
  }
  void setPolicydConnected(bool connected) {
    connected_.store(connected, std::memory_order_relaxed);
  }
  bool policydConnected() const { return connected_.load(std::memory_order_relaxed); }

  // Store identity events of the watch thread (policy_watcher.h, rpc::judgeSnapshot).
  void countStoreEpochChange() { epoch_changes_.fetch_add(1, std::memory_order_relaxed); }
  void reportOlderOffered(uint64_t version, std::string notice) {
    older_offered_.fetch_add(1, std::memory_order_relaxed);
    MutexLock lock(mu_);
    older_offered_version_ = version;
    store_notice_ = std::move(notice);
  }
  void clearStoreNotice() {
    MutexLock lock(mu_);
    store_notice_.clear();
  }
  WatchStatus watchStatus() const {
    MutexLock lock(mu_);
    return {policydConnected(), epoch_changes_.load(std::memory_order_relaxed),
            older_offered_.load(std::memory_order_relaxed), older_offered_version_, store_notice_};
  }

  // The node's demand on its shared links (reconcile thread, each allocation pass in which it
  // changed), for the cluster allocator's stream (agent/fabric_client.h); nullopt until the
  // node is behind one. `edge` (fabric_links.h demandEdge: a tenant started or stopped, a large
  // step): the listener is told at once, so that the stream reports it without waiting for its
  // next periodic look.
  void publishFabricDemand(std::optional<FabricDemand> demand, bool edge = false) {
    {
      MutexLock lock(mu_);
      fabric_demand_ = std::move(demand);
    }
    if (edge) {
      MutexLock lock(listener_mu_);
      if (fabric_edge_listener_) fabric_edge_listener_();
    }
  }
  // Who is told of an edge (empty: nobody). Once this returns, the previous listener is not
  // running and will not be called again. The listener must not call back into the board's
  // fabric listener; it runs on the reconcile thread and must not block.
  void setFabricEdgeListener(std::function<void()> listener) {
    MutexLock lock(listener_mu_);
    fabric_edge_listener_ = std::move(listener);
  }
  std::optional<FabricDemand> fabricDemand() const {
    MutexLock lock(mu_);
    return fabric_demand_;
  }

 private:
  mutable Mutex mu_;
  AgentState state_ TQ_GUARDED_BY(mu_);
  std::optional<std::vector<RdmaQpCounts>> rdma_qps_ TQ_GUARDED_BY(mu_);
  uint64_t qp_scans_ TQ_GUARDED_BY(mu_) = 0;
  std::atomic<bool> connected_{false};
  std::atomic<uint64_t> epoch_changes_{0};
  std::atomic<uint64_t> older_offered_{0};
  uint64_t older_offered_version_ TQ_GUARDED_BY(mu_) = 0;
  std::string store_notice_ TQ_GUARDED_BY(mu_);
  std::optional<FabricDemand> fabric_demand_ TQ_GUARDED_BY(mu_);
  Mutex listener_mu_;  // held while the listener runs, so that clearing it waits for it
  std::function<void()> fabric_edge_listener_ TQ_GUARDED_BY(listener_mu_);
};

}  // namespace tq::agent
