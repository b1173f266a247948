#include "agent/policy_watcher.h"

#include <chrono>

#include "common/log.h"
#include "proto/convert.h"
#include "tenantqos/v1/policy.grpc.pb.h"

namespace tq::agent {
namespace {

constexpr int64_t kStateWaitSliceNs = 50'000'000;  // bounds stop() latency while connecting
constexpr int kConnectTimeoutMs = 5'000;           // one connection attempt, handshakes included

gpr_timespec deadlineIn(int64_t ns) {
  return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_nanos(ns, GPR_TIMESPAN));
}

}  // namespace

std::shared_ptr<grpc::Channel> makePolicydChannel(
    const std::string& target, const BackoffOptions& backoff,
    std::shared_ptr<grpc::ChannelCredentials> credentials) {
  grpc::ChannelArguments args;
  const int min_ms = static_cast<int>(backoff.initial_ns / 1'000'000);
  const int max_ms = static_cast<int>(backoff.max_ns / 1'000'000);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, min_ms);
  // Despite its name, the shortest time one connection attempt (TCP and TLS handshake) may take
  // before gRPC gives up on it. Not min_ms: 100 ms cut TLS handshakes on a loaded node
  // ("tcp handshaker shutdown"); 5 s still notices a black-holed address.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, kConnectTimeoutMs);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, max_ms);
  // A watch stream may be silent for hours; keepalive pings notice a peer that vanished
  // without a FIN (host down, partition); a killed policyd closes the connection and is noticed
  // at once without them. tenantqos-policyd accepts pings every 10 s
  // (GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS); a default gRPC server would answer
  // pings more often than every 5 min with "too_many_pings" GOAWAYs (the watch then reconnects).
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30'000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10'000);
  // Not the process-wide subchannel pool: a renewed channel (proto::ChannelRing::renew) must not
  // pick up the subchannel, and its connection state, of the one it replaces.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(target, std::move(credentials), args);
}

std::shared_ptr<PolicydEndpoints> makePolicydEndpoints(
    std::vector<std::string> targets, const BackoffOptions& backoff,
    std::shared_ptr<grpc::ChannelCredentials> credentials) {
  return std::make_shared<PolicydEndpoints>(std::move(targets),
                                            [backoff, credentials](const std::string& t) {
                                              return makePolicydChannel(t, backoff, credentials);
                                            });
}

SnapshotVerdict judgeSnapshot(const std::string& held_epoch, uint64_t held_version,
                              const std::string& epoch, uint64_t version) {
  if (held_version == 0) return SnapshotVerdict::kTake;
  if (!held_epoch.empty() && !epoch.empty() && held_epoch != epoch) {
    return SnapshotVerdict::kTakeNewStore;
  }
  return version >= held_version ? SnapshotVerdict::kTake : SnapshotVerdict::kKeepOlder;
}

PolicyWatcher::PolicyWatcher(std::shared_ptr<PolicydEndpoints> endpoints, Options options,
                             SnapshotStore* store, StateBoard* board, OnSnapshot on_snapshot,
                             Clock& clock)
    : endpoints_(std::move(endpoints)),
      options_(std::move(options)),
      store_(store),
      board_(board),
      on_snapshot_(std::move(on_snapshot)),
      backoff_(options_.backoff, options_.seed != 0 ? options_.seed : std::random_device{}()),
      worker_(clock) {}

PolicyWatcher::~PolicyWatcher() { stop(); }

void PolicyWatcher::start() {
  worker_.start("tq-watch", [this](std::stop_token stop) { run(stop); });
}

void PolicyWatcher::stop() { worker_.stop(); }

// True once the channel is READY; false on TRANSIENT_FAILURE/SHUTDOWN or when stopping.
bool PolicyWatcher::waitChannelReady(grpc::Channel& channel, const std::stop_token& stop) {
  grpc_connectivity_state state = channel.GetState(/*try_to_connect=*/true);
  while (state != GRPC_CHANNEL_READY) {
    if (state == GRPC_CHANNEL_TRANSIENT_FAILURE || state == GRPC_CHANNEL_SHUTDOWN) return false;
    if (stop.stop_requested()) return false;
    channel.WaitForStateChange(state, deadlineIn(kStateWaitSliceNs));
    state = channel.GetState(/*try_to_connect=*/true);
  }
  return true;
}

bool PolicyWatcher::accept(const VersionedPolicy& p) {
  const auto held = static_cast<unsigned long long>(options_.known_version);
  const auto got = static_cast<unsigned long long>(p.version);
  switch (
      judgeSnapshot(options_.known_store_epoch, options_.known_version, p.store_epoch, p.version)) {
    case SnapshotVerdict::kKeepOlder: {
      std::string notice = "policyd " + endpoints_->currentTarget() + " offers policy v" +
                           std::to_string(got) + " of store " + p.store_epoch +
                           ", older than the enforced v" + std::to_string(held) +
                           " of the same store: not taken (store restored from an old backup? "
                           "apply the intended policy again to move on)";
      TQ_LOG(kError, "%s", notice.c_str());
      board_->reportOlderOffered(p.version, std::move(notice));
      return false;
    }
    case SnapshotVerdict::kTakeNewStore:
      TQ_LOG(kWarn,
             "policy store changed (epoch %s -> %s): adopting v%llu of the new store, "
             "replacing v%llu of the old one",
             options_.known_store_epoch.c_str(), p.store_epoch.c_str(), got, held);
      board_->countStoreEpochChange();
      break;
    case SnapshotVerdict::kTake: break;
  }
  board_->clearStoreNotice();
  return true;
}

void PolicyWatcher::run(const std::stop_token& stop) {
  Clock& clock = worker_.clock();
  bool was_connected = false;
  bool logged_down = false;
  while (!stop.stop_requested()) {
    std::shared_ptr<grpc::Channel> channel = endpoints_->current();
    if (!waitChannelReady(*channel, stop)) {
      if (stop.stop_requested()) break;
      const int64_t delay = backoff_.nextDelayNs();
      const std::string failed = endpoints_->currentTarget();
      const std::string next = endpoints_->failover();  // a fresh channel either way
      if (endpoints_->size() > 1) {
        TQ_LOG(kDebug, "policyd %s unreachable; trying %s next", failed.c_str(), next.c_str());
      }
      if (!logged_down) {
        TQ_LOG(kWarn,
               "policyd %s unreachable; enforcing policy v%llu as is, retrying with backoff%s",
               failed.c_str(), static_cast<unsigned long long>(options_.known_version),
               endpoints_->size() > 1 ? " over every replica" : "");
        logged_down = true;
      }
      TQ_LOG(kDebug, "policyd not ready; next attempt in %lld ms",
             static_cast<long long>(delay / 1'000'000));
      backoffs_++;
      worker_.waitFor(delay);
      continue;
    }

    grpc::ClientContext ctx;
    ctx.set_wait_for_ready(false);
    // Runs at once if stop was already requested; else stop() cancels the read below.
    std::stop_callback cancel(stop, [&ctx] { ctx.TryCancel(); });
    tenantqos::v1::WatchPolicyRequest req;
    req.set_node(options_.node);
    req.set_known_version(options_.known_version);
    req.set_known_store_epoch(options_.known_store_epoch);
    auto stub = tenantqos::v1::PolicyService::NewStub(channel);
    auto reader = stub->WatchPolicy(&ctx, req);
    streams_opened_++;
    board_->setPolicydConnected(true);
    if (!was_connected || logged_down) {
      TQ_LOG(kInfo, "watching policyd %s (node %s, known version %llu)",
             endpoints_->currentTarget().c_str(), options_.node.c_str(),
             static_cast<unsigned long long>(options_.known_version));
    }
    was_connected = true;
    logged_down = false;
    const int64_t opened_at = clock.nowNs();
    bool got_any = false;

    tenantqos::v1::PolicySnapshot msg;
    while (reader->Read(&msg)) {
      got_any = true;
      VersionedPolicy vp = proto::fromSnapshot(msg);
      if (!accept(vp)) continue;
      Status s = store_->save(vp);
      if (!s.ok()) {
        // Enforcing the new policy matters more than surviving a restart with it.
        TQ_LOG(kError, "%s; applying it without persisting", s.message().c_str());
      }
      options_.known_version = vp.version;
      if (!vp.store_epoch.empty()) options_.known_store_epoch = vp.store_epoch;
      on_snapshot_(std::move(vp));
    }
    grpc::Status st = reader->Finish();
    board_->setPolicydConnected(false);
    if (stop.stop_requested()) break;
    // A stream that lived or delivered counts as a successful connection.
    if (got_any || clock.nowNs() - opened_at > 1'000'000'000) backoff_.reset();
    const int64_t delay = backoff_.nextDelayNs();
    const std::string ended = endpoints_->currentTarget();
    const std::string next = endpoints_->failover();
    TQ_LOG(kWarn,
           "policy watch on %s ended: %s (grpc code %d); enforcement unchanged, reconnecting "
           "to %s in %lld ms",
           ended.c_str(), st.error_message().c_str(), static_cast<int>(st.error_code()),
           next.c_str(), static_cast<long long>(delay / 1'000'000));
    backoffs_++;
    worker_.waitFor(delay);
  }
  board_->setPolicydConnected(false);
}

}  // namespace tq::agent
