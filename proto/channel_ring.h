// A ring of gRPC channels to the replicas of one service (--policyd A,B,C, --server A,B,C,
// --etcd-endpoints A,B,C): one channel per target, made up front (gRPC connects lazily), one of
// them current. A caller that finds the current replica unreachable calls failover() and tries
// the next; a target that is a DNS name with several addresses is already tried address by
// address by gRPC's pick_first. Thread-safe.
#pragma once

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace tq::proto {

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
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<grpc::Channel>> channels_;  // guarded by mu_
  size_t current_ = 0;                                    // guarded by mu_
};

}  // namespace tq::proto
