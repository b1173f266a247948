// The node's map of which peers are behind which shared fabric link (docs/fabric.md): written
// by the agent from the cluster allocator's messages, read by the NCCL plugin to decide which
// of a tenant's link buckets (common/shm_layout.h, kScopeFabricLink) a connection charges.
//
// File <run-dir>/fabric-peers (attach::fabricPeersPath), root-owned, mode 0644, replaced
// atomically; text, one record per line:
//
//   tenantqos-fabric-peers 1
//   link INDEX NAME GROUP RAIL      one per shared link class the node is behind; INDEX is the
//                                   bucket index of the class (0..kMaxLinkBuckets-1), RAIL a
//                                   rail number or "all"
//   peer INDEX ADDRESS              an address of another node of the node's group in that class
//
// A connection to ADDRESS crosses the link of class INDEX unless a `peer INDEX ADDRESS` line
// names it: an unknown peer crosses (the safe side: its bytes are charged to the link). A class
// with a rail applies only to connections on a device of that rail. Addresses are IPv4 or IPv6
// literals in canonical form (inet_ntop; an IPv4-mapped IPv6 address is its IPv4 address).
//
// The plugin reads a file other processes could have replaced only if they are root; it still
// parses it as untrusted input: bounded (kMaxFabricPeersBytes, kMaxLinkBuckets classes), every
// line checked, the first bad line an error naming it (the plugin then charges every link).
// Pure; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tq {

inline constexpr size_t kMaxFabricPeersBytes = 4u << 20;

struct FabricLinkPeers {
  uint32_t index = 0;  // the bucket index of the class on this node
  std::string name;    // the shared link class
  std::string group;   // the node's group in it
  std::optional<uint32_t> rail;
  std::set<std::string> peers;  // canonical addresses of the group's other nodes
  friend bool operator==(const FabricLinkPeers&, const FabricLinkPeers&) = default;
};

struct FabricPeerMap {
  std::vector<FabricLinkPeers> links;  // by index
  friend bool operator==(const FabricPeerMap&, const FabricPeerMap&) = default;
};

// The canonical text of an IPv4/IPv6 literal, or nullopt when it is not one.
std::optional<std::string> canonicalAddress(std::string_view address);

std::string formatFabricPeers(const FabricPeerMap& map);
// kInvalidArgument naming the line for anything but the format above.
Result<FabricPeerMap> parseFabricPeers(std::string_view text);

// Whether a connection to `peer` (canonical) on a device of `rail` (nullopt: unknown) crosses
// `link`: not when the link is for another rail, nor when `peer` is in its group.
bool crossesLink(const FabricLinkPeers& link, const std::string& peer,
                 std::optional<uint32_t> rail);

}  // namespace tq
