// A ring of gRPC channels to the replicas of one service (--policyd A,B,C, --server A,B,C,
// --etcd-endpoints A,B,C): one channel per target, made up front (gRPC connects lazily), one of
// them current. A caller that finds the current replica unreachable calls failover() and tries
// the next; a target that is a DNS name with several addresses is already tried address by
// address by gRPC's pick_first. Thread-safe.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tq::proto {

class ChannelRing {
 public:
  using Factory = std::function<std::shared_ptr<grpc::Channel>(const std::string& target)>;

  // `targets` must not be empty.
  ChannelRing(std::vector<std::string> targets, const Factory& make);

  std::shared_ptr<grpc::Channel> current() const;
  std::string currentTarget() const;
  // Moves to the next target (round robin) and returns it.
  std::string failover();
  size_t size() const { return targets_.size(); }

 private:
  const std::vector<std::string> targets_;
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::atomic<size_t> current_{0};
};

}  // namespace tq::proto
