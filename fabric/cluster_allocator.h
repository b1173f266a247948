// One round of the cluster allocator: per-(node, tenant, shared link class, direction) demand in,
// per-(node, tenant, class, direction) caps out. Pure: no clock, no I/O, no state between rounds;
// the same reports give the same caps, whatever their order. policyd's allocator loop, the agent
// side's tests and bench/fabric call this function, so what the bench measures is what runs.
//
// Per shared link and direction (a group's uplink, tx or rx), the rule of a node's NIC:
// tq::allocate() (common/allocation.h) over the tenants that reported demand there, with each
// tenant's guarantee, limit and weight on the link's class (common/topology.h) and its demand
// summed over its nodes behind the link. Then each tenant's allocation A is split among those
// nodes:
//
//   rate(n) = A x demand(n) / sum of demand          (never above the node's demand)
//   cap(n)  = rate(n) + unused / k,  unused = max(0, min(guarantee, limit) - A)
//
// where k is the number of the tenant's nodes that reported on the link (demand 0 included).
// cap is what the node enforces (its bucket's refill rate), rate what it is expected to use.
//
// Nodes with zero demand, and nodes with no report:
//   - a node that reports demand 0 gets rate 0 and cap = its even part of the tenant's unused
//     guarantee. The caps of the tenant's nodes on the link add up to max(A, guarantee): when
//     the tenant wakes (an all-reduce starts on all its nodes at once) it has its whole
//     guarantee on the link at once, before the next round, as a node's bucket keeps its
//     guarantee (common/allocation.h). The price is the same: until the next round the caps on
//     a link may add up to more than its capacity, by at most the sum of the tenants' unused
//     guarantees, which admission bounds by the capacity itself.
//   - a node that reports nothing for a (tenant, class, direction) gets no cap from the round:
//     the allocator cannot tell that it hosts the tenant. Agents report every tenant they host
//     on every class they are behind, zeros included.
//   Guarantees hold because a tenant's allocation is computed on its demand summed over all its
//   nodes: allocate() gives it min(summed demand, guarantee) first, whichever of its nodes the
//   demand is on, and the split hands all of A to the nodes that want it.
//
// Demand is clamped to the tenant's limit on the class (kUnboundedDemand means "backlogged":
// it takes up to its limit), so no report can claim more than the policy allows.
//
// Hierarchy (a leaf's uplink below its pod's, model.h): a node's traffic that crosses the pod's
// link crosses the leaf's too, so what it can use is the minimum of its caps along the path, and
// what one link allocates beyond that minimum is idle there. With hierarchy_passes > 1 the round
// recomputes every link with each node's demand bounded by the caps of the previous pass:
//   on the upper link: min(demand, cap below);
//   on the lower link: demand - demand above + min(demand above, cap above).
// Measured by bench/fabric (docs/fabric.md): the passes matter only where classes nest.
//
// Coupled tenants (options.coupled_tenants): an NCCL collective runs at the pace of its slowest
// link, so a tenant's nodes whose buckets do not hold them back report what they carry (x 1.05,
// the agent's headroom), and a link gives such a node only that: when the tenant's bottleneck
// frees up, the tenant grows by that 5 % per round, the bottleneck moving from link to link.
// With coupling_passes > 0, a tenant with a key at its limit (held back by a cap somewhere) is
// filled progressively within the round: on each pass it asks for its limit where it got the
// least (its bottleneck) and for that least elsewhere, so a bottleneck that frees up lets it rise
// on the next pass and what its other links would give it beyond its bottleneck goes to other
// tenants; after the last pass every key of the tenant asks for the least it got. It reaches its
// bottleneck in the round, not 5 % per round. Wrong for a tenant whose flows are independent
// (one held-back flow would bound the others), hence an option; measured by bench/fabric
// (docs/fabric.md).
//
// Units: bytes per second. Thread-safety: pure function (a RoundWorkspace is one caller's).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/allocation.h"
#include "fabric/model.h"

namespace tq::fabric {

struct DemandReport {
  uint32_t node = 0;  // FabricModel indexes
  uint32_t tenant = 0;
  uint32_t cls = 0;  // the class; the node's group in it is the link
  Direction direction = Direction::kTx;
  uint64_t demand = 0;  // bytes/s of the tenant's traffic of this node across the link, or
                        // kUnboundedDemand
};

struct LinkCap {
  uint32_t node = 0;
  uint32_t tenant = 0;
  uint32_t cls = 0;
  Direction direction = Direction::kTx;
  uint32_t link = 0;  // the shared link (FabricModel::link)
  uint64_t rate = 0;  // the node's part of the tenant's allocation (<= its demand)
  uint64_t cap = 0;   // what the node enforces: rate + its part of the unused guarantee
  friend bool operator==(const LinkCap&, const LinkCap&) = default;
};

// A tenant on one link and direction: for metrics, logs and tests.
struct TenantOnLink {
  uint32_t link = 0;
  Direction direction = Direction::kTx;
  uint32_t tenant = 0;
  uint64_t demand = 0;      // summed over its nodes, clamped to its limit
  uint64_t allocation = 0;  // allocate()'s rate
  uint32_t nodes = 0;       // nodes that reported
  friend bool operator==(const TenantOnLink&, const TenantOnLink&) = default;
};

struct RoundOptions {
  uint32_t hierarchy_passes = 1;  // >= 1; more only helps where classes nest
  // > 0: each tenant's traffic runs at one rate on every link it crosses (an NCCL ring runs at
  // its slowest hop; an all-to-all step ends with its slowest pair), filled over this many
  // passes (see "Coupled tenants" above). 0: a tenant's keys are independent.
  uint32_t coupling_passes = 0;
};

struct RoundResult {
  std::vector<LinkCap> caps;          // one per accepted report, by (node, tenant, cls, direction)
  std::vector<TenantOnLink> tenants;  // by (link, direction, tenant)
  size_t rejected = 0;    // unknown index, or a class whose links the node is not behind
  size_t duplicates = 0;  // a later report of the same key replaced an earlier one
};

// The working memory of rounds, kept by a caller that runs one round after another (policyd's
// round thread, bench/fabric) so that a round does not allocate and fault in its buffers again:
// about 10 MB with 65,536 reports. It holds nothing a result depends on: a round with a
// workspace gives exactly what one without gives. Not thread-safe: one per thread.
class RoundWorkspace {
 public:
  RoundWorkspace();
  ~RoundWorkspace();
  RoundWorkspace(const RoundWorkspace&) = delete;
  RoundWorkspace& operator=(const RoundWorkspace&) = delete;
  struct Buffers;  // cluster_allocator.cc
  Buffers& buffers() { return *buffers_; }

 private:
  std::unique_ptr<Buffers> buffers_;
};

RoundResult allocateRound(const FabricModel& model, std::span<const DemandReport> reports,
                          const RoundOptions& options = {});
RoundResult allocateRound(const FabricModel& model, std::span<const DemandReport> reports,
                          const RoundOptions& options, RoundWorkspace& workspace);

}  // namespace tq::fabric
