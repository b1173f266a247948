#include "agent/policy_watcher.h"

#include "common/log.h"

namespace tq::agent {

PolicyWatcher::PolicyWatcher(std::shared_ptr<rpc::ChannelRing> replicas, Options options,
                             SnapshotStore* store, StateBoard* board, OnSnapshot on_snapshot,
                             Clock& clock)
    : store_(store),
      board_(board),
      on_snapshot_(std::move(on_snapshot)),
      follower_(std::move(replicas), std::move(options), handlers(), clock) {}

PolicyWatcher::~PolicyWatcher() { stop(); }

void PolicyWatcher::start() { follower_.start(); }

void PolicyWatcher::stop() { follower_.stop(); }

rpc::PolicyFollower::Handlers PolicyWatcher::handlers() {
  rpc::PolicyFollower::Handlers h;
  h.on_policy = [this](VersionedPolicy p, rpc::SnapshotVerdict verdict, const rpc::HeldPolicy&) {
    if (verdict == rpc::SnapshotVerdict::kTakeNewStore) board_->countStoreEpochChange();
    board_->clearStoreNotice();
    Status s = store_->save(p);
    if (!s.ok()) {
      // Enforcing the new policy matters more than surviving a restart with it.
      TQ_LOG(kError, "%s; applying it without persisting", s.message().c_str());
    }
    on_snapshot_(std::move(p));
  };
  h.on_older = [this](const VersionedPolicy& offered, const std::string& notice) {
    board_->reportOlderOffered(offered.version, notice);
  };
  h.on_connected = [this](bool up) { board_->setPolicydConnected(up); };
  return h;
}

}  // namespace tq::agent
