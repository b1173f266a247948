// Per-object difference between two policies, for `tenantqosctl apply` and ApplyPolicy.
//
// Order-insensitive: moving a tenant within the file, or reordering its trafficClasses, is not a
// change. Details read "field: old -> new" with rates shown by formatRate ("limit: 40Gbps ->
// 60Gbps"); an added object gets one detail line summarising its settings.
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "common/policy.h"

namespace tq::policy {

enum class ChangeKind { kAdded, kRemoved, kChanged, kUnchanged };

std::string_view changeKindName(ChangeKind kind);  // "added", "removed", "changed", "unchanged"

struct ObjectChange {
  std::string name;
  ChangeKind kind = ChangeKind::kUnchanged;
  std::vector<std::string> details;
  friend bool operator==(const ObjectChange&, const ObjectChange&) = default;
};

struct PolicyDiff {
  // New objects in the new policy's order, then removed ones in the old policy's order.
  std::vector<ObjectChange> links;
  std::vector<ObjectChange> tenants;
  std::vector<ObjectChange> shared_links;  // the topology's link classes

  // True if any link, tenant or shared link was added, removed or changed.
  bool hasChanges() const;
};

PolicyDiff diffPolicies(const PolicySpec& before, const PolicySpec& after);

// One line for the audit trail: "tenants +a ~b -c; links ~fabric; shared links +leaf-uplink"
// (names cut after a few, with "+N more"), or "no change".
std::string summarizeDiff(const PolicyDiff& diff);

// One line per setting, for an added tenant ("link fabric, guarantee 40Gbps, limit 60Gbps, ...").
std::string describeTenant(const TenantSpec& t);

// A tenant's values on shared links, "[leaf-uplink guarantee 1Gbps weight 2, ...]" (by name).
std::string tenantLinkValuesText(const std::vector<TenantLinkValues>& values);

}  // namespace tq::policy
