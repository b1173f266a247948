// The node's map of which peers are behind which shared fabric link (docs/fabric.md): written
// by the agent from the cluster allocator's messages, read by the NCCL plugin to decide which
// of a tenant's link buckets (common/shm_layout.h, kScopeFabricLink) a connection charges.
//
// File <run-dir>/fabric-peers (attach::fabricPeersPath), root-owned, mode 0644, replaced
// atomically; text, one record per line:
//
//   tenantqos-fabric-peers 1        (2 when the file has device lines)
//   link INDEX NAME GROUP RAIL      one per shared link class the node is behind; INDEX is the
//                                   bucket index of the class (0..kMaxLinkBuckets-1), RAIL a
//                                   rail number or "all"
//   peer INDEX ADDRESS              an address of another node of the node's group in that class
//   device NAME RAIL                the rail of one of the node's network devices (the agent's
//                                   --device DEV=LINK,rail=N), at most kMaxFabricDevices
//
// A connection to ADDRESS crosses the link of class INDEX unless a `peer INDEX ADDRESS` line
// names it: an unknown peer crosses (the safe side: its bytes are charged to the link). A class
// with a rail applies only to connections on a device of that rail; a device no `device` line
// names is on every rail (charged to each rail's class: the safe side). Addresses are IPv4 or
// IPv6 literals in canonical form (inet_ntop; an IPv4-mapped IPv6 address is its IPv4 address).
// The version is 1 unless device lines are present, so a plugin of the release before rails
// still reads a map without them; one that meets a version-2 file charges every link, as for
// any file it cannot read.
//
// The plugin reads a file other processes could have replaced only if they are root; it still
// parses it as untrusted input: bounded (kMaxFabricPeersBytes, kMaxLinkBuckets classes), every
// line checked, the first bad line an error naming it (the plugin then charges every link).
// Pure; thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tq {

inline constexpr size_t kMaxFabricPeersBytes = 4u << 20;
inline constexpr size_t kMaxFabricDevices = 64;  // device lines (a node's NICs)

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
  // Kernel network device name -> its rail (only the devices the agent was told a rail of).
  std::map<std::string, uint32_t, std::less<>> device_rails;
  friend bool operator==(const FabricPeerMap&, const FabricPeerMap&) = default;
};

// The canonical text of an IPv4/IPv6 literal, or nullopt when it is not one.
std::optional<std::string> canonicalAddress(std::string_view address);

std::string formatFabricPeers(const FabricPeerMap& map);
// kInvalidArgument naming the line for anything but the format above.
Result<FabricPeerMap> parseFabricPeers(std::string_view text);

// The rail of kernel network device `device` (nullopt: the map does not say: every rail).
std::optional<uint32_t> railOf(const FabricPeerMap& map, std::string_view device);

// Whether a connection to `peer` (canonical; empty: no address, as an InfiniBand peer) on a
// device of `rail` (nullopt: unknown) crosses `link`: not when the link is for another rail,
// nor when `peer` is in its group.
bool crossesLink(const FabricLinkPeers& link, const std::string& peer,
                 std::optional<uint32_t> rail);

}  // namespace tq
