// Socket addresses of the out-of-band (TCP) layer both transports use, and the listener-address
// block of their 64-byte handles.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace tq::plugin::oob {

// An IPv4 or IPv6 socket address.
struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t len = 0;
  int family() const { return storage.ss_family; }
  uint16_t port() const;
  void setPort(uint16_t port);
  std::string toString() const;  // "10.0.0.1:4242", "[fe80::1]:4242"
  // The address alone, canonical (common/fabric_peers.h: an IPv4-mapped address is its IPv4
  // address); empty for anything but IPv4/IPv6.
  std::string ipText() const;
};

// The canonical address of `fd`'s peer (getpeername), empty when it has none.
std::string peerAddressOf(int fd);

// The listener's address inside a 64-byte handle, the same block in the socket and ib
// transports' handles: address family at byte 10 (4 or 6), port at 12, address at 16 (4 or 16
// bytes), nonce at 32, IPv6 scope id at 40. get checks the port and family and that an IPv4
// address leaves the IPv6-only bytes zero; errors are bad(what, reason).
void putHandleAddress(uint8_t* handle, const SocketAddress& addr, uint64_t nonce);
Status getHandleAddress(const uint8_t* handle, std::string_view what, SocketAddress* addr,
                        uint64_t* nonce);

}  // namespace tq::plugin::oob
