#include "ib/hca_filter.h"

#include <charconv>

namespace tq::ib {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

bool HcaFilter::matches(std::string_view device, int port) const {
  if (entries.empty()) return true;
  bool hit = false;
  for (const auto& e : entries) {
    bool name_ok = exact ? device == e.name : device.substr(0, e.name.size()) == e.name;
    if (name_ok && (e.port == -1 || e.port == port)) {
      hit = true;
      break;
    }
  }
  return exclude ? !hit : hit;
}

std::string HcaFilter::toString() const {
  std::string out = std::string(exclude ? "^" : "") + (exact ? "=" : "");
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i > 0) out += ",";
    out += entries[i].name;
    if (entries[i].port >= 0) out += ":" + std::to_string(entries[i].port);
  }
  return out;
}

Result<HcaFilter> parseHcaFilter(std::string_view spec) {
  HcaFilter f;
  std::string_view s = trim(spec);
  if (!s.empty() && s.front() == '^') {
    f.exclude = true;
    s = trim(s.substr(1));
  }
  if (!s.empty() && s.front() == '=') {
    f.exact = true;
    s = trim(s.substr(1));
  }
  if (s.empty()) {
    if (f.exclude || f.exact) {
      return invalidArgument("HCA filter \"" + std::string(spec) + "\": no device names");
    }
    return f;
  }
  while (true) {
    size_t comma = s.find(',');
    std::string_view item = trim(s.substr(0, comma));
    HcaFilter::Entry e;
    size_t colon = item.find(':');
    e.name = std::string(trim(item.substr(0, colon)));
    if (e.name.empty()) {
      return invalidArgument("HCA filter \"" + std::string(spec) + "\": empty device name");
    }
    if (colon != std::string_view::npos) {
      std::string_view p = trim(item.substr(colon + 1));
      int port = 0;
      auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), port);
      if (p.empty() || ec != std::errc() || end != p.data() + p.size() || port < 1 || port > 255) {
        return invalidArgument("HCA filter \"" + std::string(spec) + "\": bad port \"" +
                               std::string(p) + "\" for " + e.name + " (expected 1-255)");
      }
      e.port = port;
    }
    f.entries.push_back(std::move(e));
    if (comma == std::string_view::npos) break;
    s = s.substr(comma + 1);
  }
  return f;
}

}  // namespace tq::ib
