#include "ib/qos_plan.h"

#include <algorithm>
#include <set>

#include "common/units.h"

namespace tq::ib {
namespace {

using u128 = unsigned __int128;

// A set of tenants that share one DSCP (RoCE) or SL (IB): they cannot be told apart.
struct Group {
  int key = 0;
  std::vector<const QosTenant*> members;
  uint64_t guarantee = 0;
  uint64_t limit = 0;  // sum of limits, saturating
};

bool validName(const std::string& n) {
  if (n.empty() || n == "DEFAULT") return false;
  for (char c : n) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

Status validate(const QosPlanInput& in) {
  if (in.capacity == 0) return invalidArgument("QoS plan: link capacity is 0");
  std::set<std::string> names;
  u128 sum = 0;
  for (const auto& t : in.tenants) {
    std::string who = "QoS plan: tenant \"" + t.name + "\": ";
    if (!validName(t.name)) {
      return invalidArgument(who + "name must be non-empty, of [A-Za-z0-9._-], and not DEFAULT");
    }
    if (!names.insert(t.name).second) return invalidArgument(who + "listed twice");
    if (t.service_level < 0 || t.service_level > 15) {
      return invalidArgument(who + "service level " + std::to_string(t.service_level) +
                             " out of range 0-15");
    }
    if (t.dscp < 0 || t.dscp > 63) {
      return invalidArgument(who + "DSCP " + std::to_string(t.dscp) + " out of range 0-63");
    }
    if (t.limit == 0 || t.limit < t.guarantee) {
      return invalidArgument(who + "limit " + formatRate(t.limit) +
                             " must be > 0 and >= guarantee " + formatRate(t.guarantee));
    }
    sum += t.guarantee;
  }
  if (sum > in.capacity) {
    return invalidArgument("QoS plan: guarantees add up to " +
                           formatRate(static_cast<uint64_t>(std::min<u128>(sum, UINT64_MAX))) +
                           ", more than the link capacity " + formatRate(in.capacity));
  }
  return okStatus();
}

// Tenants in rank order: guarantee descending, then name.
std::vector<QosTenant> rankTenants(const std::vector<QosTenant>& tenants) {
  std::vector<QosTenant> out = tenants;
  std::sort(out.begin(), out.end(), [](const QosTenant& a, const QosTenant& b) {
    if (a.guarantee != b.guarantee) return a.guarantee > b.guarantee;
    return a.name < b.name;
  });
  return out;
}

// Builds classes 0..n from tenants grouped by key(t). `tenant_classes` is how many classes
// besides class 0 exist. Key 0 joins class 0.
template <typename KeyFn>
std::vector<QosClass> assignClasses(const std::vector<QosTenant>& ranked, uint64_t capacity,
                                    int tenant_classes, KeyFn key) {
  std::map<int, Group> by_key;
  std::vector<int> key_order;  // first appearance in rank order = group rank
  for (const auto& t : ranked) {
    int k = key(t);
    Group& g = by_key[k];
    if (g.members.empty()) {
      g.key = k;
      key_order.push_back(k);
    }
    g.members.push_back(&t);
    g.guarantee += t.guarantee;
    g.limit = g.limit > UINT64_MAX - t.limit ? UINT64_MAX : g.limit + t.limit;
  }
  // Groups ranked by their total guarantee (then the rank of their first member).
  std::vector<const Group*> groups;
  for (int k : key_order) {
    if (k != 0) groups.push_back(&by_key[k]);
  }
  std::stable_sort(groups.begin(), groups.end(),
                   [](const Group* a, const Group* b) { return a->guarantee > b->guarantee; });

  std::vector<QosClass> classes(1);
  classes[0].id = 0;
  classes[0].is_default = true;
  auto add = [](QosClass& c, const Group& g) {
    for (const QosTenant* t : g.members) c.tenants.push_back(t->name);
    c.keys.push_back(g.key);
    c.guarantee += g.guarantee;
    c.limit = c.limit > UINT64_MAX - g.limit ? UINT64_MAX : c.limit + g.limit;
  };
  if (auto it = by_key.find(0); it != by_key.end()) add(classes[0], it->second);

  // With no tenant classes at all (tenant_classes == 0) every group lands in class 0.
  bool overflow = static_cast<int>(groups.size()) > tenant_classes;
  int dedicated = overflow ? tenant_classes - 1 : static_cast<int>(groups.size());
  for (size_t i = 0; i < groups.size(); ++i) {
    int id = static_cast<int>(i) < dedicated ? static_cast<int>(i) + 1 : tenant_classes;
    if (static_cast<int>(classes.size()) <= id) {
      QosClass c;
      c.id = id;
      classes.push_back(c);
    }
    QosClass& c = classes[id];
    if (!c.keys.empty() && id != 0) c.shared = true;
    add(c, *groups[i]);
  }
  for (auto& c : classes) {
    std::sort(c.keys.begin(), c.keys.end());
    // The default class is never capped; a cap at or above the link is no cap.
    if (c.id == 0 || c.limit >= capacity) c.limit = 0;
  }
  return classes;
}

// Integer percentages summing to 100 (see the header for the rule).
void assignShares(std::vector<QosClass>& classes, uint64_t capacity) {
  const u128 cap = capacity;
  int tenant_sum = 0;
  for (size_t i = 1; i < classes.size(); ++i) {
    u128 num = u128(100) * classes[i].guarantee;
    int s = static_cast<int>((num + cap - 1) / cap);
    classes[i].share_percent = std::max(1, s);
    tenant_sum += classes[i].share_percent;
  }
  if (tenant_sum <= 99) {
    classes[0].share_percent = 100 - tenant_sum;
    return;
  }
  // Largest remainder over all classes; class 0 is owed what the tenant classes leave.
  u128 tenant_guarantees = 0;
  for (size_t i = 1; i < classes.size(); ++i) tenant_guarantees += classes[i].guarantee;
  std::vector<u128> num(classes.size());
  num[0] = u128(100) * (cap - std::min<u128>(cap, tenant_guarantees));
  for (size_t i = 1; i < classes.size(); ++i) num[i] = u128(100) * classes[i].guarantee;
  int total = 0;
  for (size_t i = 0; i < classes.size(); ++i) {
    classes[i].share_percent = static_cast<int>(num[i] / cap);
    total += classes[i].share_percent;
  }
  std::vector<size_t> order(classes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return num[a] % cap > num[b] % cap; });
  for (size_t j = 0; total < 100 && j < order.size(); ++j, ++total) {
    classes[order[j]].share_percent++;
  }
  for (size_t i = 0; i < classes.size(); ++i) {
    if (classes[i].share_percent > 0) continue;
    // Donor: most share above its own guarantee (share * cap - 100 * guarantee), keeping >= 1.
    size_t donor = i;
    __int128 best = 0;
    bool found = false;
    for (size_t j = 0; j < classes.size(); ++j) {
      if (j == i || classes[j].share_percent < 2) continue;
      __int128 slack = static_cast<__int128>(u128(classes[j].share_percent) * cap) -
                       static_cast<__int128>(u128(100) * classes[j].guarantee);
      if (!found || slack > best) {
        best = slack;
        donor = j;
        found = true;
      }
    }
    if (!found) continue;  // cannot happen with <= 16 classes and a total of 100
    classes[donor].share_percent--;
    classes[i].share_percent++;
  }
}

// tc(8) rate syntax in bits per second, exact: 7500000000 B/s -> "60Gbit".
std::string tcRate(uint64_t bytes_per_second) {
  u128 bits = u128(bytes_per_second) * 8;
  struct Unit {
    uint64_t factor;
    const char* name;
  };
  for (Unit u : {Unit{1000000000000ull, "Tbit"}, Unit{1000000000, "Gbit"}, Unit{1000000, "Mbit"},
                 Unit{1000, "Kbit"}}) {
    if (bits >= u.factor && bits % u.factor == 0) {
      return std::to_string(static_cast<uint64_t>(bits / u.factor)) + u.name;
    }
  }
  return std::to_string(static_cast<uint64_t>(bits)) + "bit";
}

std::string joinInts(const std::vector<int>& v, const char* sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + std::to_string(v[i]);
  return out;
}

std::string memberText(const QosClass& c) {
  std::string out;
  for (size_t i = 0; i < c.tenants.size(); ++i) out += (i ? ", " : "") + c.tenants[i];
  return out;
}

std::string limitText(uint64_t limit) {
  return limit == 0 ? "no limit" : "limit " + formatRate(limit);
}

}  // namespace

Result<RoceQosPlan> planRoceQos(const QosPlanInput& input) {
  TQ_RETURN_IF_ERROR(validate(input));
  RoceQosPlan plan;
  plan.capacity = input.capacity;
  plan.tenants = rankTenants(input.tenants);
  plan.classes = assignClasses(plan.tenants, input.capacity, kRoceTrafficClasses - 1,
                               [](const QosTenant& t) { return t.dscp; });
  assignShares(plan.classes, input.capacity);
  for (const auto& c : plan.classes) {
    for (int dscp : c.keys) plan.dscp_priority[dscp] = c.id;
  }
  return plan;
}

std::vector<std::vector<std::string>> dcbCommands(const RoceQosPlan& plan, std::string_view dev) {
  const std::string d(dev);
  std::vector<std::vector<std::string>> cmds;
  std::vector<std::string> prio = {"dcb", "ets", "set", "dev", d, "prio-tc"};
  for (int p = 0; p < kRoceTrafficClasses; ++p) {
    prio.push_back(std::to_string(p) + ":" + std::to_string(p));
  }
  cmds.push_back(prio);

  std::array<int, kRoceTrafficClasses> bw{};
  std::array<uint64_t, kRoceTrafficClasses> maxrate{};
  for (const auto& c : plan.classes) {
    bw[c.id] = c.share_percent;
    maxrate[c.id] = c.limit;
  }
  std::vector<std::string> ets = {"dcb", "ets", "set", "dev", d, "tc-tsa", "all:ets", "tc-bw"};
  for (int tc = 0; tc < kRoceTrafficClasses; ++tc) {
    ets.push_back(std::to_string(tc) + ":" + std::to_string(bw[tc]));
  }
  cmds.push_back(ets);

  // 0 = no limit for the kernel's IEEE maxrate (and mlx5).
  std::vector<std::string> rate = {"dcb", "maxrate", "set", "dev", d, "tc-maxrate"};
  for (int tc = 0; tc < kRoceTrafficClasses; ++tc) {
    rate.push_back(std::to_string(tc) + ":" + (maxrate[tc] == 0 ? "0bit" : tcRate(maxrate[tc])));
  }
  cmds.push_back(rate);

  if (!plan.dscp_priority.empty()) {
    std::vector<std::string> app = {"dcb", "app", "replace", "dev", d, "dscp-prio"};
    for (const auto& [dscp, p] : plan.dscp_priority) {
      app.push_back(std::to_string(dscp) + ":" + std::to_string(p));
    }
    cmds.push_back(app);
  }
  return cmds;
}

std::string renderDcbScript(const RoceQosPlan& plan, std::string_view dev) {
  std::string out;
  out += "# tenantqos RoCE QoS plan for " + std::string(dev) + " (link " +
         formatRate(plan.capacity) + "); generated, do not edit.\n";
  out +=
      "# DSCP -> priority (dcb app) -> traffic class (prio-tc, priority p = TC p)"
      " -> ETS share and max rate.\n";
  for (const auto& c : plan.classes) {
    out += "# TC " + std::to_string(c.id) + ": ";
    if (c.is_default) {
      out += "default (unmapped DSCPs)";
      if (!c.tenants.empty()) out += " + " + memberText(c) + " (DSCP 0)";
    } else {
      out += memberText(c) + " (DSCP " + joinInts(c.keys, ",") + ")";
      if (c.shared) out += " [shared: out of traffic classes]";
    }
    out += ", guarantee " + formatRate(c.guarantee) + ", share " + std::to_string(c.share_percent) +
           "%, " + limitText(c.limit) + "\n";
  }
  for (const auto& cmd : dcbCommands(plan, dev)) {
    for (size_t i = 0; i < cmd.size(); ++i) out += (i ? " " : "") + cmd[i];
    out += "\n";
  }
  return out;
}

Result<IbQosPlan> planIbQos(const QosPlanInput& input, const IbQosOptions& options) {
  TQ_RETURN_IF_ERROR(validate(input));
  if (options.max_vls < 1 || options.max_vls > 15) {
    return invalidArgument("IB QoS plan: max_vls " + std::to_string(options.max_vls) +
                           " out of range 1-15");
  }
  if (options.mtu != 256 && options.mtu != 512 && options.mtu != 1024 && options.mtu != 2048 &&
      options.mtu != 4096) {
    return invalidArgument("IB QoS plan: MTU " + std::to_string(options.mtu) +
                           " is not one of 256, 512, 1024, 2048, 4096");
  }
  IbQosPlan plan;
  plan.capacity = input.capacity;
  plan.options = options;
  plan.tenants = rankTenants(input.tenants);
  plan.classes = assignClasses(plan.tenants, input.capacity, options.max_vls - 1,
                               [](const QosTenant& t) { return t.service_level; });
  assignShares(plan.classes, input.capacity);
  plan.sl_to_vl.fill(0);
  for (const auto& c : plan.classes) {
    for (int sl : c.keys) plan.sl_to_vl[sl] = c.id;
  }
  const int credits_per_packet = options.mtu / 64;
  const int packets_per_entry = 255 / credits_per_packet;
  std::vector<int> left;
  for (const auto& c : plan.classes) left.push_back(c.share_percent);
  bool more = true;
  while (more) {
    more = false;
    for (size_t i = 0; i < plan.classes.size(); ++i) {
      if (left[i] == 0) continue;
      int n = std::min(left[i], packets_per_entry);
      left[i] -= n;
      plan.vlarb_low.emplace_back(plan.classes[i].id, n * credits_per_packet);
      more = more || left[i] > 0;
    }
  }
  if (plan.vlarb_low.size() > 64) {
    return internalError("IB QoS plan: VL arbitration table needs " +
                         std::to_string(plan.vlarb_low.size()) + " entries (max 64)");
  }
  return plan;
}

std::string renderOpenSmQosPolicy(const IbQosPlan& plan) {
  std::string out;
  out += "# tenantqos: OpenSM QoS levels, one per tenant; generated, do not edit.\n";
  out += "# The NCCL plugin sets each tenant's SL on its QPs; SL2VL and VL arbitration are in\n";
  out += "# the opensm.conf options generated alongside.\n";
  out += "qos-levels\n";
  out += "    qos-level\n";
  out += "        name: DEFAULT\n";
  out += "        use: traffic of no tenant\n";
  out += "        sl: 0\n";
  out += "    end-qos-level\n";
  for (const auto& t : plan.tenants) {
    out += "    qos-level\n";
    out += "        name: " + t.name + "\n";
    out += "        use: tenantqos tenant " + t.name + ", guarantee " + formatRate(t.guarantee) +
           ", limit " + formatRate(t.limit) + ", VL " +
           std::to_string(plan.sl_to_vl[t.service_level]) + "\n";
    out += "        sl: " + std::to_string(t.service_level) + "\n";
    out += "    end-qos-level\n";
  }
  out += "end-qos-levels\n";
  return out;
}

std::string renderOpenSmOptions(const IbQosPlan& plan) {
  std::string out;
  out += "# tenantqos: OpenSM QoS options (link " + formatRate(plan.capacity) + ", MTU " +
         std::to_string(plan.options.mtu) + "); generated, do not edit.\n";
  for (const auto& c : plan.classes) {
    out += "# VL " + std::to_string(c.id) + ": ";
    if (c.is_default) {
      out += "default (unused SLs)";
      if (!c.tenants.empty()) out += " + " + memberText(c) + " (SL 0)";
    } else {
      out += memberText(c) + " (SL " + joinInts(c.keys, ",") + ")";
      if (c.shared) out += " [shared: out of VLs]";
    }
    out += ", guarantee " + formatRate(c.guarantee) + ", share " + std::to_string(c.share_percent) +
           "% = " + std::to_string(c.share_percent) +
           (c.share_percent == 1 ? " packet" : " packets") + " per arbitration round\n";
  }
  out += "qos TRUE\n";
  out += "qos_max_vls " + std::to_string(plan.options.max_vls) + "\n";
  // No high-priority VLs: every VL competes in the weighted low-priority table.
  out += "qos_high_limit 0\n";
  out += "qos_vlarb_high 0:0\n";
  out += "qos_vlarb_low ";
  for (size_t i = 0; i < plan.vlarb_low.size(); ++i) {
    out += (i ? "," : "") + std::to_string(plan.vlarb_low[i].first) + ":" +
           std::to_string(plan.vlarb_low[i].second);
  }
  out += "\n";
  out += "qos_sl2vl " +
         joinInts(std::vector<int>(plan.sl_to_vl.begin(), plan.sl_to_vl.end()), ",") + "\n";
  return out;
}

}  // namespace tq::ib
