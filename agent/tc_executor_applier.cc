#include "agent/tc_executor_applier.h"

#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "agent/agent.h"
#include "common/file_util.h"
#include "common/log.h"

namespace tq::agent {
namespace {

constexpr char kMinorsHeader[] = "tenantqos-agent-tc-classes 1";

const tc::ClassMinorMap kNoMinors;

}  // namespace

Result<std::unique_ptr<TcApplier>> makeKernelTcApplier(const std::string& state_dir) {
  TQ_ASSIGN_OR_RETURN(auto applier, TcExecutorApplier::open(state_dir));
  return std::unique_ptr<TcApplier>(std::move(applier));
}

Result<std::unique_ptr<TcExecutorApplier>> TcExecutorApplier::open(const std::string& state_dir,
                                                                   const std::string& netns) {
  tc::NetlinkOptions o;
  o.netns = netns;
  TQ_ASSIGN_OR_RETURN(auto nl, tc::openTcNetlink(o));
  return std::make_unique<TcExecutorApplier>(std::move(nl), state_dir);
}

TcExecutorApplier::TcExecutorApplier(std::unique_ptr<tc::TcNetlink> nl, std::string state_dir)
    : nl_(std::move(nl)), executor_(*nl_) {
  if (state_dir.empty()) return;
  path_ = state_dir + "/" + kTcClassesFileName;
  auto text = readFile(path_, 16u << 20);
  if (!text.ok()) {
    if (text.status().code() != StatusCode::kNotFound) {
      TQ_LOG(kWarn, "tc class ids: %s; starting from name hashes", text.status().message().c_str());
    }
    return;
  }
  auto decoded = decodeMinors(*text);
  if (!decoded.ok()) {
    TQ_LOG(kWarn, "ignoring %s: %s; class ids fall back to name hashes", path_.c_str(),
           decoded.status().message().c_str());
    return;
  }
  minors_ = std::move(decoded).value();
}

std::string TcExecutorApplier::encodeMinors(
    const std::map<std::string, tc::ClassMinorMap>& minors) {
  std::string out = std::string(kMinorsHeader) + "\n";
  char buf[128];
  for (const auto& [device, m] : minors) {
    for (const auto& [tenant, minor] : m) {
      std::snprintf(buf, sizeof buf, "%s %s %04x\n", device.c_str(), tenant.c_str(), minor);
      out += buf;
    }
  }
  return out;
}

Result<std::map<std::string, tc::ClassMinorMap>> TcExecutorApplier::decodeMinors(
    const std::string& text) {
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line) || line != kMinorsHeader) {
    return dataLoss("bad header (expected \"" + std::string(kMinorsHeader) + "\")");
  }
  std::map<std::string, tc::ClassMinorMap> out;
  int n = 1;
  while (std::getline(in, line)) {
    ++n;
    std::istringstream l(line);
    std::string device, tenant, hex, extra;
    if (!(l >> device >> tenant >> hex) || (l >> extra)) {
      return dataLoss("line " + std::to_string(n) + ": expected \"<device> <tenant> <minor>\"");
    }
    char* end = nullptr;
    const unsigned long v = std::strtoul(hex.c_str(), &end, 16);
    if (end == hex.c_str() || *end != '\0' || v < tc::kFirstTenantMinor ||
        v > tc::kLastTenantMinor) {
      return dataLoss("line " + std::to_string(n) + ": bad class minor \"" + hex + "\"");
    }
    out[device][tenant] = static_cast<uint16_t>(v);
  }
  return out;
}

void TcExecutorApplier::persistMinors() {
  if (path_.empty()) return;
  if (minors_.empty()) {
    if (::unlink(path_.c_str()) != 0 && errno != ENOENT) {
      TQ_LOG(kWarn, "remove %s: %s", path_.c_str(), std::strerror(errno));
    }
    return;
  }
  Status s = writeFileAtomic(path_, encodeMinors(minors_), 0644);
  if (!s.ok()) TQ_LOG(kWarn, "persist tc class ids: %s", s.message().c_str());
}

const tc::ClassMinorMap& TcExecutorApplier::minors(const std::string& device) const {
  auto it = minors_.find(device);
  return it == minors_.end() ? kNoMinors : it->second;
}

Result<tc::DevicePlan> TcExecutorApplier::planFor(const DesiredDevice& d) const {
  tc::DevicePolicy p;
  p.device = d.device;
  p.capacity = d.capacity_bytes_per_second;
  // Guarantees and limits are payload rates; HTB counts frames (tc/plan.h, wireRateForPayload).
  TQ_ASSIGN_OR_RETURN(p.framing.mtu, nl_->linkMtu(d.device));
  for (const TenantSpec& t : d.tenants) {
    tc::TenantClassSpec c;
    c.name = t.name;
    c.guarantee = t.guarantee_bytes_per_second;
    c.limit = t.limit_bytes_per_second;
    c.weight = t.weight;
    // DSCP 0 is untagged traffic: such a tenant gets its class but no filter (plan.h).
    if (t.dscp != 0) c.dscp = static_cast<uint8_t>(t.dscp);
    p.tenants.push_back(std::move(c));
  }
  return tc::makeDevicePlan(p, minors(d.device));
}

Result<int> TcExecutorApplier::apply(const DesiredDevice& d) {
  if (!d.tenant_classes) {
    // none mode: tc is not ours to use on this device (an RDMA NIC's traffic never reaches it).
    // Remove a tree we built in htb mode; a foreign or default root stays as it is.
    TQ_ASSIGN_OR_RETURN(tc::DeviceState state, executor_.read(d.device));
    if (state.owner != tc::RootOwner::kOurs) return 0;
    TQ_RETURN_IF_ERROR(executor_.removeAll(d.device));
    labels_.erase(d.device);
    return 1;
  }
  auto plan = planFor(d);
  if (!plan.ok()) return plan.status().withContext("plan for dev " + d.device);
  TQ_ASSIGN_OR_RETURN(tc::ApplyReport report, executor_.apply(*plan));
  auto& labels = labels_[d.device];
  labels.clear();
  for (const tc::PlannedClass& c : plan->classes) labels[c.htb.classid] = c.label;
  if (d.tenant_classes && minors(d.device) != plan->tenant_minors) {
    minors_[d.device] = plan->tenant_minors;
    persistMinors();
  }
  if (report.writes() > 0) {
    TQ_LOG(kDebug, "dev %s: %s%s", d.device.c_str(), report.toString().c_str(),
           report.rebuilt ? " (rebuilt)" : "");
  }
  return report.writes();
}

Status TcExecutorApplier::remove(const std::string& device) {
  TQ_RETURN_IF_ERROR(executor_.removeAll(device));
  labels_.erase(device);
  if (minors_.erase(device) != 0) persistMinors();
  return okStatus();
}

Result<std::vector<ClassStat>> TcExecutorApplier::stats(const std::string& device) {
  TQ_ASSIGN_OR_RETURN(tc::DeviceState state, executor_.read(device));
  std::vector<ClassStat> out;
  if (state.owner != tc::RootOwner::kOurs) return out;
  const auto& labels = labels_[device];
  for (const tc::ClassInfo& c : state.classes) {
    ClassStat s;
    s.device = device;
    s.class_id = tc::formatHandle(c.htb.classid);
    auto it = labels.find(c.htb.classid);
    const std::string label = it != labels.end() ? it->second : "";
    s.tenant = (label == "link" || label == "default") ? "" : label;
    s.bytes = c.stats.bytes;
    s.packets = c.stats.packets;
    s.drops = c.stats.drops;
    s.overlimits = c.stats.overlimits;
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace tq::agent
