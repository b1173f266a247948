#include "policy/policy_diff.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <optional>

#include "common/units.h"

namespace tq::policy {
namespace {

std::string classesText(std::vector<int32_t> v) {
  std::sort(v.begin(), v.end());
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::string namesText(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
  return s + "]";
}

std::string percentText(double p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g%%", p);
  return buf;
}

template <typename T>
void field(std::vector<std::string>& out, const char* name, const T& a, const T& b,
           std::string (*fmt)(const T&)) {
  if (!(a == b)) out.push_back(std::string(name) + ": " + fmt(a) + " -> " + fmt(b));
}

std::string rateText(const uint64_t& v) { return formatRate(v); }
std::string numText(const uint32_t& v) { return std::to_string(v); }
std::string strText(const std::string& v) { return v; }
std::string boolText(const bool& v) { return v ? "true" : "false"; }
std::string pctText(const double& v) { return percentText(v); }

std::vector<std::string> tenantDetails(const TenantSpec& a, const TenantSpec& b) {
  std::vector<std::string> d;
  field(d, "link", a.link, b.link, &strText);
  field(d, "guarantee", a.guarantee_bytes_per_second, b.guarantee_bytes_per_second, &rateText);
  field(d, "limit", a.limit_bytes_per_second, b.limit_bytes_per_second, &rateText);
  field(d, "weight", a.weight, b.weight, &numText);
  field(d, "serviceLevel", a.service_level, b.service_level, &numText);
  field(d, "dscp", a.dscp, b.dscp, &numText);
  std::string ca = classesText(a.traffic_classes), cb = classesText(b.traffic_classes);
  if (ca != cb) d.push_back("trafficClasses: " + ca + " -> " + cb);
  field(d, "shareClass", a.share_class, b.share_class, &boolText);
  for (auto [name, list] : {std::pair{"namespaces", &TenantSpec::namespaces},
                            std::pair{"volcanoQueues", &TenantSpec::volcano_queues}}) {
    std::string na = namesText(a.*list), nb = namesText(b.*list);
    if (na != nb) d.push_back(std::string(name) + ": " + na + " -> " + nb);
  }
  field(d, "default", a.is_default, b.is_default, &boolText);
  field(d, "unixGroup", a.unix_group, b.unix_group, &strText);
  std::string sa = tenantLinkValuesText(a.shared_links), sb = tenantLinkValuesText(b.shared_links);
  if (sa != sb) d.push_back("sharedLinks: " + sa + " -> " + sb);
  return d;
}

std::vector<std::string> linkDetails(const LinkSpec& a, const LinkSpec& b) {
  std::vector<std::string> d;
  field(d, "capacity", a.capacity_bytes_per_second, b.capacity_bytes_per_second, &rateText);
  field(d, "headroom", a.headroom_percent, b.headroom_percent, &pctText);
  return d;
}

std::string railText(const std::optional<uint32_t>& r) {
  return r ? std::to_string(*r) : std::string("all");
}

std::string groupSummary(const SharedLinkSpec& l) {
  size_t nodes = 0;
  for (const LinkGroupSpec& g : l.groups) nodes += g.nodes.size();
  std::string s = "capacity " + formatRate(l.capacity_bytes_per_second) + ", headroom " +
                  percentText(l.headroom_percent) + ", " + std::to_string(l.groups.size()) +
                  (l.groups.size() == 1 ? " group, " : " groups, ") + std::to_string(nodes) +
                  (nodes == 1 ? " node" : " nodes");
  if (l.rail) s += ", rail " + std::to_string(*l.rail);
  return s;
}

// Groups compared by name: "groups: +leaf-9 -leaf-2 ~leaf-3 (nodes +2 -1, capacity 1Gbps ->
// 2Gbps)", one line per changed group after the first line of added / removed names.
void groupDetails(std::vector<std::string>& d, const SharedLinkSpec& a, const SharedLinkSpec& b) {
  std::map<std::string, const LinkGroupSpec*> before, after;
  for (const LinkGroupSpec& g : a.groups) before.emplace(g.name, &g);
  for (const LinkGroupSpec& g : b.groups) after.emplace(g.name, &g);
  std::string added, removed;
  for (const auto& [name, g] : after)
    if (!before.count(name)) added += " +" + name;
  for (const auto& [name, g] : before)
    if (!after.count(name)) removed += " -" + name;
  if (!added.empty() || !removed.empty()) d.push_back("groups:" + added + removed);
  for (const auto& [name, g] : after) {
    auto it = before.find(name);
    if (it == before.end()) continue;
    std::vector<std::string> na = it->second->nodes, nb = g->nodes;
    std::sort(na.begin(), na.end());
    std::sort(nb.begin(), nb.end());
    std::vector<std::string> plus, minus;
    std::set_difference(nb.begin(), nb.end(), na.begin(), na.end(), std::back_inserter(plus));
    std::set_difference(na.begin(), na.end(), nb.begin(), nb.end(), std::back_inserter(minus));
    std::string line;
    if (!plus.empty() || !minus.empty()) {
      line = "nodes +" + std::to_string(plus.size()) + " -" + std::to_string(minus.size());
    }
    if (it->second->capacity_bytes_per_second != g->capacity_bytes_per_second) {
      line += std::string(line.empty() ? "" : ", ") + "capacity " +
              formatRate(it->second->capacity_bytes_per_second) + " -> " +
              formatRate(g->capacity_bytes_per_second);
    }
    if (!line.empty()) d.push_back("group " + name + ": " + line);
  }
}

std::vector<std::string> sharedLinkDetails(const SharedLinkSpec& a, const SharedLinkSpec& b) {
  std::vector<std::string> d;
  field(d, "capacity", a.capacity_bytes_per_second, b.capacity_bytes_per_second, &rateText);
  field(d, "headroom", a.headroom_percent, b.headroom_percent, &pctText);
  field(d, "rail", a.rail, b.rail, &railText);
  groupDetails(d, a, b);
  return d;
}

template <typename T, typename DetailsFn, typename DescribeFn>
std::vector<ObjectChange> diffList(const std::vector<T>& before, const std::vector<T>& after,
                                   DetailsFn details, DescribeFn describe) {
  std::map<std::string, const T*> old_by_name, new_by_name;
  for (const T& x : before) old_by_name.emplace(x.name, &x);
  for (const T& x : after) new_by_name.emplace(x.name, &x);
  std::vector<ObjectChange> out;
  for (const T& x : after) {
    auto it = old_by_name.find(x.name);
    if (it == old_by_name.end()) {
      out.push_back({x.name, ChangeKind::kAdded, {describe(x)}});
      continue;
    }
    auto d = details(*it->second, x);
    out.push_back(
        {x.name, d.empty() ? ChangeKind::kUnchanged : ChangeKind::kChanged, std::move(d)});
  }
  for (const T& x : before) {
    if (!new_by_name.count(x.name)) out.push_back({x.name, ChangeKind::kRemoved, {}});
  }
  return out;
}

}  // namespace

std::string_view changeKindName(ChangeKind kind) {
  switch (kind) {
    case ChangeKind::kAdded: return "added";
    case ChangeKind::kRemoved: return "removed";
    case ChangeKind::kChanged: return "changed";
    case ChangeKind::kUnchanged: return "unchanged";
  }
  return "?";
}

bool PolicyDiff::hasChanges() const {
  auto changed = [](const ObjectChange& c) { return c.kind != ChangeKind::kUnchanged; };
  return std::any_of(links.begin(), links.end(), changed) ||
         std::any_of(tenants.begin(), tenants.end(), changed) ||
         std::any_of(shared_links.begin(), shared_links.end(), changed);
}

std::string summarizeDiff(const PolicyDiff& diff) {
  constexpr size_t kNamesShown = 8;  // per kind, so the line stays readable
  auto part = [&](const char* what, const std::vector<ObjectChange>& changes) {
    std::string out;
    size_t shown = 0, more = 0;
    for (const ObjectChange& c : changes) {
      if (c.kind == ChangeKind::kUnchanged) continue;
      if (shown == kNamesShown) {
        ++more;
        continue;
      }
      const char* mark = c.kind == ChangeKind::kAdded     ? "+"
                         : c.kind == ChangeKind::kRemoved ? "-"
                                                          : "~";
      out += std::string(shown++ ? " " : "") + mark + c.name;
    }
    if (more) out += " (+" + std::to_string(more) + " more)";
    return out.empty() ? out : std::string(what) + " " + out;
  };
  std::string line;
  for (std::string p : {part("tenants", diff.tenants), part("links", diff.links),
                        part("shared links", diff.shared_links)}) {
    if (!p.empty()) line += (line.empty() ? "" : "; ") + p;
  }
  return line.empty() ? "no change" : line;
}

std::string describeTenant(const TenantSpec& t) {
  std::string s = "link " + t.link + ", guarantee " + formatRate(t.guarantee_bytes_per_second) +
                  ", limit " + formatRate(t.limit_bytes_per_second) + ", weight " +
                  std::to_string(t.weight) + ", serviceLevel " + std::to_string(t.service_level) +
                  ", dscp " + std::to_string(t.dscp);
  if (!t.traffic_classes.empty()) s += ", trafficClasses " + classesText(t.traffic_classes);
  if (t.share_class) s += ", shareClass";
  if (!t.namespaces.empty()) s += ", namespaces " + namesText(t.namespaces);
  if (!t.volcano_queues.empty()) s += ", volcanoQueues " + namesText(t.volcano_queues);
  if (t.is_default) s += ", default";
  if (!t.unix_group.empty()) s += ", unixGroup " + t.unix_group;
  if (!t.shared_links.empty()) s += ", sharedLinks " + tenantLinkValuesText(t.shared_links);
  return s;
}

std::string tenantLinkValuesText(const std::vector<TenantLinkValues>& values) {
  std::vector<std::string> items;
  for (const TenantLinkValues& v : values) {
    std::string s = v.link;
    if (v.guarantee_bytes_per_second)
      s += " guarantee " + formatRate(*v.guarantee_bytes_per_second);
    if (v.limit_bytes_per_second) s += " limit " + formatRate(*v.limit_bytes_per_second);
    if (v.weight) s += " weight " + std::to_string(*v.weight);
    items.push_back(std::move(s));
  }
  std::sort(items.begin(), items.end());
  std::string s = "[";
  for (size_t i = 0; i < items.size(); ++i) s += (i ? ", " : "") + items[i];
  return s + "]";
}

PolicyDiff diffPolicies(const PolicySpec& before, const PolicySpec& after) {
  PolicyDiff d;
  d.links = diffList(before.links, after.links, &linkDetails, [](const LinkSpec& l) {
    return "capacity " + formatRate(l.capacity_bytes_per_second) + ", headroom " +
           percentText(l.headroom_percent);
  });
  d.tenants = diffList(before.tenants, after.tenants, &tenantDetails, &describeTenant);
  d.shared_links =
      diffList(before.shared_links, after.shared_links, &sharedLinkDetails, &groupSummary);
  return d;
}

}  // namespace tq::policy
