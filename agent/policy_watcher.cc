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
  // Not the process-wide subchannel pool: a fresh channel (ChannelFactory) must not pick up the
  // subchannel, and its connection state, of the one it replaces.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(target, std::move(credentials), args);
}

PolicyWatcher::PolicyWatcher(ChannelFactory channels, Options options, SnapshotStore* store,
                             StateBoard* board, OnSnapshot on_snapshot, Clock& clock)
    : channels_(std::move(channels)),
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
bool PolicyWatcher::waitChannelReady(const std::stop_token& stop) {
  grpc_connectivity_state state = channel_->GetState(/*try_to_connect=*/true);
  while (state != GRPC_CHANNEL_READY) {
    if (state == GRPC_CHANNEL_TRANSIENT_FAILURE || state == GRPC_CHANNEL_SHUTDOWN) return false;
    if (stop.stop_requested()) return false;
    channel_->WaitForStateChange(state, deadlineIn(kStateWaitSliceNs));
    state = channel_->GetState(/*try_to_connect=*/true);
  }
  return true;
}

void PolicyWatcher::run(const std::stop_token& stop) {
  Clock& clock = worker_.clock();
  bool was_connected = false;
  bool logged_down = false;
  while (!stop.stop_requested()) {
    // Every attempt (the first, or after a failure or an ended stream) on a fresh channel: see
    // ChannelFactory.
    channel_ = channels_();
    auto stub = tenantqos::v1::PolicyService::NewStub(channel_);
    if (!waitChannelReady(stop)) {
      if (stop.stop_requested()) break;
      const int64_t delay = backoff_.nextDelayNs();
      if (!logged_down) {
        TQ_LOG(kWarn, "policyd unreachable; enforcing policy v%llu as is, retrying with backoff",
               static_cast<unsigned long long>(options_.known_version));
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
    auto reader = stub->WatchPolicy(&ctx, req);
    streams_opened_++;
    board_->setPolicydConnected(true);
    if (!was_connected || logged_down) {
      TQ_LOG(kInfo, "watching policyd (node %s, known version %llu)", options_.node.c_str(),
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
      Status s = store_->save(vp);
      if (!s.ok()) {
        // Enforcing the new policy matters more than surviving a restart with it.
        TQ_LOG(kError, "%s; applying it without persisting", s.message().c_str());
      }
      options_.known_version = vp.version;
      on_snapshot_(std::move(vp));
    }
    grpc::Status st = reader->Finish();
    board_->setPolicydConnected(false);
    if (stop.stop_requested()) break;
    // A stream that lived or delivered counts as a successful connection.
    if (got_any || clock.nowNs() - opened_at > 1'000'000'000) backoff_.reset();
    const int64_t delay = backoff_.nextDelayNs();
    TQ_LOG(kWarn,
           "policy watch ended: %s (grpc code %d); enforcement unchanged, reconnecting "
           "in %lld ms",
           st.error_message().c_str(), static_cast<int>(st.error_code()),
           static_cast<long long>(delay / 1'000'000));
    backoffs_++;
    worker_.waitFor(delay);
  }
  board_->setPolicydConnected(false);
}

}  // namespace tq::agent
