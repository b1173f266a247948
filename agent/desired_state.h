// Desired state of one node = the policy ∩ this node. Pure: no kernel, no files.
//
// A node carries the links named by its --device DEV=LINK flags. Its tenants are the policy's
// tenants whose link is one of those. Every device whose link the policy defines is "managed"
// (htb mode gives it an HTB tree with one class per tenant of that link); a device whose link
// the policy does not define is "unmanaged" for this version (a warning, not an error: a policy
// may drop a link; the agent then removes its tree from that device).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "agent/config.h"
#include "common/policy.h"
#include "common/status.h"

namespace tq::agent {

struct DesiredDevice {
  std::string device;
  std::string link;
  uint64_t capacity_bytes_per_second = 0;
  std::vector<TenantSpec> tenants;  // sorted by name
  // false in --tc-mode none: the agent programs no tc on the device (removes its own tree).
  bool tenant_classes = true;
  friend bool operator==(const DesiredDevice&, const DesiredDevice&) = default;
};

struct DesiredNode {
  uint64_t version = 0;
  std::vector<DesiredDevice> devices;          // managed, in --device order
  std::vector<std::string> unmanaged_devices;  // link not in this policy version
  std::map<std::string, TenantSpec> tenants;   // this node's tenants by name
  std::map<std::string, LinkSpec> links;       // this node's links (defined by the policy)
  std::vector<std::string> warnings;           // logged once per version, not errors
  friend bool operator==(const DesiredNode&, const DesiredNode&) = default;
};

// Says whether a kernel device exists (the default asks if_nametoindex). Injected for tests.
using DeviceExistsFn = std::function<bool(const std::string& device)>;
bool kernelDeviceExists(const std::string& device);

// Errors (the node cannot apply this policy; nothing of it may be applied):
//  * a managed device does not exist (kNotFound),
//  * a tenant of this node: bad name (not a DNS-1123 label, so no shm file), duplicate name,
//    guarantee above limit, more traffic classes than the shm layout holds,
//  * a tenant whose link the policy does not define (an inconsistent policy).
Result<DesiredNode> computeDesired(const VersionedPolicy& policy,
                                   const std::vector<DeviceMapping>& devices,
                                   const DeviceExistsFn& device_exists = kernelDeviceExists);

}  // namespace tq::agent
