#include "common/endpoints.h"

#include <charconv>

namespace tq {

Result<std::vector<std::string>> splitEndpointList(std::string_view list, std::string_view what) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t comma = list.find(',', start);
    std::string_view item =
        list.substr(start, comma == std::string_view::npos ? list.npos : comma - start);
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
    if (item.empty()) {
      return invalidArgument(std::string(what) + ": empty entry in \"" + std::string(list) +
                             "\" (want HOST:PORT[,HOST:PORT...])");
    }
    out.emplace_back(item);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

std::string HostPort::urlHost() const {
  return host.find(':') != std::string::npos ? "[" + host + "]" : host;
}

std::string HostPort::toString() const { return urlHost() + ":" + std::to_string(port); }

Result<HostPort> parseHostPort(std::string_view text) {
  const auto bad = [&](std::string_view why) {
    return invalidArgument("\"" + std::string(text) + "\" is not HOST:PORT (" + std::string(why) +
                           ")");
  };
  HostPort out;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return bad("an IPv6 address is written [ADDRESS]:PORT");
    }
    out.host = std::string(text.substr(1, close - 1));
    port = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return bad("no port");
    out.host = std::string(text.substr(0, colon));
    if (out.host.find(':') != std::string::npos) {
      return bad("an IPv6 address is written [ADDRESS]:PORT");
    }
    port = text.substr(colon + 1);
  }
  if (out.host.empty()) return bad("no host");
  unsigned p = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || p > 65535) {
    return bad("the port is not 0..65535");
  }
  out.port = static_cast<uint16_t>(p);
  return out;
}

}  // namespace tq
