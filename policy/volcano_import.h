// `tenantqosctl import volcano`: Volcano Queue objects (YAML, as `kubectl get queues -o yaml`
// prints them or as written by hand) -> a policy skeleton with one tenant per queue; and Volcano
// HyperNode objects in the same input -> its `sharedLinks` (policy/hypernode_import.h: the
// mapping, and what it lists as not mapped).
//
// Per queue: tenant name = the queue's name, volcanoQueues = [the queue's name], weight =
// spec.weight (Volcano's default 1 when absent), guarantee / limit = the annotations
// tenantqos.io/guarantee / tenantqos.io/limit (policy rates, e.g. "40Gbps"). serviceLevel and
// dscp are assigned in queue order from a fixed table (distinct per tenant). Whatever cannot be
// taken from the queues (a missing or bad annotation, the link's capacity when not given) is
// written as the value TODO with a "# TODO: why" comment, and listed in `todos`: such output is
// deliberately not a valid policy until a person fills it in.
// Thread-safety: pure function.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "policy/policy_file.h"

namespace tq::policy {

inline constexpr std::string_view kGuaranteeAnnotation = "tenantqos.io/guarantee";
inline constexpr std::string_view kLimitAnnotation = "tenantqos.io/limit";

struct VolcanoImportOptions {
  std::string link = "fabric";       // the one link every tenant is put on
  std::optional<uint64_t> capacity;  // bytes/s; absent: a TODO
  // HyperNodes: each tier's uplink capacity (bytes/s per direction), and the cluster's Node
  // objects (kubectl get nodes -o yaml) that regex and label members are matched against.
  std::map<int64_t, uint64_t> tier_capacity;
  std::string nodes_yaml;
  std::string nodes_source;
};

struct VolcanoImport {
  std::string yaml;                   // the policy skeleton (empty when `errors` is not)
  std::vector<std::string> todos;     // one line per TODO left in `yaml`
  std::vector<std::string> unmapped;  // HyperNode parts left out, and why
  std::vector<PolicyError> errors;    // the input is not usable (FILE:LINE:COL: FIELD: reason)
};

VolcanoImport importVolcanoQueues(std::string_view text, std::string_view source_name,
                                  const VolcanoImportOptions& options);

}  // namespace tq::policy
