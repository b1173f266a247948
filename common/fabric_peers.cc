#include "common/fabric_peers.h"

#include <arpa/inet.h>

#include <cstring>

#include "common/policy.h"
#include "common/shm_layout.h"

namespace tq {
namespace {

constexpr std::string_view kHeader = "tenantqos-fabric-peers 1";
constexpr std::string_view kHeaderWithDevices = "tenantqos-fabric-peers 2";

std::vector<std::string_view> words(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && line[i] == ' ') ++i;
    size_t j = i;
    while (j < line.size() && line[j] != ' ') ++j;
    if (j > i) out.push_back(line.substr(i, j - i));
    i = j;
  }
  return out;
}

std::optional<uint32_t> smallNumber(std::string_view s, uint32_t max) {
  if (s.empty() || s.size() > 5) return std::nullopt;
  uint32_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint32_t>(c - '0');
  }
  if (v > max) return std::nullopt;
  return v;
}

bool printableWord(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  for (char c : s) {
    if (c <= ' ' || c > '~') return false;
  }
  return true;
}

}  // namespace

std::optional<std::string> canonicalAddress(std::string_view address) {
  if (address.empty() || address.size() > 45) return std::nullopt;
  const std::string a(address);
  unsigned char buf[16];
  char out[INET6_ADDRSTRLEN];
  if (::inet_pton(AF_INET, a.c_str(), buf) == 1) {
    if (::inet_ntop(AF_INET, buf, out, sizeof out) == nullptr) return std::nullopt;
    return std::string(out);
  }
  if (::inet_pton(AF_INET6, a.c_str(), buf) == 1) {
    static const unsigned char kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (std::memcmp(buf, kMapped, 12) == 0) {
      if (::inet_ntop(AF_INET, buf + 12, out, sizeof out) == nullptr) return std::nullopt;
      return std::string(out);
    }
    if (::inet_ntop(AF_INET6, buf, out, sizeof out) == nullptr) return std::nullopt;
    return std::string(out);
  }
  return std::nullopt;
}

std::string formatFabricPeers(const FabricPeerMap& map) {
  std::string out(map.device_rails.empty() ? kHeader : kHeaderWithDevices);
  out += "\n";
  for (const FabricLinkPeers& l : map.links) {
    out += "link " + std::to_string(l.index) + " " + l.name + " " + l.group + " " +
           (l.rail ? std::to_string(*l.rail) : std::string("all")) + "\n";
  }
  for (const FabricLinkPeers& l : map.links) {
    for (const std::string& p : l.peers) out += "peer " + std::to_string(l.index) + " " + p + "\n";
  }
  for (const auto& [device, rail] : map.device_rails) {
    out += "device " + device + " " + std::to_string(rail) + "\n";
  }
  return out;
}

Result<FabricPeerMap> parseFabricPeers(std::string_view text) {
  if (text.size() > kMaxFabricPeersBytes) {
    return invalidArgument("fabric peers: " + std::to_string(text.size()) + " bytes, more than " +
                           std::to_string(kMaxFabricPeersBytes));
  }
  FabricPeerMap map;
  size_t line_no = 0;
  size_t pos = 0;
  bool header = false;
  bool devices_allowed = false;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    auto bad = [&](const std::string& why) {
      return invalidArgument("fabric peers line " + std::to_string(line_no) + ": " + why);
    };
    if (!header) {
      if (line != kHeader && line != kHeaderWithDevices) {
        return bad("not a tenantqos-fabric-peers 1 or 2 file");
      }
      header = true;
      devices_allowed = line == kHeaderWithDevices;
      continue;
    }
    if (line.empty()) continue;
    const std::vector<std::string_view> w = words(line);
    if (w[0] == "link") {
      if (w.size() != 5) return bad("a link line has 4 fields");
      auto index = smallNumber(w[1], shm::kMaxLinkBuckets - 1);
      if (!index) return bad("link index is not 0.." + std::to_string(shm::kMaxLinkBuckets - 1));
      if (!printableWord(w[2]) || !printableWord(w[3])) return bad("bad link or group name");
      FabricLinkPeers l;
      l.index = *index;
      l.name = std::string(w[2]);
      l.group = std::string(w[3]);
      if (w[4] != "all") {
        auto rail = smallNumber(w[4], kMaxRail);
        if (!rail) return bad("rail is not 0.." + std::to_string(kMaxRail) + " or all");
        l.rail = *rail;
      }
      for (const FabricLinkPeers& o : map.links) {
        if (o.index == l.index) return bad("link index " + std::to_string(l.index) + " twice");
      }
      map.links.push_back(std::move(l));
    } else if (w[0] == "peer") {
      if (w.size() != 3) return bad("a peer line has 2 fields");
      auto index = smallNumber(w[1], shm::kMaxLinkBuckets - 1);
      FabricLinkPeers* link = nullptr;
      for (FabricLinkPeers& o : map.links) {
        if (index && o.index == *index) link = &o;
      }
      if (link == nullptr) return bad("peer of a link index no link line names");
      auto address = canonicalAddress(w[2]);
      if (!address || *address != w[2]) return bad("not a canonical IPv4 or IPv6 address");
      link->peers.insert(std::move(*address));
    } else if (w[0] == "device") {
      if (!devices_allowed) return bad("a device line in a version 1 file");
      if (w.size() != 3) return bad("a device line has 2 fields");
      if (!printableWord(w[1])) return bad("bad device name");
      auto rail = smallNumber(w[2], kMaxRail);
      if (!rail) return bad("rail is not 0.." + std::to_string(kMaxRail));
      if (map.device_rails.size() >= kMaxFabricDevices) {
        return bad("more than " + std::to_string(kMaxFabricDevices) + " devices");
      }
      if (!map.device_rails.emplace(std::string(w[1]), *rail).second) {
        return bad("device " + std::string(w[1]) + " twice");
      }
    } else {
      return bad("unknown record \"" + std::string(w[0].substr(0, 16)) + "\"");
    }
  }
  if (!header) return invalidArgument("fabric peers: empty file");
  return map;
}

std::optional<uint32_t> railOf(const FabricPeerMap& map, std::string_view device) {
  auto it = map.device_rails.find(device);
  if (it == map.device_rails.end()) return std::nullopt;
  return it->second;
}

bool crossesLink(const FabricLinkPeers& link, const std::string& peer,
                 std::optional<uint32_t> rail) {
  if (link.rail && rail && *link.rail != *rail) return false;
  return link.peers.count(peer) == 0;
}

}  // namespace tq
