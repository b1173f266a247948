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
  uint64_t limit;   // the tenant's limit on the class
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
    if (t - s == 1) {
      (*rate)[s] = a;  // one node (the common case): all of it (a <= its demand)
      given = a;
    } else if (total > 0) {
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

// Tenants held back somewhere (a key at the tenant's limit: its agent saw its bucket hold it
// back) whose traffic runs at one rate on every link it crosses (cluster_allocator.h, "Coupled
// tenants"). A progressive fill over `passes` passes: each such tenant asks for its limit on the
// keys where it got the least (its bottleneck) and for that least on its other keys, so that
// what its other links would give it beyond its bottleneck goes to other tenants, and a
// bottleneck that frees up lets it rise on the next pass. At the end every key of the tenant
// asks for the least it got.
void coupleTenants(const FabricModel& model, const std::vector<Item>& items, Pass& pass,
                   uint32_t passes, std::vector<uint64_t>* demand) {
  std::vector<char> held(model.tenantCount(), 0);
  bool any = false;
  for (const Item& x : items) {
    if (x.demand > 0 && x.demand >= x.limit) held[x.tenant] = any = 1;
  }
  if (!any) return;
  auto coupled = [&](size_t i) { return held[items[i].tenant] && items[i].demand > 0; };
  std::vector<uint64_t> want(*demand), rate, cap;
  for (size_t i = 0; i < items.size(); ++i) {
    if (coupled(i)) want[i] = items[i].limit;
  }
  // Per pass: a tenant's rate is the least it got where it is held (asking its limit, or given
  // less than it asked); keys served in full do not bound it. The held keys that got that least
  // ask for the limit again, the others for that rate (which may be more than last pass: the
  // tenant rises as its bottleneck frees up).
  std::vector<uint64_t> least(model.tenantCount());
  for (uint32_t p = 0; p < passes; ++p) {
    pass.run(want, &rate, &cap, nullptr);
    std::fill(least.begin(), least.end(), UINT64_MAX);
    for (size_t i = 0; i < items.size(); ++i) {
      if (!coupled(i)) continue;
      const uint64_t limit = items[i].limit;
      if (want[i] >= limit || rate[i] < want[i]) {
        least[items[i].tenant] = std::min(least[items[i].tenant], rate[i]);
      }
    }
    const bool last = p + 1 == passes;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!coupled(i)) continue;
      const uint64_t limit = items[i].limit;
      const uint64_t rho = std::min(least[items[i].tenant], limit);
      const bool held_here = want[i] >= limit || rate[i] < want[i];
      want[i] = !last && held_here && rate[i] <= rho ? limit : rho;
    }
  }
  demand->swap(want);
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
    items.push_back({link, dir, r.tenant, r.node, r.cls, static_cast<uint32_t>(i),
                     std::min(r.demand, limit), limit});
  }
  // By (link, direction): a counting sort (linear); then each bucket, small, by (tenant, node,
  // input order).
  {
    std::vector<uint32_t> start(model.linkCount() * kDirections + 1, 0);
    for (const Item& x : items) ++start[x.link * kDirections + x.dir + 1];
    for (size_t b = 1; b < start.size(); ++b) start[b] += start[b - 1];
    std::vector<Item> sorted(items.size());
    std::vector<uint32_t> next(start.begin(), start.end() - 1);
    for (const Item& x : items) sorted[next[x.link * kDirections + x.dir]++] = x;
    items.swap(sorted);
    for (size_t b = 0; b + 1 < start.size(); ++b) {
      std::sort(items.begin() + start[b], items.begin() + start[b + 1],
                [](const Item& a, const Item& b) {
                  return std::tie(a.tenant, a.node, a.order) < std::tie(b.tenant, b.node, b.order);
                });
    }
  }
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
  if (options.coupling_passes > 0) {
    coupleTenants(model, items, pass, options.coupling_passes, &demand);
  }
  const std::vector<uint64_t> base = demand;  // what the hierarchical passes bound
  const uint32_t passes = std::max<uint32_t>(options.hierarchy_passes, 1);
  std::vector<size_t> parent;
  if (passes > 1) parent = parentItems(model, items);
  for (uint32_t p = 0; p < passes; ++p) {
    const bool last = p + 1 == passes;
    if (p > 0) {
      // Bound each demand by the caps of the previous pass along the node's path.
      std::vector<uint64_t> bounded = base;
      for (size_t i = 0; i < items.size(); ++i) {
        const size_t up = parent[i];
        if (up == SIZE_MAX) continue;
        const uint64_t above = std::min(base[up], base[i]);
        // Lower link: what crosses only it, plus what the link above lets through.
        bounded[i] = std::min(bounded[i], base[i] - above + std::min(above, cap[up]));
        // Upper link: no more than the link below lets through.
        bounded[up] = std::min(bounded[up], cap[i]);
      }
      demand.swap(bounded);
    }
    pass.run(demand, &rate, &cap, last ? &result.tenants : nullptr);
  }

  // By node (a counting sort), then within a node by (tenant, class, direction).
  std::vector<uint32_t> start(model.nodeCount() + 1, 0);
  for (const Item& x : items) ++start[x.node + 1];
  for (size_t n = 1; n < start.size(); ++n) start[n] += start[n - 1];
  result.caps.resize(items.size());
  std::vector<uint32_t> next(start.begin(), start.end() - 1);
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& x = items[i];
    result.caps[next[x.node]++] = {x.node, x.tenant, x.cls, static_cast<Direction>(x.dir),
                                   x.link, rate[i],  cap[i]};
  }
  for (size_t n = 0; n + 1 < start.size(); ++n) {
    std::sort(result.caps.begin() + start[n], result.caps.begin() + start[n + 1],
              [](const LinkCap& a, const LinkCap& b) {
                return std::tie(a.tenant, a.cls, a.direction) <
                       std::tie(b.tenant, b.cls, b.direction);
              });
  }
  return result;
}

}  // namespace tq::fabric
