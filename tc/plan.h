// The desired tc state of one egress device, computed from tenants' guarantees and limits.
//
// Pure: no libnl, no kernel, no clock. tc/executor.h turns a DevicePlan into netlink calls.
//
// The tree we build on a managed device ("tenant plan"):
//
//   qdisc htb 1: root  r2q 0x7471 (ownership marker)  default 2
//   └── class 1:1      rate = ceil = link capacity              (the link; every class borrows
//   here)
//       ├── class 1:2  default class: untagged / unknown DSCP / non-IP traffic
//       │              rate = small (1 % of capacity, never more than the unguaranteed rest),
//       │              ceil = capacity, prio 1 (gets spare only after tenants, see below)
//       └── class 1:<m> one per tenant: rate = guarantee, ceil = limit (both as wire rates,
//                       see wireRateForPayload), prio 0, quantum = weight x kQuantumPerWeight
//   filter parent 1: protocol ip   pref 1 u32, handle 800::1<dscp>  TOS byte & 0xfc == dscp<<2
//   filter parent 1: protocol ipv6 pref 2 u32, handle 801::1<dscp>  traffic class & 0xfc == dscp<<2
//
// Why these numbers (all measured on kernel 6.18, see docs and tests):
// - Spare capacity goes to classes of the LOWEST prio number first (HTB), and among classes of
//   equal prio in proportion to their quantum (DRR). Tenants share prio 0, so spare is split by
//   weight. The default class has prio 1: traffic that bypasses tenantqos keeps its small rate
//   but only gets what tenants leave unused.
// - HTB's DRR only honours quantum when quantum >= the largest packet: a class whose deficit is
//   below zero still sends one packet per turn, so with 64 KiB GSO packets on veth/TSO NICs and a
//   60000-byte quantum, weights 2:1 split spare 1:1 (measured 477 vs 475 Mbit/s). So one weight
//   unit is kQuantumPerWeight = 80000 bytes (one 64 KiB GSO skb plus per-segment headers).
// - Guarantees and limits are payload rates (what the plugin paces, what a tenant's job sees),
//   HTB counts every frame's bytes from the MAC header on, and a TCP flow's class also carries
//   the ACKs of the opposite direction. Programmed as given, a 300/300 Mbit/s tenant got 0.27
//   Gbit/s of payload in the testbed while the RDMA-like mode held 0.30. So with the device's
//   MTU known (DevicePolicy::framing) every tenant rate is turned into the wire rate that
//   carries it: x (1514 + 66/2) / 1448 = 1.068 for TCP over Ethernet at MTU 1500.
// - burst/cburst: tc's and libnl's default is about one MTU (rate / 1e9 Hz + mtu), which starves
//   multi-Gbit classes (6 Gbit/s delivered 83 %). We size the bucket for 1 ms at the class rate,
//   at least 128 KiB (two GSO packets).
//
// Class ids are stable per tenant (see assignClassMinors): adding, removing or reordering tenants
// never renumbers another tenant's class, so the executor changes only what changed and per-class
// counters survive policy updates.
//
// Units: rates are bytes per second, sizes are bytes (project convention).
// Thread-safety: values and pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tq::tc {

// ---- handles ------------------------------------------------------------------------------

// A tc handle "major:minor" as the kernel stores it (TC_H_MAKE).
constexpr uint32_t makeHandle(uint16_t major, uint16_t minor) {
  return (static_cast<uint32_t>(major) << 16) | minor;
}
constexpr uint16_t handleMajor(uint32_t h) { return static_cast<uint16_t>(h >> 16); }
constexpr uint16_t handleMinor(uint32_t h) { return static_cast<uint16_t>(h & 0xffff); }

constexpr uint32_t kTcRoot = 0xffffffffu;  // TC_H_ROOT: "the device's root"
constexpr uint16_t kRootMajor = 1;
constexpr uint32_t kRootHandle = makeHandle(kRootMajor, 0);  // qdisc "1:"
constexpr uint16_t kLinkClassMinor = 0x1;                    // class 1:1
constexpr uint16_t kDefaultClassMinor = 0x2;                 // class 1:2
// Tenant classes live in [kFirstTenantMinor, kLastTenantMinor].
constexpr uint16_t kFirstTenantMinor = 0x10;
constexpr uint16_t kLastTenantMinor = 0xffef;

// Our root qdisc carries this r2q as an ownership marker ("tq" in ASCII). r2q only matters for
// classes without an explicit quantum, and we set every quantum, so the value is otherwise unused.
constexpr uint32_t kOwnerR2q = 0x7471;

// "1:1a", "1:" (minor 0), "root" (TC_H_ROOT), "none" (0).
std::string formatHandle(uint32_t handle);
// u32 filter handles as tc prints them: htid:bucket:node in hex, "800::11a", "800:" for a table.
std::string formatU32Handle(uint32_t handle);

// ---- kernel-shaped objects (shared with tc/netlink.h) -----------------------------------------

// The root HTB qdisc.
struct HtbRoot {
  uint32_t handle = kRootHandle;
  uint32_t r2q = kOwnerR2q;
  uint16_t default_minor = kDefaultClassMinor;  // HTB "default": a minor only (libnl pitfall 2)

  friend bool operator==(const HtbRoot&, const HtbRoot&) = default;
};

// One HTB class. Rates in bytes/s (64-bit: libnl's rate64/ceil64), burst/cburst in bytes.
struct HtbClass {
  uint32_t classid = 0;
  uint32_t parent = 0;  // the root qdisc handle (1:) for the top class, never TC_H_ROOT
  uint64_t rate = 0;
  uint64_t ceil = 0;
  uint32_t burst = 0;
  uint32_t cburst = 0;
  uint32_t quantum = 0;
  uint32_t prio = 0;

  friend bool operator==(const HtbClass&, const HtbClass&) = default;
};

// One u32 match: (32-bit word at `offset` bytes from the network header) & mask == value.
// value and mask in host byte order (the wire format is big-endian).
struct U32Key {
  uint32_t value = 0;
  uint32_t mask = 0;
  int32_t offset = 0;
  int32_t offmask = 0;

  friend bool operator==(const U32Key&, const U32Key&) = default;
};

// One u32 filter attached to the root qdisc, sending matches to `classid` (terminal).
// `handle`: in a plan only the node id (bits 0-11; the kernel adds the hash table id it chose
// for this pref); read back from the kernel it is the full htid:bucket:node handle.
struct U32Filter {
  uint16_t pref = 0;
  uint16_t protocol = 0;  // ETH_P_IP / ETH_P_IPV6, host byte order
  uint32_t handle = 0;
  std::vector<U32Key> keys;
  uint32_t classid = 0;

  friend bool operator==(const U32Filter&, const U32Filter&) = default;
};

constexpr uint16_t kEthPIp = 0x0800;
constexpr uint16_t kEthPIpv6 = 0x86dd;
constexpr uint16_t kIpv4FilterPref = 1;
constexpr uint16_t kIpv6FilterPref = 2;
// Node id of a DSCP's filter: 0x100 + dscp, so `tc filter show` reads "800::11a" for DSCP 0x1a.
// One filter per DSCP and protocol: the DSCP is the filter's identity across policy changes.
constexpr uint32_t kFilterNodeBase = 0x100;
constexpr uint32_t u32Node(uint32_t handle) { return handle & 0xfff; }
constexpr uint32_t u32Htid(uint32_t handle) { return handle & 0xfff00000u; }

// IPv4: TOS is byte 1 of the first header word (bits 16-23): value dscp<<18, mask 0x00fc0000.
U32Filter ipv4DscpFilter(uint8_t dscp, uint32_t classid);
// IPv6: the traffic class straddles bytes 0-1 (bits 20-27 of the first word, after the 4-bit
// version): value dscp<<22, mask 0x0fc00000 (what `tc ... match ip6 priority 0x88 0xfc` emits).
U32Filter ipv6DscpFilter(uint8_t dscp, uint32_t classid);

// ---- sizing rules -----------------------------------------------------------------------------

constexpr uint32_t kQuantumPerWeight = 80'000;  // >= one 64 KiB GSO skb with headers
constexpr uint32_t kMaxQuantum = 4'000'000;     // weights above 50 saturate (documented)
constexpr uint32_t kMinBurst = 128 * 1024;      // two GSO packets
constexpr uint32_t kMaxBurst = 1u << 30;        // libnl passes the burst as an int
constexpr uint64_t kBurstTimeUs = 1000;         // bucket depth: 1 ms at the class rate
// HTB needs rate > 0; an unguaranteed tenant (guarantee 0) gets this nominal rate (10 kbit/s).
// It also keeps burst/rate (the bucket time libnl converts to 32-bit ticks) under 2^32 ticks.
constexpr uint64_t kMinClassRate = 1250;
constexpr uint32_t kTenantPrio = 0;
constexpr uint32_t kDefaultClassPrio = 1;

// weight x kQuantumPerWeight, clamped to [kQuantumPerWeight, kMaxQuantum]; weight 0 counts as 1.
uint32_t quantumForWeight(uint32_t weight);
// rate x 1 ms, clamped to [kMinBurst, kMaxBurst].
uint32_t burstForRate(uint64_t rate);

// ---- payload -> wire ---------------------------------------------------------------------------

// The framing of the traffic in a device's tenant classes: full-sized TCP segments, each
// answered in the same class by the receiver's ACKs (a tenant's ring sends and receives through
// the same node). Sizes in bytes.
struct WireFraming {
  uint32_t mtu = 0;               // the device's MTU; 0 = unknown: rates are programmed as given
  uint32_t link_header = 14;      // Ethernet: what HTB counts in front of the IP packet
  uint32_t net_header = 52;       // IPv4 20 + TCP 20 + timestamps 12 (Linux's default)
  uint32_t segments_per_ack = 2;  // delayed ACK: one ACK per two full segments; 0 = no ACKs

  friend bool operator==(const WireFraming&, const WireFraming&) = default;
};

// The rate HTB must give a class so that it delivers `payload` bytes/s of TCP payload:
// payload x (k x (mtu + link_header) + link_header + net_header) / (k x (mtu - net_header)),
// k = segments_per_ack (the ACK term left out for k = 0), rounded up. The payload itself when
// framing.mtu is 0, and when the MTU leaves no payload (mtu <= net_header; makeDevicePlan
// rejects that). Saturates at UINT64_MAX.
uint64_t wireRateForPayload(uint64_t payload, const WireFraming& framing);

// ---- inputs -----------------------------------------------------------------------------------

struct TenantClassSpec {
  std::string name;
  uint64_t guarantee = 0;  // bytes/s; 0 = no guarantee (class rate kMinClassRate)
  uint64_t limit = 0;      // bytes/s; >= guarantee, > 0; above capacity it is clamped to capacity
  uint32_t weight = 1;     // >= 1; share of spare capacity
  // 1..63 (0 is untagged traffic and cannot identify a tenant). No value: the tenant gets its
  // class but no filter (there are only 63 usable DSCPs per device; RDMA-only tenants need
  // none). Its packets then reach the class only if skb->priority equals the classid (HTB
  // checks that before any filter; SO_PRIORITY > 6 needs CAP_NET_ADMIN), else the default class.
  std::optional<uint8_t> dscp;
  // 0 = derive a stable minor from the name; otherwise this class minor is used as is (it must
  // lie in [kFirstTenantMinor, kLastTenantMinor]). For callers that keep ids in their own store.
  uint16_t class_minor = 0;
};

// tenant name -> class minor
using ClassMinorMap = std::map<std::string, uint16_t, std::less<>>;

struct DevicePolicy {
  std::string device;
  uint64_t capacity = 0;  // bytes/s of the link behind the device
  std::vector<TenantClassSpec> tenants;
  // Default class rate; 0 = automatic: 1 % of capacity, at most what guarantees leave free,
  // at least kMinClassRate. Its ceil is always the capacity.
  uint64_t default_rate = 0;
  // Tenants' guarantees and limits are payload rates; with framing.mtu set they are programmed
  // as wireRateForPayload (the default class's rate and the link's capacity are wire rates).
  // When the wire rates of the guarantees do not fit the capacity next to the default class
  // (guarantees near capacity x payload / wire), they are scaled down together to fit: the link
  // cannot carry more.
  WireFraming framing;
};

// ---- the plan ---------------------------------------------------------------------------------

struct PlannedClass {
  HtbClass htb;
  std::string label;  // "link", "default" or the tenant's name (for messages and metrics)
};

struct PlannedFilter {
  U32Filter u32;
  std::string label;  // the tenant's name
};

struct DevicePlan {
  std::string device;
  HtbRoot root;
  std::vector<PlannedClass> classes;   // parents before children; then by classid
  std::vector<PlannedFilter> filters;  // by (pref, node)
  ClassMinorMap tenant_minors;         // feed back as `previous` next time (see below)

  const PlannedClass* findClass(uint32_t classid) const;
};

// Stable class minors. In order:
//   1. an explicit TenantClassSpec::class_minor is used as given (duplicates are an error);
//   2. a tenant found in `previous` keeps its minor (unless 1. took it);
//   3. everyone else, in name order, gets hashedClassMinor(name), probing upwards (wrapping
//      inside the tenant range) past minors already taken.
// So with `previous` = the last plan's tenant_minors, a tenant's class never changes while it
// exists. Without it, a tenant's minor is a pure function of its name unless two names collide
// in the 16-bit space (about 3 % for 64 tenants); then only the colliding tenant whose name
// sorts later is affected. Why not the tenant's DSCP or list position: a DSCP can be re-assigned
// and positions shift, and both would renumber classes (counters reset, needless writes).
// Callers that need guaranteed stability across restarts persist tenant_minors (the agent keeps
// them with its snapshot) or pass explicit ids.
Result<ClassMinorMap> assignClassMinors(const std::vector<TenantClassSpec>& tenants,
                                        const ClassMinorMap& previous = {});
// FNV-1a of the name mapped into [kFirstTenantMinor, kLastTenantMinor].
uint16_t hashedClassMinor(std::string_view tenant_name);

// The tenant tree above. Rejects (kInvalidArgument, naming the tenant and field): empty or
// too long device name (> 15 bytes), capacity 0, empty or duplicate tenant names, limit 0 or
// below guarantee, weight 0, DSCP 0 or > 63, a DSCP used by two tenants, guarantees (plus the
// default class's minimum rate) above capacity, more tenants than class minors, a framing MTU
// that leaves no payload.
Result<DevicePlan> makeDevicePlan(const DevicePolicy& policy, const ClassMinorMap& previous = {});

// Link-rate emulation (and the RDMA-like mode, where tc must not separate tenants): one HTB
// class 1:1 at rate = ceil = `rate` that is also the default class, with the kernel's default
// FIFO as its leaf and no filters. Same owner marker, so the executor manages it like any plan.
Result<DevicePlan> makeLinkShaperPlan(std::string device, uint64_t rate);

// Human-readable one-object-per-line rendering (for logs, --dry-run and test failure output).
std::string describePlan(const DevicePlan& plan);

}  // namespace tq::tc
