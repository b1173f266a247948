// RDMA device, port and GID discovery from sysfs (/sys/class/infiniband), and per-port counters.
//
// This is what the agent uses to find devices and export port counters; it needs no libibverbs
// and no device access rights. The sysfs root is a parameter so tests run against a fake tree.
// Layout read (all paths under <root>/class/infiniband/<dev>/):
//   node_type, node_guid, fw_ver
//   ports/<p>/{state,phys_state,link_layer,rate,lid}
//   ports/<p>/gids/<i>                 "0000:0000:0000:0000:0000:ffff:0a4d:0001"
//   ports/<p>/gid_attrs/types/<i>      "IB/RoCE v1" | "RoCE v2" (read fails for unused entries)
//   ports/<p>/gid_attrs/ndevs/<i>      netdev name (RoCE only)
//   ports/<p>/counters/<name>          IB PMA counters (absent on rxe)
//   ports/<p>/hw_counters/<name>       driver counters (rxe: sent_pkts, rcvd_pkts, ...)
// and <root>/class/net/<netdev>/mtu for the RoCE active MTU.
// Blocking file reads; thread-compatible (no shared state).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "ib/gid.h"
#include "ib/hca_filter.h"

namespace tq::ib {

enum class LinkLayer { kUnknown, kInfiniBand, kEthernet };
std::string_view linkLayerName(LinkLayer l);

// "IB/RoCE v1" covers native IB GIDs and RoCE v1; "RoCE v2" is UDP-encapsulated RoCE.
enum class GidType { kUnknown, kIbOrRoceV1, kRoceV2 };
std::string_view gidTypeName(GidType t);

struct GidEntry {
  int index = 0;
  Gid gid;
  GidType type = GidType::kUnknown;
  std::string netdev;  // RoCE: the netdev the GID belongs to; empty on IB
};

// IB port states as reported in sysfs "N: NAME" (IBTA PortInfo:PortState).
inline constexpr int kPortStateActive = 4;

struct PortInfo {
  int port = 0;
  int state = 0;                // 4 = ACTIVE
  std::string state_name;       // "ACTIVE"
  int phys_state = 0;           // 5 = LinkUp
  std::string phys_state_name;  // "LinkUp"
  LinkLayer link_layer = LinkLayer::kUnknown;
  uint64_t rate_bytes_per_second = 0;  // from "100 Gb/sec (4X EDR)"; 0 if unknown
  uint32_t lid = 0;
  std::string netdev;  // RoCE: netdev of GID 0; empty on IB
  // RoCE: the largest IB MTU (256..4096) that fits the netdev MTU minus 96 bytes of RoCEv2
  // headers, as ib_core's iboe_get_mtu computes it (1500 -> 1024, 9000 -> 4096). 0 when unknown
  // (native IB: ask the verbs port query).
  int active_mtu = 0;
  std::vector<GidEntry> gids;  // populated (non-zero) entries only, by index

  bool active() const { return state == kPortStateActive; }
};

struct DeviceInfo {
  std::string name;       // "mlx5_0", "rxe0"
  std::string node_type;  // "1: CA"
  std::string node_guid;
  std::string fw_ver;
  std::vector<PortInfo> ports;  // by port number
};

// All RDMA devices under <sysfs_root>/class/infiniband, sorted by name. A missing directory
// means "no RDMA on this host" and yields an empty list, not an error; a device whose ports
// cannot be read is skipped with a warning in the log.
Result<std::vector<DeviceInfo>> discoverDevices(const std::string& sysfs_root = "/sys");
Result<DeviceInfo> readDevice(const std::string& sysfs_root, std::string_view device);
// The device names under <sysfs_root>/class/infiniband, sorted; empty when it does not exist.
// For callers that read each device themselves and report failures their own way (the agent
// logs a broken device once, not at every rediscovery).
Result<std::vector<std::string>> listDevices(const std::string& sysfs_root = "/sys");

// The GID index to use by default on a port: on Ethernet (RoCE) the first RoCE v2 GID holding an
// IPv4-mapped address, else the first RoCE v2 GID that is not link-local; on InfiniBand index 0.
// kNotFound (naming the port and what was found) when no such GID exists.
Result<int> defaultGidIndex(const DeviceInfo& device, const PortInfo& port);

// "N: NAME" -> {N, NAME}; used for state and phys_state.
bool parseNumberedState(std::string_view text, int* number, std::string* name);
// "100 Gb/sec (4X EDR)", "2.5 Gb/sec (1X SDR)", "10 Gb/sec (4X)" -> bytes/s; 0 on failure.
uint64_t parseSysfsRate(std::string_view text);
// The RoCE active MTU for a netdev MTU (see PortInfo::active_mtu); 0 if below 256 + headers.
int roceActiveMtu(int netdev_mtu);

// A usable port: active, allowed by the HCA filter, with the GID the transport will use.
struct PortChoice {
  std::string device;
  int port = 0;
  LinkLayer link_layer = LinkLayer::kUnknown;
  int gid_index = 0;
  Gid gid;
  std::string netdev;  // RoCE
  int active_mtu = 0;  // see PortInfo::active_mtu
  uint64_t rate_bytes_per_second = 0;
};

// The ports a transport may use (TENANTQOS_IB_HCA / TENANTQOS_IB_GID_INDEX): active ports that
// `filter` allows, in device/port order, each with forced_gid_index when >= 0 (it must exist on
// the port) or else defaultGidIndex(). Ports left out for another reason than the filter
// (inactive, no usable GID) are described in *skipped ("rxe0:1: port DOWN"), which may be null.
std::vector<PortChoice> selectPorts(const std::vector<DeviceInfo>& devices, const HcaFilter& filter,
                                    int forced_gid_index, std::vector<std::string>* skipped);

struct PortCounters {
  std::string device;
  int port = 0;
  std::map<std::string, uint64_t> counters;     // counters/<name>, raw values
  std::map<std::string, uint64_t> hw_counters;  // hw_counters/<name>, raw values

  // Derived totals for metrics; nullopt when the device exposes no such counter.
  // port_xmit_data / port_rcv_data count 4-octet words (IBTA PortCounters), hence * 4.
  // Without PMA counters (rxe), packets fall back to hw_counters sent_pkts / rcvd_pkts.
  std::optional<uint64_t> transmitBytes() const;
  std::optional<uint64_t> receiveBytes() const;
  std::optional<uint64_t> transmitPackets() const;
  std::optional<uint64_t> receivePackets() const;
};

// Reads every numeric file of ports/<port>/counters and ports/<port>/hw_counters (either
// directory may be absent). Unreadable or non-numeric files are skipped.
Result<PortCounters> readPortCounters(const std::string& sysfs_root, std::string_view device,
                                      int port);

// The port's logical state number from ports/<port>/state (kPortStateActive = 4); one small
// read, for callers that poll it. kNotFound when the port (or device) is gone, kDataLoss when
// the file does not hold "N: NAME".
Result<int> readPortState(const std::string& sysfs_root, std::string_view device, int port);

}  // namespace tq::ib
