#include "agent/fabric_links.h"

#include <algorithm>
#include <cinttypes>

#include "common/capacity.h"
#include "common/log.h"
#include "common/topology.h"
#include "common/units.h"

namespace tq::agent {

const char* fabricModeName(FabricMode mode) {
  switch (mode) {
    case FabricMode::kNone: return "none";
    case FabricMode::kAllocator: return "allocator";
    case FabricMode::kHeld: return "held";
    case FabricMode::kStatic: return "static";
  }
  return "none";
}

std::vector<std::string> FabricLinks::setPolicy(const PolicySpec& policy, const std::string& node) {
  std::vector<std::string> warnings;
  node_ = node;
  std::vector<NodeLink> links;
  for (const SharedLinkSpec& l : policy.shared_links) {
    const LinkGroupSpec* group = nullptr;
    for (const LinkGroupSpec& g : l.groups) {
      if (std::find(g.nodes.begin(), g.nodes.end(), node) != g.nodes.end()) group = &g;
    }
    if (group == nullptr) continue;
    if (links.size() >= shm::kMaxLinkBuckets) {
      warnings.push_back("node " + node + " is behind more than " +
                         std::to_string(shm::kMaxLinkBuckets) + " shared links; shared link " +
                         l.name + " is not enforced on it (its traffic there is not paced)");
      continue;
    }
    NodeLink n;
    n.index = static_cast<uint32_t>(links.size());
    n.name = l.name;
    n.group = group->name;
    n.rail = l.rail;
    n.group_nodes = static_cast<uint32_t>(std::max<size_t>(1, group->nodes.size()));
    n.allocatable = allocatableCapacity(l, *group);
    for (const TenantSpec& t : policy.tenants) n.guarantees += tenantShareOn(t, l.name).guarantee;
    links.push_back(std::move(n));
  }
  links_ = std::move(links);
  return warnings;
}

Status FabricLinks::onCaps(FabricCapsMessage m, int64_t now_ns) {
  if (m.node != node_) {
    ++refused_;
    return failedPrecondition("fabric caps for node " + m.node + ", not this node " + node_);
  }
  if (m.term < max_term_) {
    ++refused_;
    return failedPrecondition("fabric caps of allocator term " + std::to_string(m.term) +
                              " (from " + m.allocator + "), older than term " +
                              std::to_string(max_term_) + " already seen: not taken");
  }
  max_term_ = m.term;
  if (m.peers) {
    peers_.clear();
    for (const FabricGroupPeers& g : *m.peers) {
      std::vector<std::string>& out = peers_[g.link];
      for (const std::string& a : g.addresses) {
        if (auto c = canonicalAddress(a)) out.push_back(*c);  // anything else: crossing
      }
    }
  }
  cap_index_.clear();
  for (size_t i = 0; i < m.caps.size(); ++i) cap_index_[{m.caps[i].tenant, m.caps[i].link}] = i;
  last_ = std::move(m);
  last_at_ns_ = now_ns;
  return okStatus();
}

void FabricLinks::setConnected(bool connected, int64_t) { connected_ = connected; }

FabricMode FabricLinks::mode(int64_t now_ns) const {
  if (links_.empty()) return FabricMode::kNone;
  if (!last_ || now_ns - last_at_ns_ >= last_->hold_ns) return FabricMode::kStatic;
  return connected_ ? FabricMode::kAllocator : FabricMode::kHeld;
}

const FabricCap* FabricLinks::capOf(const std::string& tenant, const std::string& link) const {
  if (!last_) return nullptr;
  auto it = cap_index_.find({tenant, link});
  return it == cap_index_.end() ? nullptr : &last_->caps[it->second];
}

uint64_t FabricLinks::staticRate(const TenantSpec& tenant, const NodeLink& link) const {
  const LinkShare share = tenantShareOn(tenant, link.name);
  const uint64_t guarantee = std::min(share.guarantee, share.limit);
  uint64_t rate;
  if (const FabricCap* c = capOf(tenant.name, link.name)) {
    const uint64_t spare =
        link.allocatable > link.guarantees ? link.allocatable - link.guarantees : 0;
    rate = guarantee / std::max<uint32_t>(1, c->tenant_nodes) +
           spare / std::max<uint32_t>(1, c->link_pairs);
  } else {
    rate = guarantee / std::max<uint32_t>(1, link.group_nodes);
  }
  return std::clamp<uint64_t>(std::min(rate, share.limit), kMinLinkRate,
                              std::max(share.limit, kMinLinkRate));
}

uint64_t FabricLinks::rate(const TenantSpec& tenant, const NodeLink& link, shm::Direction dir,
                           int64_t now_ns) const {
  if (mode(now_ns) == FabricMode::kStatic) return staticRate(tenant, link);
  const FabricCap* c = capOf(tenant.name, link.name);
  // A tenant the last round did not cover (its processes attached since): the static split
  // until the next round covers it.
  if (c == nullptr) return staticRate(tenant, link);
  const uint64_t limit = tenantShareOn(tenant, link.name).limit;
  const uint64_t cap = dir == shm::kTx ? c->tx : c->rx;
  return std::clamp<uint64_t>(std::min(cap, limit), kMinLinkRate, std::max(limit, kMinLinkRate));
}

FabricPeerMap FabricLinks::peerMap() const {
  FabricPeerMap map;
  for (const NodeLink& l : links_) {
    FabricLinkPeers p;
    p.index = l.index;
    p.name = l.name;
    p.group = l.group;
    p.rail = l.rail;
    auto it = peers_.find(l.name);
    if (it != peers_.end()) p.peers.insert(it->second.begin(), it->second.end());
    map.links.push_back(std::move(p));
  }
  return map;
}

FabricStatus FabricLinks::status(int64_t now_ns) const {
  FabricStatus s;
  s.mode = mode(now_ns);
  s.connected = connected_;
  if (last_) {
    s.term = last_->term;
    s.round = last_->round;
    s.allocator = last_->allocator;
    s.last_caps_age_ns = now_ns - last_at_ns_;
  }
  s.static_since_ns = s.mode == FabricMode::kStatic ? static_since_ns_ : 0;
  s.caps_refused = refused_;
  s.links = links_;
  return s;
}

void FabricLinks::logTransitions(int64_t now_ns) {
  const FabricMode m = mode(now_ns);
  if (m == logged_mode_) return;
  switch (m) {
    case FabricMode::kNone:
      TQ_LOG(kInfo, "fabric: node %s is behind no shared link of the policy", node_.c_str());
      break;
    case FabricMode::kAllocator:
      TQ_LOG(kInfo,
             "fabric: enforcing the cluster allocator's caps on %zu shared link(s) (term %" PRIu64
             ", %s)",
             links_.size(), max_term_, last_ ? last_->allocator.c_str() : "");
      break;
    case FabricMode::kHeld:
      TQ_LOG(kWarn, "fabric: lost the cluster allocator; holding its last caps for up to %lld ms",
             static_cast<long long>(last_ ? last_->hold_ns / 1'000'000 : 0));
      break;
    case FabricMode::kStatic:
      TQ_LOG(kWarn,
             "fabric: no caps from the cluster allocator within the hold time; static split "
             "on %zu shared link(s): each tenant's guarantee there over its nodes, plus the "
             "spare over the (tenant, node) pairs of the last round",
             links_.size());
      static_since_ns_ = now_ns;
      max_term_ = 0;  // nothing of the old term is enforced any more
      break;
  }
  logged_mode_ = m;
}

}  // namespace tq::agent
