#include "proto/channel_ring.h"

namespace tq::proto {

ChannelRing::ChannelRing(std::vector<std::string> targets, Factory make)
    : targets_(std::move(targets)), make_(std::move(make)) {
  for (const std::string& t : targets_) channels_.push_back(make_(t));
}

std::shared_ptr<grpc::Channel> ChannelRing::current() const {
  std::lock_guard<std::mutex> lock(mu_);
  return channels_[current_];
}

std::string ChannelRing::currentTarget() const {
  std::lock_guard<std::mutex> lock(mu_);
  return targets_[current_];
}

void ChannelRing::renew() {
  std::lock_guard<std::mutex> lock(mu_);
  channels_[current_] = make_(targets_[current_]);
}

std::string ChannelRing::failover() {
  std::lock_guard<std::mutex> lock(mu_);
  channels_[current_] = make_(targets_[current_]);
  current_ = (current_ + 1) % targets_.size();
  return targets_[current_];
}

}  // namespace tq::proto
