// Per-RDMA-port state and counters for the agent's metrics, read from sysfs (ib/sysfs.h), so an
// operator sees what each RDMA port carried next to the per-tenant plugin counters (tc never
// sees RDMA traffic, so the tc class counters do not include it).
//
// Owned and driven by the reconcile thread (refresh() on its ~1 s stats tick); not thread-safe.
// The result reaches other threads only inside the published AgentState.
//
// Discovery (which devices and ports exist, their link layer and netdev) reads every device's
// GID tables, so it is cached: redone every `rediscover_interval_ns` (a device added, e.g. an
// rxe link, appears within that time) and at once when a known port cannot be read any more (a
// device removed or its driver reloaded). Every refresh reads each known port's state and its
// counters (ib::readPortCounters: every file of counters/ and hw_counters/).
//
// Logging: nothing per refresh. The port list is logged when it changes (the first discovery
// included, so a host without RDMA says once that it has none); a device that cannot be read is
// logged once per distinct error, not at every rediscovery.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agent/agent_state.h"

namespace tq::agent {

class RdmaPortMonitor {
 public:
  static constexpr int64_t kDefaultRediscoverIntervalNs = 10'000'000'000;

  // Reads <sysfs_root>/class/infiniband (a missing directory means no RDMA: no ports).
  explicit RdmaPortMonitor(std::string sysfs_root,
                           int64_t rediscover_interval_ns = kDefaultRediscoverIntervalNs);

  // Reads every port's state and counters (discovering first when due). Blocking sysfs reads:
  // about (counter files + 1) small reads per port.
  void refresh(int64_t now_ns);
  // As of the last refresh, sorted by device then port.
  const std::vector<RdmaPortStat>& ports() const { return ports_; }
  // Discoveries done so far (tests check the cache).
  int discoveries() const { return discoveries_; }

 private:
  struct KnownPort {
    std::string device;
    int port = 0;
    std::string netdev;
    std::string link_layer;
  };

  void discover(int64_t now_ns);
  // False when the port is gone (its directory or state file no longer exists).
  bool readPort(const KnownPort& k, RdmaPortStat* out) const;

  std::string root_;
  int64_t rediscover_interval_ns_;
  int64_t rediscover_due_ns_ = 0;
  int discoveries_ = 0;
  std::vector<KnownPort> known_;
  std::vector<RdmaPortStat> ports_;
  std::map<std::string, std::string> broken_;  // device (or "" for the listing) -> error logged
  std::optional<std::string> logged_ports_;    // the port list as last logged
};

}  // namespace tq::agent
