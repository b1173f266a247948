#include "ib/gid.h"

#include <arpa/inet.h>

#include <cstring>

namespace tq::ib {

bool Gid::isZero() const {
  for (uint8_t b : raw) {
    if (b != 0) return false;
  }
  return true;
}

bool Gid::isIpv4Mapped() const {
  for (int i = 0; i < 10; ++i) {
    if (raw[i] != 0) return false;
  }
  return raw[10] == 0xff && raw[11] == 0xff;
}

bool Gid::isLinkLocal() const { return raw[0] == 0xfe && (raw[1] & 0xc0) == 0x80; }

std::string Gid::toString() const {
  char buf[INET6_ADDRSTRLEN];
  if (inet_ntop(AF_INET6, raw.data(), buf, sizeof(buf)) == nullptr) return "<invalid gid>";
  return buf;
}

Result<Gid> parseGid(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ' || text.back() == '\t')) {
    text.remove_suffix(1);
  }
  if (text.empty() || text.size() >= INET6_ADDRSTRLEN + 8) {
    return invalidArgument("bad GID \"" + std::string(text) + "\"");
  }
  std::string s(text);
  Gid gid;
  if (inet_pton(AF_INET6, s.c_str(), gid.raw.data()) != 1) {
    return invalidArgument("bad GID \"" + s + "\": not an IPv6 address");
  }
  return gid;
}

}  // namespace tq::ib
