#include "rpc/policy_follower.h"

#include "common/log.h"
#include "common/thread_annotations.h"
#include "proto/convert.h"
#include "proto/snapshot_codec.h"
#include "tenantqos/v1/policy.grpc.pb.h"

namespace tq::rpc {

SnapshotVerdict judgeSnapshot(const std::string& held_epoch, uint64_t held_version,
                              const std::string& epoch, uint64_t version) {
  if (held_version == 0) return SnapshotVerdict::kTake;
  if (!held_epoch.empty() && !epoch.empty() && held_epoch != epoch) {
    return SnapshotVerdict::kTakeNewStore;
  }
  return version >= held_version ? SnapshotVerdict::kTake : SnapshotVerdict::kKeepOlder;
}

PolicyFollower::PolicyFollower(std::shared_ptr<ChannelRing> ring, Options options,
                               Handlers handlers, Clock& clock)
    : node_(options.node),
      handlers_(std::move(handlers)),
      known_{options.known_store_epoch, options.known_version},
      stream_(
          std::move(ring),
          StreamFollower::Options{"policy watch", "tq-watch", options.backoff, options.seed},
          [this](const std::shared_ptr<grpc::Channel>& channel, grpc::ClientContext& ctx,
                 const std::string& target) { return watch(channel, ctx, target); },
          [this](bool up) {
            if (handlers_.on_connected) handlers_.on_connected(up);
          },
          clock) {}

PolicyFollower::~PolicyFollower() { stop(); }

void PolicyFollower::start() { stream_.start(); }
void PolicyFollower::stop() { stream_.stop(); }

HeldPolicy PolicyFollower::known() const {
  MutexLock lock(mu_);
  return known_;
}

StreamFollower::StreamEnd PolicyFollower::watch(const std::shared_ptr<grpc::Channel>& channel,
                                                grpc::ClientContext& ctx,
                                                const std::string& target) {
  HeldPolicy held = known();
  tenantqos::v1::WatchPolicyRequest req;
  req.set_node(node_);
  req.set_known_version(held.version);
  req.set_known_store_epoch(held.store_epoch);
  req.set_accept_deflated(true);
  auto stub = tenantqos::v1::PolicyService::NewStub(channel);
  auto reader = stub->WatchPolicy(&ctx, req);
  TQ_LOG(kInfo, "watching policyd %s as %s (holding v%llu of store %s)", target.c_str(),
         node_.c_str(), static_cast<unsigned long long>(held.version),
         held.store_epoch.empty() ? "-" : held.store_epoch.c_str());
  StreamFollower::StreamEnd end;
  tenantqos::v1::PolicySnapshot msg;
  while (reader->Read(&msg)) {
    Result<tenantqos::v1::PolicySnapshot> plain = proto::inflateSnapshot(std::move(msg));
    if (!plain.ok()) {
      // Not what policyd writes: end this stream (the follower reconnects with its backoff)
      // and keep enforcing what is held.
      TQ_LOG(kError, "policyd %s: %s; the stream is ended and the policy held is kept",
             target.c_str(), plain.status().message().c_str());
      ctx.TryCancel();
      while (reader->Read(&msg)) {
      }
      end.status = grpc::Status(grpc::StatusCode::DATA_LOSS, plain.status().message());
      reader->Finish();
      return end;
    }
    end.delivered = true;
    VersionedPolicy offered = proto::fromSnapshot(*plain);
    const auto got = static_cast<unsigned long long>(offered.version);
    const auto had = static_cast<unsigned long long>(held.version);
    const SnapshotVerdict verdict =
        judgeSnapshot(held.store_epoch, held.version, offered.store_epoch, offered.version);
    if (verdict == SnapshotVerdict::kKeepOlder) {
      const std::string notice =
          "policyd " + target + " offers policy v" + std::to_string(got) + " of store " +
          offered.store_epoch + ", older than the v" + std::to_string(had) +
          " held of the same store: not taken (store restored from an old backup? apply the "
          "intended policy again to move on)";
      TQ_LOG(kError, "%s", notice.c_str());
      if (handlers_.on_older) handlers_.on_older(offered, notice);
      continue;
    }
    if (verdict == SnapshotVerdict::kTakeNewStore) {
      TQ_LOG(kWarn,
             "policy store changed (epoch %s -> %s): adopting v%llu of the new store, replacing "
             "v%llu of the old one",
             held.store_epoch.c_str(), offered.store_epoch.c_str(), got, had);
    }
    const HeldPolicy replaced = held;
    held.version = offered.version;
    if (!offered.store_epoch.empty()) held.store_epoch = offered.store_epoch;
    {
      MutexLock lock(mu_);
      known_ = held;
    }
    if (handlers_.on_policy) handlers_.on_policy(std::move(offered), verdict, replaced);
  }
  end.status = reader->Finish();
  return end;
}

}  // namespace tq::rpc
