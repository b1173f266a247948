#include "nccl-plugin/oob/address.h"

#include <arpa/inet.h>

#include <cstring>

#include "common/fabric_peers.h"
#include "nccl-plugin/wire_bytes.h"

namespace tq::plugin::oob {

using namespace wire;  // NOLINT: byte helpers of the handle block

uint16_t SocketAddress::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(storage).sin_port);
  if (family() == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(storage).sin6_port);
  return 0;
}

void SocketAddress::setPort(uint16_t port) {
  if (family() == AF_INET) reinterpret_cast<sockaddr_in&>(storage).sin_port = htons(port);
  if (family() == AF_INET6) reinterpret_cast<sockaddr_in6&>(storage).sin6_port = htons(port);
}

std::string SocketAddress::toString() const {
  char buf[INET6_ADDRSTRLEN] = "?";
  if (family() == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(storage).sin_addr, buf, sizeof buf);
    return std::string(buf) + ":" + std::to_string(port());
  }
  if (family() == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(storage).sin6_addr, buf, sizeof buf);
    return "[" + std::string(buf) + "]:" + std::to_string(port());
  }
  return "<no address>";
}

std::string SocketAddress::ipText() const {
  char buf[INET6_ADDRSTRLEN] = "";
  if (family() == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(storage).sin_addr, buf, sizeof buf);
  } else if (family() == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(storage).sin6_addr, buf, sizeof buf);
  }
  return canonicalAddress(buf).value_or("");
}

std::string peerAddressOf(int fd) {
  SocketAddress a;
  a.len = sizeof a.storage;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a.storage), &a.len) != 0) return {};
  return a.ipText();
}

void putHandleAddress(uint8_t* out, const SocketAddress& addr, uint64_t nonce) {
  put16(out + 12, addr.port());
  if (addr.family() == AF_INET) {
    out[10] = 4;
    std::memcpy(out + 16, &reinterpret_cast<const sockaddr_in&>(addr.storage).sin_addr, 4);
  } else if (addr.family() == AF_INET6) {
    out[10] = 6;
    const auto& a6 = reinterpret_cast<const sockaddr_in6&>(addr.storage);
    std::memcpy(out + 16, &a6.sin6_addr, 16);
    put32(out + 40, a6.sin6_scope_id);
  }
  put64(out + 32, nonce);
}

Status getHandleAddress(const uint8_t* p, std::string_view what, SocketAddress* addr,
                        uint64_t* nonce) {
  const uint16_t port = get16(p + 12);
  if (port == 0) return bad(what, "port 0");
  if (p[10] == 4) {
    auto& a4 = reinterpret_cast<sockaddr_in&>(addr->storage);
    a4.sin_family = AF_INET;
    std::memcpy(&a4.sin_addr, p + 16, 4);
    if (!allZero(p + 20, 12) || get32(p + 40) != 0) return bad(what, "reserved bytes set");
    addr->len = sizeof(sockaddr_in);
  } else if (p[10] == 6) {
    auto& a6 = reinterpret_cast<sockaddr_in6&>(addr->storage);
    a6.sin6_family = AF_INET6;
    std::memcpy(&a6.sin6_addr, p + 16, 16);
    a6.sin6_scope_id = get32(p + 40);
    addr->len = sizeof(sockaddr_in6);
  } else {
    return bad(what, "unknown address family");
  }
  addr->setPort(port);
  *nonce = get64(p + 32);
  return okStatus();
}

}  // namespace tq::plugin::oob
