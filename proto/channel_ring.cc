#include "proto/channel_ring.h"

namespace tq::proto {

ChannelRing::ChannelRing(std::vector<std::string> targets, const Factory& make)
    : targets_(std::move(targets)) {
  for (const std::string& t : targets_) channels_.push_back(make(t));
}

std::shared_ptr<grpc::Channel> ChannelRing::current() const {
  return channels_[current_.load() % channels_.size()];
}

std::string ChannelRing::currentTarget() const {
  return targets_[current_.load() % targets_.size()];
}

std::string ChannelRing::failover() {
  return targets_[(current_.fetch_add(1) + 1) % targets_.size()];
}

}  // namespace tq::proto
