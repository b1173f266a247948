// Service endpoints as flags take them: one HOST:PORT (--listen, --metrics, --rendezvous), or a
// list "A,B,C" (--policyd, --server, --etcd-endpoints) whose entries are gRPC targets (a DNS name
// may resolve to several addresses, which gRPC's pick_first tries in turn). The one parser of
// HOST:PORT in the tree. Pure string handling: no name resolution.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tq {

// Splits on commas and trims blanks around entries. kInvalidArgument for an empty list or an
// empty entry ("a,,b"), naming `what` (the flag).
Result<std::vector<std::string>> splitEndpointList(std::string_view list, std::string_view what);

struct HostPort {
  std::string host;  // a name, an IPv4 address or an IPv6 address without its brackets
  uint16_t port = 0;

  // "host:port", "[v6]:port".
  std::string toString() const;
  // The host as it stands in a URL or a HOST:PORT: an IPv6 address in brackets.
  std::string urlHost() const;
};

// "HOST:PORT" or "[IPV6]:PORT" (the form gRPC targets and URLs use). The host must not be empty
// and a bare IPv6 address must be in brackets ("::1:80" is ambiguous); the port is a decimal
// number 0..65535 (0: "any free port" where the caller listens). kInvalidArgument naming the
// text otherwise.
Result<HostPort> parseHostPort(std::string_view text);

}  // namespace tq
