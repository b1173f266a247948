// The ib transport: RDMA over InfiniBand or RoCE with RC queue pairs (data path: ib_comm.h).
//
// Devices are the active ports that TENANTQOS_IB_HCA allows (sysfs discovery, ib/sysfs.h), each
// with its GID (TENANTQOS_IB_GID_INDEX, default the RoCE v2 IPv4-mapped one). libibverbs is
// dlopen'ed (TENANTQOS_IBVERBS_LIB) only once such a port exists, so hosts without RDMA never
// load it.
//
// Connection setup is an out-of-band TCP handshake (nccl-plugin/oob/: dial, message steps,
// envelope) on the first interface TENANTQOS_SOCKET_IFNAME selects (like NCCL's own IB
// transport), entirely non-blocking, every state bounded by TENANTQOS_HANDSHAKE_TIMEOUT_MS:
//   listen:  a listening TCP socket; the handle (ib_wire.h) carries its address and a nonce.
//   connect: kTcpConnect -> kSendHello (QPs, CQ and CTS ring already made; the hello carries
//            their numbers and addresses, the tenant's DSCP and SL) -> kAwaitReply -> (QPs to
//            RTS towards the acceptor's) -> kSendReady -> comm.
//   accept:  per pending connection kReadHello -> (checks; QPs made and walked to RTS with the
//            SENDER's SL and traffic class: the receiver adopts the sender's marking, or
//            TENANTQOS_IB_CTS_DSCP) -> kSendReply -> kAwaitReady -> comm.
// A peer with a wrong magic, version, nonce or unusable QP data is told why (reply or ready
// with a reason) and the call fails with the reason; nothing it made is kept. The TCP
// connection stays open as the comm's liveness link.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "nccl-plugin/ib/ib_comm.h"
#include "nccl-plugin/oob/ifaces.h"
#include "nccl-plugin/params.h"
#include "nccl-plugin/transport.h"

namespace tq::plugin::ib {

struct IbTransportConfig {
  std::string hca;            // TENANTQOS_IB_HCA
  int gid_index = -1;         // TENANTQOS_IB_GID_INDEX; -1: default choice
  std::string verbs_library;  // TENANTQOS_IBVERBS_LIB
  std::string sysfs_root = "/sys";
  std::string oob_ifname;  // TENANTQOS_SOCKET_IFNAME: the handshake's interface
  std::string oob_family;  // TENANTQOS_SOCKET_FAMILY
  IbCommConfig comm;
  int64_t handshake_timeout_ns = 30'000'000'000;
};
IbTransportConfig ibConfigFromParams(const PluginParams& p);

class IbTransport final : public Transport {
 public:
  // kNotFound when no active RDMA port passes the filter (TENANTQOS_TRANSPORT=auto then uses
  // socket); kUnavailable when libibverbs cannot be loaded; kInvalidArgument for a bad
  // TENANTQOS_IB_HCA; an interface error when no interface can carry the handshake.
  static Result<std::unique_ptr<IbTransport>> create(const IbTransportConfig& cfg, Clock& clock);
  static Result<std::unique_ptr<IbTransport>> create(const PluginParams& p, Clock& clock);
  // Frees the connect attempts NCCL abandoned; the devices (and their event threads) end with
  // the last comm still using them.
  ~IbTransport() override;

  const char* name() const override { return "ib"; }
  int deviceCount() const override { return static_cast<int>(ports_.size()); }
  Status properties(int dev, DeviceProperties* out) const override;
  Status listen(int dev, const TrafficQos& qos, void* handle,
                std::unique_ptr<ListenComm>* out) override;
  Status connect(int dev, const TrafficQos& qos, void* handle,
                 std::unique_ptr<SendComm>* out) override;
  Status accept(ListenComm* listen, std::unique_ptr<RecvComm>* out) override;

  // One line for the log: "[rxe0:1 RoCE v2 GID 1 ::ffff:10.77.0.1 mtu 4096, ...]".
  std::string summary() const;
  const std::vector<std::unique_ptr<IbPort>>& ports() const { return ports_; }

 private:
  IbTransport(IbTransportConfig cfg, Clock& clock) : cfg_(std::move(cfg)), clock_(clock) {}

  const IbTransportConfig cfg_;
  oob::NetInterface oob_;
  Clock& clock_;
  std::vector<std::unique_ptr<IbPort>> ports_;
};

}  // namespace tq::plugin::ib
