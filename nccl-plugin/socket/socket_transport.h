// The socket transport: TCP over the host's IP interfaces, several data streams per
// connection, every socket marked with its tenant's DSCP and priority.
//
// Connection setup (all non-blocking, explicit state machines, bounded by a deadline):
//   listen:  bind a listening socket on the device's address (port 0), write the handle
//            (wire.h) with a random nonce and the stream count.
//   connect: open nsocks+1 TCP connections (marked before connect(), so even the SYN is),
//            send a hello on each, wait for the acceptor's ack on the control stream.
//            States: kConnecting -> kSendingHello -> kAwaitAck -> done | failed.
//   accept:  accept every pending connection, read and check each hello (magic, version, crc,
//            nonce), group streams by the connector's random connection id, adopt the
//            sender's DSCP/priority on all of them, write the ack, hand out the connection.
//            Connections from several connectors may interleave in any order.
// A peer that sends garbage, a wrong magic or version, a truncated hello or nothing fails the
// call with a message within TENANTQOS_HANDSHAKE_TIMEOUT_MS; no call ever blocks.
#pragma once

#include <memory>
#include <vector>

#include "common/clock.h"
#include "nccl-plugin/oob/ifaces.h"
#include "nccl-plugin/params.h"
#include "nccl-plugin/transport.h"

namespace tq::plugin::socket {

struct SocketTransportConfig {
  int nsocks = 4;
  int nthreads = 1;
  uint64_t inline_max = 64 * 1024;
  uint64_t min_chunk = 64 * 1024;
  int64_t handshake_timeout_ns = 30'000'000'000;
  int64_t window_ns = 0;       // TENANTQOS_SOCKET_WINDOW_US (ns); 0: no window sizing
  uint64_t window_min = 8192;  // TENANTQOS_SOCKET_WINDOW_MIN
  bool window_rtt = false;     // TENANTQOS_SOCKET_WINDOW_RTT
};

SocketTransportConfig socketConfigFromParams(const PluginParams& p);

class SocketTransport final : public Transport {
 public:
  SocketTransport(std::vector<oob::NetInterface> devices, SocketTransportConfig cfg, Clock& clock);
  // Finds the devices (TENANTQOS_SOCKET_IFNAME / _FAMILY) and builds the transport.
  static Result<std::unique_ptr<SocketTransport>> create(const PluginParams& p, Clock& clock);
  ~SocketTransport() override;  // frees the connect attempts NCCL abandoned

  const char* name() const override { return "socket"; }
  int deviceCount() const override { return static_cast<int>(devices_.size()); }
  Status properties(int dev, DeviceProperties* out) const override;
  Status listen(int dev, const TrafficQos& qos, void* handle,
                std::unique_ptr<ListenComm>* out) override;
  Status connect(int dev, const TrafficQos& qos, void* handle,
                 std::unique_ptr<SendComm>* out) override;
  Status accept(ListenComm* listen, std::unique_ptr<RecvComm>* out) override;

  const std::vector<oob::NetInterface>& devices() const { return devices_; }
  const SocketTransportConfig& config() const { return cfg_; }

 private:
  std::vector<oob::NetInterface> devices_;
  SocketTransportConfig cfg_;
  Clock& clock_;
};

// The sockets of a comm made by this transport (control last); empty for other comms.
// For tests of the marking.
std::vector<int> socketFdsOf(const SendComm* c);
std::vector<int> socketFdsOf(const RecvComm* c);

}  // namespace tq::plugin::socket
