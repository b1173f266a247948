#include "fabric/cluster_allocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <tuple>

#include "common/capacity.h"

namespace tq::fabric {
namespace {

constexpr uint64_t kMbit = 125'000;  // bytes/s in 1 Mbit/s

TenantSpec tenant(std::string name, uint64_t guarantee, uint64_t limit, uint32_t weight) {
  TenantSpec t;
  t.name = std::move(name);
  t.link = "fabric";
  t.guarantee_bytes_per_second = guarantee;
  t.limit_bytes_per_second = limit;
  t.weight = weight;
  return t;
}

// The testbed scenario: two leaves of two nodes under a 1 Gbit/s spine (5 % headroom:
// 950 Mbit/s to hand out per direction), tenant-a 400/600 Mbit/s weight 2, noisy 0/1000.
PolicySpec article() {
  PolicySpec p;
  p.links.push_back({"fabric", 1000 * kMbit, 5});
  SharedLinkSpec leaf{"leaf-uplink", 1000 * kMbit, 5, std::nullopt, {}};
  leaf.groups.push_back({"leaf1", {"node1", "node2"}, 0});
  leaf.groups.push_back({"leaf2", {"node3", "node4"}, 0});
  p.shared_links.push_back(leaf);
  p.tenants.push_back(tenant("tenant-a", 400 * kMbit, 600 * kMbit, 2));
  p.tenants.push_back(tenant("noisy", 0, 1000 * kMbit, 1));
  return p;
}

FabricModel model(const PolicySpec& p) {
  auto m = FabricModel::build(p);
  EXPECT_TRUE(m.ok()) << m.status().message();
  return std::move(m).value();
}

constexpr Direction kTx = Direction::kTx;
constexpr Direction kRx = Direction::kRx;

// The cap entry for (node, tenant, cls, dir); fails the test when absent.
LinkCap capOf(const RoundResult& r, uint32_t node, uint32_t tenant, uint32_t cls, Direction d) {
  for (const LinkCap& c : r.caps) {
    if (c.node == node && c.tenant == tenant && c.cls == cls && c.direction == d) return c;
  }
  ADD_FAILURE() << "no cap for node " << node << " tenant " << tenant;
  return {};
}

TEST(ClusterAllocator, TheArticlesSpineIsSplitByTheNodesRule) {
  FabricModel m = model(article());
  // tenant-a node1 -> node3, noisy node2 -> node4, both backlogged: each crosses leaf1 up
  // and leaf2 down.
  std::vector<DemandReport> reports = {
      {0, 0, 0, kTx, kUnboundedDemand},
      {1, 1, 0, kTx, kUnboundedDemand},
      {2, 0, 0, kRx, kUnboundedDemand},
      {3, 1, 0, kRx, kUnboundedDemand},
  };
  RoundResult r = allocateRound(m, reports);
  EXPECT_EQ(r.rejected, 0u);
  // 950 Mbit/s: tenant-a its 400 guarantee, the 550 spare 2:1 would give it 766 but its limit
  // is 600; noisy the other 350. The same on both links.
  for (auto [node_a, node_n, d] : {std::tuple{0u, 1u, kTx}, std::tuple{2u, 3u, kRx}}) {
    EXPECT_EQ(capOf(r, node_a, 0, 0, d).rate, 600 * kMbit);
    EXPECT_EQ(capOf(r, node_a, 0, 0, d).cap, 600 * kMbit);
    EXPECT_EQ(capOf(r, node_n, 1, 0, d).rate, 350 * kMbit);
    EXPECT_EQ(capOf(r, node_n, 1, 0, d).cap, 350 * kMbit);
  }
  EXPECT_EQ(capOf(r, 0, 0, 0, kTx).link, 0u);
  EXPECT_EQ(capOf(r, 2, 0, 0, kRx).link, 1u);
  // The node rule exactly: allocate() on the link's allocatable capacity.
  auto direct = allocate(
      allocatableCapacity(1000 * kMbit, 5),
      {{400 * kMbit, 600 * kMbit, 2, 600 * kMbit, true}, {0, 1000 * kMbit, 1, 1000 * kMbit, true}});
  ASSERT_EQ(r.tenants.size(), 4u);
  EXPECT_EQ(r.tenants[0], (TenantOnLink{0, kTx, 0, 600 * kMbit, direct[0].rate, 1}));
  EXPECT_EQ(r.tenants[1], (TenantOnLink{0, kTx, 1, 1000 * kMbit, direct[1].rate, 1}));
}

TEST(ClusterAllocator, ATenantsAllocationIsSplitAmongItsNodesByDemand) {
  PolicySpec p = article();
  p.tenants.pop_back();
  FabricModel m = model(p);
  // tenant-a on node1 and node2 wants 480 + 160 = 640 Mbit/s across leaf1: its limit, 600,
  // split 3:1.
  RoundResult r = allocateRound(
      m, std::vector<DemandReport>{{0, 0, 0, kTx, 480 * kMbit}, {1, 0, 0, kTx, 160 * kMbit}});
  EXPECT_EQ(capOf(r, 0, 0, 0, kTx).rate, 450 * kMbit);
  EXPECT_EQ(capOf(r, 1, 0, 0, kTx).rate, 150 * kMbit);
  EXPECT_EQ(capOf(r, 0, 0, 0, kTx).cap, 450 * kMbit);
  EXPECT_EQ(r.tenants.at(0).demand, 600 * kMbit);  // summed, clamped to the limit
}

TEST(ClusterAllocator, AQuietNodeKeepsItsPartOfTheUnusedGuaranteeSoAWakingTenantHasIt) {
  FabricModel m = model(article());
  // tenant-a uses 240 Mbit/s from node1 and nothing from node2 (both report), below its 400
  // guarantee; noisy is backlogged on node2.
  RoundResult r = allocateRound(
      m, std::vector<DemandReport>{
             {0, 0, 0, kTx, 240 * kMbit}, {1, 0, 0, kTx, 0}, {1, 1, 0, kTx, kUnboundedDemand}});
  // Rates: tenant-a what it uses, noisy the rest of 950 (work-conserving).
  EXPECT_EQ(capOf(r, 0, 0, 0, kTx).rate, 240 * kMbit);
  EXPECT_EQ(capOf(r, 1, 0, 0, kTx).rate, 0u);
  EXPECT_EQ(capOf(r, 1, 1, 0, kTx).rate, 710 * kMbit);
  // Caps: the unused 160 of the guarantee split evenly, so tenant-a's caps add up to 400.
  EXPECT_EQ(capOf(r, 0, 0, 0, kTx).cap, 320 * kMbit);
  EXPECT_EQ(capOf(r, 1, 0, 0, kTx).cap, 80 * kMbit);
  EXPECT_EQ(capOf(r, 1, 1, 0, kTx).cap, 710 * kMbit);
  // Idle everywhere: each of its nodes holds half its guarantee.
  r = allocateRound(m, std::vector<DemandReport>{
                           {0, 0, 0, kTx, 0}, {1, 0, 0, kTx, 0}, {1, 1, 0, kTx, kUnboundedDemand}});
  EXPECT_EQ(capOf(r, 0, 0, 0, kTx).cap, 200 * kMbit);
  EXPECT_EQ(capOf(r, 1, 0, 0, kTx).cap, 200 * kMbit);
  EXPECT_EQ(capOf(r, 1, 1, 0, kTx).rate, 950 * kMbit);
}

TEST(ClusterAllocator, ReportsThatNameNoLinkOfTheNodeAreRejectedAndTheLastOfAKeyWins) {
  FabricModel m = model(article());
  std::vector<DemandReport> reports = {
      {9, 0, 0, kTx, 1},                        // unknown node
      {0, 7, 0, kTx, 1},                        // unknown tenant
      {0, 0, 3, kTx, 1},                        // unknown class
      {0, 0, 0, static_cast<Direction>(2), 1},  // unknown direction
      {0, 0, 0, kTx, 100 * kMbit},              // replaced by the next
      {0, 0, 0, kTx, 200 * kMbit},
  };
  RoundResult r = allocateRound(m, reports);
  EXPECT_EQ(r.rejected, 4u);
  EXPECT_EQ(r.duplicates, 1u);
  ASSERT_EQ(r.caps.size(), 1u);
  EXPECT_EQ(r.caps[0].rate, 200 * kMbit);
  // A node behind no group of the class.
  PolicySpec p = article();
  p.shared_links[0].groups[1].nodes = {"node3"};
  SharedLinkSpec other{"other", 1000 * kMbit, 0, std::nullopt, {{"o", {"node4"}, 0}}};
  p.shared_links.push_back(other);
  FabricModel m2 = model(p);
  r = allocateRound(m2, std::vector<DemandReport>{{*m2.nodeIndex("node4"), 0, 0, kTx, 1}});
  EXPECT_EQ(r.rejected, 1u);
  EXPECT_TRUE(r.caps.empty());
}

TEST(ClusterAllocator, AbsurdDemandIsClampedToTheTenantsLimitOnTheClass) {
  PolicySpec p = article();
  p.tenants[1].shared_links.push_back({"leaf-uplink", std::nullopt, 100 * kMbit, std::nullopt});
  FabricModel m = model(p);
  RoundResult r = allocateRound(m, std::vector<DemandReport>{{1, 1, 0, kTx, ~0ull - 1}});
  EXPECT_EQ(r.tenants.at(0).demand, 100 * kMbit);
  EXPECT_EQ(capOf(r, 1, 1, 0, kTx).cap, 100 * kMbit);
}

// Leaves of one node each, two per pod; the pod uplinks are the bottleneck.
PolicySpec twoTiers() {
  PolicySpec p;
  p.links.push_back({"fabric", 1000 * kMbit, 0});
  SharedLinkSpec leaf{"leaf-uplink", 800 * kMbit, 0, std::nullopt, {}};
  leaf.groups = {
      {"leaf1", {"n1"}, 0}, {"leaf2", {"n2"}, 0}, {"leaf3", {"n3"}, 0}, {"leaf4", {"n4"}, 0}};
  SharedLinkSpec pod{"pod-uplink", 160 * kMbit, 0, std::nullopt, {}};
  pod.groups = {{"pod1", {"n1", "n2"}, 0}, {"pod2", {"n3", "n4"}, 0}};
  p.shared_links = {leaf, pod};
  p.tenants.push_back(tenant("x", 0, 800 * kMbit, 1));
  p.tenants.push_back(tenant("y", 0, 800 * kMbit, 1));
  return p;
}

TEST(ClusterAllocator, AHierarchicalPassGivesTheLinkBelowWhatTheLinkAboveLeavesUnused) {
  FabricModel m = model(twoTiers());
  ASSERT_EQ(m.parentClass(0), 1u);
  // x on n1 sends to n3 (leaf1 up, then pod1 up); y on n1 sends to n2 (leaf1 up only; it
  // reports 0 on the pod uplink).
  std::vector<DemandReport> reports = {{0, 0, 0, kTx, kUnboundedDemand},
                                       {0, 0, 1, kTx, kUnboundedDemand},
                                       {0, 1, 0, kTx, kUnboundedDemand},
                                       {0, 1, 1, kTx, 0}};
  // One pass: leaf1 splits 400/400, but x can use only the pod's 160: 240 idle on leaf1.
  RoundResult one = allocateRound(m, reports);
  EXPECT_EQ(capOf(one, 0, 0, 0, kTx).cap, 400 * kMbit);
  EXPECT_EQ(capOf(one, 0, 0, 1, kTx).cap, 160 * kMbit);
  EXPECT_EQ(capOf(one, 0, 1, 0, kTx).cap, 400 * kMbit);
  // Two passes: x's demand on leaf1 is bounded by its pod cap, y gets the rest: the min along
  // the path is the same for x, and leaf1 is full.
  RoundResult two = allocateRound(m, reports, {.hierarchy_passes = 2});
  EXPECT_EQ(capOf(two, 0, 0, 0, kTx).cap, 160 * kMbit);
  EXPECT_EQ(capOf(two, 0, 0, 1, kTx).cap, 160 * kMbit);
  EXPECT_EQ(capOf(two, 0, 1, 0, kTx).cap, 640 * kMbit);
  // More passes change nothing here.
  EXPECT_EQ(allocateRound(m, reports, {.hierarchy_passes = 5}).caps, two.caps);
}

// Three leaves (one shared link each, 100 MB/s per direction): tenant x's ring n1 <-> n2 crosses
// leaf1 and leaf2; y's ring n4 <-> n5 (weight 2) crosses leaf2 and leaf3; z sends from n3 out of
// leaf1. x is held back on leaf2 by y, and on leaf1 only uses what leaf2 lets it.
PolicySpec ringsAcrossLeaves() {
  PolicySpec p;
  p.links.push_back({"fabric", 1'000'000'000, 0});
  SharedLinkSpec leaf{"leaf-uplink", 100'000'000, 0, std::nullopt, {}};
  leaf.groups = {{"leaf1", {"n1", "n3"}, 0}, {"leaf2", {"n2", "n4"}, 0}, {"leaf3", {"n5"}, 0}};
  p.shared_links = {leaf};
  p.tenants = {tenant("x", 0, 100'000'000, 1), tenant("y", 0, 100'000'000, 2),
               tenant("z", 0, 100'000'000, 1)};
  return p;
}

TEST(ClusterAllocator, ACoupledTenantIsBoundedByItsBottleneckAndItsOtherLinksGoToOthers) {
  FabricModel m = model(ringsAcrossLeaves());
  const uint32_t n1 = 0, n2 = 1, n3 = 2, n4 = 3, n5 = 4, x = 0, y = 1, z = 2;
  constexpr uint64_t kLimit = 100'000'000;
  // What the agents see: x's keys on leaf2 are held back by their caps (its limit), its keys on
  // leaf1 carry 20 MB/s (x 1.05); y is held back everywhere; z is backlogged.
  const std::vector<DemandReport> reports = {
      {n1, x, 0, kTx, 21'000'000}, {n1, x, 0, kRx, 21'000'000}, {n2, x, 0, kTx, kLimit},
      {n2, x, 0, kRx, kLimit},     {n4, y, 0, kTx, kLimit},     {n4, y, 0, kRx, kLimit},
      {n5, y, 0, kTx, kLimit},     {n5, y, 0, kRx, kLimit},     {n3, z, 0, kTx, kLimit}};
  // Independent keys: leaf2 splits 1:2 (x 33,333,334 with the leftover byte, y 66,666,666); on
  // leaf1 x gets the 21 MB/s it reported and z the other 79: x stays at 21 (its 5 % a round).
  RoundResult independent = allocateRound(m, reports);
  EXPECT_EQ(capOf(independent, n2, x, 0, kRx).cap, 33'333'334u);
  EXPECT_EQ(capOf(independent, n1, x, 0, kTx).cap, 21'000'000u);
  EXPECT_EQ(capOf(independent, n3, z, 0, kTx).cap, 79'000'000u);
  EXPECT_EQ(capOf(independent, n5, y, 0, kTx).cap, kLimit);
  // Coupled: x reaches its bottleneck in this round on every key, and what leaf1 would have
  // given it beyond that goes to z; y is bounded on leaf3 by what it gets on leaf2.
  for (uint32_t passes : {1u, 2u, 4u}) {
    SCOPED_TRACE("coupling passes " + std::to_string(passes));
    RoundResult coupled = allocateRound(m, reports, {.coupling_passes = passes});
    for (auto [node, d] :
         {std::pair{n1, kTx}, std::pair{n1, kRx}, std::pair{n2, kTx}, std::pair{n2, kRx}}) {
      EXPECT_EQ(capOf(coupled, node, x, 0, d).cap, 33'333'334u);
    }
    // z is held too (backlogged): with one pass it is bounded by what it got while x still
    // asked for its limit on leaf1 (half); a second pass sees x bounded and gives z the rest.
    EXPECT_EQ(capOf(coupled, n3, z, 0, kTx).cap, passes == 1 ? 50'000'000u : 66'666'666u);
    EXPECT_EQ(capOf(coupled, n4, y, 0, kTx).cap, 66'666'666u);
    EXPECT_EQ(capOf(coupled, n5, y, 0, kTx).cap, 66'666'666u);
  }
}

TEST(ClusterAllocator, ACoupledTenantRisesWhenItsBottleneckFreesUpOverPasses) {
  // As above, but y wants only 10 MB/s (not held): x could have 90 on leaf2. With one pass x
  // is bounded by the first split of leaf1 with z (50); with more, the pass that sees leaf1 as
  // x's bottleneck asks for more there and x settles where leaf1 is shared with z.
  FabricModel m = model(ringsAcrossLeaves());
  const uint32_t n1 = 0, n2 = 1, n3 = 2, n4 = 3, x = 0, y = 1, z = 2;
  constexpr uint64_t kLimit = 100'000'000;
  const std::vector<DemandReport> reports = {
      {n1, x, 0, kTx, kLimit}, {n1, x, 0, kRx, kLimit},     {n2, x, 0, kTx, kLimit},
      {n2, x, 0, kRx, kLimit}, {n4, y, 0, kTx, 10'000'000}, {n4, y, 0, kRx, 10'000'000},
      {n3, z, 0, kTx, kLimit}};
  RoundResult r = allocateRound(m, reports, {.coupling_passes = 3});
  // leaf1 tx: x and z, weight 1 each: 50/50; x's other keys are bounded to its 50.
  for (auto [node, d] :
       {std::pair{n1, kTx}, std::pair{n1, kRx}, std::pair{n2, kTx}, std::pair{n2, kRx}}) {
    EXPECT_EQ(capOf(r, node, x, 0, d).cap, 50'000'000u);
  }
  EXPECT_EQ(capOf(r, n3, z, 0, kTx).cap, 50'000'000u);
  EXPECT_EQ(capOf(r, n4, y, 0, kTx).cap, 10'000'000u);
}

// ---- Properties over random topologies, policies and reports --------------------------------

struct Scenario {
  PolicySpec policy;
  std::vector<DemandReport> reports;
};

Scenario randomScenario(std::mt19937_64& rng) {
  auto pick = [&](uint64_t lo, uint64_t hi) {
    return std::uniform_int_distribution<uint64_t>(lo, hi)(rng);
  };
  Scenario s;
  const size_t nodes = pick(2, 24), classes = pick(1, 3), tenants = pick(1, 8);
  s.policy.links.push_back({"fabric", 1000 * kMbit, 0});
  std::vector<std::string> names;
  for (size_t n = 0; n < nodes; ++n) names.push_back("n" + std::to_string(n));
  for (size_t c = 0; c < classes; ++c) {
    SharedLinkSpec l{"c" + std::to_string(c),
                     pick(50, 2000) * kMbit,
                     static_cast<double>(pick(0, 10)),
                     std::nullopt,
                     {}};
    const size_t groups = pick(1, std::min<size_t>(nodes, 6));
    l.groups.resize(groups);
    for (size_t g = 0; g < groups; ++g) {
      l.groups[g].name = "g" + std::to_string(g);
      if (pick(0, 3) == 0) l.groups[g].capacity_bytes_per_second = pick(50, 2000) * kMbit;
    }
    // Every node in one group (some left out of the class).
    for (size_t n = 0; n < nodes; ++n) {
      if (pick(0, 5) == 0) continue;
      l.groups[n % groups].nodes.push_back(names[n]);
    }
    for (auto& g : l.groups)
      if (g.nodes.empty()) g.nodes.push_back("lonely-" + l.name + "-" + g.name);
    s.policy.shared_links.push_back(l);
  }
  for (size_t t = 0; t < tenants; ++t) {
    TenantSpec spec = tenant("t" + std::to_string(t), pick(0, 300) * kMbit, 0, pick(1, 9));
    spec.limit_bytes_per_second = spec.guarantee_bytes_per_second + pick(1, 1500) * kMbit;
    if (pick(0, 2) == 0) {
      spec.shared_links.push_back({s.policy.shared_links[pick(0, classes - 1)].name,
                                   pick(0, 200) * kMbit, std::nullopt, std::nullopt});
    }
    s.policy.tenants.push_back(spec);
  }
  // Admission: scale the guarantees on each class down until they fit its smallest group.
  for (const SharedLinkSpec& l : s.policy.shared_links) {
    uint64_t smallest = ~0ull;
    for (const auto& g : l.groups) smallest = std::min(smallest, allocatableCapacity(l, g));
    unsigned __int128 sum = 0;
    for (const auto& t : s.policy.tenants) sum += tenantShareOn(t, l.name).guarantee;
    if (sum <= smallest) continue;
    for (auto& t : s.policy.tenants) {
      TenantLinkValues* v = const_cast<TenantLinkValues*>(findTenantLinkValues(t, l.name));
      if (v == nullptr) {
        t.shared_links.push_back({l.name, 0, std::nullopt, std::nullopt});
        v = &t.shared_links.back();
      }
      v->guarantee_bytes_per_second = static_cast<uint64_t>(
          static_cast<unsigned __int128>(tenantShareOn(t, l.name).guarantee) * smallest / sum);
    }
  }
  auto m = FabricModel::build(s.policy);
  EXPECT_TRUE(m.ok()) << m.status().message();
  const size_t count = pick(0, 80);
  std::set<std::tuple<uint32_t, uint32_t, uint32_t, int>> seen;
  for (size_t i = 0; i < count; ++i) {
    DemandReport r{static_cast<uint32_t>(pick(0, m->nodeCount())),  // sometimes out of range
                   static_cast<uint32_t>(pick(0, tenants - 1)),
                   static_cast<uint32_t>(pick(0, classes - 1)), pick(0, 1) ? kTx : kRx, 0};
    switch (pick(0, 4)) {
      case 0: r.demand = 0; break;
      case 1: r.demand = kUnboundedDemand; break;
      default: r.demand = pick(1, 1200) * kMbit; break;
    }
    if (!seen.insert({r.node, r.tenant, r.cls, static_cast<int>(r.direction)}).second) continue;
    s.reports.push_back(r);
  }
  return s;
}

TEST(ClusterAllocator, PropertiesHoldOnRandomTopologies) {
  std::mt19937_64 rng(2024);
  for (int iteration = 0; iteration < 300; ++iteration) {
    SCOPED_TRACE("iteration " + std::to_string(iteration));
    Scenario s = randomScenario(rng);
    FabricModel m = model(s.policy);
    RoundResult r = allocateRound(m, s.reports);
    // The reported demand of each accepted key, clamped to the tenant's limit on the class.
    std::map<std::tuple<uint32_t, uint32_t, uint32_t, Direction>, uint64_t> demand;
    for (const DemandReport& d : s.reports) {
      if (d.node < m.nodeCount() && m.linkOf(d.node, d.cls) != kNone) {
        demand[{d.node, d.tenant, d.cls, d.direction}] =
            std::min(d.demand, m.share(d.tenant, d.cls).limit);
      }
    }
    ASSERT_EQ(r.caps.size(), demand.size());
    ASSERT_EQ(r.rejected + r.caps.size(), s.reports.size());
    // Per link and direction.
    std::map<std::pair<uint32_t, Direction>, unsigned __int128> used;
    std::map<std::tuple<uint32_t, Direction, uint32_t>, std::pair<uint64_t, uint64_t>> sums;
    for (const LinkCap& c : r.caps) {
      const uint64_t d = demand.at({c.node, c.tenant, c.cls, c.direction});
      EXPECT_LE(c.rate, d) << "a node never gets more than its demand";
      EXPECT_GE(c.cap, c.rate);
      auto& [rates, caps] = sums[{c.link, c.direction, c.tenant}];
      rates += c.rate;
      caps += c.cap;
    }
    std::map<std::pair<uint32_t, Direction>, bool> everyone_satisfied;
    for (const TenantOnLink& t : r.tenants) {
      const LinkShare& share = m.share(t.tenant, m.link(t.link).cls);
      EXPECT_LE(t.allocation, share.limit) << "never above the limit";
      EXPECT_LE(t.allocation, t.demand) << "never above the demand";
      EXPECT_GE(t.allocation, std::min({t.demand, share.guarantee, share.limit}))
          << "the guarantee when there is demand (admission holds)";
      used[{t.link, t.direction}] += t.allocation;
      auto key = std::pair{t.link, t.direction};
      if (!everyone_satisfied.count(key)) everyone_satisfied[key] = true;
      if (t.allocation < t.demand) everyone_satisfied[key] = false;
      const auto& [rates, caps] = sums.at({t.link, t.direction, t.tenant});
      EXPECT_EQ(rates, t.allocation) << "the nodes' rates add up to the tenant's allocation";
      EXPECT_EQ(caps, std::max(t.allocation, std::min(share.guarantee, share.limit)))
          << "the caps add up to max(allocation, guarantee)";
    }
    for (const auto& [key, sum] : used) {
      const uint64_t capacity = m.link(key.first).allocatable;
      EXPECT_LE(sum, capacity) << "never above the link's allocatable capacity";
      if (sum < capacity) {
        EXPECT_TRUE(everyone_satisfied.at(key))
            << "work-conserving: capacity left means every tenant has its demand";
      }
    }
    // Deterministic, whatever the order of the reports.
    std::vector<DemandReport> shuffled = s.reports;
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    RoundResult again = allocateRound(m, shuffled);
    EXPECT_EQ(again.caps, r.caps);
    EXPECT_EQ(again.tenants, r.tenants);
    // Hierarchical and coupling passes keep the per-link bounds.
    RoundResult passes = allocateRound(m, s.reports, {.hierarchy_passes = 3, .coupling_passes = 3});
    std::map<std::pair<uint32_t, Direction>, unsigned __int128> used3;
    for (const TenantOnLink& t : passes.tenants) {
      EXPECT_LE(t.allocation, m.share(t.tenant, m.link(t.link).cls).limit);
      used3[{t.link, t.direction}] += t.allocation;
    }
    for (const auto& [key, sum] : used3) EXPECT_LE(sum, m.link(key.first).allocatable);
  }
}

}  // namespace
}  // namespace tq::fabric
