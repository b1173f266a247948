// The policy domain model: what tenants get on which class of link. Plain values, shared by the
// policy service (YAML in, validation), the agent (from the wire) and tenantqosctl.
// Protobuf types never appear beyond proto/convert.h; YAML never beyond policy/.
// Rates: bytes per second.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace tq {

// Tenants one node agent enforces: each is an HTB class with DSCP filters per managed device, a
// shared-memory file the agent keeps open (an fd), and work in every allocation period. Policy
// validation and usage reports use this one number.
inline constexpr size_t kMaxTenantsPerAgent = 4096;

struct LinkSpec {
  std::string name;
  uint64_t capacity_bytes_per_second = 0;
  double headroom_percent = 0;
  friend bool operator==(const LinkSpec&, const LinkSpec&) = default;
};

// The topology: classes of links between switches that groups of nodes share (a leaf switch's
// uplink, a pod's, a rail's). Each group of a class has one such link; traffic between a member
// of the group and a node outside it crosses the link, leaving the group ("tx", up) or entering
// it ("rx", down), each direction with the link's capacity. A node is in at most one group of a
// class. Guarantees, limits and weights hold on every shared link a tenant crosses, for the
// tenant's traffic summed over its nodes (docs/policy.md, "Shared links").
inline constexpr uint32_t kMaxRail = 255;  // a shared link class's or a device's rail

struct LinkGroupSpec {
  std::string name;
  std::vector<std::string> nodes;          // Kubernetes node names
  uint64_t capacity_bytes_per_second = 0;  // per direction; 0: the shared link's capacity
  friend bool operator==(const LinkGroupSpec&, const LinkGroupSpec&) = default;
};

struct SharedLinkSpec {
  std::string name;
  uint64_t capacity_bytes_per_second = 0;  // per direction, of each group's link (0: per group)
  double headroom_percent = 0;
  // Only the traffic of the nodes' devices on this rail (0..kMaxRail; Net ABI railId) crosses
  // the class's links; absent: all the nodes' traffic.
  std::optional<uint32_t> rail;
  std::vector<LinkGroupSpec> groups;
  friend bool operator==(const SharedLinkSpec&, const SharedLinkSpec&) = default;
};

// A tenant's own values on one shared link class; each absent value is the tenant's own
// (common/topology.h: tenantShareOn() is the one rule).
struct TenantLinkValues {
  std::string link;  // a SharedLinkSpec.name
  std::optional<uint64_t> guarantee_bytes_per_second;
  std::optional<uint64_t> limit_bytes_per_second;
  std::optional<uint32_t> weight;
  friend bool operator==(const TenantLinkValues&, const TenantLinkValues&) = default;
};

struct TenantSpec {
  std::string name;
  std::string link;
  uint64_t guarantee_bytes_per_second = 0;
  uint64_t limit_bytes_per_second = 0;
  uint32_t weight = 1;  // share of spare capacity; the policy file's default
  uint32_t service_level = 0;
  uint32_t dscp = 0;
  std::vector<int32_t> traffic_classes;
  bool share_class = false;
  // The platform's names for the tenant, for the admission webhook: Kubernetes namespaces and
  // Volcano queues whose pods belong to it (each name belongs to one tenant); `is_default`:
  // the tenant of pods that match no name (at most one tenant).
  std::vector<std::string> namespaces;
  std::vector<std::string> volcano_queues;
  bool is_default = false;
  // Unix group (numeric gid or name) of the tenant's attach directory on the nodes; empty: root
  // only. Decides which processes of a node can attach as this tenant (common/attach_protocol.h).
  std::string unix_group;
  // Values on shared link classes that differ from the tenant's own (at most one per class).
  std::vector<TenantLinkValues> shared_links;
  friend bool operator==(const TenantSpec&, const TenantSpec&) = default;
};

struct PolicySpec {
  std::vector<LinkSpec> links;
  std::vector<TenantSpec> tenants;
  std::vector<SharedLinkSpec> shared_links;  // the topology; empty: none described
  friend bool operator==(const PolicySpec&, const PolicySpec&) = default;

  const LinkSpec* findLink(const std::string& name) const {
    for (const auto& l : links)
      if (l.name == name) return &l;
    return nullptr;
  }
  const SharedLinkSpec* findSharedLink(const std::string& name) const {
    for (const auto& l : shared_links)
      if (l.name == name) return &l;
    return nullptr;
  }
};

// A policy with its version, as the agent holds it.
struct VersionedPolicy {
  uint64_t version = 0;
  PolicySpec policy;
  std::string store_epoch;  // the policy store's identity (policy/store.h); "" = unknown
  friend bool operator==(const VersionedPolicy&, const VersionedPolicy&) = default;
};

// What a node agent reports about one tenant (ReportUsage), and what `tenantqosctl top` shows.
// Named *Report so it does not clash with the shm-level TenantUsage (common/tenant_shm.h).
struct TenantUsageReport {
  std::string tenant;
  uint64_t transmit_bytes_total = 0;
  uint64_t receive_bytes_total = 0;
  uint64_t transmit_rate_bytes_per_second = 0;  // over the agent's last report interval
  uint64_t allocated_rate_bytes_per_second = 0;
  uint64_t guarantee_bytes_per_second = 0;
  uint64_t limit_bytes_per_second = 0;
  double throttled_seconds_total = 0;
  uint32_t processes = 0;
  friend bool operator==(const TenantUsageReport&, const TenantUsageReport&) = default;
  // Adds another node's figures of the same tenant (cluster totals: policyd's GetUsage, and
  // `tenantqosctl top` over several replicas). Each figure is an agent's word: a sum saturates
  // at the type's maximum instead of wrapping, so one node's absurd figure cannot turn the
  // others' into a small number.
  TenantUsageReport& operator+=(const TenantUsageReport& o) {
    auto add = []<typename T>(T& a, T b) {
      a = a > std::numeric_limits<T>::max() - b ? std::numeric_limits<T>::max() : a + b;
    };
    add(transmit_bytes_total, o.transmit_bytes_total);
    add(receive_bytes_total, o.receive_bytes_total);
    add(transmit_rate_bytes_per_second, o.transmit_rate_bytes_per_second);
    add(allocated_rate_bytes_per_second, o.allocated_rate_bytes_per_second);
    add(guarantee_bytes_per_second, o.guarantee_bytes_per_second);
    add(limit_bytes_per_second, o.limit_bytes_per_second);
    add(processes, o.processes);
    throttled_seconds_total = std::min(throttled_seconds_total + o.throttled_seconds_total,
                                       std::numeric_limits<double>::max());
    return *this;
  }
};

struct NodeUsageReport {
  std::string node;
  uint64_t policy_version = 0;    // the version the node enforces
  int64_t timestamp_unix_ms = 0;  // when the agent took the report
  std::vector<TenantUsageReport> tenants;
  std::vector<std::string> errors;  // reconcile errors the node could not resolve
  friend bool operator==(const NodeUsageReport&, const NodeUsageReport&) = default;
};

}  // namespace tq
