#include "rpc/channel_ring.h"
#include "common/thread_annotations.h"

namespace tq::rpc {

ChannelRing::ChannelRing(std::vector<std::string> targets, Factory make)
    : targets_(std::move(targets)), make_(std::move(make)) {
  for (const std::string& t : targets_) channels_.push_back(make_(t));
}

std::shared_ptr<grpc::Channel> ChannelRing::current() const {
  MutexLock lock(mu_);
  return channels_[current_];
}

std::string ChannelRing::currentTarget() const {
  MutexLock lock(mu_);
  return targets_[current_];
}

void ChannelRing::renew() {
  MutexLock lock(mu_);
  channels_[current_] = make_(targets_[current_]);
}

std::string ChannelRing::failover() {
  MutexLock lock(mu_);
  channels_[current_] = make_(targets_[current_]);
  current_ = (current_ + 1) % targets_.size();
  return targets_[current_];
}

namespace {
constexpr int kConnectTimeoutMs = 5'000;  // one connection attempt, handshakes included
}  // namespace

std::shared_ptr<grpc::Channel> makeChannel(const std::string& target, const BackoffOptions& backoff,
                                           std::shared_ptr<grpc::ChannelCredentials> credentials) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
              static_cast<int>(backoff.initial_ns / 1'000'000));
  // Despite its name, the shortest time one connection attempt (TCP and TLS handshake) may take
  // before gRPC gives up on it. Not the initial backoff: 100 ms cut TLS handshakes on a loaded
  // node ("tcp handshaker shutdown"); 5 s still notices a black-holed address.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, kConnectTimeoutMs);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, static_cast<int>(backoff.max_ns / 1'000'000));
  // A watch stream may be silent for hours; keepalive pings notice a peer that vanished
  // without a FIN (host down, partition); a killed policyd closes the connection and is noticed
  // at once without them. tenantqos-policyd accepts pings every 10 s
  // (GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS); a default gRPC server would answer
  // pings more often than every 5 min with "too_many_pings" GOAWAYs (the watch then reconnects).
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30'000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10'000);
  // Not the process-wide subchannel pool: a renewed channel (ChannelRing::renew) must not pick
  // up the subchannel, and its connection state, of the one it replaces.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetMaxReceiveMessageSize(16 << 20);
  return grpc::CreateCustomChannel(target, std::move(credentials), args);
}

std::shared_ptr<ChannelRing> makeChannelRing(
    std::vector<std::string> targets, const BackoffOptions& backoff,
    std::shared_ptr<grpc::ChannelCredentials> credentials) {
  return std::make_shared<ChannelRing>(
      std::move(targets), [backoff, credentials = std::move(credentials)](const std::string& t) {
        return makeChannel(t, backoff, credentials);
      });
}

}  // namespace tq::rpc
