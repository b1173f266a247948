// A tenant's guarantee, limit and weight on a shared link class (common/policy.h: the topology):
// the one rule that policy admission (policy/topology_file.cc) and the cluster allocator
// (fabric/) share. A value the tenant does not set for the class is its own (the per-node
// value): "the same guarantee, limit and weight on every link a tenant crosses", for the
// tenant's traffic summed over its nodes.
// Units: bytes per second. Pure; thread-safe.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/policy.h"

namespace tq {

struct LinkShare {
  uint64_t guarantee = 0;  // bytes/s
  uint64_t limit = 0;      // bytes/s
  uint32_t weight = 1;
  friend bool operator==(const LinkShare&, const LinkShare&) = default;
};

// The tenant's entry for `link` (a SharedLinkSpec.name), or nullptr.
const TenantLinkValues* findTenantLinkValues(const TenantSpec& tenant, std::string_view link);

LinkShare tenantShareOn(const TenantSpec& tenant, std::string_view link);

}  // namespace tq
