// Periodic ReportUsage to policyd (the cluster view behind `tenantqosctl top`), on its own
// thread, from the published AgentState only. A failed report is logged at debug level and the
// next interval simply sends fresh totals (reports carry totals, so nothing is lost), on a fresh
// channel (rpc::ChannelRing::renew says why).
// Intervals and timestamps follow the injected Clock; stop() cancels a report in flight.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <stop_token>

#include "agent/agent_state.h"
#include "common/clock.h"
#include "common/policy.h"
#include "common/worker.h"
#include "rpc/channel_ring.h"

namespace tq::agent {

// Pure: the report for `now`, with per-tenant transmit rates over the interval since `prev`
// (nullptr: rates 0). A tenant whose counter went backwards (file recreated) reports rate 0.
NodeUsageReport buildUsageReport(const AgentState& now, const AgentState* prev, int64_t wall_ms);

class UsageReporter {
 public:
  // Reports go to the replica `endpoints` currently uses (the watch moves it).
  UsageReporter(std::shared_ptr<rpc::ChannelRing> endpoints, const StateBoard& board,
                int64_t interval_ns, Clock& clock);
  ~UsageReporter();
  void start();
  void stop();  // idempotent

  uint64_t reportsSent() const { return sent_.load(); }
  // Reports attempted (sent or failed).
  uint64_t reportsAttempted() const { return attempted_.load(); }
  const Worker& worker() const { return worker_; }

 private:
  void run(std::stop_token stop);

  std::shared_ptr<rpc::ChannelRing> endpoints_;
  const StateBoard& board_;
  int64_t interval_ns_;
  std::atomic<uint64_t> sent_{0};
  std::atomic<uint64_t> attempted_{0};
  Worker worker_;
};

}  // namespace tq::agent
