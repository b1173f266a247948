// RDMA GIDs (16-byte port addresses) as plain values: parsing, printing, classification.
//
// Kept free of <infiniband/verbs.h> so that sysfs discovery and the agent can use it without the
// verbs headers; ib/rc_qp.h converts to and from `union ibv_gid`.
// On RoCE a GID is an IPv6 address; RoCEv2 GIDs of IPv4 addresses are IPv4-mapped
// (::ffff:a.b.c.d). Thread-safety: values.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace tq::ib {

struct Gid {
  std::array<uint8_t, 16> raw{};

  bool isZero() const;
  // ::ffff:a.b.c.d (the RoCEv2 GID of an IPv4 address).
  bool isIpv4Mapped() const;
  // fe80::/10 (the default GID 0 derived from the MAC address).
  bool isLinkLocal() const;
  // Canonical IPv6 text: "::ffff:10.77.0.1", "fe80::5054:ff:fe12:3456".
  std::string toString() const;

  friend bool operator==(const Gid& a, const Gid& b) { return a.raw == b.raw; }
  friend bool operator!=(const Gid& a, const Gid& b) { return !(a == b); }
};

// Accepts any IPv6 text form, including the sysfs form with eight 4-digit groups
// ("0000:0000:0000:0000:0000:ffff:0a4d:0001") and surrounding whitespace.
Result<Gid> parseGid(std::string_view text);

}  // namespace tq::ib
