#include "nccl-plugin/oob/ifaces.h"

#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace tq::plugin::oob {

IfnameFilter IfnameFilter::parse(std::string_view spec) {
  IfnameFilter f;
  if (!spec.empty() && spec.front() == '^') {
    f.exclude_ = true;
    spec.remove_prefix(1);
  }
  if (!spec.empty() && spec.front() == '=') {
    f.exact_ = true;
    spec.remove_prefix(1);
  }
  while (!spec.empty()) {
    const size_t comma = spec.find(',');
    std::string_view item = spec.substr(0, comma);
    if (!item.empty()) f.names_.emplace_back(item);
    if (comma == std::string_view::npos) break;
    spec.remove_prefix(comma + 1);
  }
  return f;
}

bool IfnameFilter::matches(std::string_view ifname) const {
  bool hit = false;
  for (const std::string& n : names_) {
    if (exact_ ? ifname == n : ifname.substr(0, n.size()) == n) {
      hit = true;
      break;
    }
  }
  return exclude_ ? !hit : hit;
}

namespace {

int readSpeedMbps(const std::string& ifname) {
  std::ifstream in("/sys/class/net/" + ifname + "/speed");
  long v = 0;
  if (in >> v && v > 0 && v < INT_MAX) return static_cast<int>(v);
  return 10000;  // same fallback as NCCL's socket transport (virtual NICs, loopback)
}

std::string pciPath(const std::string& ifname) {
  char buf[PATH_MAX];
  const std::string link = "/sys/class/net/" + ifname + "/device";
  if (realpath(link.c_str(), buf) == nullptr) return "";
  return buf;
}

bool usableV6(const sockaddr_in6& a) {
  return !IN6_IS_ADDR_LINKLOCAL(&a.sin6_addr) && !IN6_IS_ADDR_UNSPECIFIED(&a.sin6_addr);
}

struct Candidate {
  std::string name;
  SocketAddress v4, v6;
  bool has_v4 = false, has_v6 = false;
};

}  // namespace

Result<std::vector<NetInterface>> findInterfaces(const std::string& spec,
                                                 const std::string& family) {
  if (!family.empty() && family != "AF_INET" && family != "AF_INET6") {
    return invalidArgument("TENANTQOS_SOCKET_FAMILY=" + family + ": expected AF_INET or AF_INET6");
  }
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return errnoStatus("getifaddrs");
  std::vector<Candidate> cands;  // in getifaddrs order, one per interface
  for (ifaddrs* ifa = list; ifa != nullptr; ifa = ifa->ifa_next) {
    if (ifa->ifa_addr == nullptr || (ifa->ifa_flags & IFF_UP) == 0) continue;
    const int fam = ifa->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    auto it = std::find_if(cands.begin(), cands.end(),
                           [&](const Candidate& c) { return c.name == ifa->ifa_name; });
    if (it == cands.end()) {
      cands.push_back(Candidate{ifa->ifa_name, {}, {}, false, false});
      it = cands.end() - 1;
    }
    if (fam == AF_INET && !it->has_v4) {
      std::memcpy(&it->v4.storage, ifa->ifa_addr, sizeof(sockaddr_in));
      it->v4.len = sizeof(sockaddr_in);
      it->has_v4 = true;
    } else if (fam == AF_INET6 && !it->has_v6 &&
               usableV6(*reinterpret_cast<const sockaddr_in6*>(ifa->ifa_addr))) {
      std::memcpy(&it->v6.storage, ifa->ifa_addr, sizeof(sockaddr_in6));
      it->v6.len = sizeof(sockaddr_in6);
      it->has_v6 = true;
    }
  }
  freeifaddrs(list);

  auto pick = [&](const Candidate& c, SocketAddress* out) {
    if (family != "AF_INET6" && c.has_v4) {
      *out = c.v4;
      return true;
    }
    if (family != "AF_INET" && c.has_v6) {
      *out = c.v6;
      return true;
    }
    return false;
  };
  auto select = [&](const IfnameFilter& filter) {
    std::vector<NetInterface> out;
    for (const Candidate& c : cands) {
      NetInterface ni;
      if (!filter.matches(c.name) || !pick(c, &ni.addr)) continue;
      ni.name = c.name;
      ni.addr.setPort(0);
      ni.speed_mbps = readSpeedMbps(c.name);
      ni.pci_path = pciPath(c.name);
      out.push_back(std::move(ni));
    }
    return out;
  };

  std::vector<NetInterface> found;
  if (!spec.empty()) {
    found = select(IfnameFilter::parse(spec));
  } else {
    found = select(IfnameFilter::parse("^docker,lo"));
    if (found.empty()) found = select(IfnameFilter::parse("=lo"));
  }
  if (found.empty()) {
    std::string have;
    for (const Candidate& c : cands) have += (have.empty() ? "" : ", ") + c.name;
    return notFound(
        "no up interface with an " + std::string(family.empty() ? "IP" : family) +
        " address matches " +
        (spec.empty() ? std::string("the default selection") : "TENANTQOS_SOCKET_IFNAME=" + spec) +
        " (up: " + (have.empty() ? "none" : have) + ")");
  }
  return found;
}

}  // namespace tq::plugin::oob
