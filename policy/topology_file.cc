#include "policy/topology_file.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <map>
#include <set>

#include "common/capacity.h"
#include "common/text.h"
#include "common/topology.h"
#include "common/units.h"

namespace tq::policy {
namespace {

using yaml::ErrorList;
using yaml::FieldIndex;
using yaml::itemPath;
using yaml::Pos;
using yaml::posOf;
using yaml::quote;

constexpr std::string_view kSharedLinkFields[] = {"name", "capacity", "headroom", "rail", "groups"};
constexpr std::string_view kGroupFields[] = {"name", "nodes", "capacity"};
constexpr std::string_view kTenantLinkFields[] = {"link", "guarantee", "limit", "weight"};

LinkGroupSpec readGroup(yaml::FieldReader& r, const yaml::Node& node, const std::string& path) {
  LinkGroupSpec g;
  yaml::FieldReader::Fields f;
  const Pos at = posOf(node.mark());
  if (!r.readMapping(node, at, path, kGroupFields, &f)) {
    for (auto k : kGroupFields) r.markInvalid(path + "." + std::string(k));
    return g;
  }
  if (r.requireField(f, path, "name", at)) r.readName(f["name"], path + ".name", &g.name);
  if (r.requireField(f, path, "nodes", at)) {
    r.readNames(f["nodes"], path + ".nodes", kMaxGroupNodes, &g.nodes);
  }
  if (f.count("capacity")) {
    r.readRate(f["capacity"], path + ".capacity", &g.capacity_bytes_per_second);
  }
  return g;
}

SharedLinkSpec readSharedLink(yaml::FieldReader& r, const yaml::Node& node,
                              const std::string& path) {
  SharedLinkSpec l;
  yaml::FieldReader::Fields f;
  const Pos at = posOf(node.mark());
  if (!r.readMapping(node, at, path, kSharedLinkFields, &f)) {
    for (auto k : kSharedLinkFields) r.markInvalid(path + "." + std::string(k));
    return l;
  }
  if (r.requireField(f, path, "name", at)) r.readName(f["name"], path + ".name", &l.name);
  if (f.count("capacity")) {
    r.readRate(f["capacity"], path + ".capacity", &l.capacity_bytes_per_second);
  }
  if (f.count("headroom")) r.readPercent(f["headroom"], path + ".headroom", &l.headroom_percent);
  uint32_t rail = 0;
  if (f.count("rail") && r.readUint(f["rail"], path + ".rail", 0, kMaxRail, &rail)) l.rail = rail;
  if (r.requireField(f, path, "groups", at)) {
    r.forEachItem(f["groups"], path + ".groups", kMaxLinkGroups,
                  [&](const yaml::Node& item, const std::string& p) {
                    l.groups.push_back(readGroup(r, item, p));
                  });
  }
  return l;
}

// The semantic rules (topology_file.h); errors at the field they concern.
class TopologyValidator {
 public:
  TopologyValidator(const PolicySpec& p, const FieldIndex& index, ErrorList& errors)
      : p_(p), index_(index), errors_(errors) {}

  void run() {
    for (size_t i = 0; i < p_.shared_links.size(); ++i) checkSharedLink(i);
    for (size_t j = 0; j < p_.tenants.size(); ++j) checkTenantValues(j);
    for (size_t i = 0; i < p_.shared_links.size(); ++i) checkAdmission(i);
  }

 private:
  void err(const std::string& path, std::string reason) {
    errors_.add(index_.find(path), path, std::move(reason));
  }
  bool usable(const std::string& path) const { return index_.usable(path); }
  // A field written in the file (structured input has no positions: 0 there means "absent").
  bool written(const std::string& path) const { return index_.pos.count(path) != 0; }
  std::string where(std::string_view list, size_t i) const {
    return yaml::itemWhere(index_, list, i);
  }

  void checkSharedLink(size_t i) {
    const SharedLinkSpec& l = p_.shared_links[i];
    const std::string path = itemPath("sharedLinks", i);
    auto f = [&](std::string_view field) { return path + "." + std::string(field); };
    if (usable(f("name"))) {
      const LinkSpec* node_link = p_.findLink(l.name);
      if (!isDns1123Label(l.name)) {
        err(f("name"), quote(l.name) + " is not a DNS-1123 label");
      } else if (auto [it, fresh] = names_.emplace(l.name, i); !fresh) {
        err(f("name"), "duplicate shared link name " + quote(l.name) + " (also " +
                           where("sharedLinks", it->second) + ")");
      } else if (node_link != nullptr) {
        err(f("name"), quote(l.name) + " is also the name of a node link (links[" +
                           std::to_string(node_link - p_.links.data()) +
                           "]); a name means one link");
      }
    }
    bool numbers_ok = usable(f("capacity")) && usable(f("headroom")) && usable(f("groups"));
    if (usable(f("capacity")) && written(f("capacity")) && l.capacity_bytes_per_second == 0) {
      err(f("capacity"), "must be greater than 0 (leave it out to give each group its own)");
      numbers_ok = false;
    }
    if (usable(f("headroom")) && !(l.headroom_percent >= 0 && l.headroom_percent < 100)) {
      err(f("headroom"),
          "must be at least 0% and less than 100%, got " + yaml::percentText(l.headroom_percent));
      numbers_ok = false;
    }
    if (usable(f("rail")) && l.rail && *l.rail > kMaxRail) {
      err(f("rail"), yaml::rangeReason(0, kMaxRail, std::to_string(*l.rail)));
    }
    if (usable(f("groups")) && l.groups.empty()) {
      err(f("groups"),
          "a shared link needs at least one group (the nodes behind one of its links)");
      numbers_ok = false;
    }
    if (l.groups.size() > kMaxLinkGroups) {
      err(f("groups"), "too many items: " + std::to_string(l.groups.size()) + " (at most " +
                           std::to_string(kMaxLinkGroups) + ")");
    }
    std::map<std::string, size_t, std::less<>> group_names;
    std::map<std::string, size_t, std::less<>> node_group;  // node -> group index
    for (size_t g = 0; g < l.groups.size(); ++g) {
      if (!checkGroup(i, g, group_names, node_group)) numbers_ok = false;
    }
    if (numbers_ok) valid_links_.insert(i);
  }

  // Returns whether the group's capacity is known and valid.
  bool checkGroup(size_t i, size_t gi, std::map<std::string, size_t, std::less<>>& group_names,
                  std::map<std::string, size_t, std::less<>>& node_group) {
    const SharedLinkSpec& l = p_.shared_links[i];
    const LinkGroupSpec& g = l.groups[gi];
    const std::string list = itemPath("sharedLinks", i, "groups");
    const std::string path = itemPath(list, gi);
    auto f = [&](std::string_view field) { return path + "." + std::string(field); };
    if (usable(f("name"))) {
      if (!isDns1123Label(g.name)) {
        err(f("name"), quote(g.name) + " is not a DNS-1123 label");
      } else if (auto [it, fresh] = group_names.emplace(g.name, gi); !fresh) {
        err(f("name"), "duplicate group name " + quote(g.name) + " in shared link " +
                           quote(l.name) + " (also " + where(list, it->second) + ")");
      }
    }
    bool capacity_ok = usable(f("capacity"));
    if (capacity_ok && written(f("capacity")) && g.capacity_bytes_per_second == 0) {
      err(f("capacity"), "must be greater than 0");
      capacity_ok = false;
    } else if (const std::string lc = itemPath("sharedLinks", i, "capacity");
               capacity_ok && groupCapacity(l, g) == 0 && usable(lc) && !written(lc)) {
      err(path, "group " + quote(g.name) +
                    " has no capacity: set capacity on the group or on shared link " +
                    quote(l.name));
      capacity_ok = false;
    }
    if (!usable(f("nodes"))) return capacity_ok;
    if (g.nodes.empty()) err(f("nodes"), "a group needs at least one node");
    if (g.nodes.size() > kMaxGroupNodes) {
      err(f("nodes"), "too many items: " + std::to_string(g.nodes.size()) + " (at most " +
                          std::to_string(kMaxGroupNodes) + ")");
    }
    node_entries_ += g.nodes.size();
    if (node_entries_ > kMaxTopologyNodes && !reported_node_budget_) {
      reported_node_budget_ = true;
      err(f("nodes"),
          "more than " + std::to_string(kMaxTopologyNodes) + " node entries over all shared links");
    }
    for (size_t k = 0; k < g.nodes.size(); ++k) {
      const std::string np = f("nodes") + "[" + std::to_string(k) + "]";
      if (!usable(np)) continue;
      const std::string& node = g.nodes[k];
      if (!isDns1123Subdomain(node)) {
        err(np, quote(node) + " is not a Kubernetes node name (a DNS-1123 subdomain)");
      } else if (auto [it, fresh] = node_group.emplace(node, gi); !fresh) {
        err(np, it->second == gi
                    ? "node " + quote(node) + " is listed twice"
                    : "node " + quote(node) + " is in group " + quote(l.groups[it->second].name) +
                          " (" + where(list, it->second) +
                          ") already; a node is in at most one group of a shared link");
      }
    }
    return capacity_ok;
  }

  void checkTenantValues(size_t j) {
    const TenantSpec& t = p_.tenants[j];
    const std::string list = itemPath("tenants", j, "sharedLinks");
    if (!usable(list)) return;
    std::map<std::string, size_t, std::less<>> seen;
    for (size_t k = 0; k < t.shared_links.size(); ++k) {
      const TenantLinkValues& v = t.shared_links[k];
      const std::string path = itemPath(list, k);
      auto f = [&](std::string_view field) { return path + "." + std::string(field); };
      if (!usable(f("link"))) continue;
      auto it = names_.find(v.link);
      if (it == names_.end()) {
        std::string known;
        for (const auto& [name, i] : names_) known += (known.empty() ? "" : ", ") + name;
        err(f("link"),
            "unknown shared link " + quote(v.link) +
                (known.empty() ? " (no sharedLinks are defined)" : " (defined: " + known + ")"));
        continue;
      }
      if (auto [prev, fresh] = seen.emplace(v.link, k); !fresh) {
        err(f("link"), "shared link " + quote(v.link) + " is given twice for this tenant (also " +
                           where(list, prev->second) + ")");
        continue;
      }
      const SharedLinkSpec& l = p_.shared_links[it->second];
      const LinkShare share = tenantShareOn(t, v.link);
      const bool g_ok = usable(f("guarantee")) && usable(itemPath("tenants", j, "guarantee"));
      const bool l_ok = usable(f("limit")) && usable(itemPath("tenants", j, "limit"));
      if (v.limit_bytes_per_second && usable(f("limit"))) {
        uint64_t largest = 0;
        for (const LinkGroupSpec& g : l.groups) largest = std::max(largest, groupCapacity(l, g));
        if (*v.limit_bytes_per_second == 0) {
          err(f("limit"), "must be greater than 0");
        } else if (valid_links_.count(it->second) && *v.limit_bytes_per_second > largest) {
          err(f("limit"), formatRate(*v.limit_bytes_per_second) +
                              " exceeds the capacity of every group of shared link " +
                              quote(l.name) + " (largest " + formatRate(largest) + ")");
        }
      }
      // Only when this entry sets one of the two (else the tenant's own rule reported it).
      if (g_ok && l_ok && (v.guarantee_bytes_per_second || v.limit_bytes_per_second) &&
          share.limit != 0 && share.limit < share.guarantee) {
        const bool own_g = v.guarantee_bytes_per_second.has_value();
        err(own_g ? f("guarantee") : f("limit"),
            "on shared link " + quote(l.name) + " the limit must be >= the guarantee (limit " +
                formatRate(share.limit) + (v.limit_bytes_per_second ? "" : " (the tenant's)") +
                " < guarantee " + formatRate(share.guarantee) + (own_g ? "" : " (the tenant's)") +
                ")");
      }
      if (v.weight && usable(f("weight")) && (*v.weight < 1 || *v.weight > kMaxWeight)) {
        err(f("weight"), yaml::rangeReason(1, kMaxWeight, std::to_string(*v.weight)));
      }
    }
  }

  // Any tenant may run behind any group: the sum of all tenants' guarantees on the shared link
  // must fit its smallest group's allocatable capacity. Reported once, at the tenant where the
  // running sum first exceeds it.
  void checkAdmission(size_t i) {
    if (!valid_links_.count(i)) return;
    const SharedLinkSpec& l = p_.shared_links[i];
    if (!usable(itemPath("sharedLinks", i, "name")) || names_.count(l.name) == 0 ||
        names_.at(l.name) != i) {
      return;
    }
    size_t smallest = 0;
    for (size_t g = 1; g < l.groups.size(); ++g) {
      if (allocatableCapacity(l, l.groups[g]) < allocatableCapacity(l, l.groups[smallest])) {
        smallest = g;
      }
    }
    const uint64_t allocatable = allocatableCapacity(l, l.groups[smallest]);
    unsigned __int128 sum = 0, total = 0;
    size_t first_over = SIZE_MAX;
    std::string first_path;
    bool inherited = false;
    for (size_t j = 0; j < p_.tenants.size(); ++j) {
      const TenantSpec& t = p_.tenants[j];
      const TenantLinkValues* v = findTenantLinkValues(t, l.name);
      size_t k = v ? static_cast<size_t>(v - t.shared_links.data()) : 0;
      const std::string path = v && v->guarantee_bytes_per_second
                                   ? itemPath(itemPath("tenants", j, "sharedLinks"), k, "guarantee")
                                   : itemPath("tenants", j, "guarantee");
      if (!usable(path) || !usable(itemPath("tenants", j, "sharedLinks"))) continue;
      const uint64_t g = tenantShareOn(t, l.name).guarantee;
      sum += g;
      total += g;
      if (sum > allocatable && first_over == SIZE_MAX) {
        first_over = j;
        first_path = path;
        inherited = !(v && v->guarantee_bytes_per_second);
      }
    }
    if (first_over == SIZE_MAX) return;
    std::string total_text = total > std::numeric_limits<uint64_t>::max()
                                 ? std::string("more than 2^64 B/s")
                                 : formatRate(static_cast<uint64_t>(total));
    const LinkGroupSpec& g = l.groups[smallest];
    err(first_path,
        "admission: guarantees on shared link " + quote(l.name) + " add up to " + total_text +
            ", more than the " + formatRate(allocatable) + " it admits (group " + quote(g.name) +
            ": capacity " + formatRate(groupCapacity(l, g)) + " minus " +
            yaml::percentText(l.headroom_percent) +
            " headroom; every tenant counts on every shared link, since any may run behind any "
            "group); the sum first exceeds it here" +
            (inherited ? " (this tenant's guarantee there is its own per-node guarantee: a "
                         "tenants[].sharedLinks entry for " +
                             quote(l.name) + " sets another)"
                       : ""));
  }

  const PolicySpec& p_;
  const FieldIndex& index_;
  ErrorList& errors_;
  std::map<std::string, size_t, std::less<>> names_;  // shared link name -> index
  std::set<size_t> valid_links_;  // shared links whose capacities and groups are usable
  size_t node_entries_ = 0;
  bool reported_node_budget_ = false;
};

std::string jsonNumber(double d) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, d);
  return std::string(buf, ec == std::errc() ? end : buf);
}

std::string nameList(const std::vector<std::string>& names) {
  std::string s = "[";
  for (size_t i = 0; i < names.size(); ++i) s += (i ? ", " : "") + names[i];
  return s + "]";
}

}  // namespace

void readSharedLinks(yaml::FieldReader& reader, const yaml::FieldReader::Entry& e,
                     std::vector<SharedLinkSpec>* out) {
  reader.forEachItem(e, "sharedLinks", kMaxSharedLinks,
                     [&](const yaml::Node& item, const std::string& path) {
                       out->push_back(readSharedLink(reader, item, path));
                     });
}

void readTenantLinkValues(yaml::FieldReader& r, const yaml::FieldReader::Entry& e,
                          const std::string& path, std::vector<TenantLinkValues>* out) {
  r.forEachItem(e, path, kMaxSharedLinks, [&](const yaml::Node& node, const std::string& p) {
    TenantLinkValues v;
    yaml::FieldReader::Fields f;
    const Pos at = posOf(node.mark());
    if (!r.readMapping(node, at, p, kTenantLinkFields, &f)) {
      for (auto k : kTenantLinkFields) r.markInvalid(p + "." + std::string(k));
    } else {
      if (r.requireField(f, p, "link", at)) r.readName(f["link"], p + ".link", &v.link);
      uint64_t rate = 0;
      if (f.count("guarantee") && r.readRate(f["guarantee"], p + ".guarantee", &rate)) {
        v.guarantee_bytes_per_second = rate;
      }
      if (f.count("limit") && r.readRate(f["limit"], p + ".limit", &rate)) {
        v.limit_bytes_per_second = rate;
      }
      uint32_t weight = 0;
      if (f.count("weight") && r.readUint(f["weight"], p + ".weight", 1, kMaxWeight, &weight)) {
        v.weight = weight;
      }
    }
    out->push_back(std::move(v));
  });
}

void validateTopology(const PolicySpec& policy, const yaml::FieldIndex& index,
                      yaml::ErrorList& errors) {
  TopologyValidator(policy, index, errors).run();
}

std::string sharedLinksYaml(const PolicySpec& policy) {
  if (policy.shared_links.empty()) return "";
  // Names are validated DNS-1123 labels and node names subdomains: no quoting needed.
  std::string y = "sharedLinks:\n";
  for (const SharedLinkSpec& l : policy.shared_links) {
    y += "  - name: " + l.name + "\n";
    if (l.capacity_bytes_per_second != 0) {
      y += "    capacity: " + exactRateText(l.capacity_bytes_per_second) + "\n";
    }
    y += "    headroom: " + yaml::percentText(l.headroom_percent) + "\n";
    if (l.rail) y += "    rail: " + std::to_string(*l.rail) + "\n";
    y += "    groups:\n";
    for (const LinkGroupSpec& g : l.groups) {
      y += "      - name: " + g.name + "\n";
      if (g.capacity_bytes_per_second != 0) {
        y += "        capacity: " + exactRateText(g.capacity_bytes_per_second) + "\n";
      }
      y += "        nodes: " + nameList(g.nodes) + "\n";
    }
  }
  return y;
}

std::string tenantLinkValuesYaml(const TenantSpec& t) {
  if (t.shared_links.empty()) return "";
  std::string y = "    sharedLinks:\n";
  for (const TenantLinkValues& v : t.shared_links) {
    y += "      - link: " + v.link + "\n";
    if (v.guarantee_bytes_per_second) {
      y += "        guarantee: " + exactRateText(*v.guarantee_bytes_per_second) + "\n";
    }
    if (v.limit_bytes_per_second) {
      y += "        limit: " + exactRateText(*v.limit_bytes_per_second) + "\n";
    }
    if (v.weight) y += "        weight: " + std::to_string(*v.weight) + "\n";
  }
  return y;
}

std::string sharedLinksJson(const std::vector<SharedLinkSpec>& links) {
  std::string o = "\"sharedLinks\": [";
  for (size_t i = 0; i < links.size(); ++i) {
    const SharedLinkSpec& l = links[i];
    o += std::string(i ? "," : "") + "\n    {\"name\": " + jsonQuote(l.name) +
         ", \"capacityBytesPerSecond\": " + std::to_string(l.capacity_bytes_per_second) +
         ", \"headroomPercent\": " + jsonNumber(l.headroom_percent);
    if (l.rail) o += ", \"rail\": " + std::to_string(*l.rail);
    o += ", \"groups\": [";
    for (size_t g = 0; g < l.groups.size(); ++g) {
      o +=
          std::string(g ? ", " : "") + "{\"name\": " + jsonQuote(l.groups[g].name) +
          ", \"capacityBytesPerSecond\": " + std::to_string(l.groups[g].capacity_bytes_per_second) +
          ", \"nodes\": [";
      for (size_t n = 0; n < l.groups[g].nodes.size(); ++n) {
        o += std::string(n ? ", " : "") + jsonQuote(l.groups[g].nodes[n]);
      }
      o += "]}";
    }
    o += "]}";
  }
  return o + (links.empty() ? "]" : "\n  ]");
}

std::string tenantLinkValuesJson(const std::vector<TenantLinkValues>& values) {
  std::string o = "\"sharedLinks\": [";
  for (size_t i = 0; i < values.size(); ++i) {
    const TenantLinkValues& v = values[i];
    o += std::string(i ? ", " : "") + "{\"link\": " + jsonQuote(v.link);
    if (v.guarantee_bytes_per_second) {
      o += ", \"guaranteeBytesPerSecond\": " + std::to_string(*v.guarantee_bytes_per_second);
    }
    if (v.limit_bytes_per_second) {
      o += ", \"limitBytesPerSecond\": " + std::to_string(*v.limit_bytes_per_second);
    }
    if (v.weight) o += ", \"weight\": " + std::to_string(*v.weight);
    o += "}";
  }
  return o + "]";
}

}  // namespace tq::policy
