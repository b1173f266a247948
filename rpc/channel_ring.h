// A ring of gRPC channels to the replicas of one service (--policyd A,B,C, --server A,B,C,
// --etcd-endpoints A,B,C): one channel per target, made up front (gRPC connects lazily), one of
// them current. A caller that finds the current replica unreachable calls failover() and tries
// the next; a target that is a DNS name with several addresses is already tried address by
// address by gRPC's pick_first. Thread-safe.
//
// makeChannel()/makeChannelRing() build the channels of the long-lived clients of policyd (the
// agent's watch and reports, the webhook's watch, rpc/stream_follower.h) with one set of
// arguments.
#pragma once

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/backoff.h"
#include "common/thread_annotations.h"

namespace tq::rpc {

class ChannelRing {
 public:
  using Factory = std::function<std::shared_ptr<grpc::Channel>(const std::string& target)>;

  // `targets` must not be empty; `make` is kept for renew() and failover().
  ChannelRing(std::vector<std::string> targets, Factory make);

  std::shared_ptr<grpc::Channel> current() const;
  std::string currentTarget() const;
  // Gives the current target a new channel. A gRPC 1.51 TLS channel whose handshakes had failed
  // (the server down, or one with a certificate from another CA on the port) was seen never to
  // become READY again once the real server was back, while a new channel connected at once;
  // so a failed target is never retried on its old channel.
  void renew();
  // Renews the current target's channel and moves to the next target (round robin, the same
  // one again when there is only one); returns the new current target.
  std::string failover();
  size_t size() const { return targets_.size(); }

 private:
  const std::vector<std::string> targets_;
  const Factory make_;
  mutable Mutex mu_;
  std::vector<std::shared_ptr<grpc::Channel>> channels_ TQ_GUARDED_BY(mu_);
  size_t current_ TQ_GUARDED_BY(mu_) = 0;
};

// A channel whose own reconnect backoff is bounded like `backoff` (gRPC's default grows to
// 120 s), with keepalive so a silently dead peer is noticed, on a subchannel of its own (a
// renewed channel must not pick up the old one's connection state), receiving messages up to
// 16 MiB (a policy is at most 4 MiB). `credentials`: from rpc::channelCredentials.
std::shared_ptr<grpc::Channel> makeChannel(const std::string& target, const BackoffOptions& backoff,
                                           std::shared_ptr<grpc::ChannelCredentials> credentials);
// A ring of such channels, one per target.
std::shared_ptr<ChannelRing> makeChannelRing(std::vector<std::string> targets,
                                             const BackoffOptions& backoff,
                                             std::shared_ptr<grpc::ChannelCredentials> credentials);

}  // namespace tq::rpc
