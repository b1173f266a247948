// IP interfaces, selected like NCCL_SOCKET_IFNAME: the socket transport's devices and the ib
// transport's handshake interface.
//
// Filter syntax (same as NCCL): a comma-separated list of name prefixes ("eth,ens"); a leading
// "^" turns it into an exclude list; a leading "=" (after "^" if both) makes the names exact.
// Examples: "eth0" matches eth0 and eth01; "=eth0" only eth0; "^docker,lo" everything else.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "nccl-plugin/oob/address.h"

namespace tq::plugin::oob {

class IfnameFilter {
 public:
  static IfnameFilter parse(std::string_view spec);
  bool matches(std::string_view ifname) const;
  bool empty() const { return names_.empty(); }

 private:
  bool exclude_ = false;
  bool exact_ = false;
  std::vector<std::string> names_;
};

struct NetInterface {
  std::string name;
  SocketAddress addr;    // port 0
  int speed_mbps = 0;    // /sys/class/net/<name>/speed, 10000 when unknown
  std::string pci_path;  // realpath of /sys/class/net/<name>/device, empty for virtual NICs
};

// Up interfaces with an address, one entry per interface (its first IPv4 address, else its
// first global IPv6 one; `family` "AF_INET"/"AF_INET6" restricts). With an empty `spec`: all
// but lo and docker*, or lo if nothing else is up. Fails, listing what exists, when nothing
// matches.
Result<std::vector<NetInterface>> findInterfaces(const std::string& spec,
                                                 const std::string& family);

}  // namespace tq::plugin::oob
