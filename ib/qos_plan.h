// Hardware QoS plans derived from the tenant policy: RoCE (DSCP -> priority -> traffic class,
// ETS shares, per-class max rate), rendered as iproute2 `dcb` commands, and InfiniBand (SL -> VL,
// VL arbitration weights), rendered for OpenSM. Pure functions: no I/O, unit-tested against
// hand-checked files in tests/unit/ib/testdata/.
//
// The hardware has few classes: 8 traffic classes per RoCE port (TC 0 is kept for traffic of no
// tenant, so 7 for tenants), and max_vls data VLs on IB (VL 0 likewise default). Tenants that use
// the same DSCP (RoCE) or SL (IB) necessarily share a class and form one group. Groups are ranked
// by guarantee (largest first, then name); when there are more groups than tenant classes, the
// first (classes - 1) groups get a class each and all the others share the last class. Inside a
// shared class the hardware cannot tell tenants apart: their isolation from each other comes from
// the plugin's per-tenant pacing alone, while the class as a whole still gets the sum of their
// guarantees from the hardware.
//
// Shares: a tenant class gets ceil(100 * guarantee / capacity) percent (at least 1), the default
// class the rest. If that leaves the default class nothing (guarantees within rounding of the
// whole link), shares are instead rounded to nearest by largest remainder and every class is
// given at least 1 percent, taken from the class with the most share above its guarantee.
// Limits: a class is capped at the sum of its members' limits unless that reaches capacity.
// Weights (spare capacity split) are not representable: ETS and VL arbitration use one number
// per class both as the minimum and as the ratio for spare bandwidth, and that number follows
// the guarantees; the plugin's pacer applies the weights.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace tq::ib {

struct QosTenant {
  std::string name;
  int service_level = 0;   // IB SL, 0-15
  int dscp = 0;            // 0-63
  uint64_t guarantee = 0;  // bytes/s
  uint64_t limit = 0;      // bytes/s, >= guarantee and > 0
  uint32_t weight = 1;
};

struct QosPlanInput {
  uint64_t capacity = 0;  // link, bytes/s
  std::vector<QosTenant> tenants;
};

// One hardware class: a RoCE traffic class or an IB virtual lane.
struct QosClass {
  int id = 0;                        // TC 0-7 or VL 0-14
  bool is_default = false;           // id 0: traffic of no tenant (plus tenants on DSCP/SL 0)
  bool shared = false;               // holds several groups because classes ran out
  std::vector<std::string> tenants;  // members, in rank order
  std::vector<int> keys;             // DSCPs (RoCE) or SLs (IB) mapped here, ascending
  uint64_t guarantee = 0;            // sum of the members' guarantees, bytes/s
  uint64_t limit = 0;                // cap in bytes/s; 0 = none
  int share_percent = 0;             // all classes of a plan sum to 100
};

struct RoceQosPlan {
  uint64_t capacity = 0;
  std::vector<QosTenant> tenants;    // validated input, in rank order
  std::vector<QosClass> classes;     // classes in use, ascending id; classes[0] is TC 0
  std::map<int, int> dscp_priority;  // DSCP -> 802.1p priority (priority p uses TC p)
};

inline constexpr int kRoceTrafficClasses = 8;

Result<RoceQosPlan> planRoceQos(const QosPlanInput& input);
// argv of each command, in order: prio-tc map, ETS (tsa + shares), max rates, DSCP -> priority.
// `dcb app replace` only touches the DSCPs it names: the caller removes stale DSCP entries
// (diff against `dcb -j app show dev X dscp-prio`). Adding a DSCP entry switches mlx5 ports to
// DSCP trust. Per-TC max rates are rounded by the NIC (mlx5: 100 Mbit/s steps up to 25.5 Gbit/s,
// then 1 Gbit/s steps).
std::vector<std::vector<std::string>> dcbCommands(const RoceQosPlan& plan, std::string_view dev);
// The same as a shell script with a comment per class.
std::string renderDcbScript(const RoceQosPlan& plan, std::string_view dev);

struct IbQosOptions {
  int max_vls = 8;  // data VLs the fabric runs (qos_max_vls), 1-15
  int mtu = 4096;   // bytes; VL arbitration weights are whole packets of this size
};

struct IbQosPlan {
  uint64_t capacity = 0;
  IbQosOptions options;
  std::vector<QosTenant> tenants;  // validated input, in rank order
  std::vector<QosClass> classes;   // VLs in use, ascending; classes[0] is VL 0
  std::array<int, 16> sl_to_vl{};  // unused SLs -> VL 0
  // Low-priority VL arbitration table: (VL, weight in 64-byte credits, 1-255). A class with
  // share s% sends s packets of `mtu` bytes per table round, in entries of at most
  // floor(255 / (mtu / 64)) packets, interleaved across VLs. At most 64 entries.
  std::vector<std::pair<int, int>> vlarb_low;
};

Result<IbQosPlan> planIbQos(const QosPlanInput& input, const IbQosOptions& options = {});
// qos-policy.conf: a qos-levels section, one level per tenant (name, SL) plus DEFAULT (SL 0).
// The plugin sets SLs on its QPs directly (no PathRecord query), so these levels document the
// SLs for the SM and for match rules of path-querying ULPs; the enforcement is in the options.
std::string renderOpenSmQosPolicy(const IbQosPlan& plan);
// opensm.conf options: qos TRUE, qos_max_vls, qos_high_limit, qos_vlarb_high, qos_vlarb_low,
// qos_sl2vl. (OpenSM reads SL2VL and VL arbitration from its options file, not from
// qos-policy.conf, whose qos-setup section it ignores.) Per-type keys (qos_ca_*, qos_swe_*)
// set elsewhere override these generic ones.
std::string renderOpenSmOptions(const IbQosPlan& plan);

}  // namespace tq::ib
