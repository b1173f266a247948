// The agent's side of the cluster allocator (docs/fabric.md): which shared links this node is
// behind, the caps the allocator sent for them, and what each tenant's link buckets enforce
// now. Pure: no clock, no I/O (the reconcile thread owns one and passes the time in).
//
// Modes, by the age of the allocator's last message (its hold_ms, --allocator-hold):
//   kAllocator  a message within hold and the stream up: the caps as sent;
//   kHeld       the stream is down but the last message is within hold: the caps as sent;
//   kStatic     no message within hold (or none ever): the static split below.
// Caps of an older election term than one seen are refused (a replica that still thinks it is
// active); the term seen is forgotten when the agent falls back to static, which is when
// nothing of the old term is enforced any more.
//
// The static split, per (tenant, class, direction), on the node's link of the class:
//     rate = min(limit, guarantee / k + spare / P)   with the last round's k and P, or
//     rate = min(limit, guarantee / n)               for a tenant the last round did not cover
// where guarantee, limit are the tenant's on the class (common/topology.h), k the tenant's nodes
// that reported on the link in the last round, P the (tenant, node) pairs there, n the nodes of
// the node's group (from the policy), and spare = allocatable - the sum of every tenant's
// guarantee on the class (what admission leaves). Why it keeps guarantees: while every node of
// a link is static, the tenants' rates there add up to at most
//     sum over tenants of guarantee  +  spare x (sum of k) / P  =  sum of guarantees + spare
// which is the link's allocatable capacity: the link is not oversubscribed, so every node gets
// its rate through, and a tenant whose demand is spread over its k nodes (a collective sends
// the same bytes from every rank) gets k x guarantee / k = its guarantee. What it does not keep:
// a tenant whose demand sits on fewer nodes than the last round saw gets less than its
// guarantee; a node that joins a tenant during the fallback adds guarantee / n to the link.
// A link bucket never refills below kMinLinkRate, so no connection stalls for good.
//
// Thread-safety: none (the reconcile thread's).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/fabric_peers.h"
#include "common/policy.h"
#include "common/shm_layout.h"
#include "common/status.h"

namespace tq::agent {

// 1 Mbit/s: the least a link bucket refills at.
inline constexpr uint64_t kMinLinkRate = 125'000;

struct FabricCap {
  std::string tenant;
  std::string link;  // the class
  std::string group;
  uint64_t tx = 0;  // bytes/s
  uint64_t rx = 0;
  uint32_t tenant_nodes = 1;
  uint32_t link_pairs = 1;
  friend bool operator==(const FabricCap&, const FabricCap&) = default;
};

struct FabricGroupPeers {
  std::string link;
  std::string group;
  std::vector<std::string> addresses;
  friend bool operator==(const FabricGroupPeers&, const FabricGroupPeers&) = default;
};

// One NodeCaps message, translated at the gRPC edge (agent/fabric_client.cc).
struct FabricCapsMessage {
  std::string node;
  uint64_t term = 0;
  uint64_t round = 0;
  uint64_t policy_version = 0;
  int64_t hold_ns = 0;
  std::vector<FabricCap> caps;
  std::optional<std::vector<FabricGroupPeers>> peers;  // set when the message carried them
  std::string allocator;
};

enum class FabricMode { kNone, kAllocator, kHeld, kStatic };
const char* fabricModeName(FabricMode mode);  // "none", "allocator", "held", "static"

// A shared link class this node is behind.
struct NodeLink {
  uint32_t index = 0;  // the bucket index (position among the node's classes)
  std::string name;    // the class
  std::string group;
  std::optional<uint32_t> rail;
  uint32_t group_nodes = 1;
  uint64_t allocatable = 0;  // per direction
  uint64_t guarantees = 0;   // every tenant's guarantee on the class, summed
  friend bool operator==(const NodeLink&, const NodeLink&) = default;
};

// What the agent reports: per tenant with processes, per link, each direction's demand.
struct FabricDemandEntry {
  std::string tenant;
  std::string link;
  uint64_t tx = 0;
  uint64_t rx = 0;
  friend bool operator==(const FabricDemandEntry&, const FabricDemandEntry&) = default;
};
struct FabricDemand {
  uint64_t policy_version = 0;
  std::vector<FabricDemandEntry> entries;
  friend bool operator==(const FabricDemand&, const FabricDemand&) = default;
};

// The fabric's state for metrics and /readyz.
struct FabricStatus {
  FabricMode mode = FabricMode::kNone;
  bool connected = false;
  uint64_t term = 0;
  uint64_t round = 0;
  std::string allocator;
  int64_t last_caps_age_ns = -1;  // -1: none received
  int64_t static_since_ns = 0;    // monotonic, when the mode became static (0: not static)
  uint64_t caps_refused = 0;      // messages refused (an older term, another node)
  std::vector<NodeLink> links;
};

class FabricLinks {
 public:
  // The node's links under `policy` (classes with a group holding `node`, in policy order, at
  // most shm::kMaxLinkBuckets: more are left out and said so in the returned warnings).
  std::vector<std::string> setPolicy(const PolicySpec& policy, const std::string& node);
  const std::vector<NodeLink>& links() const { return links_; }

  // A message of the allocator: kFailedPrecondition (counted, not taken) for another node's or
  // an older term's.
  Status onCaps(FabricCapsMessage message, int64_t now_ns);
  void setConnected(bool connected, int64_t now_ns);

  FabricMode mode(int64_t now_ns) const;
  // What `tenant`'s bucket of `link` enforces in direction `dir` at `now_ns`.
  uint64_t rate(const TenantSpec& tenant, const NodeLink& link, shm::Direction dir,
                int64_t now_ns) const;
  uint64_t staticRate(const TenantSpec& tenant, const NodeLink& link) const;

  // For the plugin (common/fabric_peers.h): the node's links and their groups' other members.
  FabricPeerMap peerMap() const;
  FabricStatus status(int64_t now_ns) const;

  // Logs a change of mode once (call every allocation period).
  void logTransitions(int64_t now_ns);

 private:
  const FabricCap* capOf(const std::string& tenant, const std::string& link) const;

  std::string node_;
  std::vector<NodeLink> links_;
  std::optional<FabricCapsMessage> last_;  // the last message taken
  int64_t last_at_ns_ = 0;
  std::map<std::pair<std::string, std::string>, size_t> cap_index_;  // (tenant, link) -> caps[i]
  std::map<std::string, std::vector<std::string>> peers_;            // link -> addresses
  uint64_t max_term_ = 0;
  bool connected_ = false;
  uint64_t refused_ = 0;
  FabricMode logged_mode_ = FabricMode::kNone;
  int64_t static_since_ns_ = 0;
};

}  // namespace tq::agent
