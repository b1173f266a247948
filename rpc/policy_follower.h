// The latest policy from tenantqos-policyd, followed over one WatchPolicy stream (the
// StreamFollower's reconnect, jitter, backoff and failover over the replicas), for every client
// that enforces or decides with it: the node agent (agent/policy_watcher.h adds persistence and
// its metrics) and the admission webhook.
//
// Each request sends the (store epoch, version) held, so a replica sends only what is newer and
// nothing is lost or reordered across a failover. Store identity (judgeSnapshot): a snapshot of
// another store epoch is adopted whatever its version (a re-created store starts again at 1) and
// said so in the log and to the client; an older version of the same store is never taken (the
// client keeps what it holds and is told why).
//
// Thread-safety: start()/stop() from the owner; known() from any thread; the handlers run on
// the follower's thread, one at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "common/backoff.h"
#include "common/clock.h"
#include "common/policy.h"
#include "common/thread_annotations.h"
#include "rpc/channel_ring.h"
#include "rpc/stream_follower.h"

namespace tq::rpc {

enum class SnapshotVerdict {
  kTake,          // a newer (or equal) version of the store held, or nothing held
  kTakeNewStore,  // another store epoch: adopt its latest, whatever the version numbers
  kKeepOlder,     // an older version of the same store: not taken, reported
};
// `held_epoch` "" (nothing held, or a snapshot from before epochs) compares versions only.
SnapshotVerdict judgeSnapshot(const std::string& held_epoch, uint64_t held_version,
                              const std::string& epoch, uint64_t version);

// Which policy a client holds: the store it came from and its version there (0: none).
struct HeldPolicy {
  std::string store_epoch;
  uint64_t version = 0;
};

class PolicyFollower {
 public:
  struct Options {
    std::string node;               // WatchPolicyRequest.node: who watches, for policyd's log
    uint64_t known_version = 0;     // what the client holds already (0: nothing)
    std::string known_store_epoch;  // the store of known_version ("" = unknown)
    BackoffOptions backoff;         // between stream attempts
    uint64_t seed = 0;              // 0: random
  };
  struct Handlers {
    // A snapshot taken (kTake, or kTakeNewStore: `replaced` is what was held before it, of the
    // other store). The follower asks for versions after it from then on.
    std::function<void(VersionedPolicy policy, SnapshotVerdict verdict, const HeldPolicy& replaced)>
        on_policy;
    // An older version of the held store offered (kKeepOlder), with the notice logged.
    std::function<void(const VersionedPolicy& offered, const std::string& notice)> on_older;
    // The stream opened (true) or ended (false).
    std::function<void(bool connected)> on_connected;
  };

  PolicyFollower(std::shared_ptr<ChannelRing> ring, Options options, Handlers handlers,
                 Clock& clock);
  ~PolicyFollower();  // stop()

  void start();
  void stop();  // idempotent

  // The (epoch, version) held: the last snapshot taken, else the options'.
  HeldPolicy known() const;
  const StreamFollower& stream() const { return stream_; }

 private:
  StreamFollower::StreamEnd watch(const std::shared_ptr<grpc::Channel>& channel,
                                  grpc::ClientContext& ctx, const std::string& target);

  const std::string node_;
  Handlers handlers_;
  mutable Mutex mu_;
  HeldPolicy known_ TQ_GUARDED_BY(mu_);
  StreamFollower stream_;  // last: its thread uses the members above
};

}  // namespace tq::rpc
