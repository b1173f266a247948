// Prometheus metrics of tenantqos-policyd (prometheus-cpp). The registry always exists (tests
// read it through serialize()); the HTTP endpoint is started by policyd only with --metrics.
//
//   tenantqos_policyd_policy_version                 gauge    latest served version (0: none)
//   tenantqos_policyd_applies_total{op,result}       counter  op=apply|rollback,
//                                                             result=applied|unchanged|dry_run|
//                                                             invalid|conflict|not_found|error
//   tenantqos_policyd_apply_duration_seconds         histogram  validation + durable store
//   tenantqos_policyd_watchers                       gauge    open WatchPolicy streams
//   tenantqos_policyd_store_corrupt_records          gauge    records that failed verification
//   tenantqos_policyd_usage_nodes                    gauge    nodes with a usage report
//   tenantqos_policyd_store_info{backend,epoch}      gauge    1: the store served
//   tenantqos_policyd_store_newest_corrupt_version   gauge    the newest version when its record
//                                                             is corrupt and an older one is
//                                                             served (--serve-newest-intact); 0
//   tenantqos_policyd_watchers_ahead_total           counter  watchers holding a newer version of
//                                                             this store than its latest
//   tenantqos_policyd_allocator_active               gauge    1 while this replica is the active
//                                                             cluster allocator
//   tenantqos_policyd_allocator_term                 gauge    the election term held (or last held)
//   tenantqos_policyd_allocator_streams              gauge    open Allocate streams
//   tenantqos_policyd_allocator_rounds_total         counter  allocation rounds computed
//   tenantqos_policyd_allocator_round_duration_seconds histogram  one round's compute time
//   tenantqos_policyd_allocator_caps_messages_total  counter  NodeCaps messages sent
//   tenantqos_policyd_allocator_rejected_reports_total counter report entries a round rejected
//   tenantqos_policyd_allocator_demand_reports_total{result}  counter  accepted|refused|
//                                                             too_frequent
//   tenantqos_policyd_allocator_skipped_entries_total counter  entries of another policy version
// Thread-safety: all methods are safe from any thread (prometheus-cpp metrics are atomic).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace prometheus {
class Registry;
}

namespace tq::policy {

class PolicydMetrics {
 public:
  PolicydMetrics();
  ~PolicydMetrics();
  PolicydMetrics(const PolicydMetrics&) = delete;
  PolicydMetrics& operator=(const PolicydMetrics&) = delete;

  void setPolicyVersion(uint64_t version);
  void countApply(std::string_view op, std::string_view result);
  void observeApplySeconds(double seconds);
  void setWatchers(int64_t n);
  void setStoreCorruptRecords(uint64_t n);
  void setUsageNodes(uint64_t n);
  void setStoreInfo(const std::string& backend, const std::string& epoch);
  void setStoreNewestCorruptVersion(uint64_t version);
  void countWatcherAhead();
  void setAllocatorState(bool active, uint64_t term);
  void setAllocatorStreams(uint64_t n);
  void observeAllocatorRound(double seconds, uint64_t rejected_entries, uint64_t messages);
  void countDemandReport(std::string_view result);
  void countDemandEntriesSkipped(uint64_t n);

  std::shared_ptr<prometheus::Registry> registry() const;
  // The text exposition format, as a scrape would return it.
  std::string serialize() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tq::policy
