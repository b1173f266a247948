// bench/fabric: the cluster allocator (fabric/cluster_allocator.h, the library policyd runs)
// driven by a flow-level model of a large two-tier Clos, in closed loop with a model of the node
// agents' demand estimate. Prints and writes (JSON) what the issue asks of it:
//
//   - one allocation round's compute time, p50/p99, on one core;
//   - control bytes per round in each direction (demand reports up, caps down): the real
//     tenantqos.v1 DemandReport and NodeCaps of PolicyService.Allocate (proto/tenantqos/v1/
//     policy.proto), serialized, plus gRPC, HTTP/2 and TLS framing; a node's report when its
//     demand moved past a deadband or every second, its caps when they changed or every second
//     (policy/allocator_service.cc's rule); per second per 1,000 nodes at the report period;
//   - rounds to converge after a step change of the tenants' demand;
//   - every guaranteed tenant's attainment and each contended link's utilisation against an
//     exact reference: weighted progressive filling over all links at once, on the same
//     allocatable capacities, guarantees first (docs/fabric.md, "Simulation").
//
// The model (what it keeps and leaves out: docs/fabric.md): nodes under leaves of `leaf-size`
// nodes, each leaf's uplink `oversubscription`:1 (optionally leaves grouped into pods with their
// own uplinks, and R rails: R parallel fabrics, one NIC per rail per node). Whole nodes per tenant,
// placed at random; each tenant runs a ring (per rail) over its nodes in node order, so its
// traffic crosses a leaf's uplink where the ring leaves the leaf, up at the sender's leaf and down
// at the receiver's. A ring runs at its slowest hop. Hop bound: the NIC, the tenant's limit, its
// own demand (a quarter of the tenants want a fixed rate), and the caps the agents hold for the
// links the hop crosses. Links never carry more than their capacity (a link offered more slows
// every ring on it in proportion). Each round the agents estimate demand as the node agent does
// (agent/allocator.h): a key whose cap held the ring back is backlogged (its limit), else what
// it carried x 1.05; the allocator sees the last values reported, the agents enforce the last
// caps pushed.
//
// Usage: fabric_sim [--nodes N] [--tenants T] [--json OUT] [--data OUT] [options below]
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench/fabric/caps_push.h"
#include "common/capacity.h"
#include "fabric/cluster_allocator.h"
#include "proto/allocate_codec.h"
#include "tenantqos/v1/policy.pb.h"

namespace {

using tq::fabric::DemandReport;
using tq::fabric::Direction;
using tq::fabric::FabricModel;

constexpr double kGbit = 125'000'000.0;  // bytes/s per Gbit/s
// Framing per message on the stream: gRPC's 5-byte length prefix, an HTTP/2 DATA frame header
// (9), a TLS 1.3 record header and AEAD tag (5 + 16).
constexpr size_t kFramingBytes = 5 + 9 + 5 + 16;

struct Options {
  int nodes = 4096;
  int tenants = 256;
  int leaf_size = 64;
  int leaves_per_pod = 0;  // 0: two tiers only (leaf uplinks are the shared links)
  int rails = 1;
  double oversubscription = 4;
  double nic_gbps = 400;
  double headroom_percent = 5;
  int rounds = 400;
  int step_every = 25;          // rounds between step changes of demand
  double step_fraction = 0.25;  // tenants that switch on or off at a step
  double period_ms = 100;       // report period: a round per period
  double deadband = 0.01;       // a value is re-sent when it changed by more than this fraction
  int refresh_every = 10;       // rounds between full reports / caps
  uint32_t passes = 1;          // hierarchy passes of the allocator
  uint32_t coupling = 4;        // RoundOptions::coupling_passes (an NCCL ring is coupled)
  uint64_t seed = 1;
  std::string json, data;
  // The real path (caps_push.h): one round of caps from a real policyd to this many agents.
  int grpc_agents = 1000;  // 0: skipped
  int grpc_rounds = 20;
  int grpc_period_ms = 100;  // the allocator's period (caps_push.h)
  std::string policyd = TQ_POLICYD_BIN;
};

const char* const kUsage =
    R"(Usage: fabric_sim [--nodes N] [--tenants T] [--json OUT] [--data OUT]
                  [--leaf-size N] [--leaves-per-pod N] [--rails R] [--oversubscription X]
                  [--nic-gbps G] [--rounds N] [--step-every N] [--period-ms MS]
                  [--deadband F] [--refresh-every N] [--passes N] [--coupling-passes N] [--seed S]
                  [--grpc-agents N] [--grpc-rounds N] [--grpc-period-ms MS] [--policyd BIN]
The cluster allocator (fabric/) in closed loop with a flow-level model of a two-tier Clos:
round time, control bytes, convergence, guarantees and utilisation against an exact reference.
Defaults: 4096 nodes, 256 tenants, 64 nodes per leaf, 4:1 uplinks, 400 Gbit/s NICs, one rail,
400 rounds of 100 ms with a step change of a quarter of the tenants every 25.
Then the real path: a real tenantqos-policyd (file store, --allocator-period MS from
--grpc-period-ms, default 100, the allocator's real period) pushes caps through its Allocate
service over mutual TLS (openssl certificates, one identity and TCP connection per agent) to
--grpc-agents streams on this machine (default 1000; 0 skips it), while every agent reports
every period as node agents do (staggered, demand +-20 %, so nearly every round moves nearly
every cap): measured per round is the time from policyd computing it
(NodeCaps.computed_at_unix_ms) to the LAST agent holding its message of that round, p50/p99
over --grpc-rounds rounds (default 20; target p99 <= 100 ms). A round that reached fewer than
half the agents is counted, not measured.
)";

bool parseOptions(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::cout << kUsage;
      std::exit(0);
    }
    if (i + 1 >= argc) {
      std::cerr << "fabric_sim: " << a << " needs a value\n" << kUsage;
      return false;
    }
    const std::string v = argv[++i];
    char* end = nullptr;
    const double d = std::strtod(v.c_str(), &end);
    const bool number = end != v.c_str() && *end == '\0';
    auto positive = [&](auto* out) {
      if (!number || d <= 0) return false;
      *out = static_cast<std::remove_reference_t<decltype(*out)>>(d);
      return true;
    };
    bool ok = true;
    if (a == "--nodes")
      ok = positive(&o->nodes);
    else if (a == "--tenants")
      ok = positive(&o->tenants);
    else if (a == "--leaf-size")
      ok = positive(&o->leaf_size);
    else if (a == "--leaves-per-pod")
      ok = number && d >= 0 && (o->leaves_per_pod = int(d), true);
    else if (a == "--rails")
      ok = positive(&o->rails);
    else if (a == "--oversubscription")
      ok = positive(&o->oversubscription);
    else if (a == "--nic-gbps")
      ok = positive(&o->nic_gbps);
    else if (a == "--rounds")
      ok = positive(&o->rounds);
    else if (a == "--step-every")
      ok = positive(&o->step_every);
    else if (a == "--period-ms")
      ok = positive(&o->period_ms);
    else if (a == "--deadband")
      ok = number && d >= 0 && d < 1 && (o->deadband = d, true);
    else if (a == "--refresh-every")
      ok = positive(&o->refresh_every);
    else if (a == "--passes")
      ok = positive(&o->passes);
    else if (a == "--coupling-passes")
      ok = number && d >= 0 && (o->coupling = uint32_t(d), true);
    else if (a == "--seed")
      ok = number && d >= 0 && (o->seed = uint64_t(d), true);
    else if (a == "--grpc-agents")
      ok = number && d >= 0 && d <= 10000 && (o->grpc_agents = int(d), true);
    else if (a == "--grpc-rounds")
      ok = positive(&o->grpc_rounds);
    else if (a == "--grpc-period-ms")
      ok = number && d >= 10 && d <= 10000 && (o->grpc_period_ms = int(d), true);
    else if (a == "--policyd")
      o->policyd = v;
    else if (a == "--json")
      o->json = v;
    else if (a == "--data")
      o->data = v;
    else {
      std::cerr << "fabric_sim: unknown option " << a << "\n" << kUsage;
      return false;
    }
    if (!ok) {
      std::cerr << "fabric_sim: " << a << ": bad value \"" << v << "\"\n";
      return false;
    }
  }
  if (o->rails > 16 || o->nodes < 2 || o->tenants < 1 || o->tenants * 2 > o->nodes) {
    std::cerr << "fabric_sim: need 2 <= 2 x tenants <= nodes and at most 16 rails\n";
    return false;
  }
  return true;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = p / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (rank - static_cast<double>(lo));
}

// ---- The cluster: topology, tenants, policy --------------------------------------------------

struct Tenant {
  std::vector<uint32_t> nodes;  // node indexes, ascending (the ring's order)
  double limit = 0;             // bytes/s per node (and on every shared link)
  double guarantee = 0;         // bytes/s on every shared link (0: best effort)
  uint32_t weight = 1;
  double want = 0;  // per-hop rate it wants when on (bytes/s); infinity: backlogged
  bool on = true;
};

struct Cluster {
  Options o;
  int leaves = 0, pods = 0;
  std::vector<Tenant> tenants;
  std::vector<int> owner;  // node -> tenant or -1
  tq::PolicySpec policy;
  double nic = 0;  // bytes/s per rail NIC

  int leafOf(uint32_t n) const { return static_cast<int>(n) / o.leaf_size; }
  int podOf(uint32_t n) const { return o.leaves_per_pod ? leafOf(n) / o.leaves_per_pod : 0; }
};

// Names of the length real ones have (they are most of a message's bytes): "gpu-node-000123",
// zero-padded so that name order is index order; a data-plane address per node.
std::string nodeName(uint32_t n) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "gpu-node-%06u", n);
  return buf;
}
std::string nodeAddress(uint32_t n) {
  return "10." + std::to_string(n >> 16 & 255) + "." + std::to_string(n >> 8 & 255) + "." +
         std::to_string(n & 255);
}

Cluster buildCluster(const Options& o, std::mt19937_64& rng) {
  Cluster c;
  c.o = o;
  c.nic = o.nic_gbps * kGbit;
  c.leaves = (o.nodes + o.leaf_size - 1) / o.leaf_size;
  c.pods = o.leaves_per_pod ? (c.leaves + o.leaves_per_pod - 1) / o.leaves_per_pod : 0;
  // Tenant sizes: uniform around nodes/tenants, at least 2, within the cluster.
  const int mean = o.nodes / o.tenants;
  std::uniform_int_distribution<int> size(std::max(2, mean / 4), std::max(2, mean * 7 / 4));
  std::vector<uint32_t> free(o.nodes);
  std::iota(free.begin(), free.end(), 0u);
  std::shuffle(free.begin(), free.end(), rng);
  c.owner.assign(o.nodes, -1);
  size_t next = 0;
  c.tenants.resize(o.tenants);
  for (int t = 0; t < o.tenants; ++t) {
    const size_t left_for_others = 2 * static_cast<size_t>(o.tenants - t - 1);
    const size_t room = free.size() - next - left_for_others;
    const size_t k = std::min<size_t>(size(rng), room);
    for (size_t i = 0; i < k; ++i) {
      c.tenants[t].nodes.push_back(free[next]);
      c.owner[free[next++]] = t;
    }
    std::sort(c.tenants[t].nodes.begin(), c.tenants[t].nodes.end());
  }
  // Values: half the tenants guaranteed, all guarantees together exactly what a leaf uplink
  // admits; limits 1/2, 3/4 or all of a NIC; weights 1-4; a quarter want a fixed rate.
  const double uplink = o.leaf_size * c.nic / o.oversubscription;
  const double allocatable = static_cast<double>(
      tq::allocatableCapacity(static_cast<uint64_t>(uplink), o.headroom_percent));
  const int guaranteed = (o.tenants + 1) / 2;
  std::uniform_int_distribution<int> pick4(0, 3);
  for (int t = 0; t < o.tenants; ++t) {
    Tenant& x = c.tenants[t];
    x.guarantee = t % 2 == 0 ? std::floor(allocatable / guaranteed) : 0;
    x.limit = c.nic * o.rails * (0.5 + 0.25 * std::min(2, pick4(rng)));
    x.guarantee = std::min(x.guarantee, x.limit);
    x.weight = 1 + pick4(rng);
    x.want = pick4(rng) == 0 ? c.nic * (0.05 + 0.4 * std::uniform_real_distribution<>(0, 1)(rng))
                             : INFINITY;
    x.on = std::uniform_real_distribution<>(0, 1)(rng) < 0.7;
  }
  // The policy: one shared link class per rail (and tier), one group per leaf (pod).
  tq::PolicySpec& p = c.policy;
  p.links.push_back({"nic", static_cast<uint64_t>(c.nic), o.headroom_percent});
  auto addClass = [&](const std::string& name, int rail, int groups, auto groupOf, double cap) {
    tq::SharedLinkSpec l{name, static_cast<uint64_t>(cap), o.headroom_percent, std::nullopt, {}};
    if (o.rails > 1) l.rail = static_cast<uint32_t>(rail);
    l.groups.resize(groups);
    for (int g = 0; g < groups; ++g) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%s-%03d",
                    c.pods && name.ends_with("pod-uplink") ? "pod" : "leaf", g);
      l.groups[g].name = buf;
    }
    for (int n = 0; n < o.nodes; ++n) l.groups[groupOf(n)].nodes.push_back(nodeName(n));
    p.shared_links.push_back(std::move(l));
  };
  for (int r = 0; r < o.rails; ++r) {
    const std::string prefix = o.rails > 1 ? "rail" + std::to_string(r) + "-" : "";
    addClass(
        prefix + "leaf-uplink", r, c.leaves, [&](int n) { return c.leafOf(n); }, uplink);
    if (c.pods) {
      addClass(
          prefix + "pod-uplink", r, c.pods, [&](int n) { return c.podOf(n); },
          uplink * o.leaves_per_pod / o.oversubscription);
    }
  }
  for (int t = 0; t < o.tenants; ++t) {
    const Tenant& x = c.tenants[t];
    tq::TenantSpec s;
    char name[32];
    std::snprintf(name, sizeof name, "team-%04d-train", t);  // the length of a real team's name
    s.name = name;
    s.link = "nic";
    s.guarantee_bytes_per_second = 0;
    s.limit_bytes_per_second = static_cast<uint64_t>(x.limit);
    s.weight = x.weight;
    for (const auto& l : p.shared_links) {
      // Per rail: the rail's part of the limit; the guarantee on every class.
      s.shared_links.push_back({l.name, static_cast<uint64_t>(x.guarantee),
                                static_cast<uint64_t>(x.limit / o.rails), std::nullopt});
    }
    p.tenants.push_back(std::move(s));
  }
  return c;
}

// ---- The flow model --------------------------------------------------------------------------

// A link in the model: one (shared link, direction) the allocator allocates.
struct ModelLink {
  double allocatable = 0;  // what the allocator hands out
  double capacity = 0;     // what it carries
};

// A ring per (tenant, rail); its hops and the report keys they cross.
struct Ring {
  uint32_t tenant = 0;
  uint32_t rail = 0;
  std::vector<std::vector<uint32_t>> hop_keys;  // per hop: the keys whose caps bound it
  std::vector<uint32_t> links;                  // model links it crosses (with repeats: m per link)
  double upper = 0;                             // NIC, limit per rail, want
};

struct Key {
  uint32_t node, tenant, cls;
  Direction dir;
  uint32_t link;  // model link: shared link * 2 + dir
  int ring = -1;  // the ring whose hop crosses here, or -1 (the node's traffic stays inside)
};

struct Model {
  std::vector<Key> keys;  // in the allocator's output order: (node, tenant, cls, dir)
  std::vector<Ring> rings;
  std::vector<ModelLink> links;
};

Model buildModel(const Cluster& c, const FabricModel& fm) {
  Model m;
  const uint32_t classes = static_cast<uint32_t>(fm.classCount());
  const uint32_t per_rail = c.pods ? 2 : 1;  // classes per rail: leaf (and pod)
  m.links.resize(fm.linkCount() * 2);
  for (uint32_t l = 0; l < fm.linkCount(); ++l) {
    const auto& spec = c.policy.shared_links[fm.link(l).cls];
    const double cap = static_cast<double>(tq::groupCapacity(spec, spec.groups[fm.link(l).group]));
    for (int d = 0; d < 2; ++d)
      m.links[l * 2 + d] = {static_cast<double>(fm.link(l).allocatable), cap};
  }
  // Keys: every node with a tenant, every class, both directions.
  std::vector<int64_t> first_key(c.o.nodes, -1);
  for (uint32_t n = 0; n < static_cast<uint32_t>(c.o.nodes); ++n) {
    if (c.owner[n] < 0) continue;
    first_key[n] = static_cast<int64_t>(m.keys.size());
    for (uint32_t cls = 0; cls < classes; ++cls) {
      for (Direction d : {Direction::kTx, Direction::kRx}) {
        const uint32_t link = fm.linkOf(n, cls);
        m.keys.push_back({n, static_cast<uint32_t>(c.owner[n]), cls, d,
                          link * 2 + static_cast<uint32_t>(d), -1});
      }
    }
  }
  auto key = [&](uint32_t node, uint32_t cls, Direction d) {
    return static_cast<uint32_t>(first_key[node] + cls * 2 + static_cast<uint32_t>(d));
  };
  for (uint32_t t = 0; t < c.tenants.size(); ++t) {
    const Tenant& x = c.tenants[t];
    for (uint32_t r = 0; r < static_cast<uint32_t>(c.o.rails); ++r) {
      Ring ring;
      ring.tenant = t;
      ring.rail = r;
      ring.upper = std::min({c.nic, x.limit / c.o.rails, x.want / c.o.rails});
      const int ring_index = static_cast<int>(m.rings.size());
      for (size_t i = 0; i < x.nodes.size(); ++i) {
        const uint32_t a = x.nodes[i], b = x.nodes[(i + 1) % x.nodes.size()];
        std::vector<uint32_t> crossed;
        std::vector<uint32_t> tiers = {0};
        if (c.pods) tiers.push_back(1);
        for (uint32_t tier : tiers) {
          const bool crosses = tier == 0 ? c.leafOf(a) != c.leafOf(b) : c.podOf(a) != c.podOf(b);
          if (!crosses) continue;
          const uint32_t cls = r * per_rail + tier;
          for (auto [node, d] : {std::pair{a, Direction::kTx}, std::pair{b, Direction::kRx}}) {
            const uint32_t k = key(node, cls, d);
            crossed.push_back(k);
            m.keys[k].ring = ring_index;
            ring.links.push_back(m.keys[k].link);
          }
        }
        ring.hop_keys.push_back(std::move(crossed));
      }
      m.rings.push_back(std::move(ring));
    }
  }
  return m;
}

// ---- The exact reference ---------------------------------------------------------------------

// Weighted progressive filling over every link at once: each ring on starts at its guarantee
// (the least of its guarantees per crossing, and its upper bound), then all rise together, each
// at its weight, and a ring stops when it reaches its upper bound or a link it crosses is full.
std::vector<double> reference(const Cluster& c, const Model& m) {
  const size_t R = m.rings.size();
  std::vector<double> x(R, 0);
  std::vector<char> frozen(R, 1);
  std::vector<double> load(m.links.size(), 0);
  for (size_t i = 0; i < R; ++i) {
    const Ring& ring = m.rings[i];
    const Tenant& t = c.tenants[ring.tenant];
    if (!t.on) continue;
    double g = ring.upper;
    if (!ring.links.empty()) g = std::min(g, t.guarantee);
    x[i] = g;
    frozen[i] = x[i] >= ring.upper;
    for (uint32_t l : ring.links) load[l] += x[i];
  }
  std::vector<double> rising(m.links.size());
  for (;;) {
    std::fill(rising.begin(), rising.end(), 0.0);
    bool any = false;
    for (size_t i = 0; i < R; ++i) {
      if (frozen[i]) continue;
      any = true;
      for (uint32_t l : m.rings[i].links) rising[l] += c.tenants[m.rings[i].tenant].weight;
    }
    if (!any) break;
    double step = INFINITY;
    for (size_t l = 0; l < m.links.size(); ++l) {
      if (rising[l] > 0)
        step = std::min(step, std::max(0.0, m.links[l].allocatable - load[l]) / rising[l]);
    }
    for (size_t i = 0; i < R; ++i) {
      if (!frozen[i]) {
        step = std::min(step, (m.rings[i].upper - x[i]) / c.tenants[m.rings[i].tenant].weight);
      }
    }
    for (size_t i = 0; i < R; ++i) {
      if (frozen[i]) continue;
      const double dx = step * c.tenants[m.rings[i].tenant].weight;
      x[i] += dx;
      for (uint32_t l : m.rings[i].links) load[l] += dx;
    }
    for (size_t i = 0; i < R; ++i) {
      if (frozen[i]) continue;
      bool stop = x[i] >= m.rings[i].upper * (1 - 1e-12);
      for (uint32_t l : m.rings[i].links) {
        if (load[l] >= m.links[l].allocatable * (1 - 1e-12)) stop = true;
      }
      if (stop) frozen[i] = 1;
    }
  }
  return x;
}

// ---- The closed loop -------------------------------------------------------------------------

struct Figures {
  std::vector<double> round_ms;
  double report_bytes = 0, caps_bytes = 0;  // summed over rounds
  // The same loop's messages as agents and policyd before compact streams send them.
  double whole_report_bytes = 0, whole_caps_bytes = 0;
  double peak_round_bytes = 0;  // the busiest round, both directions
  size_t report_messages = 0, caps_messages = 0;
  std::vector<double> converge_rounds;
  std::vector<double> util_ratio_steady;  // per step: contended links, sim / reference
  std::vector<double> link_ratio_steady;  // per contended link and step
  std::vector<double> link_util_steady;   // per contended link and step: sim / allocatable
  std::vector<double> attainment_steady;  // per guaranteed tenant and step
  std::vector<double> ref_attainment;
  size_t guarantees_missed = 0, guaranteed_checks = 0, overload_rounds = 0;
  size_t transient_dips = 0;
};

struct Loop {
  const Cluster& c;
  const FabricModel& fm;
  const Model& m;
  Options o;
  std::vector<uint64_t> held_cap;           // what each agent enforces (last pushed)
  std::vector<int> last_caps_round;         // per node: when policyd last sent its caps
  std::vector<uint64_t> sent_demand;        // what the allocator holds (its decoder's state)
  std::vector<uint64_t> whole_sent_demand;  // the baseline's: the last whole report per node
  // Each node's stream: the agent's encoder, policyd's decoder of it, policyd's caps encoder.
  struct Agent {
    explicit Agent(tq::proto::DemandEncoder::Options eo) : encoder(eo) {}
    tq::proto::DemandEncoder encoder;
    tq::proto::DemandDecoder decoder{4096 * 64};
    tq::proto::CapsEncoder caps;
  };
  std::vector<Agent> agents;
  std::vector<uint32_t> cap_link;  // per key: the shared link of its cap (fabric::LinkCap::link)
  std::vector<double> x;           // ring rates this round
  std::vector<char> slowed;        // the ring was slowed by a link offered too much
  std::vector<double> link_load;
  Figures f;
  std::unique_ptr<tq::fabric::RoundWorkspace> workspace =
      std::make_unique<tq::fabric::RoundWorkspace>();

  void rates() {
    const size_t R = m.rings.size();
    x.assign(R, 0);
    for (size_t i = 0; i < R; ++i) {
      const Ring& ring = m.rings[i];
      if (!c.tenants[ring.tenant].on) continue;
      double rate = ring.upper;
      for (const auto& hop : ring.hop_keys)
        for (uint32_t k : hop) rate = std::min(rate, static_cast<double>(held_cap[k]));
      x[i] = rate;
    }
    // What a link is offered beyond its capacity slows every ring on it in proportion.
    bool overloaded = false;
    slowed.assign(R, 0);
    for (int iteration = 0; iteration < 50; ++iteration) {
      link_load.assign(m.links.size(), 0);
      for (size_t i = 0; i < R; ++i)
        for (uint32_t l : m.rings[i].links) link_load[l] += x[i];
      bool any = false;
      for (size_t i = 0; i < R; ++i) {
        double factor = 1;
        for (uint32_t l : m.rings[i].links) {
          if (link_load[l] > m.links[l].capacity * (1 + 1e-9)) {
            factor = std::min(factor, m.links[l].capacity / link_load[l]);
          }
        }
        if (factor < 1) x[i] *= factor, any = true, slowed[i] = 1;
      }
      if (!any) break;
      overloaded = true;
    }
    if (overloaded) ++f.overload_rounds;
  }

  bool changed(uint64_t now, uint64_t last) const {
    return std::fabs(static_cast<double>(now) - static_cast<double>(last)) >
               o.deadband * static_cast<double>(last) ||
           (now == 0) != (last == 0);
  }

  // Keys of a node: consecutive, classes x (tx, rx).
  size_t keysPerNode() const { return fm.classCount() * 2; }

  // The agents' estimate per key (agent/allocator.h's rule), then what they send, encoded by
  // the agent's own encoder (proto/allocate_codec.h: keys, and the entries that moved past the
  // deadband, a heartbeat every second and a whole message every 10 s) and decoded by
  // policyd's decoder: what the allocator holds is what that decoder returns. The whole
  // DemandReports that agents before compact streams send are sized beside it (the baseline).
  void report(int round, std::vector<DemandReport>* reports) {
    reports->resize(m.keys.size());
    std::vector<uint64_t> demand(m.keys.size(), 0);
    for (size_t k = 0; k < m.keys.size(); ++k) {
      const Key& key = m.keys[k];
      if (key.ring < 0 || !c.tenants[key.tenant].on) continue;
      const double carried = x[key.ring];
      // Held back by its own bucket; or slowed in the network below its guarantee (the
      // estimator's network-bound rule): backlogged, it takes up to its limit.
      const bool throttled = static_cast<double>(held_cap[k]) <= carried * (1 + 1e-9) ||
                             (slowed[key.ring] && carried < c.tenants[key.tenant].guarantee);
      demand[k] =
          throttled ? tq::kUnboundedDemand : static_cast<uint64_t>(std::llround(carried * 1.05));
    }
    const size_t per_node = keysPerNode();
    for (size_t first = 0; first < m.keys.size(); first += per_node) {
      const uint32_t node = m.keys[first].node;
      const tenantqos::v1::DemandReport whole = wholeReport(first, demand);
      // Baseline: the whole report when any entry moved, else every refresh_every rounds.
      bool send = (round + node) % o.refresh_every == 0;
      for (size_t k = first; k < first + per_node && !send; ++k) {
        send = changed(demand[k], whole_sent_demand[k]);
      }
      if (send) {
        for (size_t k = first; k < first + per_node; ++k) whole_sent_demand[k] = demand[k];
        f.whole_report_bytes += static_cast<double>(whole.ByteSizeLong() + kFramingBytes);
      }
      std::optional<tenantqos::v1::DemandReport> msg =
          agents[node].encoder.encode(whole, nowNs(round));
      if (!msg) continue;
      msg->set_sequence(static_cast<uint64_t>(round) + 1);
      f.report_bytes += static_cast<double>(msg->ByteSizeLong() + kFramingBytes);
      ++f.report_messages;
      heldDemand(first, agents[node].decoder.decode(*msg));
    }
    for (size_t k = 0; k < m.keys.size(); ++k) {
      const Key& key = m.keys[k];
      (*reports)[k] = {key.node, key.tenant, key.cls, key.dir, sent_demand[k]};
    }
  }

  int64_t nowNs(int round) const {
    return static_cast<int64_t>(std::llround(round * o.period_ms * 1e6));
  }

  // A node's demand as the agent has it (names, every entry: toDemandReport's message).
  tenantqos::v1::DemandReport wholeReport(size_t first, const std::vector<uint64_t>& demand) {
    const uint32_t node = m.keys[first].node;
    tenantqos::v1::DemandReport msg;
    msg.set_node(nodeName(node));
    msg.set_policy_version(1234);
    msg.add_addresses(nodeAddress(node));
    for (size_t k = first; k < first + keysPerNode(); k += 2) {  // (tx, rx) pairs
      auto* e = msg.add_demands();
      e->set_tenant(c.policy.tenants[m.keys[k].tenant].name);
      e->set_link(c.policy.shared_links[m.keys[k].cls].name);
      e->set_transmit_bytes_per_second(demand.empty() ? 0 : demand[k]);
      e->set_receive_bytes_per_second(demand.empty() ? 0 : demand[k + 1]);
    }
    return msg;
  }

  // What policyd's decoder returned for the node whose keys start at `first`: its entries come
  // in the order the agent first sent them (the node's keys never change here).
  void heldDemand(size_t first, const tq::Result<tenantqos::v1::DemandReport>& held) {
    if (!held.ok() || static_cast<size_t>(held->demands_size()) * 2 != keysPerNode()) {
      std::fprintf(stderr, "fabric_sim: policyd's decoder refused node %u's report: %s\n",
                   m.keys[first].node,
                   held.ok() ? "entries lost" : held.status().message().c_str());
      std::exit(1);
    }
    for (int i = 0; i < held->demands_size(); ++i) {
      const size_t k = first + 2 * static_cast<size_t>(i);
      sent_demand[k] = held->demands(i).transmit_bytes_per_second();
      sent_demand[k + 1] = held->demands(i).receive_bytes_per_second();
    }
  }

  // The streams' start, before the measured rounds: each agent's first (whole) report and
  // policyd's first (whole) caps, which also say that the other side reads the compact form.
  // Each node's stream starts at its own time within the 10 s of a whole message (agents
  // start at different times), so heartbeats and whole messages are spread over the rounds.
  void openStreams() {
    agents.clear();
    agents.reserve(static_cast<size_t>(o.nodes));
    const int spread = static_cast<int>(
        std::llround(static_cast<double>(tq::proto::kAllocateFullEveryNs) / (o.period_ms * 1e6)));
    tq::proto::DemandEncoder::Options eo;
    eo.deadband = o.deadband;
    eo.refresh_ns = nowNs(o.refresh_every);
    for (int n = 0; n < o.nodes; ++n) agents.emplace_back(eo);
    for (size_t first = 0; first < m.keys.size(); first += keysPerNode()) {
      const uint32_t node = m.keys[first].node;
      Agent& a = agents[node];
      const int64_t start = -nowNs(static_cast<int>(node) % std::max(spread, 1) + 1);
      auto msg = a.encoder.encode(wholeReport(first, {}), start);
      heldDemand(first, a.decoder.decode(*msg));
      a.encoder.setPeerCompact();
      a.caps.setPeerCompact();
      (void)a.caps.encode(wholeCaps(first, 0, start / 1'000'000), start);
    }
  }

  // A node's caps as policyd builds them (names, every entry).
  tenantqos::v1::NodeCaps wholeCaps(size_t first, int round, int64_t computed_ms) {
    const uint32_t node = m.keys[first].node;
    tenantqos::v1::NodeCaps msg;
    msg.set_node(nodeName(node));
    msg.set_term(7);
    msg.set_round(static_cast<uint64_t>(round) + 1);
    msg.set_policy_version(1234);
    msg.set_computed_at_unix_ms(computed_ms);
    msg.set_hold_ms(3000);
    msg.set_demand_sequence(static_cast<uint64_t>(round) + 1);
    msg.set_allocator("policyd-0.tenantqos.svc:7400");
    for (size_t k = first; k < first + keysPerNode(); k += 2) {
      const tq::SharedLinkSpec& cls = c.policy.shared_links[m.keys[k].cls];
      auto* e = msg.add_caps();
      e->set_tenant(c.policy.tenants[m.keys[k].tenant].name);
      e->set_link(cls.name);
      e->set_group(cls.groups[fm.link(cap_link[k]).group].name);
      e->set_transmit_cap_bytes_per_second(held_cap[k]);
      e->set_receive_cap_bytes_per_second(held_cap[k + 1]);
      e->set_tenant_nodes(c.tenants[m.keys[k].tenant].nodes.size() > 1 ? 2 : 1);
      e->set_link_pairs(static_cast<uint32_t>(c.o.leaf_size));
    }
    return msg;
  }

  // What policyd sends (policy/allocator_service.cc): a node's caps when any of them changed,
  // and at least every refresh_every rounds (its one-second heartbeat), through the stream's
  // encoder (the caps that changed, by key; a whole message every 10 s); the whole messages
  // of agents before compact streams beside it (the baseline).
  void push(int round, const tq::fabric::RoundResult& result) {
    const size_t per_node = keysPerNode();
    for (size_t first = 0; first < m.keys.size(); first += per_node) {
      const uint32_t node = m.keys[first].node;
      bool send = round - last_caps_round[node] >= o.refresh_every;
      for (size_t k = first; k < first + per_node && !send; ++k) {
        send = result.caps[k].cap != held_cap[k];
      }
      if (!send) continue;
      last_caps_round[node] = round;
      for (size_t k = first; k < first + per_node; ++k) held_cap[k] = result.caps[k].cap;
      const int64_t computed_ms = 1'780'000'000'000 + nowNs(round) / 1'000'000;
      const tenantqos::v1::NodeCaps whole = wholeCaps(first, round, computed_ms);
      f.whole_caps_bytes += static_cast<double>(whole.ByteSizeLong() + kFramingBytes);
      const tenantqos::v1::NodeCaps msg = agents[node].caps.encode(whole, nowNs(round));
      f.caps_bytes += static_cast<double>(msg.ByteSizeLong() + kFramingBytes);
      ++f.caps_messages;
    }
  }

  tq::fabric::RoundResult allocate(const std::vector<DemandReport>& reports) {
    const auto start = std::chrono::steady_clock::now();
    // With a workspace kept between rounds, as policyd's round thread keeps one.
    tq::fabric::RoundResult r =
        tq::fabric::allocateRound(fm, reports, {o.passes, o.coupling}, *workspace);
    const auto end = std::chrono::steady_clock::now();
    f.round_ms.push_back(std::chrono::duration<double, std::milli>(end - start).count());
    if (r.caps.size() != m.keys.size() || r.rejected != 0) {
      std::cerr << "fabric_sim: the allocator answered " << r.caps.size() << " caps for "
                << m.keys.size() << " keys (" << r.rejected << " rejected)\n";
      std::exit(1);
    }
    for (size_t k = 0; k < m.keys.size(); ++k) {
      if (r.caps[k].node != m.keys[k].node || r.caps[k].cls != m.keys[k].cls ||
          r.caps[k].direction != m.keys[k].dir) {
        std::cerr << "fabric_sim: caps out of the documented order\n";
        std::exit(1);
      }
    }
    return r;
  }
};

// The guaranteed rate of a ring: its guarantee on every link it crosses, within its upper bound.
double guaranteedRate(const Cluster& c, const Ring& ring) {
  const Tenant& t = c.tenants[ring.tenant];
  if (t.guarantee <= 0 || !t.on) return 0;
  return ring.links.empty() ? ring.upper : std::min(ring.upper, t.guarantee);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parseOptions(argc, argv, &o)) return 2;
  // One core: the allocator is single-threaded; pin so that its time is one core's (until the
  // real-path part, which gets every core back: policyd and the agents are other threads).
  cpu_set_t allowed;
  const bool pinned = sched_getaffinity(0, sizeof allowed, &allowed) == 0;
  if (pinned) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (!CPU_ISSET(cpu, &allowed)) continue;
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpu, &one);
      sched_setaffinity(0, sizeof one, &one);
      break;
    }
  }
  std::mt19937_64 rng(o.seed);
  Cluster c = buildCluster(o, rng);
  auto built = FabricModel::build(c.policy);
  if (!built.ok()) {
    std::cerr << "fabric_sim: " << built.status().message() << "\n";
    return 1;
  }
  const FabricModel& fm = *built;
  const Model m = buildModel(c, fm);
  Loop loop{c, fm, m, o, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}};
  loop.held_cap.assign(m.keys.size(), 0);
  loop.sent_demand.assign(m.keys.size(), 0);
  loop.whole_sent_demand.assign(m.keys.size(), 0);
  loop.last_caps_round.assign(o.nodes, -o.refresh_every);
  std::vector<DemandReport> reports;

  std::cerr << "fabric_sim: " << o.nodes << " nodes under " << c.leaves << " leaves"
            << (c.pods ? " in " + std::to_string(c.pods) + " pods" : std::string()) << ", "
            << o.rails << " rail(s), " << fm.linkCount() << " shared links, " << o.tenants
            << " tenants, " << m.keys.size() << " report keys, " << o.rounds << " rounds\n";

  // Before the first round the agents hold the caps of an all-idle round (each node its part of
  // its tenant's guarantee).
  std::vector<DemandReport> idle(m.keys.size());
  for (size_t k = 0; k < m.keys.size(); ++k) {
    idle[k] = {m.keys[k].node, m.keys[k].tenant, m.keys[k].cls, m.keys[k].dir, 0};
  }
  {
    auto r = tq::fabric::allocateRound(fm, idle, {o.passes, o.coupling});
    for (size_t k = 0; k < m.keys.size(); ++k) loop.held_cap[k] = r.caps[k].cap;
    loop.cap_link.resize(m.keys.size());
    for (size_t k = 0; k < m.keys.size(); ++k) loop.cap_link[k] = r.caps[k].link;
  }
  {
    const auto start = std::chrono::steady_clock::now();
    loop.openStreams();
    std::cerr << "fabric_sim: " << o.nodes << " streams opened in "
              << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()
              << " s\n";
  }

  std::ofstream data;
  if (!o.data.empty()) {
    data.open(o.data);
    data << "# round util_vs_reference min_attainment control_bytes round_ms step\n";
  }
  std::vector<double> ref;
  std::vector<char> contended;
  std::vector<double> ref_load;
  std::vector<std::vector<double>> window;  // ring rates per round of the current step
  int step_start = 0;
  auto startStep = [&](int round) {
    step_start = round;
    window.clear();
    ref = reference(c, m);
    ref_load.assign(m.links.size(), 0);
    std::vector<double> wants(m.links.size(), 0);
    for (size_t i = 0; i < m.rings.size(); ++i) {
      for (uint32_t l : m.rings[i].links) {
        ref_load[l] += ref[i];
        if (c.tenants[m.rings[i].tenant].on) wants[l] += m.rings[i].upper;
      }
    }
    contended.assign(m.links.size(), 0);
    for (size_t l = 0; l < m.links.size(); ++l) {
      contended[l] = wants[l] > m.links[l].allocatable * 1.0001;
    }
    for (size_t i = 0; i < m.rings.size(); ++i) {
      const double g = guaranteedRate(c, m.rings[i]);
      if (g > 0) loop.f.ref_attainment.push_back(ref[i] / g);
    }
  };
  auto endStep = [&](int round) {
    // Steady state: the last round of the step.
    const std::vector<double>& last = window.back();
    double sim_sum = 0, ref_sum = 0;
    for (size_t l = 0; l < m.links.size(); ++l) {
      if (!contended[l] || ref_load[l] <= 0) continue;
      sim_sum += loop.link_load[l];
      ref_sum += ref_load[l];
      loop.f.link_ratio_steady.push_back(loop.link_load[l] / ref_load[l]);
      loop.f.link_util_steady.push_back(loop.link_load[l] / m.links[l].allocatable);
    }
    if (ref_sum > 0) loop.f.util_ratio_steady.push_back(sim_sum / ref_sum);
    for (size_t i = 0; i < m.rings.size(); ++i) {
      const double g = guaranteedRate(c, m.rings[i]);
      if (g <= 0) continue;
      ++loop.f.guaranteed_checks;
      loop.f.attainment_steady.push_back(last[i] / g);
      if (last[i] < 0.99 * g) ++loop.f.guarantees_missed;
    }
    // Rounds to converge: the first round from which every ring stays within 2 % of a NIC of
    // where it ends.
    int converged = static_cast<int>(window.size());
    for (int r = static_cast<int>(window.size()) - 1; r >= 0; --r) {
      bool close = true;
      for (size_t i = 0; i < m.rings.size() && close; ++i) {
        close = std::fabs(window[r][i] - last[i]) <= 0.02 * std::max(last[i], 0.1 * c.nic);
      }
      if (!close) break;
      converged = r;
    }
    loop.f.converge_rounds.push_back(converged);
    (void)round;
  };

  startStep(0);
  std::uniform_real_distribution<> uni(0, 1);
  for (int round = 0; round < o.rounds; ++round) {
    if (round > 0 && round % o.step_every == 0) {
      endStep(round);
      for (Tenant& t : c.tenants)
        if (uni(rng) < o.step_fraction) t.on = !t.on;
      startStep(round);
    }
    const double bytes_before = loop.f.report_bytes + loop.f.caps_bytes;
    loop.rates();
    window.push_back(loop.x);
    loop.report(round, &reports);
    const auto result = loop.allocate(reports);
    loop.push(round, result);
    loop.f.peak_round_bytes =
        std::max(loop.f.peak_round_bytes, loop.f.report_bytes + loop.f.caps_bytes - bytes_before);
    // Per round, for the plot.
    double sim_sum = 0, ref_sum = 0, min_att = INFINITY;
    for (size_t l = 0; l < m.links.size(); ++l) {
      if (contended[l]) sim_sum += loop.link_load[l], ref_sum += ref_load[l];
    }
    for (size_t i = 0; i < m.rings.size(); ++i) {
      const double g = guaranteedRate(c, m.rings[i]);
      if (g <= 0) continue;
      min_att = std::min(min_att, loop.x[i] / g);
      if (loop.x[i] < 0.95 * g) ++loop.f.transient_dips;
    }
    if (data.is_open()) {
      data << round << " " << (ref_sum > 0 ? sim_sum / ref_sum : 1) << " "
           << (std::isfinite(min_att) ? min_att : 1) << " "
           << (loop.f.report_bytes + loop.f.caps_bytes - bytes_before) << " "
           << loop.f.round_ms.back() << " " << (round == step_start ? 1 : 0) << "\n";
    }
  }
  endStep(o.rounds);

  // ---- Figures ----
  const Figures& f = loop.f;
  const double rounds = o.rounds;
  const double per_s = 1000.0 / o.period_ms;
  const double up_per_round = f.report_bytes / rounds, down_per_round = f.caps_bytes / rounds;
  const double per_1000 = (up_per_round + down_per_round) * per_s / (o.nodes / 1000.0);
  const double peak_per_1000 = f.peak_round_bytes * per_s / (o.nodes / 1000.0);
  const double whole_per_1000 =
      (f.whole_report_bytes + f.whole_caps_bytes) / rounds * per_s / (o.nodes / 1000.0);
  double sim_util = 0;
  for (double u : f.util_ratio_steady) sim_util += u;
  sim_util = f.util_ratio_steady.empty() ? 1 : sim_util / f.util_ratio_steady.size();
  const double p50 = percentile(f.round_ms, 50), p99 = percentile(f.round_ms, 99);
  const double conv50 = percentile(f.converge_rounds, 50),
               conv_max = f.converge_rounds.empty() ? 0
                                                    : *std::max_element(f.converge_rounds.begin(),
                                                                        f.converge_rounds.end());
  const double att_min =
      f.attainment_steady.empty()
          ? 1
          : *std::min_element(f.attainment_steady.begin(), f.attainment_steady.end());
  const double ref_att_min = f.ref_attainment.empty() ? 1
                                                      : *std::min_element(f.ref_attainment.begin(),
                                                                          f.ref_attainment.end());

  std::printf(
      "fabric: %d nodes, %d leaves%s, %d rail(s), %zu shared links, %d tenants, %d rounds "
      "of %.0f ms\n",
      o.nodes, c.leaves, c.pods ? (" in " + std::to_string(c.pods) + " pods").c_str() : "", o.rails,
      fm.linkCount(), o.tenants, o.rounds, o.period_ms);
  std::printf(
      "  round compute (allocateRound, one core): p50 %.3f ms  p99 %.3f ms   (target p99 <= 20 "
      "ms)\n",
      p50, p99);
  std::printf(
      "  control bytes per round: reports %.0f B up (%zu messages), caps %.0f B down (%zu "
      "messages)\n",
      up_per_round, f.report_messages / static_cast<size_t>(o.rounds), down_per_round,
      f.caps_messages / static_cast<size_t>(o.rounds));
  std::printf(
      "  control bytes per second per 1000 nodes: %.0f B/s (%.3f MB/s at %.0f ms; target <= 1 "
      "MB/s); busiest round %.3f MB/s\n",
      per_1000, per_1000 / 1e6, o.period_ms, peak_per_1000 / 1e6);
  std::printf(
      "    baseline, the same loop's whole messages with names (agents before compact streams): "
      "%.3f MB/s (reports %.0f B, caps %.0f B per round); compact / whole %.3f\n",
      whole_per_1000 / 1e6, f.whole_report_bytes / rounds, f.whole_caps_bytes / rounds,
      whole_per_1000 > 0 ? per_1000 / whole_per_1000 : 0.0);
  std::printf("  rounds to converge after a step change: p50 %.0f  max %.0f  (%zu steps)\n", conv50,
              conv_max, f.converge_rounds.size());
  std::printf(
      "  contended links, steady state: utilisation vs reference %.4f (per link: p5 %.3f, min "
      "%.3f); "
      "of allocatable p5 %.3f  (target >= 0.95)\n",
      sim_util, percentile(f.link_ratio_steady, 5),
      f.link_ratio_steady.empty()
          ? 1.0
          : *std::min_element(f.link_ratio_steady.begin(), f.link_ratio_steady.end()),
      percentile(f.link_util_steady, 5));
  std::printf(
      "  guaranteed tenants, steady state: %zu checks, %zu missed (< 0.99), attainment min %.3f "
      "p50 %.3f (reference min %.3f)\n",
      f.guaranteed_checks, f.guarantees_missed, att_min, percentile(f.attainment_steady, 50),
      ref_att_min);
  std::printf(
      "  transients: %zu (ring, round) below 0.95 of the guarantee; %zu rounds with a link offered "
      "more than its capacity\n",
      f.transient_dips, f.overload_rounds);

  tq::bench::CapsPushResult push;
  if (o.grpc_agents > 0) {
    if (pinned) sched_setaffinity(0, sizeof allowed, &allowed);
    tq::bench::CapsPushOptions po;
    po.agents = static_cast<size_t>(o.grpc_agents);
    po.rounds = o.grpc_rounds;
    po.period_ms = o.grpc_period_ms;
    po.leaf_size = static_cast<size_t>(o.leaf_size);
    po.policyd = o.policyd;
    po.certs_script = std::string(TQ_SOURCE_DIR) + "/scripts/tq-certs.sh";
    auto measured = tq::bench::measureCapsPush(po);
    if (!measured.ok()) {
      std::cerr << "fabric_sim: caps push through gRPC: " << measured.status().message() << "\n";
      return 1;
    }
    push = *measured;
    std::printf(
        "  caps through gRPC (real policyd, mutual TLS, %zu agent connections reporting every "
        "%d ms, allocator period %d ms): round computed -> the last agent holds its caps: p50 "
        "%.1f ms  p99 %.1f ms  max %.1f ms over %d rounds (agents per round p50 %.0f; %d rounds "
        "reached < 90 %%, %d < 50 %% not measured)  (target p99 <= 100 ms)\n",
        push.agents, o.grpc_period_ms, o.grpc_period_ms, push.p50_ms, push.p99_ms, push.max_ms,
        push.rounds, push.agents_per_round_p50, push.partial_rounds, push.split_rounds);
  }

  if (!o.json.empty()) {
    std::ofstream j(o.json);
    j << "{\n"
      << "  \"nodes\": " << o.nodes << ",\n  \"tenants\": " << o.tenants
      << ",\n  \"leaves\": " << c.leaves << ",\n  \"pods\": " << c.pods
      << ",\n  \"rails\": " << o.rails << ",\n  \"shared_links\": " << fm.linkCount()
      << ",\n  \"rounds\": " << o.rounds << ",\n  \"period_ms\": " << o.period_ms
      << ",\n  \"hierarchy_passes\": " << o.passes << ",\n  \"round_ms_p50\": " << p50
      << ",\n  \"round_ms_p99\": " << p99 << ",\n  \"report_bytes_per_round\": " << up_per_round
      << ",\n  \"caps_bytes_per_round\": " << down_per_round
      << ",\n  \"control_bytes_per_s_per_1000_nodes\": " << per_1000
      << ",\n  \"control_bytes_per_s_per_1000_nodes_peak_round\": " << peak_per_1000
      << ",\n  \"control_bytes_per_s_per_1000_nodes_whole_messages\": " << whole_per_1000
      << ",\n  \"rounds_to_converge\": " << conv_max
      << ",\n  \"rounds_to_converge_p50\": " << conv50
      << ",\n  \"utilisation_vs_reference\": " << sim_util
      << ",\n  \"link_utilisation_vs_reference_p5\": " << percentile(f.link_ratio_steady, 5)
      << ",\n  \"link_utilisation_of_allocatable_p5\": " << percentile(f.link_util_steady, 5)
      << ",\n  \"guaranteed_checks\": " << f.guaranteed_checks
      << ",\n  \"guarantees_missed\": " << f.guarantees_missed
      << ",\n  \"attainment_min\": " << att_min
      << ",\n  \"attainment_p50\": " << percentile(f.attainment_steady, 50)
      << ",\n  \"reference_attainment_min\": " << ref_att_min
      << ",\n  \"transient_guarantee_dips\": " << f.transient_dips
      << ",\n  \"overload_rounds\": " << f.overload_rounds
      << ",\n  \"caps_push_agents\": " << push.agents
      << ",\n  \"caps_push_rounds\": " << push.rounds
      << ",\n  \"caps_push_split_rounds\": " << push.split_rounds
      << ",\n  \"caps_push_partial_rounds\": " << push.partial_rounds
      << ",\n  \"caps_push_agents_per_round_p50\": " << push.agents_per_round_p50
      << ",\n  \"caps_push_period_ms\": " << o.grpc_period_ms
      << ",\n  \"caps_push_ms_p50\": " << push.p50_ms
      << ",\n  \"caps_push_ms_p99\": " << push.p99_ms
      << ",\n  \"caps_push_ms_max\": " << push.max_ms << "\n}\n";
  }
  return 0;
}
