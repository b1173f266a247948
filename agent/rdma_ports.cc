#include "agent/rdma_ports.h"

#include <set>

#include "common/log.h"
#include "ib/sysfs.h"

namespace tq::agent {

RdmaPortMonitor::RdmaPortMonitor(std::string sysfs_root, int64_t rediscover_interval_ns)
    : root_(std::move(sysfs_root)), rediscover_interval_ns_(rediscover_interval_ns) {}

void RdmaPortMonitor::refresh(int64_t now_ns) {
  if (discoveries_ == 0 || now_ns >= rediscover_due_ns_) discover(now_ns);
  std::vector<RdmaPortStat> out;
  out.reserve(known_.size());
  bool gone = false;
  for (const KnownPort& k : known_) {
    RdmaPortStat s;
    if (readPort(k, &s)) {
      out.push_back(std::move(s));
    } else {
      gone = true;
    }
  }
  if (gone) {
    // A device went away (or was re-created under the same name): list again now rather than
    // export a stale port set until the next scheduled discovery.
    discover(now_ns);
    out.clear();
    for (const KnownPort& k : known_) {
      RdmaPortStat s;
      if (readPort(k, &s)) out.push_back(std::move(s));
    }
  }
  ports_ = std::move(out);
}

bool RdmaPortMonitor::readPort(const KnownPort& k, RdmaPortStat* out) const {
  auto state = ib::readPortState(root_, k.device, k.port);
  if (!state.ok() && state.status().code() == StatusCode::kNotFound) return false;
  auto counters = ib::readPortCounters(root_, k.device, k.port);
  if (!counters.ok()) {
    if (counters.status().code() == StatusCode::kNotFound) return false;
    TQ_LOG(kDebug, "RDMA port %s:%d counters: %s", k.device.c_str(), k.port,
           counters.status().message().c_str());
  }
  out->device = k.device;
  out->port = k.port;
  out->netdev = k.netdev;
  out->link_layer = k.link_layer;
  // An unreadable or garbled state file is reported as not up.
  out->up = state.ok() && *state == ib::kPortStateActive;
  if (counters.ok()) {
    out->transmit_bytes = counters->transmitBytes();
    out->receive_bytes = counters->receiveBytes();
    out->transmit_packets = counters->transmitPackets();
    out->receive_packets = counters->receivePackets();
  }
  return true;
}

void RdmaPortMonitor::discover(int64_t now_ns) {
  discoveries_++;
  rediscover_due_ns_ = now_ns + rediscover_interval_ns_;
  std::vector<KnownPort> found;
  std::set<std::string> failing;
  auto note_failure = [&](const std::string& key, const std::string& message) {
    failing.insert(key);
    auto it = broken_.find(key);
    if (it != broken_.end() && it->second == message) return;  // already said
    TQ_LOG(kWarn, "RDMA port metrics: %s", message.c_str());
    broken_[key] = message;
  };
  auto names = ib::listDevices(root_);
  if (!names.ok()) {
    note_failure("", names.status().message());
  } else {
    for (const std::string& name : *names) {
      auto dev = ib::readDevice(root_, name);
      if (!dev.ok()) {
        note_failure(name, "skipping " + dev.status().message());
        continue;
      }
      for (const ib::PortInfo& p : dev->ports) {
        found.push_back({name, p.port, p.netdev, std::string(ib::linkLayerName(p.link_layer))});
      }
    }
  }
  for (auto it = broken_.begin(); it != broken_.end();) {
    it = failing.count(it->first) ? std::next(it) : broken_.erase(it);
  }
  known_ = std::move(found);

  std::string list;
  for (const KnownPort& k : known_) {
    list += (list.empty() ? "" : ", ") + k.device + ":" + std::to_string(k.port) + " (" +
            k.link_layer + (k.netdev.empty() ? "" : ", " + k.netdev) + ")";
  }
  if (logged_ports_ == list) return;
  if (known_.empty()) {
    TQ_LOG(kInfo, "no RDMA ports under %s/class/infiniband: no RDMA port metrics", root_.c_str());
  } else {
    TQ_LOG(kInfo, "RDMA port metrics for %zu port(s): %s", known_.size(), list.c_str());
  }
  logged_ports_ = list;
}

}  // namespace tq::agent
