#include "tc/plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <random>
#include <set>

#include "tests/support/tc_spec.h"

namespace tq::tc {
namespace {

using testing::tenantClass;

constexpr uint64_t kMbit = 125'000;  // bytes/s
constexpr uint64_t kGbit = 1000 * kMbit;

DevicePolicy twoTenants() {
  DevicePolicy p;
  p.device = "eth0";
  p.capacity = kGbit;
  p.tenants = {tenantClass("tenant-a", 400 * kMbit, 600 * kMbit, 2, 34),
               tenantClass("tenant-b", 200 * kMbit, 400 * kMbit, 1, 10)};
  return p;
}

TEST(Handles, Format) {
  EXPECT_EQ(formatHandle(makeHandle(1, 0x1a)), "1:1a");
  EXPECT_EQ(formatHandle(kRootHandle), "1:");
  EXPECT_EQ(formatHandle(kTcRoot), "root");
  EXPECT_EQ(formatU32Handle(0x8000011a), "800::11a");
  EXPECT_EQ(formatU32Handle(0x80000000), "800:");
  EXPECT_EQ(formatU32Handle(0x80102003), "801:2:3");
}

TEST(Sizing, QuantumFollowsWeightAboveOneGsoPacket) {
  EXPECT_EQ(quantumForWeight(1), 80'000u);
  EXPECT_EQ(quantumForWeight(2), 160'000u);
  EXPECT_EQ(quantumForWeight(0), 80'000u);
  EXPECT_EQ(quantumForWeight(50), 4'000'000u);
  EXPECT_EQ(quantumForWeight(1000), kMaxQuantum);
  // Must hold a 64 KiB GSO skb plus 45 x 66 bytes of per-segment headers.
  EXPECT_GE(quantumForWeight(1), 65536u + 45 * 66);
}

TEST(Sizing, BurstIsOneMillisecondAtLeastTwoGsoPackets) {
  EXPECT_EQ(burstForRate(kGbit), kMinBurst);        // 125 kB < 128 KiB
  EXPECT_EQ(burstForRate(10 * kGbit), 1'250'000u);  // 1 ms at 10 Gbit/s
  EXPECT_EQ(burstForRate(100 * kGbit), 12'500'000u);
  EXPECT_EQ(burstForRate(kMinClassRate), kMinBurst);
  EXPECT_EQ(burstForRate(UINT64_MAX / 2), kMaxBurst);
  // libnl converts burst/rate to µs in an int and then to 15.625 ticks/µs in a uint32.
  double worst_us = static_cast<double>(kMinBurst) / kMinClassRate * 1e6;
  EXPECT_LT(worst_us * 15.625, 4294967296.0);
}

TEST(DscpFilters, Ipv4TosByte) {
  U32Filter f = ipv4DscpFilter(34, makeHandle(1, 0x20));  // AF41, TOS 0x88
  EXPECT_EQ(f.protocol, kEthPIp);
  EXPECT_EQ(f.pref, kIpv4FilterPref);
  EXPECT_EQ(f.handle, 0x100u + 34);
  ASSERT_EQ(f.keys.size(), 1u);
  EXPECT_EQ(f.keys[0].value, 0x00880000u);  // what `tc ... match ip tos 0x88 0xfc` installs
  EXPECT_EQ(f.keys[0].mask, 0x00fc0000u);
  EXPECT_EQ(f.keys[0].offset, 0);
  EXPECT_EQ(f.classid, makeHandle(1, 0x20));
}

TEST(DscpFilters, Ipv6TrafficClassAcrossBytesZeroAndOne) {
  U32Filter f = ipv6DscpFilter(34, makeHandle(1, 0x20));
  EXPECT_EQ(f.protocol, kEthPIpv6);
  EXPECT_EQ(f.pref, kIpv6FilterPref);
  ASSERT_EQ(f.keys.size(), 1u);
  // `tc ... match ip6 priority 0x88 0xfc` installs 08800000/0fc00000 at 0.
  EXPECT_EQ(f.keys[0].value, 0x08800000u);
  EXPECT_EQ(f.keys[0].mask, 0x0fc00000u);
  // The version nibble and flow label are outside the mask; the ECN bits too.
  const uint32_t word = (6u << 28) | (0x88u << 20) | 0x3u << 20 | 0xabcde;  // ECN=3, flow label
  EXPECT_EQ(word & f.keys[0].mask, f.keys[0].value);
  for (uint32_t dscp = 0; dscp < 64; ++dscp) {
    U32Filter g = ipv6DscpFilter(static_cast<uint8_t>(dscp), 1);
    uint32_t hdr = (6u << 28) | ((dscp << 2) << 20);
    EXPECT_EQ(hdr & g.keys[0].mask, g.keys[0].value) << dscp;
    U32Filter h = ipv4DscpFilter(static_cast<uint8_t>(dscp), 1);
    uint32_t v4 = (4u << 28) | (5u << 24) | ((dscp << 2) << 16) | 1500;
    EXPECT_EQ(v4 & h.keys[0].mask, h.keys[0].value) << dscp;
  }
}

TEST(MakeDevicePlan, Layout) {
  auto plan = makeDevicePlan(twoTenants());
  ASSERT_TRUE(plan.ok()) << plan.status().toString();
  EXPECT_EQ(plan->device, "eth0");
  EXPECT_EQ(plan->root.handle, kRootHandle);
  EXPECT_EQ(plan->root.r2q, kOwnerR2q);
  EXPECT_EQ(plan->root.default_minor, kDefaultClassMinor);
  ASSERT_EQ(plan->classes.size(), 4u);

  const HtbClass& link = plan->classes[0].htb;
  EXPECT_EQ(link.classid, makeHandle(1, 1));
  EXPECT_EQ(link.parent, kRootHandle);
  EXPECT_EQ(link.rate, kGbit);
  EXPECT_EQ(link.ceil, kGbit);

  const HtbClass& def = plan->classes[1].htb;
  EXPECT_EQ(plan->classes[1].label, "default");
  EXPECT_EQ(def.classid, makeHandle(1, kDefaultClassMinor));
  EXPECT_EQ(def.parent, link.classid);
  EXPECT_EQ(def.rate, kGbit / 100);
  EXPECT_EQ(def.ceil, kGbit);
  EXPECT_EQ(def.prio, kDefaultClassPrio);

  uint16_t minor_a = plan->tenant_minors.at("tenant-a");
  const PlannedClass* a = plan->findClass(makeHandle(1, minor_a));
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->label, "tenant-a");
  EXPECT_EQ(a->htb.parent, link.classid);
  EXPECT_EQ(a->htb.rate, 400 * kMbit);
  EXPECT_EQ(a->htb.ceil, 600 * kMbit);
  EXPECT_EQ(a->htb.quantum, quantumForWeight(2));
  EXPECT_EQ(a->htb.prio, kTenantPrio);
  EXPECT_EQ(a->htb.burst, burstForRate(400 * kMbit));
  EXPECT_EQ(a->htb.cburst, burstForRate(600 * kMbit));
  const PlannedClass* b = plan->findClass(makeHandle(1, plan->tenant_minors.at("tenant-b")));
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->htb.quantum, quantumForWeight(1));
  EXPECT_EQ(b->htb.prio, a->htb.prio) << "equal prio: spare shared by quantum";

  // Two filters per tenant, sorted by (pref, node).
  ASSERT_EQ(plan->filters.size(), 4u);
  EXPECT_EQ(plan->filters[0].u32.pref, kIpv4FilterPref);
  EXPECT_EQ(plan->filters[0].u32.handle, 0x100u + 10);
  EXPECT_EQ(plan->filters[0].u32.classid, b->htb.classid);
  EXPECT_EQ(plan->filters[1].u32.handle, 0x100u + 34);
  EXPECT_EQ(plan->filters[1].u32.classid, a->htb.classid);
  EXPECT_EQ(plan->filters[2].u32.pref, kIpv6FilterPref);
  EXPECT_EQ(plan->filters[3].u32.protocol, kEthPIpv6);
  EXPECT_EQ(plan->filters[3].label, "tenant-a");

  std::string text = describePlan(*plan);
  EXPECT_NE(text.find("class 1:1 parent 1: rate 1Gbps ceil 1Gbps"), std::string::npos) << text;
  EXPECT_NE(text.find("match 00880000/00fc0000"), std::string::npos) << text;
}

TEST(MakeDevicePlan, LimitAboveCapacityIsClampedAndZeroGuaranteeGetsNominalRate) {
  DevicePolicy p = twoTenants();
  p.tenants.push_back(tenantClass("noisy", 0, 10 * kGbit, 1, 1));
  auto plan = makeDevicePlan(p);
  ASSERT_TRUE(plan.ok()) << plan.status().toString();
  const PlannedClass* n = plan->findClass(makeHandle(1, plan->tenant_minors.at("noisy")));
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->htb.rate, kMinClassRate);
  EXPECT_EQ(n->htb.ceil, kGbit);
}

TEST(MakeDevicePlan, TenantWithoutDscpHasAClassButNoFilters) {
  DevicePolicy p = twoTenants();
  TenantClassSpec rdma = tenantClass("rdma-only", 100 * kMbit, kGbit, 1, 0);
  rdma.dscp.reset();
  p.tenants.push_back(rdma);
  auto plan = makeDevicePlan(p);
  ASSERT_TRUE(plan.ok()) << plan.status().toString();
  EXPECT_NE(plan->findClass(makeHandle(1, plan->tenant_minors.at("rdma-only"))), nullptr);
  EXPECT_EQ(plan->filters.size(), 4u);
  for (const PlannedFilter& f : plan->filters) EXPECT_NE(f.label, "rdma-only");
}

TEST(MakeDevicePlan, DefaultRateNeverEatsGuarantees) {
  DevicePolicy p;
  p.device = "eth0";
  p.capacity = kGbit;
  p.tenants = {tenantClass("a", 995 * kMbit, kGbit, 1, 1)};
  auto plan = makeDevicePlan(p);
  ASSERT_TRUE(plan.ok()) << plan.status().toString();
  EXPECT_EQ(plan->classes[1].htb.rate, 5 * kMbit);  // what is left, less than 1 %

  p.tenants = {tenantClass("a", kGbit, kGbit, 1, 1)};
  auto full = makeDevicePlan(p);
  EXPECT_EQ(full.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(full.status().message().find("exceed link capacity"), std::string::npos)
      << full.status().message();

  p.tenants = {tenantClass("a", 500 * kMbit, kGbit, 1, 1)};
  p.default_rate = 50 * kMbit;
  auto explicit_rate = makeDevicePlan(p);
  ASSERT_TRUE(explicit_rate.ok());
  EXPECT_EQ(explicit_rate->classes[1].htb.rate, 50 * kMbit);
}

TEST(WireFraming, PayloadToWireRate) {
  WireFraming tcp;
  tcp.mtu = 1500;
  // 1448 B of payload per 1514 B frame, plus one 66 B ACK per two segments: x 3094 / 2896.
  EXPECT_EQ(wireRateForPayload(300 * kMbit, tcp), 40'063'882u);  // 37.5e6 x 3094 / 2896, up
  EXPECT_EQ(wireRateForPayload(2896, tcp), 3094u);
  EXPECT_EQ(wireRateForPayload(0, tcp), 0u);
  WireFraming no_acks = tcp;
  no_acks.segments_per_ack = 0;
  EXPECT_EQ(wireRateForPayload(1448, no_acks), 1514u);
  EXPECT_EQ(wireRateForPayload(1449, no_acks), 1516u);  // rounded up
  WireFraming jumbo = tcp;
  jumbo.mtu = 9000;
  EXPECT_EQ(wireRateForPayload(2 * 8948, jumbo), 2 * 9014u + 66);
  // Unknown MTU, or one that leaves no payload: as given.
  EXPECT_EQ(wireRateForPayload(1000, WireFraming{}), 1000u);
  WireFraming tiny = tcp;
  tiny.mtu = 52;
  EXPECT_EQ(wireRateForPayload(1000, tiny), 1000u);
  EXPECT_EQ(wireRateForPayload(UINT64_MAX, tcp), UINT64_MAX);
}

TEST(MakeDevicePlan, FramedRatesCarryThePayloadAndFitTheLink) {
  DevicePolicy p = twoTenants();
  p.tenants.push_back(tenantClass("flat", 300 * kMbit, 300 * kMbit, 1, 12));
  p.framing.mtu = 1500;
  auto plan = makeDevicePlan(p);
  ASSERT_TRUE(plan.ok()) << plan.status().toString();
  const PlannedClass* flat = plan->findClass(makeHandle(1, plan->tenant_minors.at("flat")));
  ASSERT_NE(flat, nullptr);
  EXPECT_EQ(flat->htb.rate, wireRateForPayload(300 * kMbit, p.framing));
  EXPECT_EQ(flat->htb.ceil, flat->htb.rate);
  const PlannedClass* a = plan->findClass(makeHandle(1, plan->tenant_minors.at("tenant-a")));
  EXPECT_EQ(a->htb.ceil, wireRateForPayload(600 * kMbit, p.framing));
  EXPECT_EQ(plan->classes[0].htb.rate, kGbit);  // the link is a wire rate: as given
  uint64_t sum = 0;
  for (const PlannedClass& c : plan->classes)
    if (c.htb.parent != kRootHandle) sum += c.htb.rate;
  EXPECT_LE(sum, kGbit);

  // Guarantees of 95 % of the link need more than the link in frames: scaled down to fit, in
  // proportion, next to the default class's minimum; a limit at capacity stays at capacity.
  p.tenants = {tenantClass("a", 600 * kMbit, kGbit, 1, 1),
               tenantClass("b", 350 * kMbit, 350 * kMbit, 1, 2)};
  auto full = makeDevicePlan(p);
  ASSERT_TRUE(full.ok()) << full.status().toString();
  const PlannedClass* fa = full->findClass(makeHandle(1, full->tenant_minors.at("a")));
  const PlannedClass* fb = full->findClass(makeHandle(1, full->tenant_minors.at("b")));
  EXPECT_EQ(full->classes[1].htb.rate, kMinClassRate);
  EXPECT_LE(fa->htb.rate + fb->htb.rate + kMinClassRate, kGbit);
  EXPECT_GE(fa->htb.rate + fb->htb.rate + kMinClassRate, kGbit - 2);
  EXPECT_NEAR(static_cast<double>(fa->htb.rate) / fb->htb.rate, 600.0 / 350, 1e-6);
  EXPECT_EQ(fa->htb.ceil, kGbit);
  EXPECT_EQ(fb->htb.ceil, wireRateForPayload(350 * kMbit, p.framing));

  p.framing.mtu = 40;
  auto bad = makeDevicePlan(p);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("MTU 40 leaves no payload"), std::string::npos)
      << bad.status().message();
}

TEST(MakeDevicePlan, RejectsBadInput) {
  struct Case {
    const char* what;
    std::function<void(DevicePolicy&)> mutate;
    const char* message;
  };
  const Case kCases[] = {
      {"empty device", [](DevicePolicy& p) { p.device = ""; }, "device name is empty"},
      {"long device", [](DevicePolicy& p) { p.device = "abcdefghijklmnop"; }, "longer than 15"},
      {"zero capacity", [](DevicePolicy& p) { p.capacity = 0; }, "capacity is 0"},
      {"dup name", [](DevicePolicy& p) { p.tenants[1].name = "tenant-a"; }, "listed twice"},
      {"empty name", [](DevicePolicy& p) { p.tenants[1].name = ""; }, "empty name"},
      {"limit 0", [](DevicePolicy& p) { p.tenants[0].limit = 0; },
       "tenant \"tenant-a\": limit is 0"},
      {"limit < guarantee", [](DevicePolicy& p) { p.tenants[0].limit = kMbit; }, "below guarantee"},
      {"weight 0", [](DevicePolicy& p) { p.tenants[0].weight = 0; }, "weight is 0"},
      {"dscp 0", [](DevicePolicy& p) { p.tenants[0].dscp = 0; }, "dscp 0 is untagged"},
      {"dscp 64", [](DevicePolicy& p) { p.tenants[0].dscp = 64; }, "dscp 64 above 63"},
      {"dup dscp", [](DevicePolicy& p) { p.tenants[1].dscp = 34; },
       "already used by tenant \"tenant-a\""},
      {"guarantee > capacity",
       [](DevicePolicy& p) { p.tenants[0].guarantee = p.tenants[0].limit = 2 * kGbit; },
       "above link capacity"},
      {"sum > capacity",
       [](DevicePolicy& p) {
         p.tenants[1].guarantee = 600 * kMbit;
         p.tenants[1].limit = kGbit;
       },
       "exceed link capacity"},
      {"bad explicit minor", [](DevicePolicy& p) { p.tenants[0].class_minor = 2; }, "outside"},
      {"dup explicit minor",
       [](DevicePolicy& p) { p.tenants[0].class_minor = p.tenants[1].class_minor = 0x40; },
       "already used"},
  };
  for (const Case& c : kCases) {
    DevicePolicy p = twoTenants();
    c.mutate(p);
    auto plan = makeDevicePlan(p);
    ASSERT_FALSE(plan.ok()) << c.what;
    EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument) << c.what;
    EXPECT_NE(plan.status().message().find(c.message), std::string::npos)
        << c.what << ": " << plan.status().message();
  }
}

TEST(ClassMinors, PureFunctionOfNameWithoutCollisions) {
  DevicePolicy p = twoTenants();
  auto first = makeDevicePlan(p);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->tenant_minors.at("tenant-a"), hashedClassMinor("tenant-a"));
  // Reorder, add, remove: tenant-a keeps its class even without `previous`.
  std::reverse(p.tenants.begin(), p.tenants.end());
  p.tenants.push_back(tenantClass("tenant-c", 100 * kMbit, kGbit, 1, 12));
  auto second = makeDevicePlan(p);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->tenant_minors.at("tenant-a"), first->tenant_minors.at("tenant-a"));
  EXPECT_EQ(second->tenant_minors.at("tenant-b"), first->tenant_minors.at("tenant-b"));
  p.tenants.erase(p.tenants.begin());  // drop tenant-b
  auto third = makeDevicePlan(p);
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(third->tenant_minors.at("tenant-a"), first->tenant_minors.at("tenant-a"));
  EXPECT_EQ(third->tenant_minors.at("tenant-c"), second->tenant_minors.at("tenant-c"));
}

// Finds two names whose hashed minors collide (deterministic search).
std::pair<std::string, std::string> collidingNames() {
  std::map<uint16_t, std::string> seen;
  for (int i = 0;; ++i) {
    std::string n = "t" + std::to_string(i);
    auto [it, inserted] = seen.emplace(hashedClassMinor(n), n);
    if (!inserted) return {it->second, n};
  }
}

TEST(ClassMinors, CollisionsProbeAndPreviousKeepsEveryoneStable) {
  auto [x, y] = collidingNames();
  ASSERT_EQ(hashedClassMinor(x), hashedClassMinor(y));
  std::vector<TenantClassSpec> only_y = {tenantClass(y, kMbit, kMbit, 1, 1)};
  auto m1 = assignClassMinors(only_y);
  ASSERT_TRUE(m1.ok());
  EXPECT_EQ(m1->at(y), hashedClassMinor(y));
  // x joins. Without `previous`, name order decides who probes; with it, y keeps its minor.
  std::vector<TenantClassSpec> both = {tenantClass(y, kMbit, kMbit, 1, 1),
                                       tenantClass(x, kMbit, kMbit, 1, 2)};
  auto m2 = assignClassMinors(both, *m1);
  ASSERT_TRUE(m2.ok());
  EXPECT_EQ(m2->at(y), m1->at(y));
  EXPECT_NE(m2->at(x), m2->at(y));
  EXPECT_GE(m2->at(x), kFirstTenantMinor);
  EXPECT_LE(m2->at(x), kLastTenantMinor);
}

TEST(ClassMinors, ExplicitIdsWinAndWrapAround) {
  std::vector<TenantClassSpec> t = {tenantClass("a", kMbit, kMbit, 1, 1),
                                    tenantClass("b", kMbit, kMbit, 1, 2)};
  t[0].class_minor = hashedClassMinor("b");
  auto m = assignClassMinors(t);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->at("a"), hashedClassMinor("b"));
  EXPECT_EQ(m->at("b"), hashedClassMinor("b") == kLastTenantMinor ? kFirstTenantMinor
                                                                  : hashedClassMinor("b") + 1);
  // A previous assignment outside the range is ignored.
  ClassMinorMap prev = {{"b", 0x3}};
  t[0].class_minor = 0;
  auto m2 = assignClassMinors(t, prev);
  ASSERT_TRUE(m2.ok());
  EXPECT_EQ(m2->at("b"), hashedClassMinor("b"));
}

// Property: for random tenant sets and random edits, with `previous`, every surviving tenant
// keeps its minor and all minors are distinct and in range.
TEST(ClassMinors, RandomEditsNeverRenumberSurvivors) {
  std::mt19937 rng(4242);
  for (int iter = 0; iter < 300; ++iter) {
    std::vector<TenantClassSpec> tenants;
    int n = 1 + static_cast<int>(rng() % 80);
    for (int i = 0; i < n; ++i)
      tenants.push_back(tenantClass("t" + std::to_string(rng() % 5000), kMbit, kMbit, 1, 1));
    std::sort(tenants.begin(), tenants.end(), [](auto& a, auto& b) { return a.name < b.name; });
    tenants.erase(std::unique(tenants.begin(), tenants.end(),
                              [](auto& a, auto& b) { return a.name == b.name; }),
                  tenants.end());
    auto before = assignClassMinors(tenants);
    ASSERT_TRUE(before.ok());
    // remove some, add some, shuffle
    std::vector<TenantClassSpec> edited;
    for (auto& t : tenants)
      if (rng() % 4 != 0) edited.push_back(t);
    for (int i = 0; i < 10; ++i) {
      std::string name = "n" + std::to_string(rng() % 5000);
      if (std::none_of(edited.begin(), edited.end(), [&](auto& t) { return t.name == name; }))
        edited.push_back(tenantClass(name, kMbit, kMbit, 1, 1));
    }
    std::shuffle(edited.begin(), edited.end(), rng);
    auto after = assignClassMinors(edited, *before);
    ASSERT_TRUE(after.ok());
    std::set<uint16_t> used;
    for (auto& t : edited) {
      uint16_t m = after->at(t.name);
      EXPECT_TRUE(used.insert(m).second);
      EXPECT_GE(m, kFirstTenantMinor);
      EXPECT_LE(m, kLastTenantMinor);
      auto it = before->find(t.name);
      if (it != before->end()) {
        EXPECT_EQ(m, it->second) << t.name;
      }
    }
  }
}

TEST(LinkShaperPlan, OneClassAtLineRateNoFilters) {
  auto plan = makeLinkShaperPlan("veth0", kGbit);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->root.default_minor, kLinkClassMinor);
  EXPECT_EQ(plan->root.r2q, kOwnerR2q);
  ASSERT_EQ(plan->classes.size(), 1u);
  EXPECT_EQ(plan->classes[0].htb.rate, kGbit);
  EXPECT_EQ(plan->classes[0].htb.ceil, kGbit);
  EXPECT_EQ(plan->classes[0].htb.burst, burstForRate(kGbit));
  EXPECT_TRUE(plan->filters.empty());
  EXPECT_FALSE(makeLinkShaperPlan("veth0", 0).ok());
  EXPECT_FALSE(makeLinkShaperPlan("", kGbit).ok());
}

}  // namespace
}  // namespace tq::tc
