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

std::shared_ptr<prometheus::Registry> PolicydMetrics::registry() const { return impl_->registry; }

std::string PolicydMetrics::serialize() const {
  return prometheus::TextSerializer().Serialize(impl_->registry->Collect());
}

}  // namespace tq::policy
