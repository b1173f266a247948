// Periodic ReportUsage to policyd (the cluster view behind `tenantqosctl top`), on its own
// thread, from the published AgentState only. A failed report is logged at debug level and the
// next interval simply sends fresh totals (reports carry totals, so nothing is lost).
#pragma once

#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "agent/agent_state.h"
#include "common/policy.h"

namespace tq::agent {

// Pure: the report for `now`, with per-tenant transmit rates over the interval since `prev`
// (nullptr: rates 0). A tenant whose counter went backwards (file recreated) reports rate 0.
NodeUsageReport buildUsageReport(const AgentState& now, const AgentState* prev, int64_t wall_ms);

class UsageReporter {
 public:
  UsageReporter(std::shared_ptr<grpc::Channel> channel, const StateBoard& board,
                int64_t interval_ns);
  ~UsageReporter();
  void start();
  void stop();  // idempotent

  uint64_t reportsSent() const;

 private:
  void run();

  std::shared_ptr<grpc::Channel> channel_;
  const StateBoard& board_;
  int64_t interval_ns_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  uint64_t sent_ = 0;
  std::thread thread_;
};

}  // namespace tq::agent
