// Reliable-connected queue pairs: the attributes of the INIT -> RTR -> RTS walk, built as pure
// values (unit-tested on hosts without RDMA), and the walk itself through Verbs.
//
// Tagging: every RC QP carries the tenant's service level in ah_attr.sl; on RoCE (Ethernet link
// layer) it also carries a GRH whose traffic_class is the full IPv4 TOS / IPv6 traffic-class
// byte, i.e. DSCP << 2 (ECN bits 0). The receiver of a connection adopts the sender's values.
// Soft-RoCE (rxe, Linux 6.1) puts traffic_class on the wire but drops the SL (no VLAN/PCP).
// Thread-safety: pure functions; connectRcQp follows libibverbs' rules for one QP.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <string>

#include "common/status.h"
#include "ib/gid.h"
#include "ib/verbs.h"

namespace tq::ib {

// grh.traffic_class for a DSCP: the DS field occupies the upper six bits of the TOS byte.
constexpr uint8_t trafficClassForDscp(int dscp) { return static_cast<uint8_t>((dscp & 0x3f) << 2); }
constexpr int dscpOfTrafficClass(uint8_t traffic_class) { return traffic_class >> 2; }

ibv_gid toIbvGid(const Gid& gid);
Gid fromIbvGid(const ibv_gid& gid);
// 256 -> IBV_MTU_256 ... 4096 -> IBV_MTU_4096; 0 for anything else.
ibv_mtu mtuFromBytes(int bytes);
int mtuBytes(ibv_mtu mtu);

// What one side of a connection tells the other (carried by the transport's handshake).
struct QpEndpoint {
  uint32_t qpn = 0;
  uint32_t psn = 0;      // 24 bits
  uint16_t lid = 0;      // IB only
  Gid gid;               // RoCE: the sender's GID at its sgid_index
  int mtu_bytes = 1024;  // the sender's active MTU: 256, 512, 1024, 2048 or 4096. Bytes, not
                         // ibv_mtu: it arrives off the wire and an out-of-range enum is UB.
};

// Local choices for one RC QP. Defaults follow NCCL's IB transport (timeout 20 = 4.096 us *
// 2^20 ~ 4.3 s per try, 7 retries, RNR retry 7 = infinite, min RNR timer 12 = 0.64 ms).
struct RcQpOptions {
  uint8_t port = 1;
  bool roce = true;  // Ethernet link layer: GRH with sgid_index and traffic_class
  uint8_t sgid_index = 0;
  uint8_t service_level = 0;  // ah_attr.sl, 0-15
  uint8_t traffic_class = 0;  // grh.traffic_class (= DSCP << 2), RoCE only
  uint8_t hop_limit = 255;
  uint16_t pkey_index = 0;
  uint8_t timeout = 20;
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 7;
  uint8_t min_rnr_timer = 12;
  uint8_t max_rd_atomic = 1;       // outstanding RDMA READs this QP initiates
  uint8_t max_dest_rd_atomic = 1;  // ... and accepts
  int access_flags = IBV_ACCESS_REMOTE_WRITE;
};

struct QpTransition {
  ibv_qp_attr attr{};
  int mask = 0;
};

// RESET -> INIT. kInvalidArgument for port 0.
Result<QpTransition> initTransition(const RcQpOptions& opts);
// INIT -> RTR towards `remote`; path MTU = min(local, remote). kInvalidArgument for an SL above
// 15, a zero remote GID on RoCE, a zero LID on IB, a QPN/PSN above 24 bits, or a bad MTU.
Result<QpTransition> rtrTransition(const RcQpOptions& opts, const QpEndpoint& remote,
                                   int local_mtu_bytes);
// RTR -> RTS with our send PSN.
QpTransition rtsTransition(const RcQpOptions& opts, uint32_t local_psn);

// Walks `qp` from RESET to RTS. On error the QP is left in whatever state it reached: destroy
// it (the transport never reuses a QP after a failed connect). Errors name the QP, the
// transition and the peer ("modify rxe0 QP 0x11 to RTR (dgid ::ffff:10.77.0.2 qpn 0x12 sl 3
// tclass 104): Invalid argument").
Status connectRcQp(const Verbs& verbs, ibv_qp* qp, const RcQpOptions& opts, const QpEndpoint& local,
                   const QpEndpoint& remote);

// An RC QP with one SGE per WR, on `cq` for both directions.
Result<QpPtr> createRcQp(const Verbs& verbs, ibv_pd* pd, ibv_cq* cq, uint32_t max_send_wr,
                         uint32_t max_recv_wr, uint32_t max_inline_data = 0);

}  // namespace tq::ib
