// The cluster allocator's view of a policy: its topology (shared link classes, their groups and
// member nodes) and every tenant's values on every class, compiled once per policy version into
// dense indexes so that an allocation round (fabric/cluster_allocator.h) does no lookups by name.
//
// Indexes: nodes in name order (every node that is behind at least one shared link), tenants
// and classes in policy order, shared links (one per group of a class) class by class in group
// order. A policyd that streams caps, an agent that reports demand and the bench all resolve
// names through the same model, so an index means the same thing on both ends of a round.
//
// Hierarchy: class P is the parent of class C when every group of C lies inside one group of P
// (and P has fewer groups, carries the same rail or all rails): a leaf's uplink below its pod's.
// Traffic that crosses P's link of a node also crosses C's, which is what the allocator's
// hierarchical passes use (cluster_allocator.h). Found from the groups, not declared.
//
// Pure; immutable after build(); thread-safe to share.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/policy.h"
#include "common/status.h"
#include "common/topology.h"

namespace tq::fabric {

inline constexpr uint32_t kNone = UINT32_MAX;

// tx: out of the group through its shared link (up); rx: into the group (down).
enum class Direction : uint8_t { kTx = 0, kRx = 1 };
inline constexpr uint32_t kDirections = 2;
std::string_view directionName(Direction d);  // "tx", "rx"

struct SharedLink {
  uint32_t cls = 0;          // class index
  uint32_t group = 0;        // group index within the class
  uint64_t allocatable = 0;  // bytes/s per direction (common/capacity.h)
};

class FabricModel {
 public:
  // From a policy that passed validation. Rechecks what the model depends on (a node in two
  // groups of one class, a group without capacity, an unknown class in a tenant's values) and
  // fails with kInvalidArgument naming the object, so a model is never built from a policy that
  // breaks its invariants.
  static Result<FabricModel> build(const PolicySpec& policy);

  size_t nodeCount() const { return node_names_.size(); }
  size_t tenantCount() const { return tenant_names_.size(); }
  size_t classCount() const { return class_names_.size(); }
  size_t linkCount() const { return links_.size(); }

  std::optional<uint32_t> nodeIndex(std::string_view name) const;
  std::optional<uint32_t> tenantIndex(std::string_view name) const;
  std::optional<uint32_t> classIndex(std::string_view name) const;
  const std::string& nodeName(uint32_t node) const { return node_names_[node]; }
  const std::string& tenantName(uint32_t tenant) const { return tenant_names_[tenant]; }
  const std::string& className(uint32_t cls) const { return class_names_[cls]; }
  const std::string& groupName(uint32_t link) const { return group_names_[link]; }

  // The shared link of class `cls` that `node` is behind, or kNone (the node is in no group of
  // the class: its traffic never crosses one of the class's links).
  uint32_t linkOf(uint32_t node, uint32_t cls) const {
    return node_links_[static_cast<size_t>(node) * classCount() + cls];
  }
  const SharedLink& link(uint32_t link) const { return links_[link]; }
  // The tenant's guarantee, limit and weight on every link of the class (common/topology.h).
  const LinkShare& share(uint32_t tenant, uint32_t cls) const {
    return shares_[static_cast<size_t>(tenant) * classCount() + cls];
  }
  uint32_t parentClass(uint32_t cls) const { return parents_[cls]; }  // or kNone
  // The first link index of class `cls` (its links are consecutive, in group order).
  uint32_t firstLink(uint32_t cls) const { return first_link_[cls]; }

 private:
  std::vector<std::string> node_names_, tenant_names_, class_names_, group_names_;
  std::unordered_map<std::string, uint32_t> node_index_, tenant_index_, class_index_;
  std::vector<uint32_t> node_links_;  // [node * classes + cls] -> link or kNone
  std::vector<SharedLink> links_;
  std::vector<LinkShare> shares_;  // [tenant * classes + cls]
  std::vector<uint32_t> parents_;
  std::vector<uint32_t> first_link_;
};

}  // namespace tq::fabric
