#include "agent/desired_state.h"

#include <net/if.h>

#include <algorithm>
#include <set>

#include "common/shm_layout.h"
#include "common/tenant_shm.h"
#include "common/units.h"

namespace tq::agent {

bool kernelDeviceExists(const std::string& device) { return ::if_nametoindex(device.c_str()) != 0; }

Result<DesiredNode> computeDesired(const VersionedPolicy& vp,
                                   const std::vector<DeviceMapping>& devices,
                                   const DeviceExistsFn& device_exists) {
  const PolicySpec& policy = vp.policy;
  const std::string where = "policy v" + std::to_string(vp.version);
  DesiredNode out;
  out.version = vp.version;

  std::set<std::string> node_links;
  for (const DeviceMapping& d : devices) {
    const LinkSpec* link = policy.findLink(d.link);
    if (link == nullptr) {
      out.unmanaged_devices.push_back(d.device);
      out.warnings.push_back("device " + d.device + ": link \"" + d.link + "\" is not defined by " +
                             where + "; the device is not managed");
      continue;
    }
    if (device_exists && !device_exists(d.device)) {
      return notFound(where + ": device " + d.device + " (link " + d.link +
                      ") does not exist on this node");
    }
    node_links.insert(d.link);
    out.links[link->name] = *link;
    out.devices.push_back({d.device, d.link, link->capacity_bytes_per_second, {}});
  }

  std::set<std::string> seen;
  for (const TenantSpec& t : policy.tenants) {
    if (!seen.insert(t.name).second) {
      return invalidArgument(where + ": tenant \"" + t.name + "\" appears twice");
    }
    if (policy.findLink(t.link) == nullptr) {
      return invalidArgument(where + ": tenant " + t.name + " names link \"" + t.link +
                             "\", which the policy does not define");
    }
    if (node_links.count(t.link) == 0) continue;  // not on this node
    if (!isDns1123Label(t.name)) {
      return invalidArgument(where + ": tenant name \"" + t.name + "\" is not a DNS-1123 label");
    }
    if (t.limit_bytes_per_second < t.guarantee_bytes_per_second) {
      return invalidArgument(where + ": tenant " + t.name + ": limit " +
                             formatRate(t.limit_bytes_per_second) + " is below its guarantee " +
                             formatRate(t.guarantee_bytes_per_second));
    }
    if (t.traffic_classes.size() > shm::kMaxTrafficClasses) {
      return invalidArgument(where + ": tenant " + t.name + ": " +
                             std::to_string(t.traffic_classes.size()) +
                             " traffic classes, the shared-memory layout holds " +
                             std::to_string(shm::kMaxTrafficClasses));
    }
    if (t.dscp > 63 || t.service_level > 15) {
      return invalidArgument(where + ": tenant " + t.name + ": dscp " + std::to_string(t.dscp) +
                             " / service level " + std::to_string(t.service_level) +
                             " out of range (0-63 / 0-15)");
    }
    const uint64_t cap = out.links[t.link].capacity_bytes_per_second;
    if (cap != 0 && t.guarantee_bytes_per_second > cap) {
      return invalidArgument(where + ": tenant " + t.name + ": guarantee " +
                             formatRate(t.guarantee_bytes_per_second) + " exceeds link " + t.link +
                             " capacity " + formatRate(cap));
    }
    out.tenants[t.name] = t;
  }
  if (out.tenants.size() > kMaxTenantsPerAgent) {
    return invalidArgument(where + ": " + std::to_string(out.tenants.size()) +
                           " tenants on this node, an agent supports at most " +
                           std::to_string(kMaxTenantsPerAgent));
  }
  for (DesiredDevice& d : out.devices) {
    for (const auto& [name, t] : out.tenants) {
      if (t.link == d.link) d.tenants.push_back(t);
    }
  }
  return out;
}

}  // namespace tq::agent
