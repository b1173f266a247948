#include "ib/rc_qp.h"

#include <algorithm>
#include <cstring>

namespace tq::ib {
namespace {

constexpr uint32_t k24Bits = 0xffffff;

std::string hex(uint32_t v) {
  char buf[16];
  snprintf(buf, sizeof(buf), "0x%x", v);
  return buf;
}

}  // namespace

ibv_gid toIbvGid(const Gid& gid) {
  ibv_gid out;
  memcpy(out.raw, gid.raw.data(), sizeof(out.raw));
  return out;
}

Gid fromIbvGid(const ibv_gid& gid) {
  Gid out;
  memcpy(out.raw.data(), gid.raw, sizeof(gid.raw));
  return out;
}

ibv_mtu mtuFromBytes(int bytes) {
  switch (bytes) {
    case 256: return IBV_MTU_256;
    case 512: return IBV_MTU_512;
    case 1024: return IBV_MTU_1024;
    case 2048: return IBV_MTU_2048;
    case 4096: return IBV_MTU_4096;
    default: return static_cast<ibv_mtu>(0);
  }
}

int mtuBytes(ibv_mtu mtu) {
  switch (mtu) {
    case IBV_MTU_256: return 256;
    case IBV_MTU_512: return 512;
    case IBV_MTU_1024: return 1024;
    case IBV_MTU_2048: return 2048;
    case IBV_MTU_4096: return 4096;
  }
  return 0;
}

Result<QpTransition> initTransition(const RcQpOptions& opts) {
  if (opts.port == 0) return invalidArgument("RC QP INIT: port 0 is not a valid port number");
  QpTransition t;
  t.attr.qp_state = IBV_QPS_INIT;
  t.attr.pkey_index = opts.pkey_index;
  t.attr.port_num = opts.port;
  t.attr.qp_access_flags = static_cast<unsigned>(opts.access_flags);
  t.mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
  return t;
}

Result<QpTransition> rtrTransition(const RcQpOptions& opts, const QpEndpoint& remote,
                                   int local_mtu_bytes) {
  if (opts.service_level > 15) {
    return invalidArgument("RC QP RTR: service level " + std::to_string(opts.service_level) +
                           " out of range 0-15");
  }
  if (remote.qpn == 0 || remote.qpn > k24Bits || remote.psn > k24Bits) {
    return invalidArgument("RC QP RTR: remote QPN " + hex(remote.qpn) + " / PSN " +
                           hex(remote.psn) + " not a valid 24-bit value");
  }
  if (opts.roce && remote.gid.isZero()) {
    return invalidArgument("RC QP RTR: RoCE needs the remote GID (got ::)");
  }
  if (!opts.roce && remote.lid == 0) {
    return invalidArgument("RC QP RTR: InfiniBand needs the remote LID (got 0)");
  }
  if (mtuFromBytes(local_mtu_bytes) == 0 || mtuFromBytes(remote.mtu_bytes) == 0) {
    return invalidArgument("RC QP RTR: bad MTU (local " + std::to_string(local_mtu_bytes) +
                           ", remote " + std::to_string(remote.mtu_bytes) +
                           "; expected 256, 512, 1024, 2048 or 4096)");
  }
  QpTransition t;
  ibv_qp_attr& a = t.attr;
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = mtuFromBytes(std::min(local_mtu_bytes, remote.mtu_bytes));
  a.dest_qp_num = remote.qpn;
  a.rq_psn = remote.psn;
  a.max_dest_rd_atomic = opts.max_dest_rd_atomic;
  a.min_rnr_timer = opts.min_rnr_timer;
  a.ah_attr.sl = opts.service_level;
  a.ah_attr.src_path_bits = 0;
  a.ah_attr.port_num = opts.port;
  if (opts.roce) {
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = toIbvGid(remote.gid);
    a.ah_attr.grh.sgid_index = opts.sgid_index;
    a.ah_attr.grh.hop_limit = opts.hop_limit;
    a.ah_attr.grh.flow_label = 0;
    a.ah_attr.grh.traffic_class = opts.traffic_class;
  } else {
    a.ah_attr.is_global = 0;
    a.ah_attr.dlid = remote.lid;
  }
  t.mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
           IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  return t;
}

QpTransition rtsTransition(const RcQpOptions& opts, uint32_t local_psn) {
  QpTransition t;
  t.attr.qp_state = IBV_QPS_RTS;
  t.attr.timeout = opts.timeout;
  t.attr.retry_cnt = opts.retry_cnt;
  t.attr.rnr_retry = opts.rnr_retry;
  t.attr.sq_psn = local_psn & k24Bits;
  t.attr.max_rd_atomic = opts.max_rd_atomic;
  t.mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
           IBV_QP_MAX_QP_RD_ATOMIC;
  return t;
}

Status connectRcQp(const Verbs& verbs, ibv_qp* qp, const RcQpOptions& opts, const QpEndpoint& local,
                   const QpEndpoint& remote) {
  std::string peer =
      opts.roce ? "dgid " + remote.gid.toString() : "dlid " + std::to_string(remote.lid);
  peer += " qpn " + hex(remote.qpn) + " sl " + std::to_string(opts.service_level);
  if (opts.roce) {
    peer += " tclass " + std::to_string(opts.traffic_class) + " sgid_index " +
            std::to_string(opts.sgid_index);
  }
  TQ_ASSIGN_OR_RETURN(QpTransition init, initTransition(opts));
  TQ_RETURN_IF_ERROR(verbs.modifyQp(qp, &init.attr, init.mask, "to INIT"));
  auto rtr = rtrTransition(opts, remote, local.mtu_bytes);
  if (!rtr.ok()) return rtr.status().withContext(qpName(qp));
  TQ_RETURN_IF_ERROR(verbs.modifyQp(qp, &rtr->attr, rtr->mask, "to RTR (" + peer + ")"));
  QpTransition rts = rtsTransition(opts, local.psn);
  TQ_RETURN_IF_ERROR(verbs.modifyQp(qp, &rts.attr, rts.mask, "to RTS (" + peer + ")"));
  return okStatus();
}

Result<QpPtr> createRcQp(const Verbs& verbs, ibv_pd* pd, ibv_cq* cq, uint32_t max_send_wr,
                         uint32_t max_recv_wr, uint32_t max_inline_data) {
  ibv_qp_init_attr init;
  memset(&init, 0, sizeof(init));
  init.send_cq = cq;
  init.recv_cq = cq;
  init.qp_type = IBV_QPT_RC;
  init.sq_sig_all = 0;
  init.cap.max_send_wr = max_send_wr;
  init.cap.max_recv_wr = max_recv_wr;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  init.cap.max_inline_data = max_inline_data;
  return verbs.createQp(pd, &init);
}

}  // namespace tq::ib
