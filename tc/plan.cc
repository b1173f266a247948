#include "tc/plan.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <set>

#include "common/units.h"

namespace tq::tc {
namespace {

constexpr size_t kMaxDeviceName = 15;  // IFNAMSIZ - 1
constexpr uint32_t kTenantMinorSpan = kLastTenantMinor - kFirstTenantMinor + 1;

std::string hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%x", v);
  return buf;
}

bool inTenantRange(uint32_t minor) {
  return minor >= kFirstTenantMinor && minor <= kLastTenantMinor;
}

Status tenantError(const TenantClassSpec& t, std::string_view what) {
  return invalidArgument("tenant \"" + t.name + "\": " + std::string(what));
}

}  // namespace

std::string formatHandle(uint32_t handle) {
  if (handle == kTcRoot) return "root";
  if (handle == 0) return "none";
  std::string s = hex(handleMajor(handle)) + ":";
  if (handleMinor(handle) != 0) s += hex(handleMinor(handle));
  return s;
}

std::string formatU32Handle(uint32_t handle) {
  uint32_t htid = handle >> 20, bucket = (handle >> 12) & 0xff, node = handle & 0xfff;
  std::string s = hex(htid) + ":";
  if (bucket != 0 || node != 0) s += (bucket != 0 ? hex(bucket) : "") + ":" + hex(node);
  return s;
}

U32Filter ipv4DscpFilter(uint8_t dscp, uint32_t classid) {
  U32Filter f;
  f.pref = kIpv4FilterPref;
  f.protocol = kEthPIp;
  f.handle = kFilterNodeBase + dscp;
  f.keys.push_back(U32Key{static_cast<uint32_t>(dscp & 0x3f) << 18, 0x00fc0000u, 0, 0});
  f.classid = classid;
  return f;
}

U32Filter ipv6DscpFilter(uint8_t dscp, uint32_t classid) {
  U32Filter f;
  f.pref = kIpv6FilterPref;
  f.protocol = kEthPIpv6;
  f.handle = kFilterNodeBase + dscp;
  f.keys.push_back(U32Key{static_cast<uint32_t>(dscp & 0x3f) << 22, 0x0fc00000u, 0, 0});
  f.classid = classid;
  return f;
}

uint32_t quantumForWeight(uint32_t weight) {
  uint64_t q = static_cast<uint64_t>(std::max<uint32_t>(weight, 1)) * kQuantumPerWeight;
  return static_cast<uint32_t>(std::min<uint64_t>(q, kMaxQuantum));
}

uint32_t burstForRate(uint64_t rate) {
  uint64_t b = rate / (1'000'000 / kBurstTimeUs);
  return static_cast<uint32_t>(std::clamp<uint64_t>(b, kMinBurst, kMaxBurst));
}

uint64_t wireRateForPayload(uint64_t payload, const WireFraming& f) {
  if (f.mtu == 0 || f.mtu <= f.net_header) return payload;
  using u128 = unsigned __int128;
  const u128 k = f.segments_per_ack == 0 ? 1 : f.segments_per_ack;
  u128 wire = k * (static_cast<u128>(f.mtu) + f.link_header);
  if (f.segments_per_ack != 0) wire += static_cast<u128>(f.link_header) + f.net_header;
  const u128 carried = k * (f.mtu - f.net_header);
  const u128 r = (static_cast<u128>(payload) * wire + carried - 1) / carried;
  return r > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(r);
}

const PlannedClass* DevicePlan::findClass(uint32_t classid) const {
  for (const PlannedClass& c : classes)
    if (c.htb.classid == classid) return &c;
  return nullptr;
}

uint16_t hashedClassMinor(std::string_view tenant_name) {
  uint32_t h = 2166136261u;  // FNV-1a, 32 bit
  for (unsigned char c : tenant_name) {
    h ^= c;
    h *= 16777619u;
  }
  return static_cast<uint16_t>(kFirstTenantMinor + h % kTenantMinorSpan);
}

Result<ClassMinorMap> assignClassMinors(const std::vector<TenantClassSpec>& tenants,
                                        const ClassMinorMap& previous) {
  if (tenants.size() > kTenantMinorSpan)
    return invalidArgument("too many tenants for one device: " + std::to_string(tenants.size()) +
                           " (at most " + std::to_string(kTenantMinorSpan) + ")");
  ClassMinorMap out;
  std::map<uint16_t, std::string> taken;
  // 1. explicit ids
  for (const TenantClassSpec& t : tenants) {
    if (t.class_minor == 0) continue;
    if (!inTenantRange(t.class_minor))
      return tenantError(t, "class_minor 0x" + hex(t.class_minor) + " outside [0x" +
                                hex(kFirstTenantMinor) + ", 0x" + hex(kLastTenantMinor) + "]");
    auto [it, inserted] = taken.emplace(t.class_minor, t.name);
    if (!inserted)
      return tenantError(t, "class_minor 0x" + hex(t.class_minor) + " already used by tenant \"" +
                                it->second + "\"");
    out[t.name] = t.class_minor;
  }
  // The rest in name order, so the outcome does not depend on the input order.
  std::vector<const TenantClassSpec*> rest;
  for (const TenantClassSpec& t : tenants)
    if (t.class_minor == 0) rest.push_back(&t);
  std::sort(rest.begin(), rest.end(),
            [](const TenantClassSpec* a, const TenantClassSpec* b) { return a->name < b->name; });
  // 2. sticky ids from the previous plan
  std::vector<const TenantClassSpec*> fresh;
  for (const TenantClassSpec* t : rest) {
    auto prev = previous.find(t->name);
    if (prev != previous.end() && inTenantRange(prev->second) && !taken.count(prev->second)) {
      taken.emplace(prev->second, t->name);
      out[t->name] = prev->second;
    } else {
      fresh.push_back(t);
    }
  }
  // 3. hashed ids with linear probing
  for (const TenantClassSpec* t : fresh) {
    uint32_t m = hashedClassMinor(t->name);
    while (taken.count(static_cast<uint16_t>(m)))
      m = m == kLastTenantMinor ? kFirstTenantMinor : m + 1;
    taken.emplace(static_cast<uint16_t>(m), t->name);
    out[t->name] = static_cast<uint16_t>(m);
  }
  return out;
}

namespace {

Status validateDevice(std::string_view device) {
  if (device.empty()) return invalidArgument("device name is empty");
  if (device.size() > kMaxDeviceName)
    return invalidArgument("device name \"" + std::string(device) + "\" is longer than " +
                           std::to_string(kMaxDeviceName) + " bytes");
  return okStatus();
}

}  // namespace

Result<DevicePlan> makeDevicePlan(const DevicePolicy& policy, const ClassMinorMap& previous) {
  TQ_RETURN_IF_ERROR(validateDevice(policy.device));
  const std::string where = "plan for dev " + policy.device;
  if (policy.capacity == 0) return invalidArgument(where + ": link capacity is 0");
  if (policy.default_rate > policy.capacity)
    return invalidArgument(where + ": default class rate " + formatRate(policy.default_rate) +
                           " above capacity " + formatRate(policy.capacity));

  std::set<std::string_view> names;
  std::map<uint8_t, std::string_view> dscps;
  uint64_t sum_rates = 0;
  for (const TenantClassSpec& t : policy.tenants) {
    auto fail = [&](std::string_view why) { return tenantError(t, why).withContext(where); };
    if (t.name.empty()) return invalidArgument(where + ": a tenant has an empty name");
    if (!names.insert(t.name).second) return fail("listed twice");
    if (t.limit == 0) return fail("limit is 0");
    if (t.limit < t.guarantee)
      return fail("limit " + formatRate(t.limit) + " below guarantee " + formatRate(t.guarantee));
    if (t.weight == 0) return fail("weight is 0 (must be >= 1)");
    if (t.dscp) {
      const uint8_t dscp = *t.dscp;
      if (dscp == 0) return fail("dscp 0 is untagged traffic and cannot identify a tenant");
      if (dscp > 63) return fail("dscp " + std::to_string(dscp) + " above 63");
      auto [it, inserted] = dscps.emplace(dscp, t.name);
      if (!inserted)
        return fail("dscp " + std::to_string(dscp) + " already used by tenant \"" +
                    std::string(it->second) + "\" (a DSCP steers to one class)");
    }
    sum_rates += std::max(std::min(t.guarantee, policy.capacity), kMinClassRate);
    if (t.guarantee > policy.capacity)
      return fail("guarantee " + formatRate(t.guarantee) + " above link capacity " +
                  formatRate(policy.capacity));
  }
  if (policy.framing.mtu != 0 && policy.framing.mtu <= policy.framing.net_header)
    return invalidArgument(where + ": MTU " + std::to_string(policy.framing.mtu) +
                           " leaves no payload after " + std::to_string(policy.framing.net_header) +
                           " bytes of headers");
  // The classes' rates: the wire rates that carry the guarantees (plan.h).
  std::vector<uint64_t> rates, ceils;
  uint64_t sum_wire = 0;
  for (const TenantClassSpec& t : policy.tenants) {
    rates.push_back(std::max(wireRateForPayload(t.guarantee, policy.framing), kMinClassRate));
    ceils.push_back(wireRateForPayload(std::min(t.limit, policy.capacity), policy.framing));
    sum_wire += rates.back();
  }
  uint64_t default_rate = policy.default_rate;
  if (default_rate == 0) {
    uint64_t free = sum_wire < policy.capacity ? policy.capacity - sum_wire : 0;
    default_rate = std::max(std::min(policy.capacity / 100, free), kMinClassRate);
  }
  // What the policy promises (payload) must fit as given.
  if (sum_rates + default_rate > policy.capacity)
    return invalidArgument(where + ": guarantees (" + formatRate(sum_rates) +
                           ") plus the default class (" + formatRate(default_rate) +
                           ") exceed link capacity " + formatRate(policy.capacity));
  if (sum_wire + default_rate > policy.capacity) {
    // Framed guarantees beyond what the wire carries: all scaled down together (floor, so the
    // sum fits), never below HTB's minimum.
    const unsigned __int128 room = policy.capacity - default_rate;
    for (uint64_t& r : rates)
      r = std::max(static_cast<uint64_t>(r * room / sum_wire), kMinClassRate);
  }

  TQ_ASSIGN_OR_RETURN(ClassMinorMap minors, assignClassMinors(policy.tenants, previous));

  DevicePlan plan;
  plan.device = policy.device;
  plan.root = HtbRoot{kRootHandle, kOwnerR2q, kDefaultClassMinor};
  const uint32_t link = makeHandle(kRootMajor, kLinkClassMinor);
  const uint32_t burst_link = burstForRate(policy.capacity);
  plan.classes.push_back({HtbClass{link, kRootHandle, policy.capacity, policy.capacity, burst_link,
                                   burst_link, quantumForWeight(1), kTenantPrio},
                          "link"});
  plan.classes.push_back(
      {HtbClass{makeHandle(kRootMajor, kDefaultClassMinor), link, default_rate, policy.capacity,
                burstForRate(default_rate), burst_link, quantumForWeight(1), kDefaultClassPrio},
       "default"});
  std::vector<PlannedClass> tenant_classes;
  for (size_t i = 0; i < policy.tenants.size(); ++i) {
    const TenantClassSpec& t = policy.tenants[i];
    uint32_t classid = makeHandle(kRootMajor, minors.at(t.name));
    uint64_t rate = rates[i];
    uint64_t ceil = std::max(std::min(ceils[i], policy.capacity), rate);
    tenant_classes.push_back({HtbClass{classid, link, rate, ceil, burstForRate(rate),
                                       burstForRate(ceil), quantumForWeight(t.weight), kTenantPrio},
                              t.name});
    if (t.dscp) {
      plan.filters.push_back({ipv4DscpFilter(*t.dscp, classid), t.name});
      plan.filters.push_back({ipv6DscpFilter(*t.dscp, classid), t.name});
    }
  }
  std::sort(
      tenant_classes.begin(), tenant_classes.end(),
      [](const PlannedClass& a, const PlannedClass& b) { return a.htb.classid < b.htb.classid; });
  for (PlannedClass& c : tenant_classes) plan.classes.push_back(std::move(c));
  std::sort(plan.filters.begin(), plan.filters.end(),
            [](const PlannedFilter& a, const PlannedFilter& b) {
              return std::tie(a.u32.pref, a.u32.handle) < std::tie(b.u32.pref, b.u32.handle);
            });
  plan.tenant_minors = std::move(minors);
  return plan;
}

Result<DevicePlan> makeLinkShaperPlan(std::string device, uint64_t rate) {
  TQ_RETURN_IF_ERROR(validateDevice(device));
  if (rate < kMinClassRate)
    return invalidArgument("link shaper for dev " + device + ": rate " + formatRate(rate) +
                           " below the minimum " + formatRate(kMinClassRate));
  DevicePlan plan;
  plan.device = std::move(device);
  plan.root = HtbRoot{kRootHandle, kOwnerR2q, kLinkClassMinor};
  const uint32_t burst = burstForRate(rate);
  plan.classes.push_back({HtbClass{makeHandle(kRootMajor, kLinkClassMinor), kRootHandle, rate, rate,
                                   burst, burst, quantumForWeight(1), kTenantPrio},
                          "link"});
  return plan;
}

std::string describePlan(const DevicePlan& plan) {
  std::string s;
  char buf[256];
  std::snprintf(buf, sizeof buf, "dev %s: qdisc htb %s root r2q %" PRIu32 " default 0x%x\n",
                plan.device.c_str(), formatHandle(plan.root.handle).c_str(), plan.root.r2q,
                plan.root.default_minor);
  s += buf;
  for (const PlannedClass& c : plan.classes) {
    std::snprintf(buf, sizeof buf,
                  "  class %s parent %s rate %s ceil %s burst %" PRIu32 " cburst %" PRIu32
                  " quantum %" PRIu32 " prio %" PRIu32 "  (%s)\n",
                  formatHandle(c.htb.classid).c_str(), formatHandle(c.htb.parent).c_str(),
                  formatRate(c.htb.rate).c_str(), formatRate(c.htb.ceil).c_str(), c.htb.burst,
                  c.htb.cburst, c.htb.quantum, c.htb.prio, c.label.c_str());
    s += buf;
  }
  for (const PlannedFilter& f : plan.filters) {
    const U32Key& k = f.u32.keys.at(0);
    std::snprintf(buf, sizeof buf,
                  "  filter %s pref %u u32 node 0x%x match %08x/%08x at %d flowid %s  (%s)\n",
                  f.u32.protocol == kEthPIp ? "ip" : "ipv6", f.u32.pref, f.u32.handle, k.value,
                  k.mask, k.offset, formatHandle(f.u32.classid).c_str(), f.label.c_str());
    s += buf;
  }
  return s;
}

}  // namespace tq::tc
