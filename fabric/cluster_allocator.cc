#include "fabric/cluster_allocator.h"

#include <algorithm>
#include <tuple>

namespace tq::fabric {
namespace {

using u128 = unsigned __int128;

struct Item {
  uint32_t link;
  uint32_t dir;
  uint32_t tenant;
  uint32_t node;
  uint32_t cls;
  uint32_t order;   // input position: the last report of a key wins
  uint64_t demand;  // clamped to the tenant's limit on the class
};

// One pass over every link: caps[i] and rates[i] for items[i] from demand[i].
class Pass {
 public:
  Pass(const FabricModel& model, const std::vector<Item>& items) : model_(model), items_(items) {}

  void run(const std::vector<uint64_t>& demand, std::vector<uint64_t>* rate,
           std::vector<uint64_t>* cap, std::vector<TenantOnLink>* tenants) {
    rate->assign(items_.size(), 0);
    cap->assign(items_.size(), 0);
    if (tenants) tenants->clear();
    size_t b = 0;
    while (b < items_.size()) {
      size_t e = b;
      while (e < items_.size() && items_[e].link == items_[b].link &&
             items_[e].dir == items_[b].dir) {
        ++e;
      }
      link(b, e, demand, rate, cap, tenants);
      b = e;
    }
  }

 private:
  // Items [b, e) share a link and direction and are sorted by tenant, then node.
  void link(size_t b, size_t e, const std::vector<uint64_t>& demand, std::vector<uint64_t>* rate,
            std::vector<uint64_t>* cap, std::vector<TenantOnLink>* tenants) {
    const SharedLink& l = model_.link(items_[b].link);
    segments_.clear();
    inputs_.clear();
    for (size_t s = b; s < e;) {
      size_t t = s;
      u128 sum = 0;
      while (t < e && items_[t].tenant == items_[s].tenant) sum += demand[t++];
      const LinkShare& share = model_.share(items_[s].tenant, l.cls);
      const uint64_t d = static_cast<uint64_t>(std::min<u128>(sum, share.limit));
      segments_.push_back({s, t, d});
      inputs_.push_back({share.guarantee, share.limit, share.weight, d, true});
      s = t;
    }
    const std::vector<Allocation> out = allocate(l.allocatable, inputs_);
    for (size_t k = 0; k < segments_.size(); ++k) {
      const auto [s, t, d] = segments_[k];
      split(s, t, out[k].rate, inputs_[k], demand, rate, cap);
      if (tenants) {
        tenants->push_back({items_[s].link, static_cast<Direction>(items_[s].dir), items_[s].tenant,
                            d, out[k].rate, static_cast<uint32_t>(t - s)});
      }
    }
  }

  // The tenant's allocation `a` among its nodes [s, t): by demand, then the unused guarantee
  // evenly (cluster_allocator.h).
  void split(size_t s, size_t t, uint64_t a, const TenantInput& in,
             const std::vector<uint64_t>& demand, std::vector<uint64_t>* rate,
             std::vector<uint64_t>* cap) {
    u128 total = 0;
    for (size_t i = s; i < t; ++i) total += demand[i];
    uint64_t given = 0;
    if (total > 0) {
      for (size_t i = s; i < t; ++i) {
        (*rate)[i] = static_cast<uint64_t>(static_cast<u128>(a) * demand[i] / total);
        given += (*rate)[i];
      }
    }
    // Integer-division leftovers: one byte each, in node order, to nodes below their demand.
    for (size_t i = s; i < t && given < a; ++i) {
      if ((*rate)[i] < demand[i]) ++(*rate)[i], ++given;
    }
    const uint64_t guarantee = std::min(in.guarantee, in.limit);
    const uint64_t unused = guarantee > a ? guarantee - a : 0;
    const uint64_t k = t - s;
    for (size_t i = s; i < t; ++i) {
      (*cap)[i] = (*rate)[i] + unused / k + (i - s < unused % k ? 1 : 0);
    }
  }

  struct Segment {
    size_t begin, end;
    uint64_t demand;
  };
  const FabricModel& model_;
  const std::vector<Item>& items_;
  std::vector<Segment> segments_;
  std::vector<TenantInput> inputs_;
};

// For hierarchical passes: per item, the item of the same (node, tenant, direction) on the
// parent class, or SIZE_MAX.
std::vector<size_t> parentItems(const FabricModel& model, const std::vector<Item>& items) {
  std::vector<size_t> by_key(items.size());
  for (size_t i = 0; i < items.size(); ++i) by_key[i] = i;
  auto key = [&](size_t i) {
    return std::tuple(items[i].node, items[i].tenant, items[i].dir, items[i].cls);
  };
  std::sort(by_key.begin(), by_key.end(), [&](size_t a, size_t b) { return key(a) < key(b); });
  std::vector<size_t> parent(items.size(), SIZE_MAX);
  for (size_t b = 0; b < by_key.size();) {
    size_t e = b;
    const Item& first = items[by_key[b]];
    while (e < by_key.size() && items[by_key[e]].node == first.node &&
           items[by_key[e]].tenant == first.tenant && items[by_key[e]].dir == first.dir) {
      ++e;
    }
    for (size_t x = b; x < e; ++x) {
      const uint32_t p = model.parentClass(items[by_key[x]].cls);
      if (p == kNone) continue;
      for (size_t y = b; y < e; ++y) {
        if (items[by_key[y]].cls == p) parent[by_key[x]] = by_key[y];
      }
    }
    b = e;
  }
  return parent;
}

}  // namespace

RoundResult allocateRound(const FabricModel& model, std::span<const DemandReport> reports,
                          const RoundOptions& options) {
  RoundResult result;
  std::vector<Item> items;
  items.reserve(reports.size());
  for (size_t i = 0; i < reports.size(); ++i) {
    const DemandReport& r = reports[i];
    const uint32_t dir = static_cast<uint32_t>(r.direction);
    if (r.node >= model.nodeCount() || r.tenant >= model.tenantCount() ||
        r.cls >= model.classCount() || dir >= kDirections) {
      ++result.rejected;
      continue;
    }
    const uint32_t link = model.linkOf(r.node, r.cls);
    if (link == kNone) {
      ++result.rejected;
      continue;
    }
    const uint64_t limit = model.share(r.tenant, r.cls).limit;
    items.push_back(
        {link, dir, r.tenant, r.node, r.cls, static_cast<uint32_t>(i), std::min(r.demand, limit)});
  }
  auto key = [](const Item& x) { return std::tuple(x.link, x.dir, x.tenant, x.node, x.order); };
  std::sort(items.begin(), items.end(),
            [&](const Item& a, const Item& b) { return key(a) < key(b); });
  // Keep the last report of each key (the highest order sorts last).
  size_t kept = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i + 1 < items.size() && items[i + 1].link == items[i].link &&
        items[i + 1].dir == items[i].dir && items[i + 1].tenant == items[i].tenant &&
        items[i + 1].node == items[i].node) {
      ++result.duplicates;
      continue;
    }
    items[kept++] = items[i];
  }
  items.resize(kept);

  std::vector<uint64_t> demand(items.size()), rate, cap;
  for (size_t i = 0; i < items.size(); ++i) demand[i] = items[i].demand;
  Pass pass(model, items);
  const uint32_t passes = std::max<uint32_t>(options.hierarchy_passes, 1);
  std::vector<size_t> parent;
  if (passes > 1) parent = parentItems(model, items);
  for (uint32_t p = 0; p < passes; ++p) {
    const bool last = p + 1 == passes;
    if (p > 0) {
      // Bound each demand by the caps of the previous pass along the node's path.
      std::vector<uint64_t> bounded(demand.size());
      for (size_t i = 0; i < items.size(); ++i) bounded[i] = items[i].demand;
      for (size_t i = 0; i < items.size(); ++i) {
        const size_t up = parent[i];
        if (up == SIZE_MAX) continue;
        const uint64_t above = std::min(items[up].demand, items[i].demand);
        // Lower link: what crosses only it, plus what the link above lets through.
        bounded[i] = std::min(bounded[i], items[i].demand - above + std::min(above, cap[up]));
        // Upper link: no more than the link below lets through.
        bounded[up] = std::min(bounded[up], cap[i]);
      }
      demand.swap(bounded);
    }
    pass.run(demand, &rate, &cap, last ? &result.tenants : nullptr);
  }

  result.caps.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& x = items[i];
    result.caps.push_back(
        {x.node, x.tenant, x.cls, static_cast<Direction>(x.dir), x.link, rate[i], cap[i]});
  }
  std::sort(result.caps.begin(), result.caps.end(), [](const LinkCap& a, const LinkCap& b) {
    return std::tuple(a.node, a.tenant, a.cls, a.direction) <
           std::tuple(b.node, b.tenant, b.cls, b.direction);
  });
  return result;
}

}  // namespace tq::fabric
