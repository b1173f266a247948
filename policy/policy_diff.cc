#include "policy/policy_diff.h"

#include <algorithm>
#include <map>

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
  return d;
}

std::vector<std::string> linkDetails(const LinkSpec& a, const LinkSpec& b) {
  std::vector<std::string> d;
  field(d, "capacity", a.capacity_bytes_per_second, b.capacity_bytes_per_second, &rateText);
  field(d, "headroom", a.headroom_percent, b.headroom_percent, &pctText);
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
         std::any_of(tenants.begin(), tenants.end(), changed);
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
  std::string tenants = part("tenants", diff.tenants);
  std::string links = part("links", diff.links);
  if (tenants.empty() && links.empty()) return "no change";
  if (tenants.empty()) return links;
  return links.empty() ? tenants : tenants + "; " + links;
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
  return s;
}

PolicyDiff diffPolicies(const PolicySpec& before, const PolicySpec& after) {
  PolicyDiff d;
  d.links = diffList(before.links, after.links, &linkDetails, [](const LinkSpec& l) {
    return "capacity " + formatRate(l.capacity_bytes_per_second) + ", headroom " +
           percentText(l.headroom_percent);
  });
  d.tenants = diffList(before.tenants, after.tenants, &tenantDetails, &describeTenant);
  return d;
}

}  // namespace tq::policy
