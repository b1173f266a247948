#include "policy/hypernode_import.h"

#include <regex.h>

#include <algorithm>
#include <charconv>
#include <memory>
#include <optional>
#include <set>

#include "common/tenant_shm.h"
#include "common/units.h"

namespace tq::policy {
namespace {

constexpr size_t kMaxHyperNodes = 100'000;
constexpr size_t kMaxClusterNodes = 200'000;
// HyperNodes inside HyperNodes: a real fabric has a handful of tiers; the bound keeps the
// recursion's stack small whatever the file says.
constexpr int kMaxNesting = 32;
// Selector matches and node entries over the whole import: the bound on its time and memory
// (a 4 MiB file of regex members against 200,000 nodes would otherwise run for hours).
constexpr size_t kMaxWork = 20'000'000;

// The value under `key` of a mapping; an undefined Node when `n` is not a mapping or lacks it
// (yaml-cpp's operator[] throws on non-maps).
YAML::Node child(const YAML::Node& n, std::string_view key) {
  if (!n || !n.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
  for (auto it = n.begin(); it != n.end(); ++it) {
    if (it->first.IsScalar() && it->first.Scalar() == key) return it->second;
  }
  return YAML::Node(YAML::NodeType::Undefined);
}
std::string scalar(const YAML::Node& n) { return n && n.IsScalar() ? n.Scalar() : ""; }

// A compiled POSIX extended regular expression (regfree on destruction).
class Regex {
 public:
  // Go RE2 -> POSIX ERE for what both mean the same; nullptr with `why` otherwise.
  static std::unique_ptr<Regex> compile(const std::string& re2, std::string* why) {
    if (re2.size() > kMaxRegexPattern) {
      *why = "longer than " + std::to_string(kMaxRegexPattern) + " bytes";
      return nullptr;
    }
    std::string ere;
    for (size_t i = 0; i < re2.size(); ++i) {
      if (re2[i] != '\\' || i + 1 == re2.size()) {
        ere += re2[i];
        continue;
      }
      const char c = re2[++i];
      if (c >= '0' && c <= '9') {
        *why = "backreferences are not supported";
        return nullptr;
      }
      switch (c) {
        case 'd': ere += "[0-9]"; break;
        case 'w': ere += "[A-Za-z0-9_]"; break;
        case 's': ere += "[[:space:]]"; break;
        default:
          if (std::isalpha(static_cast<unsigned char>(c))) {
            *why = std::string("the escape \\") + c + " is RE2-only";
            return nullptr;
          }
          ere += '\\';
          ere += c;
      }
    }
    auto r = std::unique_ptr<Regex>(new Regex);
    const int rc = regcomp(&r->re_, ere.c_str(), REG_EXTENDED | REG_NOSUB);
    if (rc != 0) {
      char buf[256];
      regerror(rc, &r->re_, buf, sizeof buf);
      *why = buf;
      return nullptr;  // regcomp failed: nothing to free
    }
    r->compiled_ = true;
    return r;
  }
  ~Regex() {
    if (compiled_) regfree(&re_);
  }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  bool matches(const std::string& s) const { return regexec(&re_, s.c_str(), 0, nullptr, 0) == 0; }

 private:
  Regex() = default;
  regex_t re_{};
  bool compiled_ = false;
};

struct ClusterNode {
  std::string name;
  std::map<std::string, std::string> labels;
};

enum class MemberType { kNode, kHyperNode };

struct Member {
  MemberType type = MemberType::kNode;
  YAML::Node selector;
  size_t index = 0;  // in spec.members
};

struct HyperNode {
  std::string name;
  int64_t tier = 0;
  std::vector<Member> members;
  std::optional<uint64_t> capacity;  // the annotation
};

// A Kubernetes label selector against a node's labels (matchLabels AND matchExpressions).
// nullopt with `why` when the selector is not one.
std::optional<bool> selects(const YAML::Node& sel, const ClusterNode& node, std::string* why) {
  auto fail = [&](std::string reason) -> std::optional<bool> {
    *why = std::move(reason);
    return std::nullopt;
  };
  if (!sel.IsMap()) return fail("labelMatch is not a mapping");
  const YAML::Node labels = child(sel, "matchLabels");
  if (labels) {
    if (!labels.IsMap()) return fail("matchLabels is not a mapping");
    for (auto it = labels.begin(); it != labels.end(); ++it) {
      auto l = node.labels.find(scalar(it->first));
      if (l == node.labels.end() || l->second != scalar(it->second)) return false;
    }
  }
  const YAML::Node exprs = child(sel, "matchExpressions");
  if (exprs) {
    if (!exprs.IsSequence()) return fail("matchExpressions is not a sequence");
    for (const YAML::Node& e : exprs) {
      const std::string key = scalar(child(e, "key")), op = scalar(child(e, "operator"));
      std::set<std::string> values;
      if (const YAML::Node v = child(e, "values"); v && v.IsSequence()) {
        for (const YAML::Node& x : v) values.insert(scalar(x));
      }
      auto l = node.labels.find(key);
      const bool has = l != node.labels.end();
      bool ok = false;
      if (op == "In") {
        ok = has && values.count(l->second);
      } else if (op == "NotIn") {
        ok = !has || !values.count(l->second);
      } else if (op == "Exists") {
        ok = has;
      } else if (op == "DoesNotExist") {
        ok = !has;
      } else {
        return fail("unknown operator \"" + op + "\"");
      }
      if (!ok) return false;
    }
  }
  if (!labels && !exprs) return fail("an empty labelMatch");
  return true;
}

class Importer {
 public:
  Importer(std::string_view source, const HyperNodeImportOptions& options)
      : source_(source), options_(options) {}

  HyperNodeImport run(const std::vector<HyperNodeObject>& objects) {
    if (objects.size() > kMaxHyperNodes) {
      error(objects[kMaxHyperNodes].node, "(file)",
            "more than " + std::to_string(kMaxHyperNodes) + " HyperNodes");
      return std::move(out_);
    }
    for (const HyperNodeObject& o : objects) read(o);
    if (!options_.nodes_yaml.empty()) readClusterNodes();
    if (!out_.errors.empty()) return std::move(out_);
    for (size_t i = 0; i < hypernodes_.size(); ++i) by_name_.emplace(hypernodes_[i].name, i);
    resolved_.resize(hypernodes_.size());
    state_.assign(hypernodes_.size(), 0);
    for (size_t i = 0; i < hypernodes_.size() && work_ <= kMaxWork; ++i) resolve(i, 0);
    if (work_ > kMaxWork) {
      out_.errors.push_back({std::string(source_), 0, 0, "(file)",
                             "the HyperNodes' members take more than " + std::to_string(kMaxWork) +
                                 " node matches to resolve (a selector per HyperNode against "
                                 "the cluster's nodes)"});
      return std::move(out_);
    }
    write();
    return std::move(out_);
  }

 private:
  void error(const YAML::Node& at, const std::string& field, std::string reason,
             std::string_view file = {}) {
    const YAML::Mark m = at.Mark();
    const bool known = !m.is_null() && m.line >= 0;
    out_.errors.push_back({std::string(file.empty() ? source_ : file), known ? m.line + 1 : 0,
                           known ? m.column + 1 : 0, field, std::move(reason)});
  }
  void unmapped(std::string line) { out_.unmapped.push_back(std::move(line)); }

  void read(const HyperNodeObject& o) {
    const std::string prefix = o.path.empty() ? "" : o.path + ".";
    const std::string api = scalar(child(o.node, "apiVersion"));
    if (api.rfind("topology.volcano.sh/", 0) != 0) {
      return error(o.node, prefix + "apiVersion",
                   "not a Volcano HyperNode (apiVersion \"" + api +
                       "\"; expected topology.volcano.sh/v1alpha1)");
    }
    HyperNode h;
    const YAML::Node meta = child(o.node, "metadata");
    h.name = scalar(child(meta, "name"));
    if (!isDns1123Subdomain(h.name)) {
      return error(meta ? meta : o.node, prefix + "metadata.name",
                   "the HyperNode's name \"" + h.name + "\" is not a Kubernetes object name");
    }
    if (!names_.insert(h.name).second) {
      return error(child(meta, "name"), prefix + "metadata.name",
                   "HyperNode \"" + h.name + "\" is given twice");
    }
    const YAML::Node spec = child(o.node, "spec");
    const YAML::Node tier = child(spec, "tier");
    const std::string tier_text = scalar(tier);  // an integer, or a string in older versions
    auto [end, ec] = std::from_chars(tier_text.data(), tier_text.data() + tier_text.size(), h.tier);
    if (tier_text.empty() || ec != std::errc() || end != tier_text.data() + tier_text.size() ||
        h.tier < 0 || h.tier > 1000) {
      return error(tier ? tier : (spec ? spec : o.node), prefix + "spec.tier",
                   "HyperNode \"" + h.name + "\": spec.tier must be an integer 0..1000, got \"" +
                       tier_text + "\"");
    }
    if (const YAML::Node a = child(child(meta, "annotations"), kUplinkCapacityAnnotation); a) {
      auto rate = parseRate(scalar(a));
      if (rate.ok() && *rate > 0) {
        h.capacity = *rate;
      } else {
        unmapped("HyperNode \"" + h.name + "\": " + std::string(kUplinkCapacityAnnotation) + " \"" +
                 scalar(a) + "\" is not a rate above 0 (the tier's capacity is used)");
      }
    }
    const YAML::Node members = child(spec, "members");
    if (members && !members.IsSequence()) {
      return error(members, prefix + "spec.members", "not a sequence");
    }
    for (size_t k = 0; members && k < members.size(); ++k) {
      const YAML::Node m = members[k];
      const std::string type = scalar(child(m, "type"));
      if (type != "Node" && type != "HyperNode") {
        unmapped("HyperNode \"" + h.name + "\": member " + std::to_string(k) + " has type \"" +
                 type + "\" (Node or HyperNode expected)");
        continue;
      }
      h.members.push_back(
          {type == "Node" ? MemberType::kNode : MemberType::kHyperNode, child(m, "selector"), k});
    }
    hypernodes_.push_back(std::move(h));
  }

  void readClusterNodes() {
    const std::string& file = options_.nodes_source;
    try {
      for (const YAML::Node& doc : YAML::LoadAll(options_.nodes_yaml)) {
        if (doc.IsNull()) continue;
        const std::string kind = scalar(child(doc, "kind"));
        std::vector<YAML::Node> items;
        if (kind.ends_with("List")) {
          const YAML::Node list = child(doc, "items");
          if (!list.IsSequence()) return error(doc, "items", "a List without items", file);
          for (const YAML::Node& x : list) items.push_back(x);
        } else {
          items.push_back(doc);
        }
        for (const YAML::Node& n : items) {
          if (scalar(child(n, "kind")) != "Node" && kind != "NodeList") {
            return error(n, "kind", "not a Node (kubectl get nodes -o yaml)", file);
          }
          ClusterNode c;
          c.name = scalar(child(child(n, "metadata"), "name"));
          if (!isDns1123Subdomain(c.name)) {
            return error(n, "metadata.name", "\"" + c.name + "\" is not a node name", file);
          }
          const YAML::Node labels = child(child(n, "metadata"), "labels");
          for (auto it = labels.begin(); labels.IsMap() && it != labels.end(); ++it) {
            c.labels.emplace(scalar(it->first), scalar(it->second));
          }
          cluster_.push_back(std::move(c));
          if (cluster_.size() > kMaxClusterNodes) {
            return error(n, "(file)", "more than " + std::to_string(kMaxClusterNodes) + " nodes",
                         file);
          }
        }
      }
    } catch (const YAML::Exception& e) {
      out_.errors.push_back(
          {file, e.mark.line + 1, e.mark.column + 1, "(yaml)", "syntax error: " + e.msg});
    }
  }

  // A member's regexMatch, or nullptr after saying why through `missing`.
  template <typename Missing>
  static std::unique_ptr<Regex> compileMember(const YAML::Node& regex, Missing missing) {
    const std::string pattern = scalar(child(regex, "pattern"));
    std::string why;
    auto re = Regex::compile(pattern, &why);
    if (!re) missing("regexMatch \"" + pattern + "\": " + why);
    return re;
  }

  // The nodes of HyperNode i (memoised; a cycle resolves to what it has so far, listed).
  const std::set<std::string>& resolve(size_t i, int depth) {
    if (state_[i] == 2) return resolved_[i];
    HyperNode& h = hypernodes_[i];
    if (state_[i] == 1) {
      unmapped("HyperNode \"" + h.name + "\" is its own member through others (a cycle)");
      return resolved_[i];
    }
    if (depth > kMaxNesting) {
      unmapped("HyperNode \"" + h.name + "\" is nested more than " + std::to_string(kMaxNesting) +
               " HyperNodes deep: its nodes are left out there");
      return resolved_[i];
    }
    state_[i] = 1;
    std::set<std::string> nodes;
    for (const Member& m : h.members) {
      auto missing = [&](const std::string& why) {
        unmapped("HyperNode \"" + h.name + "\": member " + std::to_string(m.index) + ": " + why);
      };
      const YAML::Node exact = child(m.selector, "exactMatch");
      const YAML::Node regex = child(m.selector, "regexMatch");
      const YAML::Node label = child(m.selector, "labelMatch");
      if (static_cast<int>(bool(exact)) + bool(regex) + bool(label) != 1) {
        missing("the selector needs exactly one of exactMatch, regexMatch, labelMatch");
        continue;
      }
      if (m.type == MemberType::kNode) {
        if (exact) {
          const std::string name = scalar(child(exact, "name"));
          if (!isDns1123Subdomain(name)) {
            missing("\"" + name + "\" is not a node name");
          } else {
            nodes.insert(name);
          }
          continue;
        }
        if (cluster_.empty()) {
          missing(std::string(regex ? "regexMatch" : "labelMatch") +
                  " needs the cluster's nodes (--nodes FILE)");
          continue;
        }
        if (regex) {
          auto re = compileMember(regex, missing);
          if (!re) continue;
          for (const ClusterNode& c : cluster_)
            if (++work_ <= kMaxWork && re->matches(c.name)) nodes.insert(c.name);
          continue;
        }
        std::string why;
        for (const ClusterNode& c : cluster_) {
          if (++work_ > kMaxWork) break;
          auto hit = selects(label, c, &why);
          if (!hit) break;
          if (*hit) nodes.insert(c.name);
        }
        if (!why.empty()) missing("labelMatch: " + why);
        continue;
      }
      // A HyperNode member: its nodes.
      if (label) {
        missing("labelMatch selects Nodes only");
        continue;
      }
      std::vector<size_t> children;
      if (exact) {
        const std::string name = scalar(child(exact, "name"));
        auto it = by_name_.find(name);
        if (it == by_name_.end()) {
          missing("unknown HyperNode \"" + name + "\"");
          continue;
        }
        children.push_back(it->second);
      } else {
        auto re = compileMember(regex, missing);
        if (!re) continue;
        for (const auto& [name, index] : by_name_)
          if (++work_ <= kMaxWork && index != i && re->matches(name)) children.push_back(index);
      }
      for (size_t c : children) {
        const std::set<std::string>& sub = resolve(c, depth + 1);
        work_ += sub.size();
        if (work_ > kMaxWork) break;
        nodes.insert(sub.begin(), sub.end());
      }
    }
    resolved_[i] = std::move(nodes);
    state_[i] = 2;
    return resolved_[i];
  }

  // The top of the tree, whose link leads nowhere: a HyperNode that holds every node of the
  // cluster (when its nodes are known), or else the only HyperNode of the highest tier.
  bool isRoot(size_t i, const std::map<int64_t, std::vector<size_t>>& tiers) const {
    if (!cluster_.empty()) {
      std::set<std::string> everyone;
      for (const ClusterNode& c : cluster_) everyone.insert(c.name);
      for (const auto& s : resolved_) everyone.insert(s.begin(), s.end());
      return resolved_[i].size() == everyone.size();
    }
    const auto& top = tiers.rbegin()->second;
    return tiers.size() > 1 && top.size() == 1 && top[0] == i;
  }

  void write() {
    std::map<int64_t, std::vector<size_t>> tiers;  // by tier, HyperNodes by name
    for (const auto& [name, i] : by_name_) tiers[hypernodes_[i].tier].push_back(i);
    std::string& y = out_.yaml;
    for (const auto& [tier, members] : tiers) {
      const std::string cls = "tier-" + std::to_string(tier);
      std::map<std::string, std::string> owner;  // node -> HyperNode of this tier
      std::string groups;
      size_t written = 0;
      bool all_have_capacity = true;
      for (size_t i : members) {
        const HyperNode& h = hypernodes_[i];
        const std::set<std::string>& nodes = resolved_[i];
        if (nodes.empty()) {
          unmapped(cls + ": HyperNode \"" + h.name + "\" has no nodes it could resolve: left out");
          continue;
        }
        if (isRoot(i, tiers)) {
          unmapped(cls + ": HyperNode \"" + h.name +
                   "\" holds every node: no link leaves it, left out");
          continue;
        }
        std::vector<std::string> kept;
        for (const std::string& n : nodes) {
          auto [it, fresh] = owner.emplace(n, h.name);
          if (fresh) {
            kept.push_back(n);
          } else {
            unmapped(cls + ": node \"" + n + "\" is in HyperNodes \"" + it->second + "\" and \"" +
                     h.name + "\": kept in \"" + it->second + "\"");
          }
        }
        if (kept.empty()) continue;
        std::string group = h.name;
        if (!isDns1123Label(group)) {
          std::replace(group.begin(), group.end(), '.', '-');
          unmapped(cls + ": HyperNode \"" + h.name + "\" is not a DNS-1123 label: group \"" +
                   group + "\"");
        }
        groups += "      - name: " + group + "\n";
        if (h.capacity) {
          groups += "        capacity: " + exactRateText(*h.capacity) + "\n";
        } else {
          all_have_capacity = false;
        }
        groups += "        nodes: [";
        for (size_t k = 0; k < kept.size(); ++k) groups += (k ? ", " : "") + kept[k];
        groups += "]\n";
        ++written;
      }
      if (written == 0) {
        unmapped(cls + ": no group left: the tier is not a shared link");
        continue;
      }
      auto cap = options_.tier_capacity.find(tier);
      y += "  # Volcano HyperNodes of tier " + std::to_string(tier) + ": their uplinks\n";
      y += "  - name: " + cls + "\n";
      if (cap != options_.tier_capacity.end()) {
        y += "    capacity: " + exactRateText(cap->second) + "\n";
      } else if (!all_have_capacity) {
        const std::string why = "the uplinks' capacity (--tier-capacity " + std::to_string(tier) +
                                "=RATE, or the annotation " +
                                std::string(kUplinkCapacityAnnotation) + " on each HyperNode)";
        y += "    capacity: TODO  # TODO: " + why + "\n";
        out_.todos.push_back("shared link \"" + cls + "\": " + why);
      }
      y += "    headroom: 0%\n    groups:\n" + groups;
      ++out_.shared_links;
    }
    if (!y.empty()) y = "sharedLinks:\n" + y;
  }

  std::string_view source_;
  const HyperNodeImportOptions& options_;
  HyperNodeImport out_;
  std::vector<HyperNode> hypernodes_;
  std::set<std::string> names_;
  std::map<std::string, size_t> by_name_;
  std::vector<ClusterNode> cluster_;
  std::vector<std::set<std::string>> resolved_;
  std::vector<int> state_;  // 0 new, 1 resolving, 2 done
  size_t work_ = 0;         // against kMaxWork
};

}  // namespace

HyperNodeImport importHyperNodes(const std::vector<HyperNodeObject>& objects,
                                 std::string_view source, const HyperNodeImportOptions& options) {
  // yaml-cpp reports errors by exception; nothing escapes.
  try {
    return Importer(source, options).run(objects);
  } catch (const YAML::Exception& e) {
    HyperNodeImport failed;
    failed.errors.push_back({std::string(source), e.mark.line + 1, e.mark.column + 1, "(yaml)",
                             "cannot read: " + e.msg});
    return failed;
  }
}

}  // namespace tq::policy
