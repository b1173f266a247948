// `tenantqosctl import volcano`, the topology half: Volcano HyperNode objects (network-topology-
// aware scheduling's tiers of switches, topology.volcano.sh/v1alpha1) -> the policy's
// `sharedLinks` (docs/policy.md, "Shared links").
//
// Mapping: each tier T becomes one shared link class "tier-T"; each HyperNode of the tier one
// group (the nodes behind that switch's uplink), named after it. Members:
//   - type Node: exactMatch.name; regexMatch.pattern and labelMatch (matchLabels,
//     matchExpressions In/NotIn/Exists/DoesNotExist) against the cluster's nodes, which only
//     `nodes` (kubectl get nodes -o yaml) can say;
//   - type HyperNode: the member HyperNodes' nodes, recursively (exactMatch, regexMatch on
//     HyperNode names).
// Volcano's patterns are Go RE2; they are matched as POSIX extended regular expressions
// (\d, \w, \s translated), unanchored like Go's MatchString. A pattern with backreferences or
// RE2-only syntax is not mapped (POSIX matching without backreferences stays polynomial).
// Capacity: the HyperNode's annotation tenantqos.io/uplink-capacity (the group's own), else
// the tier's (options.tier_capacity), else a TODO.
//
// What cannot be mapped is listed, one line each, and left out: a member it cannot resolve (a
// regex or label selector without `nodes`, an unknown HyperNode, a cycle), a node already in
// another HyperNode of the tier (kept in the first, by name), a HyperNode that holds every node
// (no link leaves it: the top of the tree), a name that is not a DNS-1123 label (dots become
// dashes), a tier left with no group.
// Internal to tq_policy_file (yaml-cpp types). Thread-safety: pure functions.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "policy/policy_file.h"

namespace tq::policy {

inline constexpr std::string_view kUplinkCapacityAnnotation = "tenantqos.io/uplink-capacity";
inline constexpr size_t kMaxRegexPattern = 1024;  // bytes

struct HyperNodeImportOptions {
  std::map<int64_t, uint64_t> tier_capacity;  // tier -> bytes/s per direction
  std::string nodes_yaml;    // Node objects (empty: regex and label members unresolved)
  std::string nodes_source;  // its file name, for errors
};

struct HyperNodeImport {
  std::string yaml;                   // the `sharedLinks:` block ("" when nothing mapped)
  std::vector<std::string> todos;     // one per TODO left in `yaml`
  std::vector<std::string> unmapped;  // what was left out, and why
  std::vector<PolicyError> errors;    // unusable input (FILE:LINE:COL: FIELD: reason)
  size_t shared_links = 0;            // classes written
};

// A HyperNode object of the input file, with its field path there ("items[3]"; "" for a whole
// document) for errors.
struct HyperNodeObject {
  YAML::Node node;
  std::string path;
};

// `source` is the input file's name (errors and comments).
HyperNodeImport importHyperNodes(const std::vector<HyperNodeObject>& objects,
                                 std::string_view source, const HyperNodeImportOptions& options);

}  // namespace tq::policy
