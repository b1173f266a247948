#include "policy/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

namespace tq::policy {

struct PolicydMetrics::Impl {
  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
  prometheus::Gauge& version = prometheus::BuildGauge()
                                   .Name("tenantqos_policyd_policy_version")
                                   .Help("Latest policy version served (0 when none)")
                                   .Register(*registry)
                                   .Add({});
  prometheus::Family<prometheus::Counter>& applies =
      prometheus::BuildCounter()
          .Name("tenantqos_policyd_applies_total")
          .Help("ApplyPolicy and Rollback requests by outcome")
          .Register(*registry);
  prometheus::Histogram& apply_seconds =
      prometheus::BuildHistogram()
          .Name("tenantqos_policyd_apply_duration_seconds")
          .Help("Time to validate and durably store an applied policy")
          .Register(*registry)
          .Add({}, prometheus::Histogram::BucketBoundaries{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                           0.1, 0.25, 0.5, 1, 2.5});
  prometheus::Gauge& watchers = prometheus::BuildGauge()
                                    .Name("tenantqos_policyd_watchers")
                                    .Help("Open WatchPolicy streams")
                                    .Register(*registry)
                                    .Add({});
  prometheus::Gauge& corrupt = prometheus::BuildGauge()
                                   .Name("tenantqos_policyd_store_corrupt_records")
                                   .Help("Stored policy records that failed verification")
                                   .Register(*registry)
                                   .Add({});
  prometheus::Gauge& nodes = prometheus::BuildGauge()
                                 .Name("tenantqos_policyd_usage_nodes")
                                 .Help("Nodes whose latest usage report policyd holds")
                                 .Register(*registry)
                                 .Add({});
  prometheus::Family<prometheus::Gauge>& store_info =
      prometheus::BuildGauge()
          .Name("tenantqos_policyd_store_info")
          .Help("1 for the policy store served: its backend and epoch")
          .Register(*registry);
  prometheus::Gauge& newest_corrupt =
      prometheus::BuildGauge()
          .Name("tenantqos_policyd_store_newest_corrupt_version")
          .Help(
              "The newest stored version when its record is corrupt and the newest intact one "
              "is served instead (--serve-newest-intact); 0 when the newest is served")
          .Register(*registry)
          .Add({});
  prometheus::Counter& watchers_ahead =
      prometheus::BuildCounter()
          .Name("tenantqos_policyd_watchers_ahead_total")
          .Help("Watch requests holding a newer version of this store than its latest")
          .Register(*registry)
          .Add({});
  prometheus::Gauge& allocator_active =
      prometheus::BuildGauge()
          .Name("tenantqos_policyd_allocator_active")
          .Help("1 while this replica is the active cluster allocator")
          .Register(*registry)
          .Add({});
  prometheus::Gauge& allocator_term = prometheus::BuildGauge()
                                          .Name("tenantqos_policyd_allocator_term")
                                          .Help("The allocator election term held or last held")
                                          .Register(*registry)
                                          .Add({});
  prometheus::Gauge& allocator_streams = prometheus::BuildGauge()
                                             .Name("tenantqos_policyd_allocator_streams")
                                             .Help("Open Allocate streams (agents)")
                                             .Register(*registry)
                                             .Add({});
  prometheus::Counter& allocator_rounds = prometheus::BuildCounter()
                                              .Name("tenantqos_policyd_allocator_rounds_total")
                                              .Help("Cluster allocation rounds computed")
                                              .Register(*registry)
                                              .Add({});
  prometheus::Histogram& allocator_round_seconds =
      prometheus::BuildHistogram()
          .Name("tenantqos_policyd_allocator_round_duration_seconds")
          .Help("Time to compute one cluster allocation round")
          .Register(*registry)
          .Add({}, prometheus::Histogram::BucketBoundaries{0.0001, 0.0005, 0.001, 0.0025, 0.005,
                                                           0.01, 0.02, 0.05, 0.1, 0.5});
  prometheus::Counter& allocator_messages =
      prometheus::BuildCounter()
          .Name("tenantqos_policyd_allocator_caps_messages_total")
          .Help("NodeCaps messages handed to Allocate streams")
          .Register(*registry)
          .Add({});
  prometheus::Counter& allocator_rejected =
      prometheus::BuildCounter()
          .Name("tenantqos_policyd_allocator_rejected_reports_total")
          .Help("Demand entries an allocation round rejected (unknown index or class)")
          .Register(*registry)
          .Add({});
  prometheus::Family<prometheus::Counter>& demand_reports =
      prometheus::BuildCounter()
          .Name("tenantqos_policyd_allocator_demand_reports_total")
          .Help("DemandReport messages by outcome")
          .Register(*registry);
  prometheus::Counter& skipped_entries =
      prometheus::BuildCounter()
          .Name("tenantqos_policyd_allocator_skipped_entries_total")
          .Help("Demand entries of another policy version than the allocator's, skipped")
          .Register(*registry)
          .Add({});
};

PolicydMetrics::PolicydMetrics() : impl_(std::make_unique<Impl>()) {}
PolicydMetrics::~PolicydMetrics() = default;

void PolicydMetrics::setPolicyVersion(uint64_t v) { impl_->version.Set(static_cast<double>(v)); }
void PolicydMetrics::countApply(std::string_view op, std::string_view result) {
  impl_->applies.Add({{"op", std::string(op)}, {"result", std::string(result)}}).Increment();
}
void PolicydMetrics::observeApplySeconds(double s) { impl_->apply_seconds.Observe(s); }
void PolicydMetrics::setWatchers(int64_t n) { impl_->watchers.Set(static_cast<double>(n)); }
void PolicydMetrics::setStoreCorruptRecords(uint64_t n) {
  impl_->corrupt.Set(static_cast<double>(n));
}
void PolicydMetrics::setUsageNodes(uint64_t n) { impl_->nodes.Set(static_cast<double>(n)); }
void PolicydMetrics::setStoreInfo(const std::string& backend, const std::string& epoch) {
  impl_->store_info.Add({{"backend", backend}, {"epoch", epoch}}).Set(1);
}
void PolicydMetrics::setStoreNewestCorruptVersion(uint64_t v) {
  impl_->newest_corrupt.Set(static_cast<double>(v));
}
void PolicydMetrics::countWatcherAhead() { impl_->watchers_ahead.Increment(); }
void PolicydMetrics::setAllocatorState(bool active, uint64_t term) {
  impl_->allocator_active.Set(active ? 1 : 0);
  impl_->allocator_term.Set(static_cast<double>(term));
}
void PolicydMetrics::setAllocatorStreams(uint64_t n) {
  impl_->allocator_streams.Set(static_cast<double>(n));
}
void PolicydMetrics::observeAllocatorRound(double seconds, uint64_t rejected, uint64_t messages) {
  impl_->allocator_rounds.Increment();
  impl_->allocator_round_seconds.Observe(seconds);
  impl_->allocator_rejected.Increment(static_cast<double>(rejected));
  impl_->allocator_messages.Increment(static_cast<double>(messages));
}
void PolicydMetrics::countDemandReport(std::string_view result) {
  impl_->demand_reports.Add({{"result", std::string(result)}}).Increment();
}
void PolicydMetrics::countDemandEntriesSkipped(uint64_t n) {
  impl_->skipped_entries.Increment(static_cast<double>(n));
}

std::shared_ptr<prometheus::Registry> PolicydMetrics::registry() const { return impl_->registry; }

std::string PolicydMetrics::serialize() const {
  return prometheus::TextSerializer().Serialize(impl_->registry->Collect());
}

}  // namespace tq::policy
