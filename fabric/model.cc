#include "fabric/model.h"

#include <algorithm>
#include <map>

#include "common/capacity.h"

namespace tq::fabric {

std::string_view directionName(Direction d) { return d == Direction::kTx ? "tx" : "rx"; }

namespace {

template <typename Map>
std::optional<uint32_t> lookup(const Map& m, std::string_view name) {
  auto it = m.find(std::string(name));
  if (it == m.end()) return std::nullopt;
  return it->second;
}

}  // namespace

std::optional<uint32_t> FabricModel::nodeIndex(std::string_view name) const {
  return lookup(node_index_, name);
}
std::optional<uint32_t> FabricModel::tenantIndex(std::string_view name) const {
  return lookup(tenant_index_, name);
}
std::optional<uint32_t> FabricModel::classIndex(std::string_view name) const {
  return lookup(class_index_, name);
}

Result<FabricModel> FabricModel::build(const PolicySpec& policy) {
  FabricModel m;
  const size_t classes = policy.shared_links.size();
  // Nodes in name order, so that indexes do not depend on the order of groups in the file.
  std::map<std::string, uint32_t> nodes;
  for (const SharedLinkSpec& l : policy.shared_links)
    for (const LinkGroupSpec& g : l.groups)
      for (const std::string& n : g.nodes) nodes.emplace(n, 0);
  for (auto& [name, index] : nodes) {
    index = static_cast<uint32_t>(m.node_names_.size());
    m.node_names_.push_back(name);
    m.node_index_.emplace(name, index);
  }
  m.node_links_.assign(nodes.size() * classes, kNone);
  for (uint32_t c = 0; c < classes; ++c) {
    const SharedLinkSpec& l = policy.shared_links[c];
    if (!m.class_index_.emplace(l.name, c).second) {
      return invalidArgument("shared link \"" + l.name + "\" is defined twice");
    }
    m.class_names_.push_back(l.name);
    m.first_link_.push_back(static_cast<uint32_t>(m.links_.size()));
    for (uint32_t g = 0; g < l.groups.size(); ++g) {
      const LinkGroupSpec& group = l.groups[g];
      const uint32_t link = static_cast<uint32_t>(m.links_.size());
      if (groupCapacity(l, group) == 0) {
        return invalidArgument("shared link \"" + l.name + "\", group \"" + group.name +
                               "\": no capacity");
      }
      m.links_.push_back({c, g, allocatableCapacity(l, group)});
      m.group_names_.push_back(group.name);
      for (const std::string& n : group.nodes) {
        uint32_t& slot = m.node_links_[static_cast<size_t>(nodes.at(n)) * classes + c];
        if (slot != kNone) {
          return invalidArgument("shared link \"" + l.name + "\": node \"" + n +
                                 "\" is in groups \"" + m.group_names_[slot] + "\" and \"" +
                                 group.name + "\"");
        }
        slot = link;
      }
    }
  }
  for (uint32_t t = 0; t < policy.tenants.size(); ++t) {
    const TenantSpec& spec = policy.tenants[t];
    if (!m.tenant_index_.emplace(spec.name, t).second) {
      return invalidArgument("tenant \"" + spec.name + "\" is defined twice");
    }
    m.tenant_names_.push_back(spec.name);
    for (const TenantLinkValues& v : spec.shared_links) {
      if (!m.class_index_.count(v.link)) {
        return invalidArgument("tenant \"" + spec.name + "\": unknown shared link \"" + v.link +
                               "\"");
      }
    }
    for (uint32_t c = 0; c < classes; ++c) {
      m.shares_.push_back(tenantShareOn(spec, policy.shared_links[c].name));
    }
  }
  // Parents: the class with the most groups among those whose every group contains whole groups
  // of this class and whose traffic is part of this class's (same rail, or this class carries
  // every rail).
  m.parents_.assign(classes, kNone);
  for (uint32_t c = 0; c < classes; ++c) {
    const SharedLinkSpec& lc = policy.shared_links[c];
    for (uint32_t p = 0; p < classes; ++p) {
      const SharedLinkSpec& lp = policy.shared_links[p];
      if (p == c || lp.groups.size() >= lc.groups.size()) continue;
      if (lc.rail && lp.rail != lc.rail) continue;
      bool nested = true;
      for (uint32_t g = 0; g < lc.groups.size() && nested; ++g) {
        uint32_t outer = kNone;
        for (const std::string& n : lc.groups[g].nodes) {
          const uint32_t link = m.linkOf(m.node_index_.at(n), p);
          if (link == kNone || (outer != kNone && link != outer)) {
            nested = false;
            break;
          }
          outer = link;
        }
      }
      if (!nested) continue;
      const uint32_t best = m.parents_[c];
      if (best == kNone || lp.groups.size() > policy.shared_links[best].groups.size()) {
        m.parents_[c] = p;
      }
    }
  }
  return m;
}

}  // namespace tq::fabric
