#include "agent/usage_reporter.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <utility>

#include "common/clock.h"
#include "common/log.h"
#include "proto/convert.h"
#include "tenantqos/v1/policy.grpc.pb.h"

namespace tq::agent {

NodeUsageReport buildUsageReport(const AgentState& now, const AgentState* prev, int64_t wall_ms) {
  NodeUsageReport r;
  r.node = now.node;
  r.policy_version = now.policy_version;
  r.timestamp_unix_ms = wall_ms;
  std::map<std::string, uint64_t> prev_tx;
  double dt = 0;
  if (prev != nullptr) {
    for (const TenantStatus& t : prev->tenants) prev_tx[t.name] = t.transmit_bytes;
    dt = static_cast<double>(now.published_at_ns - prev->published_at_ns) / 1e9;
  }
  for (const TenantStatus& t : now.tenants) {
    TenantUsageReport u;
    u.tenant = t.name;
    u.transmit_bytes_total = t.transmit_bytes;
    u.receive_bytes_total = t.receive_bytes;
    auto it = prev_tx.find(t.name);
    if (it != prev_tx.end() && dt > 0 && t.transmit_bytes >= it->second) {
      u.transmit_rate_bytes_per_second =
          static_cast<uint64_t>(static_cast<double>(t.transmit_bytes - it->second) / dt);
    }
    u.allocated_rate_bytes_per_second = t.allocated_bytes_per_second;
    u.guarantee_bytes_per_second = t.guarantee_bytes_per_second;
    u.limit_bytes_per_second = t.limit_bytes_per_second;
    u.throttled_seconds_total = static_cast<double>(t.throttled_ns) / 1e9;
    u.processes = t.processes;
    r.tenants.push_back(std::move(u));
  }
  r.errors = now.errors;
  return r;
}

UsageReporter::UsageReporter(std::shared_ptr<rpc::ChannelRing> endpoints, const StateBoard& board,
                             int64_t interval_ns, Clock& clock)
    : endpoints_(std::move(endpoints)), board_(board), interval_ns_(interval_ns), worker_(clock) {}

UsageReporter::~UsageReporter() { stop(); }

void UsageReporter::start() {
  worker_.start("tq-report", [this](std::stop_token stop) { run(std::move(stop)); });
}

void UsageReporter::stop() { worker_.stop(); }

void UsageReporter::run(std::stop_token stop) {
  std::optional<AgentState> prev;
  const int64_t deadline_ns = std::clamp<int64_t>(interval_ns_, 200'000'000, 5'000'000'000);
  while (worker_.waitFor(interval_ns_)) {
    AgentState now = board_.snapshot();
    if (now.published_at_ns == 0) continue;  // the reconcile thread has not published yet
    const auto req = proto::toReportUsageRequest(
        buildUsageReport(now, prev ? &*prev : nullptr, worker_.clock().wallNs() / 1'000'000));
    prev = std::move(now);
    grpc::ClientContext ctx;
    ctx.set_wait_for_ready(false);
    // A real-time bound: gRPC deadlines are on the system clock whatever clock paces us.
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::nanoseconds(deadline_ns));
    std::stop_callback cancel(stop, [&ctx] { ctx.TryCancel(); });
    tenantqos::v1::ReportUsageResponse resp;
    // To the replica the watch uses: usage is held per replica (docs/policyd.md).
    auto stub = tenantqos::v1::PolicyService::NewStub(endpoints_->current());
    grpc::Status st = stub->ReportUsage(&ctx, req, &resp);
    attempted_++;
    if (!st.ok()) {
      // A refusal is a configuration error (--node is not the certificate's CN, or the
      // certificate lacks tenantqos:agents), not a network blip: say so, loudly.
      if (st.error_code() == grpc::StatusCode::PERMISSION_DENIED ||
          st.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
        TQ_LOG(kWarn, "ReportUsage refused by policyd: %s", st.error_message().c_str());
      } else {
        TQ_LOG(kDebug, "ReportUsage to policyd: %s (grpc code %d); retrying next interval",
               st.error_message().c_str(), static_cast<int>(st.error_code()));
        endpoints_->renew();  // on a new channel: see rpc::ChannelRing::renew
      }
      continue;
    }
    sent_++;
  }
}

}  // namespace tq::agent
