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

// A tenant's items on one link and direction: [begin, end), with its values on the class.
struct Segment {
  uint32_t begin, end;
  uint64_t guarantee, limit;
  uint32_t weight;
};
// A link and direction: its segments [first, last), in tenant order.
struct LinkRange {
  uint32_t first, last;
  uint64_t allocatable;
};

}  // namespace

struct RoundWorkspace::Buffers {
  std::vector<Item> items, sorted;
  std::vector<uint32_t> start, next;
  std::vector<uint64_t> demand, rate, cap, base, bounded, want, least;
  std::vector<char> held;
  std::vector<size_t> parent, by_key;
  // Pass's: the segments and links of this round's items, and allocate()'s memory.
  std::vector<Segment> segments;
  std::vector<LinkRange> links;
  std::vector<TenantInput> inputs;
  std::vector<Allocation> outs;
  AllocationScratch scratch;
};

RoundWorkspace::RoundWorkspace() : buffers_(std::make_unique<Buffers>()) {}
RoundWorkspace::~RoundWorkspace() = default;

namespace {

using Buffers = RoundWorkspace::Buffers;

// One pass over every link: cap[i] and rate[i] for items[i] from demand[i]. The items' links
// and tenants are the same in every pass of a round, so they are grouped once, here.
class Pass {
 public:
  Pass(const FabricModel& model, const std::vector<Item>& items, Buffers& b)
      : items_(items), b_(b) {
    b_.segments.clear();
    b_.links.clear();
    const uint32_t n = static_cast<uint32_t>(items.size());
    for (uint32_t s = 0; s < n;) {
      const Item& first = items[s];
      LinkRange range{static_cast<uint32_t>(b_.segments.size()), 0,
                      model.link(first.link).allocatable};
      while (s < n && items[s].link == first.link && items[s].dir == first.dir) {
        uint32_t t = s;
        while (t < n && items[t].link == first.link && items[t].dir == first.dir &&
               items[t].tenant == items[s].tenant) {
          ++t;
        }
        const LinkShare& share = model.share(items[s].tenant, items[s].cls);
        b_.segments.push_back({s, t, share.guarantee, share.limit, share.weight});
        s = t;
      }
      range.last = static_cast<uint32_t>(b_.segments.size());
      b_.links.push_back(range);
    }
  }

  void run(const std::vector<uint64_t>& demand, std::vector<uint64_t>* rate,
           std::vector<uint64_t>* cap, std::vector<TenantOnLink>* tenants) {
    rate->assign(items_.size(), 0);
    cap->resize(items_.size());
    if (tenants) tenants->clear();
    for (const LinkRange& l : b_.links) link(l, demand, *rate, *cap, tenants);
  }

 private:
  // The segments of one link and direction.
  void link(const LinkRange& l, const std::vector<uint64_t>& demand, std::vector<uint64_t>& rate,
            std::vector<uint64_t>& cap, std::vector<TenantOnLink>* tenants) {
    const size_t count = l.last - l.first;
    b_.inputs.resize(count);
    b_.outs.resize(count);
    for (size_t k = 0; k < count; ++k) {
      const Segment& g = b_.segments[l.first + k];
      u128 sum = 0;
      for (uint32_t i = g.begin; i < g.end; ++i) sum += demand[i];
      const uint64_t d = static_cast<uint64_t>(std::min<u128>(sum, g.limit));
      b_.inputs[k] = {g.guarantee, g.limit, g.weight, d, true};
    }
    allocateInto(l.allocatable, std::span<const TenantInput>(b_.inputs.data(), count),
                 std::span<Allocation>(b_.outs.data(), count), b_.scratch);
    for (size_t k = 0; k < count; ++k) {
      const Segment& g = b_.segments[l.first + k];
      split(g, b_.outs[k].rate, demand, rate, cap);
      if (tenants) {
        const Item& x = items_[g.begin];
        tenants->push_back({x.link, static_cast<Direction>(x.dir), x.tenant, b_.inputs[k].demand,
                            b_.outs[k].rate, g.end - g.begin});
      }
    }
  }

  // The tenant's allocation `a` among its nodes [g.begin, g.end): by demand, then the unused
  // guarantee evenly (cluster_allocator.h).
  static void split(const Segment& g, uint64_t a, const std::vector<uint64_t>& demand,
                    std::vector<uint64_t>& rate, std::vector<uint64_t>& cap) {
    const uint32_t s = g.begin, t = g.end;
    uint64_t given = 0;
    if (t - s == 1) {
      rate[s] = a;  // one node (the common case): all of it (a <= its demand)
      given = a;
    } else {
      u128 total = 0;
      for (uint32_t i = s; i < t; ++i) total += demand[i];
      if (total > 0) {
        for (uint32_t i = s; i < t; ++i) {
          rate[i] = mulDivFloor(a, demand[i], total);
          given += rate[i];
        }
      }
    }
    // Integer-division leftovers: one byte each, in node order, to nodes below their demand.
    for (uint32_t i = s; i < t && given < a; ++i) {
      if (rate[i] < demand[i]) ++rate[i], ++given;
    }
    const uint64_t guarantee = std::min(g.guarantee, g.limit);
    const uint64_t unused = guarantee > a ? guarantee - a : 0;
    const uint64_t k = t - s;
    const uint64_t each = unused / k, extra = unused % k;
    for (uint32_t i = s; i < t; ++i) cap[i] = rate[i] + each + (i - s < extra ? 1 : 0);
  }

  const std::vector<Item>& items_;
  Buffers& b_;
};

// For hierarchical passes: per item, the item of the same (node, tenant, direction) on the
// parent class, or SIZE_MAX.
void parentItems(const FabricModel& model, const std::vector<Item>& items, Buffers& buf) {
  std::vector<size_t>& by_key = buf.by_key;
  by_key.resize(items.size());
  for (size_t i = 0; i < items.size(); ++i) by_key[i] = i;
  auto key = [&](size_t i) {
    return std::tuple(items[i].node, items[i].tenant, items[i].dir, items[i].cls);
  };
  std::sort(by_key.begin(), by_key.end(), [&](size_t a, size_t b) { return key(a) < key(b); });
  std::vector<size_t>& parent = buf.parent;
  parent.assign(items.size(), SIZE_MAX);
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
}

// Tenants held back somewhere (a key at the tenant's limit: its agent saw its bucket hold it
// back) whose traffic runs at one rate on every link it crosses (cluster_allocator.h, "Coupled
// tenants"). A progressive fill over `passes` passes: each such tenant asks for its limit on the
// keys where it got the least (its bottleneck) and for that least on its other keys, so that
// what its other links would give it beyond its bottleneck goes to other tenants, and a
// bottleneck that frees up lets it rise on the next pass. At the end every key of the tenant
// asks for the least it got.
void coupleTenants(const FabricModel& model, const std::vector<Item>& items, Pass& pass,
                   uint32_t passes, Buffers& buf) {
  std::vector<char>& held = buf.held;
  held.assign(model.tenantCount(), 0);
  bool any = false;
  for (const Item& x : items) {
    if (x.demand > 0 && x.demand >= x.limit) held[x.tenant] = any = 1;
  }
  if (!any) return;
  auto coupled = [&](size_t i) { return held[items[i].tenant] && items[i].demand > 0; };
  std::vector<uint64_t>& want = buf.want;
  std::vector<uint64_t>& rate = buf.rate;
  std::vector<uint64_t>& cap = buf.cap;
  want = buf.demand;
  for (size_t i = 0; i < items.size(); ++i) {
    if (coupled(i)) want[i] = items[i].limit;
  }
  // Per pass: a tenant's rate is the least it got where it is held (asking its limit, or given
  // less than it asked); keys served in full do not bound it. The held keys that got that least
  // ask for the limit again, the others for that rate (which may be more than last pass: the
  // tenant rises as its bottleneck frees up).
  std::vector<uint64_t>& least = buf.least;
  least.resize(model.tenantCount());
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
  buf.demand.swap(want);
}

}  // namespace

RoundResult allocateRound(const FabricModel& model, std::span<const DemandReport> reports,
                          const RoundOptions& options) {
  RoundWorkspace workspace;
  return allocateRound(model, reports, options, workspace);
}

RoundResult allocateRound(const FabricModel& model, std::span<const DemandReport> reports,
                          const RoundOptions& options, RoundWorkspace& workspace) {
  Buffers& buf = workspace.buffers();
  RoundResult result;
  std::vector<Item>& items = buf.items;
  items.clear();
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
    std::vector<uint32_t>& start = buf.start;
    start.assign(model.linkCount() * kDirections + 1, 0);
    for (const Item& x : items) ++start[x.link * kDirections + x.dir + 1];
    for (size_t k = 1; k < start.size(); ++k) start[k] += start[k - 1];
    std::vector<Item>& sorted = buf.sorted;
    sorted.resize(items.size());
    std::vector<uint32_t>& next = buf.next;
    next.assign(start.begin(), start.end() - 1);
    for (const Item& x : items) sorted[next[x.link * kDirections + x.dir]++] = x;
    items.swap(sorted);
    for (size_t k = 0; k + 1 < start.size(); ++k) {
      std::sort(items.begin() + start[k], items.begin() + start[k + 1],
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

  std::vector<uint64_t>& demand = buf.demand;
  std::vector<uint64_t>& rate = buf.rate;
  std::vector<uint64_t>& cap = buf.cap;
  demand.resize(items.size());
  for (size_t i = 0; i < items.size(); ++i) demand[i] = items[i].demand;
  Pass pass(model, items, buf);
  if (options.coupling_passes > 0) {
    coupleTenants(model, items, pass, options.coupling_passes, buf);
  }
  const uint32_t passes = std::max<uint32_t>(options.hierarchy_passes, 1);
  if (passes > 1) {
    buf.base = demand;  // what the hierarchical passes bound
    parentItems(model, items, buf);
  }
  const std::vector<uint64_t>& base = buf.base;
  const std::vector<size_t>& parent = buf.parent;
  for (uint32_t p = 0; p < passes; ++p) {
    const bool last = p + 1 == passes;
    if (p > 0) {
      // Bound each demand by the caps of the previous pass along the node's path.
      std::vector<uint64_t>& bounded = buf.bounded;
      bounded = base;
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
  std::vector<uint32_t>& start = buf.start;
  start.assign(model.nodeCount() + 1, 0);
  for (const Item& x : items) ++start[x.node + 1];
  for (size_t n = 1; n < start.size(); ++n) start[n] += start[n - 1];
  result.caps.resize(items.size());
  std::vector<uint32_t>& next = buf.next;
  next.assign(start.begin(), start.end() - 1);
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
