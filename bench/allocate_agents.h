// Benchmarks' node agents on PolicyService.Allocate (docs/fabric.md, "In policyd"): N streams,
// each on its own TCP connection with its own mutual-TLS identity (an agent certificate whose
// CN is the node, made with openssl here), reporting demand and recording when each NodeCaps
// arrives. Used by bench/fabric (one round of caps pushed to 1,000 agents: when the last one
// holds them) and bench/policy_watch (1,000 agents reporting at 10 Hz as load on policyd).
// The agents speak the gRPC API directly; they are not the node agent's client. They ask for
// compact caps (DemandReport.compact_caps: keys and deltas, proto/allocate_codec.h) as current
// agents do, and write whole reports with names, as older agents do (policyd reads both).
//
// Thread-safety: open(), reportAll(), startLoad()/stopLoad() and close() from one thread; the
// receipts and counters from any thread (gRPC's threads write them).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "common/thread_annotations.h"

namespace tq::bench {

// "gpu-node-000123": the length of a real node name (most of a message's bytes are names).
std::string agentNodeName(size_t i);

// The `sharedLinks:` section of a policy: one class `name` (`capacity`, a rate such as
// "400Gbps", 5% headroom) with one group per `leaf_size` consecutive nodes ("leaf-000", ...).
std::string leafUplinksYaml(const std::vector<std::string>& nodes, size_t leaf_size,
                            const std::string& name, const std::string& capacity);

// Issues DIR/agent-NODE.{crt,key} for every node (CN = node, O = tenantqos:agents, P-256),
// signed by DIR/ca.{crt,key} (scripts/tq-certs.sh's CA), one openssl process per certificate,
// `jobs` at a time. Errors name the node and openssl's exit status.
Status issueAgentCerts(const std::string& dir, const std::vector<std::string>& nodes, int jobs);

// One NodeCaps as an agent received it.
struct CapsReceipt {
  uint64_t round = 0;
  int64_t computed_unix_ms = 0;  // NodeCaps.computed_at_unix_ms: when policyd computed the round
  int64_t received_unix_ns = 0;  // CLOCK_REALTIME when the agent's reactor got it
  uint64_t demand_sequence = 0;
};

class AllocateAgents {
 public:
  struct Node {
    std::string name;                  // the certificate's CN
    std::vector<std::string> tenants;  // reported on `link`, each direction
  };
  struct Options {
    std::string address;  // the active allocator's host:port
    std::string pki_dir;  // ca.crt and agent-NODE.{crt,key}
    std::string link = "leaf-uplink";
    uint64_t policy_version = 0;
  };

  AllocateAgents(Options options, std::vector<Node> nodes);
  ~AllocateAgents();  // close()
  AllocateAgents(const AllocateAgents&) = delete;
  AllocateAgents& operator=(const AllocateAgents&) = delete;

  // Opens every stream with a first report of `demand` bytes/s per entry, and waits until every
  // node holds caps (kDeadlineExceeded naming how many do not; kUnavailable when a stream
  // ended, with its status).
  Status open(uint64_t demand, std::chrono::milliseconds timeout);
  // Every node writes a new report, its entries at demand(node index) bytes/s; returns its
  // sequence number (all nodes share it).
  uint64_t reportAll(const std::function<uint64_t(size_t)>& demand);
  // Waits until every node holds caps computed from a report of `sequence` or later.
  bool waitAll(uint64_t sequence, std::chrono::milliseconds timeout);
  // The receipts of every node since the last call, per node.
  std::vector<std::vector<CapsReceipt>> takeReceipts();

  // Load: every node reports at `hz`, the nodes staggered over the period, each report's demand
  // drawn around `demand` (+-20 %) so that most rounds change most caps (the busy case).
  void startLoad(double hz, uint64_t demand);
  void stopLoad();

  size_t size() const { return nodes_.size(); }
  uint64_t reportsSent() const { return reports_sent_.load(); }
  uint64_t capsReceived() const { return caps_received_.load(); }
  // Streams that ended on their own (the server refused or dropped them), with a status.
  size_t streamsEnded(std::string* first_error) const;

  void close();

  class Agent;  // one stream (allocate_agents.cc)

 private:
  friend class Agent;
  void received(size_t id, const CapsReceipt& r);
  void writeReport(size_t id, uint64_t sequence, uint64_t demand);

  Options options_;
  std::vector<Node> nodes_;
  std::vector<std::unique_ptr<Agent>> agents_;
  std::atomic<uint64_t> reports_sent_{0}, caps_received_{0};
  uint64_t sequence_ = 0;  // the last reportAll's (the opening thread's)

  mutable Mutex mu_;
  std::condition_variable cv_;
  // Per node: newest NodeCaps.demand_sequence.
  std::vector<uint64_t> held_sequence_ TQ_GUARDED_BY(mu_);
  std::vector<std::vector<CapsReceipt>> receipts_ TQ_GUARDED_BY(mu_);
  uint64_t target_ TQ_GUARDED_BY(mu_) = 0;      // waitAll's sequence
  size_t below_target_ TQ_GUARDED_BY(mu_) = 0;  // nodes whose held_sequence_ < target_

  std::atomic<bool> load_stop_{false};
  std::thread load_;
};

}  // namespace tq::bench
