#include "policy/ctl_output.h"

#include <algorithm>
#include <charconv>
#include <ostream>
#include <sstream>
#include <string_view>
#include <utility>

#include "common/text.h"
#include "policy/policy_file.h"
#include "policy/topology_file.h"

namespace tq::policy::ctl {

std::string timeText(int64_t unix_ms) { return unix_ms <= 0 ? "-" : utcTimestamp(unix_ms); }

std::string ageText(int64_t unix_ms, int64_t now_unix_ms) {
  if (unix_ms <= 0) return "-";
  int64_t s = std::max<int64_t>(0, (now_unix_ms - unix_ms) / 1000);
  if (s < 120) return std::to_string(s) + "s";
  if (s < 7200) return std::to_string(s / 60) + "m";
  return std::to_string(s / 3600) + "h";
}

namespace {

std::string jsonNumber(double d) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, d);
  return std::string(buf, ec == std::errc() ? end : buf);
}

}  // namespace

std::string policyJson(const PolicyRecord& r) {
  std::ostringstream o;
  o << "{\n";
  o << "  \"version\": " << r.version << ",\n";
  o << "  \"appliedAt\": " << jsonQuote(timeText(r.applied_at_unix_ms)) << ",\n";
  o << "  \"appliedAtUnixMs\": " << r.applied_at_unix_ms << ",\n";
  o << "  \"appliedBy\": " << jsonQuote(r.applied_by) << ",\n";
  o << "  \"rollbackOf\": " << r.rollback_of << ",\n";
  o << "  \"checksum\": " << r.checksum << ",\n";
  o << "  \"apiVersion\": " << jsonQuote(kApiVersion) << ",\n";
  o << "  \"kind\": " << jsonQuote(kKind) << ",\n";
  o << "  \"links\": [";
  for (size_t i = 0; i < r.policy.links.size(); ++i) {
    const LinkSpec& l = r.policy.links[i];
    o << (i ? "," : "") << "\n    {\"name\": " << jsonQuote(l.name)
      << ", \"capacityBytesPerSecond\": " << l.capacity_bytes_per_second
      << ", \"headroomPercent\": " << jsonNumber(l.headroom_percent) << "}";
  }
  o << (r.policy.links.empty() ? "],\n" : "\n  ],\n");
  o << "  \"tenants\": [";
  for (size_t i = 0; i < r.policy.tenants.size(); ++i) {
    const TenantSpec& t = r.policy.tenants[i];
    o << (i ? "," : "") << "\n    {\"name\": " << jsonQuote(t.name)
      << ", \"link\": " << jsonQuote(t.link)
      << ", \"guaranteeBytesPerSecond\": " << t.guarantee_bytes_per_second
      << ", \"limitBytesPerSecond\": " << t.limit_bytes_per_second << ", \"weight\": " << t.weight
      << ", \"serviceLevel\": " << t.service_level << ", \"dscp\": " << t.dscp
      << ", \"trafficClasses\": [";
    for (size_t k = 0; k < t.traffic_classes.size(); ++k)
      o << (k ? ", " : "") << t.traffic_classes[k];
    o << "], \"shareClass\": " << (t.share_class ? "true" : "false");
    for (auto [key, list] :
         {std::pair{"namespaces", &t.namespaces}, std::pair{"volcanoQueues", &t.volcano_queues}}) {
      o << ", \"" << key << "\": [";
      for (size_t k = 0; k < list->size(); ++k) o << (k ? ", " : "") << jsonQuote((*list)[k]);
      o << "]";
    }
    o << ", \"default\": " << (t.is_default ? "true" : "false")
      << ", \"unixGroup\": " << jsonQuote(t.unix_group) << ", "
      << tenantLinkValuesJson(t.shared_links) << "}";
  }
  o << (r.policy.tenants.empty() ? "],\n" : "\n  ],\n");
  o << "  " << sharedLinksJson(r.policy.shared_links) << "\n";
  o << "}\n";
  return o.str();
}

void printTable(std::ostream& out, const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  // Cells hold what servers and nodes reported: escaped, so none can forge a row.
  std::vector<std::vector<std::string>> cells;
  for (const auto& row : rows) {
    cells.emplace_back();
    for (const std::string& cell : row) cells.back().push_back(escapeControl(cell));
  }
  for (const auto& row : cells) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  for (const auto& row : cells) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line += std::string(width[c] - row[c].size() + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  }
}

void printDiff(std::ostream& out, const PolicyDiff& diff) {
  size_t unchanged = 0;
  auto print = [&](const char* kind, const ObjectChange& c) {
    if (c.kind == ChangeKind::kUnchanged) {
      if (std::string_view(kind) == "tenant") ++unchanged;
      return;
    }
    const char* mark = c.kind == ChangeKind::kAdded     ? "+"
                       : c.kind == ChangeKind::kRemoved ? "-"
                                                        : "~";
    out << mark << " " << kind << " " << escapeControl(c.name) << ": " << changeKindName(c.kind);
    if (c.kind == ChangeKind::kAdded && !c.details.empty()) {
      out << " (" << escapeControl(c.details.front()) << ")\n";
      return;
    }
    out << "\n";
    if (c.kind == ChangeKind::kChanged) {
      for (const std::string& d : c.details) out << "    " << escapeControl(d) << "\n";
    }
  };
  for (const ObjectChange& c : diff.links) print("link", c);
  for (const ObjectChange& c : diff.shared_links) print("shared link", c);
  for (const ObjectChange& c : diff.tenants) print("tenant", c);
  if (unchanged > 0)
    out << "  (" << unchanged << (unchanged == 1 ? " tenant" : " tenants") << " unchanged)\n";
}

}  // namespace tq::policy::ctl
