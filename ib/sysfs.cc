#include "ib/sysfs.h"

#include <dirent.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>

#include "common/file_util.h"
#include "common/log.h"

namespace tq::ib {
namespace {

constexpr uint64_t kMaxAttrBytes = 4096;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return s;
}

// Reads a sysfs attribute, trimmed. Errors keep readFile's context (path and errno text).
Result<std::string> readAttr(const std::string& path) {
  TQ_ASSIGN_OR_RETURN(std::string text, readFile(path, kMaxAttrBytes));
  return std::string(trim(text));
}

std::string readAttrOr(const std::string& path, std::string fallback = "") {
  auto r = readAttr(path);
  return r.ok() ? *r : fallback;
}

// Entry names of a directory (without . and ..); *missing is set when it does not exist.
Result<std::vector<std::string>> listDir(const std::string& path, bool* missing) {
  *missing = false;
  DIR* d = opendir(path.c_str());
  if (d == nullptr) {
    if (errno == ENOENT || errno == ENOTDIR) {
      *missing = true;
      return std::vector<std::string>{};
    }
    return errnoStatus("list " + path);
  }
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) {
    std::string_view n = e->d_name;
    if (n == "." || n == "..") continue;
    names.emplace_back(n);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

bool parseU64(std::string_view s, uint64_t* out, int base = 10) {
  s = trim(s);
  if (base == 16 && s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) s.remove_prefix(2);
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out, base);
  return ec == std::errc() && p == s.data() + s.size();
}

// Numeric directory entries ("0", "1", ...) sorted numerically.
std::vector<int> numericEntries(const std::vector<std::string>& names) {
  std::vector<int> out;
  for (const auto& n : names) {
    uint64_t v;
    if (parseU64(n, &v) && v < (1u << 20)) out.push_back(static_cast<int>(v));
  }
  std::sort(out.begin(), out.end());
  return out;
}

Result<PortInfo> readPort(const std::string& sysfs_root, const std::string& port_dir, int port) {
  PortInfo info;
  info.port = port;
  TQ_ASSIGN_OR_RETURN(std::string state, readAttr(port_dir + "/state"));
  if (!parseNumberedState(state, &info.state, &info.state_name)) {
    return dataLoss(port_dir + "/state: unexpected content \"" + state + "\"");
  }
  std::string phys = readAttrOr(port_dir + "/phys_state");
  if (!phys.empty()) parseNumberedState(phys, &info.phys_state, &info.phys_state_name);
  std::string ll = readAttrOr(port_dir + "/link_layer");
  if (ll == "InfiniBand") {
    info.link_layer = LinkLayer::kInfiniBand;
  } else if (ll == "Ethernet") {
    info.link_layer = LinkLayer::kEthernet;
  }
  info.rate_bytes_per_second = parseSysfsRate(readAttrOr(port_dir + "/rate"));
  uint64_t lid = 0;
  if (parseU64(readAttrOr(port_dir + "/lid"), &lid, 16) && lid <= 0xffffffffu) {
    info.lid = static_cast<uint32_t>(lid);
  }

  bool missing = false;
  TQ_ASSIGN_OR_RETURN(auto gid_names, listDir(port_dir + "/gids", &missing));
  for (int index : numericEntries(gid_names)) {
    std::string idx = std::to_string(index);
    // Unused table entries read as all zeros (older kernels) or fail with EINVAL (newer ones).
    auto text = readAttr(port_dir + "/gids/" + idx);
    if (!text.ok()) continue;
    auto gid = parseGid(*text);
    if (!gid.ok() || gid->isZero()) continue;
    GidEntry e;
    e.index = index;
    e.gid = *gid;
    std::string type = readAttrOr(port_dir + "/gid_attrs/types/" + idx);
    if (type == "RoCE v2") {
      e.type = GidType::kRoceV2;
    } else if (type == "IB/RoCE v1") {
      e.type = GidType::kIbOrRoceV1;
    }
    e.netdev = readAttrOr(port_dir + "/gid_attrs/ndevs/" + idx);
    info.gids.push_back(std::move(e));
  }
  if (info.link_layer == LinkLayer::kEthernet) {
    for (const auto& g : info.gids) {
      if (!g.netdev.empty()) {
        info.netdev = g.netdev;
        break;
      }
    }
    uint64_t mtu = 0;
    if (!info.netdev.empty() &&
        parseU64(readAttrOr(sysfs_root + "/class/net/" + info.netdev + "/mtu"), &mtu) &&
        mtu < (1u << 20)) {
      info.active_mtu = roceActiveMtu(static_cast<int>(mtu));
    }
  }
  return info;
}

void readCounterDir(const std::string& dir, std::map<std::string, uint64_t>* out) {
  bool missing = false;
  auto names = listDir(dir, &missing);
  if (!names.ok()) {
    TQ_LOG(kDebug, "%s", names.status().message().c_str());
    return;
  }
  for (const auto& n : *names) {
    // hw_counters/lifespan is the refresh period of the counters (ms), not a counter.
    if (n == "lifespan") continue;
    auto text = readAttr(dir + "/" + n);
    uint64_t v;
    if (text.ok() && parseU64(*text, &v)) (*out)[n] = v;
  }
}

std::optional<uint64_t> lookup(const std::map<std::string, uint64_t>& m, const char* key) {
  auto it = m.find(key);
  if (it == m.end()) return std::nullopt;
  return it->second;
}

}  // namespace

std::string_view linkLayerName(LinkLayer l) {
  switch (l) {
    case LinkLayer::kInfiniBand: return "InfiniBand";
    case LinkLayer::kEthernet: return "Ethernet";
    case LinkLayer::kUnknown: break;
  }
  return "unknown";
}

std::string_view gidTypeName(GidType t) {
  switch (t) {
    case GidType::kIbOrRoceV1: return "IB/RoCE v1";
    case GidType::kRoceV2: return "RoCE v2";
    case GidType::kUnknown: break;
  }
  return "unknown";
}

bool parseNumberedState(std::string_view text, int* number, std::string* name) {
  text = trim(text);
  size_t colon = text.find(':');
  if (colon == std::string_view::npos) return false;
  uint64_t n;
  if (!parseU64(text.substr(0, colon), &n) || n > 255) return false;
  *number = static_cast<int>(n);
  *name = std::string(trim(text.substr(colon + 1)));
  return true;
}

uint64_t parseSysfsRate(std::string_view text) {
  text = trim(text);
  // "<number> Gb/sec (<width> <speed>)": the number may have a fraction ("2.5", "12.5").
  size_t sp = text.find(' ');
  if (sp == std::string_view::npos) return 0;
  std::string_view num = text.substr(0, sp);
  std::string_view unit = trim(text.substr(sp + 1));
  if (unit.substr(0, 6) != "Gb/sec") return 0;
  uint64_t whole = 0, frac = 0, frac_scale = 1;
  size_t dot = num.find('.');
  if (!parseU64(num.substr(0, dot), &whole)) return 0;
  if (dot != std::string_view::npos) {
    std::string_view f = num.substr(dot + 1);
    if (f.empty() || f.size() > 6 || !parseU64(f, &frac)) return 0;
    for (size_t i = 0; i < f.size(); ++i) frac_scale *= 10;
  }
  if (whole > 1000000) return 0;
  // Gbit/s -> bytes/s: * 1e9 / 8.
  return whole * 125000000ull + frac * 125000000ull / frac_scale;
}

int roceActiveMtu(int netdev_mtu) {
  // GRH 40 + UDP 8 + BTH 12 + XRC ext 4 + AtomicETH 28 + ICRC 4 (ib_core's iboe_get_mtu).
  int payload = netdev_mtu - 96;
  for (int mtu : {4096, 2048, 1024, 512, 256}) {
    if (payload >= mtu) return mtu;
  }
  return 0;
}

Result<DeviceInfo> readDevice(const std::string& sysfs_root, std::string_view device) {
  DeviceInfo dev;
  dev.name = std::string(device);
  std::string dir = sysfs_root + "/class/infiniband/" + dev.name;
  dev.node_type = readAttrOr(dir + "/node_type");
  dev.node_guid = readAttrOr(dir + "/node_guid");
  dev.fw_ver = readAttrOr(dir + "/fw_ver");
  bool missing = false;
  TQ_ASSIGN_OR_RETURN(auto port_names, listDir(dir + "/ports", &missing));
  if (missing) return notFound("RDMA device " + dev.name + ": no " + dir + "/ports");
  for (int p : numericEntries(port_names)) {
    auto port = readPort(sysfs_root, dir + "/ports/" + std::to_string(p), p);
    if (!port.ok()) {
      return std::move(port).status().withContext("RDMA device " + dev.name + " port " +
                                                  std::to_string(p));
    }
    dev.ports.push_back(std::move(*port));
  }
  return dev;
}

Result<std::vector<std::string>> listDevices(const std::string& sysfs_root) {
  bool missing = false;
  return listDir(sysfs_root + "/class/infiniband", &missing);
}

Result<std::vector<DeviceInfo>> discoverDevices(const std::string& sysfs_root) {
  TQ_ASSIGN_OR_RETURN(auto names, listDevices(sysfs_root));
  std::vector<DeviceInfo> out;
  for (const auto& n : names) {
    auto d = readDevice(sysfs_root, n);
    if (!d.ok()) {
      // One odd device must not hide the others from the agent; say why it is skipped.
      TQ_LOG(kWarn, "skipping %s", d.status().message().c_str());
      continue;
    }
    out.push_back(std::move(*d));
  }
  return out;
}

Result<int> defaultGidIndex(const DeviceInfo& device, const PortInfo& port) {
  std::string where = device.name + ":" + std::to_string(port.port);
  if (port.link_layer != LinkLayer::kEthernet) {
    if (port.gids.empty() || port.gids.front().index != 0) {
      return notFound("no GID 0 on " + where);
    }
    return 0;
  }
  const GidEntry* fallback = nullptr;
  for (const auto& g : port.gids) {
    if (g.type != GidType::kRoceV2) continue;
    if (g.gid.isIpv4Mapped()) return g.index;
    if (fallback == nullptr && !g.gid.isLinkLocal()) fallback = &g;
  }
  if (fallback != nullptr) return fallback->index;
  std::string found;
  for (const auto& g : port.gids) {
    found += (found.empty() ? "" : ", ") + std::to_string(g.index) + "=" + g.gid.toString() + " (" +
             std::string(gidTypeName(g.type)) + ")";
  }
  return notFound("no RoCE v2 GID with an IPv4 or global IPv6 address on " + where + " (GIDs: " +
                  (found.empty() ? "none" : found) + "); is an IP address configured on " +
                  (port.netdev.empty() ? std::string("its netdev") : port.netdev) + "?");
}

std::vector<PortChoice> selectPorts(const std::vector<DeviceInfo>& devices, const HcaFilter& filter,
                                    int forced_gid_index, std::vector<std::string>* skipped) {
  std::vector<PortChoice> out;
  auto skip = [skipped](std::string why) {
    if (skipped != nullptr) skipped->push_back(std::move(why));
  };
  for (const auto& d : devices) {
    for (const auto& p : d.ports) {
      if (!filter.matches(d.name, p.port)) continue;
      std::string where = d.name + ":" + std::to_string(p.port);
      if (!p.active()) {
        skip(where + ": port " + (p.state_name.empty() ? "not active" : p.state_name));
        continue;
      }
      PortChoice c;
      c.device = d.name;
      c.port = p.port;
      c.link_layer = p.link_layer;
      c.netdev = p.netdev;
      c.active_mtu = p.active_mtu;
      c.rate_bytes_per_second = p.rate_bytes_per_second;
      const GidEntry* entry = nullptr;
      if (forced_gid_index >= 0) {
        for (const auto& g : p.gids) {
          if (g.index == forced_gid_index) entry = &g;
        }
        if (entry == nullptr) {
          skip(where + ": GID index " + std::to_string(forced_gid_index) + " is not populated");
          continue;
        }
      } else {
        auto idx = defaultGidIndex(d, p);
        if (!idx.ok()) {
          skip(idx.status().message());
          continue;
        }
        for (const auto& g : p.gids) {
          if (g.index == *idx) entry = &g;
        }
      }
      c.gid_index = entry->index;
      c.gid = entry->gid;
      out.push_back(std::move(c));
    }
  }
  return out;
}

std::optional<uint64_t> PortCounters::transmitBytes() const {
  auto w = lookup(counters, "port_xmit_data");
  if (!w) return std::nullopt;
  return *w * 4;
}

std::optional<uint64_t> PortCounters::receiveBytes() const {
  auto w = lookup(counters, "port_rcv_data");
  if (!w) return std::nullopt;
  return *w * 4;
}

std::optional<uint64_t> PortCounters::transmitPackets() const {
  if (auto v = lookup(counters, "port_xmit_packets")) return v;
  return lookup(hw_counters, "sent_pkts");
}

std::optional<uint64_t> PortCounters::receivePackets() const {
  if (auto v = lookup(counters, "port_rcv_packets")) return v;
  return lookup(hw_counters, "rcvd_pkts");
}

Result<PortCounters> readPortCounters(const std::string& sysfs_root, std::string_view device,
                                      int port) {
  PortCounters c;
  c.device = std::string(device);
  c.port = port;
  std::string dir = sysfs_root + "/class/infiniband/" + c.device + "/ports/" + std::to_string(port);
  bool missing = false;
  TQ_ASSIGN_OR_RETURN(auto names, listDir(dir, &missing));
  if (missing)
    return notFound("RDMA port " + c.device + ":" + std::to_string(port) + ": no " + dir);
  readCounterDir(dir + "/counters", &c.counters);
  readCounterDir(dir + "/hw_counters", &c.hw_counters);
  return c;
}

Result<int> readPortState(const std::string& sysfs_root, std::string_view device, int port) {
  const std::string path = sysfs_root + "/class/infiniband/" + std::string(device) + "/ports/" +
                           std::to_string(port) + "/state";
  auto text = readAttr(path);
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kNotFound) {
      return notFound("RDMA port " + std::string(device) + ":" + std::to_string(port) +
                      " is gone (no " + path + ")");
    }
    return text.status();
  }
  int state = 0;
  std::string name;
  if (!parseNumberedState(*text, &state, &name)) {
    return dataLoss(path + ": unexpected content \"" + *text + "\"");
  }
  return state;
}

}  // namespace tq::ib
