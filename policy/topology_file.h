// The topology part of the policy file: `sharedLinks` (classes of links between switches, each
// link shared by a group of nodes) and the tenants' own values on them (`tenants[].sharedLinks`).
// YAML in, validation, canonical YAML and JSON out; policy_file.cc calls these for its sections.
//
// Rules (docs/policy.md, "Shared links", is the user-facing reference):
//   - sharedLinks: DNS-1123 name, unique among shared links and not a links[] name; capacity
//     (per direction, of each group's link) > 0 when given, 0 <= headroom < 100, rail 0..255;
//     at least one group;
//   - groups: DNS-1123 name unique within the shared link; capacity > 0 when given; a group
//     without its own capacity takes the shared link's, and one with neither is an error; at
//     least one node; node names are Kubernetes names (DNS-1123 subdomains); a node is in at
//     most one group of a shared link (listed once);
//   - tenants[].sharedLinks: `link` names a shared link, once per tenant; guarantee, limit and
//     weight are optional (absent: the tenant's own, common/topology.h); limit > 0 and not above
//     the largest group capacity of the link; guarantee <= limit; weight 1..10000;
//   - admission per shared link: the sum over ALL tenants of their guarantee on it must fit the
//     allocatable capacity (common/capacity.h) of its smallest group, because any tenant may be
//     placed behind any group (placement is not in the policy);
//   - bounds: kMaxSharedLinks, kMaxLinkGroups per shared link, kMaxGroupNodes per group,
//     kMaxTopologyNodes node entries in all.
// Internal to tq_policy_file (yaml_doc.h's nodes through yaml_reader.h). Thread-safety: pure.
#pragma once

#include <string>
#include <vector>

#include "common/policy.h"
#include "policy/yaml_reader.h"

namespace tq::policy {

inline constexpr size_t kMaxSharedLinks = 64;
inline constexpr size_t kMaxLinkGroups = 16384;      // per shared link
inline constexpr size_t kMaxGroupNodes = 16384;      // per group
inline constexpr size_t kMaxTopologyNodes = 131072;  // node entries over all shared links

// `sharedLinks` at the top level (`e` is its entry) into `out`.
void readSharedLinks(yaml::FieldReader& reader, const yaml::FieldReader::Entry& e,
                     std::vector<SharedLinkSpec>* out);

// `tenants[j].sharedLinks` (`path` is "tenants[j].sharedLinks") into `out`.
void readTenantLinkValues(yaml::FieldReader& reader, const yaml::FieldReader::Entry& e,
                          const std::string& path, std::vector<TenantLinkValues>* out);

// The rules above; fields in index.invalid failed to parse and are skipped.
void validateTopology(const PolicySpec& policy, const yaml::FieldIndex& index,
                      yaml::ErrorList& errors);

// Canonical YAML: the top-level `sharedLinks:` block ("" when there are none), and a tenant's
// `sharedLinks:` lines (indented for a tenant item; "" when it has none).
std::string sharedLinksYaml(const PolicySpec& policy);
std::string tenantLinkValuesYaml(const TenantSpec& tenant);

// JSON members for `tenantqosctl get -o json`: `"sharedLinks": [...]` (no trailing comma).
std::string sharedLinksJson(const std::vector<SharedLinkSpec>& links);
std::string tenantLinkValuesJson(const std::vector<TenantLinkValues>& values);

}  // namespace tq::policy
