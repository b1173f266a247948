#include "policy/policy_file.h"

#include "policy/topology_file.h"
#include "policy/yaml_reader.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <span>
#include <unordered_map>

#include "common/capacity.h"
#include "common/file_util.h"
#include "common/tenant_shm.h"
#include "common/units.h"

namespace tq::policy {
namespace {

using yaml::ErrorList;
using yaml::FieldIndex;
using yaml::itemPath;
using yaml::Node;
using yaml::percentText;
using yaml::Pos;
using yaml::posOf;
using yaml::quote;
using yaml::rangeReason;

constexpr std::string_view kRootFields[] = {"apiVersion", "kind", "links", "sharedLinks",
                                            "tenants"};
constexpr std::string_view kLinkFields[] = {"name", "capacity", "headroom"};
constexpr std::string_view kTenantFields[] = {
    "name",          "link",    "guarantee",      "limit",      "weight",
    "serviceLevel",  "dscp",    "trafficClasses", "shareClass", "namespaces",
    "volcanoQueues", "default", "unixGroup",      "sharedLinks"};

// Walks the YAML tree along the policy's schema (yaml_reader.h: the typed readers).
class YamlReader : public yaml::FieldReader {
 public:
  using FieldReader::FieldReader;

  void readRoot(const Node& root, PolicySpec* out) {
    Fields f;
    if (!readMapping(root, {1, 1}, "", kRootFields, &f)) return;
    std::string api, kind;
    if (requireField(f, "", "apiVersion", {1, 1}) &&
        readString(f["apiVersion"], "apiVersion", &api) && api != kApiVersion) {
      bad("apiVersion", f["apiVersion"].pos,
          "unsupported apiVersion " + quote(api) + " (expected \"" + std::string(kApiVersion) +
              "\")");
    }
    if (requireField(f, "", "kind", {1, 1}) && readString(f["kind"], "kind", &kind) &&
        kind != kKind) {
      bad("kind", f["kind"].pos,
          "unsupported kind " + quote(kind) + " (expected \"" + std::string(kKind) + "\")");
    }
    if (requireField(f, "", "links", {1, 1})) {
      forEachItem(f["links"], "links", kMaxLinks, [&](const Node& item, const std::string& path) {
        out->links.push_back(readLink(item, path));
      });
    }
    if (requireField(f, "", "tenants", {1, 1})) {
      forEachItem(f["tenants"], "tenants", kMaxTenants,
                  [&](const Node& item, const std::string& path) {
                    out->tenants.push_back(readTenant(item, path));
                  });
    }
    if (f.count("sharedLinks")) readSharedLinks(*this, f["sharedLinks"], &out->shared_links);
  }

 private:
  LinkSpec readLink(const Node& node, const std::string& path) {
    LinkSpec l;
    Fields f;
    Pos at = posOf(node.mark());
    if (!readMapping(node, at, path, kLinkFields, &f)) {
      for (auto k : kLinkFields) index_.invalid.insert(path + "." + std::string(k));
      return l;
    }
    if (requireField(f, path, "name", at)) readName(f["name"], path + ".name", &l.name);
    if (requireField(f, path, "capacity", at))
      readRate(f["capacity"], path + ".capacity", &l.capacity_bytes_per_second);
    if (f.count("headroom")) readPercent(f["headroom"], path + ".headroom", &l.headroom_percent);
    return l;
  }

  TenantSpec readTenant(const Node& node, const std::string& path) {
    TenantSpec t;
    Fields f;
    Pos at = posOf(node.mark());
    if (!readMapping(node, at, path, kTenantFields, &f)) {
      for (auto k : kTenantFields) index_.invalid.insert(path + "." + std::string(k));
      return t;
    }
    auto field = [&](std::string_view k) { return path + "." + std::string(k); };
    if (requireField(f, path, "name", at)) readName(f["name"], field("name"), &t.name);
    if (requireField(f, path, "link", at)) readName(f["link"], field("link"), &t.link);
    if (requireField(f, path, "guarantee", at)) {
      readRate(f["guarantee"], field("guarantee"), &t.guarantee_bytes_per_second);
    }
    if (requireField(f, path, "limit", at))
      readRate(f["limit"], field("limit"), &t.limit_bytes_per_second);
    if (f.count("weight")) readUint(f["weight"], field("weight"), 1, kMaxWeight, &t.weight);
    if (requireField(f, path, "serviceLevel", at)) {
      readUint(f["serviceLevel"], field("serviceLevel"), 0, kMaxServiceLevel, &t.service_level);
    }
    if (requireField(f, path, "dscp", at)) readUint(f["dscp"], field("dscp"), 0, kMaxDscp, &t.dscp);
    if (f.count("shareClass")) readBool(f["shareClass"], field("shareClass"), &t.share_class);
    if (f.count("unixGroup")) readString(f["unixGroup"], field("unixGroup"), &t.unix_group);
    if (f.count("trafficClasses")) {
      const std::string tcs = field("trafficClasses");
      forEachItem(f["trafficClasses"], tcs, kMaxTrafficClasses,
                  [&](const Node& item, const std::string& p) {
                    uint32_t v = 0;
                    Entry e{Node(), item, posOf(item.mark())};
                    if (readUint(e, p, 0, std::numeric_limits<int32_t>::max(), &v)) {
                      t.traffic_classes.push_back(static_cast<int32_t>(v));
                    } else {
                      t.traffic_classes.push_back(-1);  // keeps indexes aligned; skipped later
                    }
                  });
    }
    if (f.count("namespaces"))
      readNames(f["namespaces"], field("namespaces"), kMaxPlatformNames, &t.namespaces);
    if (f.count("volcanoQueues")) {
      readNames(f["volcanoQueues"], field("volcanoQueues"), kMaxPlatformNames, &t.volcano_queues);
    }
    if (f.count("default")) readBool(f["default"], field("default"), &t.is_default);
    if (f.count("sharedLinks")) {
      readTenantLinkValues(*this, f["sharedLinks"], field("sharedLinks"), &t.shared_links);
    }
    return t;
  }
};

// A unixGroup: a gid that is not root's nor (gid_t)-1, or a portable group name.
bool isUnixGroupText(const std::string& g) {
  if (g.empty() || g.size() > 32) return false;
  if (std::all_of(g.begin(), g.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    if (g.size() > 10) return false;
    const uint64_t v = std::stoull(g);
    return v >= 1 && v <= 4294967294ull;
  }
  auto ok = [](char c, bool first) {
    return (c >= 'a' && c <= 'z') || c == '_' || (!first && ((c >= '0' && c <= '9') || c == '-'));
  };
  if (!ok(g[0], true)) return false;
  return std::all_of(g.begin() + 1, g.end(), [&](char c) { return ok(c, false); });
}
// The semantic rules, in four groups: links, each tenant's own fields, class sharing (SL, DSCP,
// traffic classes) and admission. Fields in index.invalid failed to parse and are skipped.
// Errors are sorted by position afterwards; the order here only matters between errors at the
// same position (validatePolicy, which has none): per tenant, its fields, then admission, then
// class sharing.
class SpecValidator {
 public:
  SpecValidator(const PolicySpec& p, const FieldIndex& index, ErrorList& errors)
      : p_(p), index_(index), errors_(errors) {}

  void run() {
    checkLinks();
    for (size_t j = 0; j < p_.tenants.size(); ++j) {
      const LinkSpec* link = checkTenant(j);
      checkAdmission(j, link);
      checkClassSharing(j);
      checkPlatformNames(j);
    }
  }

 private:
  struct ClassUse {
    size_t first = SIZE_MAX;            // first tenant using the value
    size_t first_exclusive = SIZE_MAX;  // first tenant using it without shareClass
  };

  void err(const std::string& path, std::string reason) {
    errors_.add(index_.find(path), path, std::move(reason));
  }
  static std::string at(std::string_view list, size_t i, std::string_view f = {}) {
    return itemPath(list, i, f);
  }
  std::string where(std::string_view list, size_t i) const {
    return yaml::itemWhere(index_, list, i);
  }

  void checkLinks() {
    for (size_t i = 0; i < p_.links.size(); ++i) {
      if (!index_.usable(at("links", i, "name"))) all_link_names_known_ = false;
      const LinkSpec& l = p_.links[i];
      if (index_.usable(at("links", i, "name"))) {
        if (!isDns1123Label(l.name)) {
          err(at("links", i, "name"), quote(l.name) + " is not a DNS-1123 label");
        } else if (auto [it, fresh] = links_.emplace(l.name, i); !fresh) {
          err(at("links", i, "name"), "duplicate link name " + quote(l.name) + " (also " +
                                          where("links", it->second) + ")");
        }
      }
      if (index_.usable(at("links", i, "capacity")) && l.capacity_bytes_per_second == 0) {
        err(at("links", i, "capacity"), "must be greater than 0");
      }
      if (index_.usable(at("links", i, "headroom")) &&
          !(l.headroom_percent >= 0 && l.headroom_percent < 100)) {
        err(at("links", i, "headroom"),
            "must be at least 0% and less than 100%, got " + percentText(l.headroom_percent));
      }
    }
  }

  // Name, link, limit and weight of tenant j. Returns its link when that link's numbers are
  // valid (else the checks that need them are skipped: the link's errors are reported there).
  const LinkSpec* checkTenant(size_t j) {
    const TenantSpec& t = p_.tenants[j];
    auto f = [&](std::string_view field) { return at("tenants", j, field); };
    if (index_.usable(f("name"))) {
      if (!isDns1123Label(t.name)) {
        err(f("name"), quote(t.name) + " is not a DNS-1123 label");
      } else if (auto [it, fresh] = tenant_names_.emplace(t.name, j); !fresh) {
        err(f("name"), "duplicate tenant name " + quote(t.name) + " (also " +
                           where("tenants", it->second) + ")");
      }
    }
    const LinkSpec* link = nullptr;
    if (index_.usable(f("link"))) {
      auto it = links_.find(t.link);
      if (it == links_.end() && all_link_names_known_) {
        std::string known;
        for (const auto& [name, i] : links_) known += (known.empty() ? "" : ", ") + name;
        err(f("link"),
            "unknown link " + quote(t.link) +
                (known.empty() ? " (no links are defined)" : " (defined: " + known + ")"));
      } else if (it != links_.end()) {
        link = &p_.links[it->second];
        if (!index_.usable(at("links", it->second, "capacity")) ||
            !index_.usable(at("links", it->second, "headroom")) ||
            link->capacity_bytes_per_second == 0 ||
            !(link->headroom_percent >= 0 && link->headroom_percent < 100)) {
          link = nullptr;
        }
      }
    }
    const bool g_ok = index_.usable(f("guarantee"));
    const bool l_ok = index_.usable(f("limit"));
    if (l_ok && t.limit_bytes_per_second == 0) err(f("limit"), "must be greater than 0");
    if (g_ok && l_ok && t.limit_bytes_per_second < t.guarantee_bytes_per_second) {
      err(f("limit"), "must be >= guarantee (limit " + formatRate(t.limit_bytes_per_second) +
                          " < guarantee " + formatRate(t.guarantee_bytes_per_second) + ")");
    }
    if (link != nullptr && l_ok && t.limit_bytes_per_second > link->capacity_bytes_per_second) {
      err(f("limit"), formatRate(t.limit_bytes_per_second) + " exceeds the capacity of link " +
                          quote(link->name) + " (" + formatRate(link->capacity_bytes_per_second) +
                          ")");
    }
    if (index_.usable(f("unixGroup")) && !t.unix_group.empty()) {
      if (!isUnixGroupText(t.unix_group)) {
        err(f("unixGroup"), quote(t.unix_group) +
                                " is neither a gid (1-4294967294) nor a group name (1-32 of a-z, "
                                "0-9, '_', '-', starting with a letter or '_')");
      } else if (auto [it, fresh] = unix_groups_.emplace(t.unix_group, j); !fresh) {
        err(f("unixGroup"), "unixGroup " + quote(t.unix_group) + " is also tenant " +
                                quote(p_.tenants[it->second].name) + "'s (" +
                                where("tenants", it->second) +
                                "); a group decides one tenant on a node");
      }
    }
    if (index_.usable(f("weight")) && (t.weight < 1 || t.weight > kMaxWeight)) {
      err(f("weight"), rangeReason(1, kMaxWeight, std::to_string(t.weight)));
    }
    return link;
  }

  // Per link: the running sum of guarantees must stay within allocatableCapacity(); reported
  // once per link, at the tenant where the sum first exceeds it.
  void checkAdmission(size_t j, const LinkSpec* link) {
    const TenantSpec& t = p_.tenants[j];
    if (link == nullptr || !index_.usable(at("tenants", j, "guarantee")) ||
        over_admitted_.count(link->name)) {
      return;
    }
    unsigned __int128& sum = guarantee_sum_[link->name];
    sum += t.guarantee_bytes_per_second;
    const uint64_t allocatable = allocatableCapacity(*link);
    if (sum <= allocatable) return;
    over_admitted_.insert(link->name);
    unsigned __int128 total = 0;
    for (const TenantSpec& o : p_.tenants) {
      if (o.link == link->name) total += o.guarantee_bytes_per_second;
    }
    std::string total_text = total > std::numeric_limits<uint64_t>::max()
                                 ? std::string("more than 2^64 B/s")
                                 : formatRate(static_cast<uint64_t>(total));
    err(at("tenants", j, "guarantee"),
        "admission: guarantees on link " + quote(link->name) + " add up to " + total_text +
            ", more than the " + formatRate(allocatable) + " it admits (capacity " +
            formatRate(link->capacity_bytes_per_second) + " minus " +
            percentText(link->headroom_percent) + " headroom); the sum first exceeds it here");
  }

  // serviceLevel and dscp: ranges, and sharing only between tenants that both set
  // shareClass; trafficClasses: each value maps to one tenant.
  void checkClassSharing(size_t j) {
    const TenantSpec& t = p_.tenants[j];
    auto f = [&](std::string_view field) { return at("tenants", j, field); };
    if (index_.usable(f("serviceLevel"))) {
      if (t.service_level > kMaxServiceLevel) {
        err(f("serviceLevel"), rangeReason(0, kMaxServiceLevel, std::to_string(t.service_level)));
      } else {
        checkShared(sl_use_, t.service_level, j, "serviceLevel");
      }
    }
    if (index_.usable(f("dscp"))) {
      if (t.dscp > kMaxDscp) {
        err(f("dscp"), rangeReason(0, kMaxDscp, std::to_string(t.dscp)));
      } else {
        checkShared(dscp_use_, t.dscp, j, "dscp");
      }
    }
    if (!index_.usable(f("trafficClasses"))) return;
    if (t.traffic_classes.size() > kMaxTrafficClasses) {
      err(f("trafficClasses"), "too many items: " + std::to_string(t.traffic_classes.size()) +
                                   " (at most " + std::to_string(kMaxTrafficClasses) + ")");
    }
    for (size_t k = 0; k < t.traffic_classes.size(); ++k) {
      const std::string path = f("trafficClasses") + "[" + std::to_string(k) + "]";
      if (!index_.usable(path)) continue;
      int32_t tc = t.traffic_classes[k];
      if (tc < 0) {
        err(path, rangeReason(0, std::numeric_limits<int32_t>::max(), std::to_string(tc)));
        continue;
      }
      auto [it, fresh] = tc_owner_.emplace(tc, j);
      if (!fresh) {
        err(path, it->second == j
                      ? "trafficClass " + std::to_string(tc) + " is listed twice"
                      : "trafficClass " + std::to_string(tc) + " already maps to tenant " +
                            quote(p_.tenants[it->second].name) + " (" +
                            where("tenants", it->second) + "); a value must mean one tenant");
      }
    }
  }

  // namespaces and volcanoQueues: each name belongs to one tenant (the webhook's tenant of a
  // pod); at most one tenant is the default.
  void checkPlatformNames(size_t j) {
    struct List {
      std::string_view field, what, rule;
      bool (*valid)(std::string_view);
      const std::vector<std::string>& names;
      std::map<std::string, size_t, std::less<>>& owner;
    };
    const TenantSpec& t = p_.tenants[j];
    const List lists[] = {
        {"namespaces", "namespace", "a DNS-1123 label (a Kubernetes namespace name)",
         &isDns1123Label, t.namespaces, namespace_owner_},
        {"volcanoQueues", "Volcano queue", "a DNS-1123 subdomain (a Kubernetes object name)",
         &isDns1123Subdomain, t.volcano_queues, queue_owner_},
    };
    for (const List& l : lists) {
      const std::string list_path = at("tenants", j, l.field);
      if (!index_.usable(list_path)) continue;
      if (l.names.size() > kMaxPlatformNames) {
        err(list_path, "too many items: " + std::to_string(l.names.size()) + " (at most " +
                           std::to_string(kMaxPlatformNames) + ")");
      }
      for (size_t k = 0; k < l.names.size(); ++k) {
        const std::string path = list_path + "[" + std::to_string(k) + "]";
        if (!index_.usable(path)) continue;
        const std::string name = std::string(l.what) + " " + quote(l.names[k]);
        if (!l.valid(l.names[k])) {
          err(path, quote(l.names[k]) + " is not " + std::string(l.rule));
        } else if (auto [it, fresh] = l.owner.emplace(l.names[k], j); !fresh) {
          err(path, it->second == j
                        ? name + " is listed twice"
                        : name + " already belongs to tenant " +
                              quote(p_.tenants[it->second].name) + " (" +
                              where("tenants", it->second) + "); it must name one tenant");
        }
      }
    }
    if (!index_.usable(at("tenants", j, "default")) || !t.is_default) return;
    if (default_tenant_ != SIZE_MAX) {
      err(at("tenants", j, "default"),
          "tenant " + quote(p_.tenants[default_tenant_].name) + " (" +
              where("tenants", default_tenant_) +
              ") is the default already; at most one tenant sets default: true");
    } else {
      default_tenant_ = j;
    }
  }

  // `field` of tenant j uses `value`: an error if an earlier tenant uses it too, unless both
  // set shareClass.
  void checkShared(std::map<uint32_t, ClassUse>& use, uint32_t value, size_t j,
                   std::string_view field) {
    const TenantSpec& t = p_.tenants[j];
    const std::string path = at("tenants", j, field);
    const bool shares = t.share_class && index_.usable(at("tenants", j, "shareClass"));
    ClassUse& u = use[value];
    size_t other = SIZE_MAX;
    if (u.first != SIZE_MAX) other = shares ? u.first_exclusive : u.first;
    if (other != SIZE_MAX) {
      err(path, std::string(field) + " " + std::to_string(value) + " is also used by tenant " +
                    quote(p_.tenants[other].name) + " (" + where("tenants", other) +
                    "); tenants may share it only if both set shareClass: true");
    }
    if (u.first == SIZE_MAX) u.first = j;
    if (u.first_exclusive == SIZE_MAX && !shares) u.first_exclusive = j;
  }

  const PolicySpec& p_;
  const FieldIndex& index_;
  ErrorList& errors_;
  std::map<std::string, size_t, std::less<>> links_;  // name -> index in p_.links
  bool all_link_names_known_ = true;  // else "unknown link" could be a consequence, not a cause
  std::map<std::string, size_t, std::less<>> tenant_names_;
  std::map<std::string, size_t, std::less<>> unix_groups_;  // unixGroup -> first tenant
  std::map<std::string, unsigned __int128, std::less<>> guarantee_sum_;
  std::set<std::string, std::less<>> over_admitted_;
  std::map<uint32_t, ClassUse> sl_use_, dscp_use_;
  std::map<int32_t, size_t> tc_owner_;
  std::map<std::string, size_t, std::less<>> namespace_owner_, queue_owner_;
  size_t default_tenant_ = SIZE_MAX;
};

void validateSpec(const PolicySpec& p, const FieldIndex& index, ErrorList& errors) {
  SpecValidator(p, index, errors).run();
  validateTopology(p, index, errors);
}

// Marks the trafficClasses entries that failed to parse (stored as -1 placeholders) invalid.
void markUnparsedTrafficClasses(const PolicySpec& p, FieldIndex& index) {
  for (size_t j = 0; j < p.tenants.size(); ++j) {
    for (size_t k = 0; k < p.tenants[j].traffic_classes.size(); ++k) {
      if (p.tenants[j].traffic_classes[k] < 0) {
        index.invalid.insert("tenants[" + std::to_string(j) + "].trafficClasses[" +
                             std::to_string(k) + "]");
      }
    }
  }
}

}  // namespace

bool isDns1123Subdomain(std::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  for (size_t start = 0;;) {
    size_t dot = name.find('.', start);
    if (!isDns1123Label(name.substr(start, dot - start))) return false;
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

std::string PolicyError::toString() const {
  std::string s = file;
  if (line > 0) s += ":" + std::to_string(line) + ":" + std::to_string(column);
  s += ": ";
  if (!field.empty()) s += field + ": ";
  return s + reason;
}

Status errorsToStatus(const std::vector<PolicyError>& errors) {
  if (errors.empty()) return okStatus();
  std::string m =
      std::to_string(errors.size()) + (errors.size() == 1 ? " error" : " errors") + " in policy:";
  for (const PolicyError& e : errors) m += "\n" + e.toString();
  return invalidArgument(std::move(m));
}

Status ParsedPolicy::status() const { return errorsToStatus(errors); }

namespace {

// The budget scan: one pass over the bytes, O(1) memory, that bounds what the parser would build.
// Conservative: every flow bracket, block indentation level and "- "/"? " indicator counts as a
// nesting level; every ':' / '-' / ',' indicator as nodes. Quotes and comments are skipped.
struct BudgetScan {
  size_t max_depth = 0;
  size_t nodes = 0;
  Pos where{1, 1};  // where the depth or node budget was first exceeded
  const char* exceeded = nullptr;
};

BudgetScan scanYamlBudget(std::string_view t) {
  BudgetScan scan;
  std::vector<size_t> indents;  // block indentation stack (bounded: we stop at the budget)
  size_t flow = 0;
  int line = 1;
  size_t line_start = 0;
  char quote = 0;
  auto over = [&](size_t i, const char* what) {
    scan.exceeded = what;
    scan.where = {line, static_cast<int>(i - line_start + 1)};
  };
  auto depth = [&](size_t i, size_t d) {
    scan.max_depth = std::max(scan.max_depth, d);
    if (d > kMaxYamlDepth) over(i, "nesting");
  };
  bool at_line_start = true;
  for (size_t i = 0; i < t.size() && scan.exceeded == nullptr; ++i) {
    const char c = t[i];
    if (c == '\n') {
      ++line;
      line_start = i + 1;
      at_line_start = true;
      continue;
    }
    if (quote != 0) {
      if (c == quote) quote = 0;
      if (c == '\\' && quote == '"') ++i;
      continue;
    }
    if (at_line_start && flow == 0) {
      size_t j = i;
      while (j < t.size() && t[j] == ' ') ++j;
      if (j >= t.size() || t[j] == '\n' || t[j] == '#') {  // blank or comment line
        i = j - 1;
        at_line_start = false;
        if (j < t.size() && t[j] == '#') {
          while (i + 1 < t.size() && t[i + 1] != '\n') ++i;
        }
        continue;
      }
      const size_t indent = j - i;
      while (!indents.empty() && indents.back() > indent) indents.pop_back();
      if (indents.empty() || indents.back() < indent) indents.push_back(indent);
      size_t compact = 0;  // "- - x" and "? " open a level each on the same line
      while (j + 1 < t.size() && (t[j] == '-' || t[j] == '?') && (t[j + 1] == ' ')) {
        ++compact;
        ++scan.nodes;
        j += 2;
        while (j < t.size() && t[j] == ' ') ++j;
      }
      depth(j, indents.size() + compact);
      i = j - 1;
      at_line_start = false;
      continue;
    }
    at_line_start = false;
    const char next = i + 1 < t.size() ? t[i + 1] : '\n';
    switch (c) {
      case '\'':
      case '"': quote = c; break;
      case '#':
        if (i > 0 && (t[i - 1] == ' ' || t[i - 1] == '\t')) {
          while (i + 1 < t.size() && t[i + 1] != '\n') ++i;
        }
        break;
      case '[':
      case '{':
        ++flow;
        ++scan.nodes;
        depth(i, indents.size() + flow);
        break;
      case ']':
      case '}':
        if (flow > 0) --flow;
        break;
      case ',': ++scan.nodes; break;
      case ':':
        if (next == ' ' || next == '\n' || flow > 0) scan.nodes += 2;
        break;
      default: break;
    }
    if (scan.nodes > kMaxYamlNodes && scan.exceeded == nullptr) over(i, "nodes");
  }
  return scan;
}

}  // namespace

ParsedPolicy parsePolicyYaml(std::string_view text, std::string_view source_name) {
  ParsedPolicy out;
  ErrorList errors(source_name);
  if (text.size() > kMaxPolicyBytes) {
    errors.add({1, 1}, "(file)",
               "policy is " + std::to_string(text.size()) + " bytes, more than the limit of " +
                   std::to_string(kMaxPolicyBytes) + " bytes (4 MiB)");
    out.errors = errors.take();
    return out;
  }
  // Before the parser builds a tree (yaml-cpp's cost ~100x the text for deep nesting; the budget
  // bounds ours too): reject what would exceed it.
  BudgetScan scan = scanYamlBudget(text);
  if (scan.exceeded != nullptr) {
    errors.add(scan.where, "(yaml)",
               std::string_view(scan.exceeded) == "nesting"
                   ? "nested deeper than " + std::to_string(kMaxYamlDepth) +
                         " levels (a policy needs 4; rejected before parsing)"
                   : "more than " + std::to_string(kMaxYamlNodes) +
                         " YAML nodes (rejected before parsing)");
    out.errors = errors.take();
    return out;
  }
  FieldIndex index;
  // Only allocation failures throw (libyaml is C); nothing escapes this block.
  try {
    yaml::Document doc;
    if (!doc.parse(text)) {
      errors.add(posOf(doc.error_mark).line > 0 ? posOf(doc.error_mark) : Pos{1, 1}, "(yaml)",
                 "syntax error: " + doc.error);
    } else if (doc.documents.size() > 1) {
      errors.add(posOf(doc.documents[1].mark()), "(yaml)",
                 "the file holds " + std::to_string(doc.documents.size()) +
                     " YAML documents; a policy is exactly one");
    } else if (doc.documents.empty() || doc.documents[0].isNull()) {
      errors.add({1, 1}, "(document)", "the policy is empty");
    } else {
      YamlReader reader(errors, index);
      reader.readRoot(doc.documents[0], &out.policy);
    }
  } catch (const std::exception& e) {
    errors.add({1, 1}, "(yaml)", std::string("cannot parse: ") + e.what());
  }
  // Semantic rules run even after structural errors, so one pass reports everything; fields
  // that failed to parse are skipped by them.
  markUnparsedTrafficClasses(out.policy, index);
  validateSpec(out.policy, index, errors);
  out.errors = errors.take();
  if (!out.ok()) out.policy = PolicySpec{};
  return out;
}

ParsedPolicy loadPolicyFile(const std::string& path) {
  auto text = readFile(path, kMaxPolicyBytes);
  if (!text.ok()) {
    ParsedPolicy out;
    out.errors.push_back({path, 1, 1, "(file)", text.status().message()});
    return out;
  }
  return parsePolicyYaml(*text, path);
}

std::vector<PolicyError> validatePolicy(const PolicySpec& policy, std::string_view source_name) {
  ErrorList errors(source_name);
  FieldIndex index;
  if (policy.links.size() > kMaxLinks) {
    errors.add({}, "links", "too many items: " + std::to_string(policy.links.size()));
  }
  if (policy.tenants.size() > kMaxTenants) {
    errors.add({}, "tenants", "too many items: " + std::to_string(policy.tenants.size()));
  }
  if (policy.shared_links.size() > kMaxSharedLinks) {
    errors.add({}, "sharedLinks", "too many items: " + std::to_string(policy.shared_links.size()));
  }
  validateSpec(policy, index, errors);
  return errors.take();
}

std::string exactRateText(uint64_t bytes_per_second) {
  std::string text = formatRate(bytes_per_second);
  auto back = parseRate(text);
  if (back.ok() && *back == bytes_per_second) return text;
  return std::to_string(bytes_per_second) + "B/s";
}

std::string toYaml(const PolicySpec& policy, std::string_view header_comment) {
  std::string y;
  size_t start = 0;
  while (start < header_comment.size()) {
    size_t nl = header_comment.find('\n', start);
    if (nl == std::string_view::npos) nl = header_comment.size();
    y += "# " + std::string(header_comment.substr(start, nl - start)) + "\n";
    start = nl + 1;
  }
  y += "apiVersion: " + std::string(kApiVersion) + "\n";
  y += "kind: " + std::string(kKind) + "\n";
  // Names are DNS-1123 labels (validated), so they never need quoting.
  y += policy.links.empty() ? "links: []\n" : "links:\n";
  for (const LinkSpec& l : policy.links) {
    y += "  - name: " + l.name + "\n";
    y += "    capacity: " + exactRateText(l.capacity_bytes_per_second) + "\n";
    y += "    headroom: " + percentText(l.headroom_percent) + "\n";
  }
  y += sharedLinksYaml(policy);
  y += policy.tenants.empty() ? "tenants: []\n" : "tenants:\n";
  for (const TenantSpec& t : policy.tenants) {
    y += "  - name: " + t.name + "\n";
    y += "    link: " + t.link + "\n";
    y += "    guarantee: " + exactRateText(t.guarantee_bytes_per_second) + "\n";
    y += "    limit: " + exactRateText(t.limit_bytes_per_second) + "\n";
    y += "    weight: " + std::to_string(t.weight) + "\n";
    y += "    serviceLevel: " + std::to_string(t.service_level) + "\n";
    y += "    dscp: " + std::to_string(t.dscp) + "\n";
    if (!t.traffic_classes.empty()) {
      y += "    trafficClasses: [";
      for (size_t i = 0; i < t.traffic_classes.size(); ++i) {
        y += (i ? ", " : "") + std::to_string(t.traffic_classes[i]);
      }
      y += "]\n";
    }
    if (t.share_class) y += "    shareClass: true\n";
    // Names are validated DNS-1123 labels / subdomains: no quoting needed.
    for (auto [key, list] :
         {std::pair{"namespaces", &t.namespaces}, std::pair{"volcanoQueues", &t.volcano_queues}}) {
      if (list->empty()) continue;
      y += std::string("    ") + key + ": [";
      for (size_t i = 0; i < list->size(); ++i) y += (i ? ", " : "") + (*list)[i];
      y += "]\n";
    }
    if (t.is_default) y += "    default: true\n";
    // A validated gid or portable group name: quoted so a gid stays a string.
    if (!t.unix_group.empty()) y += "    unixGroup: \"" + t.unix_group + "\"\n";
    y += tenantLinkValuesYaml(t);
  }
  return y;
}

}  // namespace tq::policy
