#include "rpc/stream_follower.h"

#include <random>

#include "common/log.h"

namespace tq::rpc {
namespace {

constexpr int64_t kStateWaitSliceNs = 50'000'000;  // bounds stop() latency while connecting

gpr_timespec deadlineIn(int64_t ns) {
  return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_nanos(ns, GPR_TIMESPAN));
}

}  // namespace

StreamFollower::StreamFollower(std::shared_ptr<ChannelRing> ring, Options options, Session session,
                               OnConnected on_connected, Clock& clock)
    : ring_(std::move(ring)),
      options_(std::move(options)),
      session_(std::move(session)),
      on_connected_(std::move(on_connected)),
      backoff_(options_.backoff, options_.seed != 0 ? options_.seed : std::random_device{}()),
      worker_(clock) {}

StreamFollower::~StreamFollower() { stop(); }

void StreamFollower::start() {
  worker_.start(options_.thread, [this](std::stop_token stop) { run(stop); });
}

void StreamFollower::stop() { worker_.stop(); }

// True once the channel is READY; false on TRANSIENT_FAILURE/SHUTDOWN or when stopping.
bool StreamFollower::waitChannelReady(grpc::Channel& channel, const std::stop_token& stop) {
  grpc_connectivity_state state = channel.GetState(/*try_to_connect=*/true);
  while (state != GRPC_CHANNEL_READY) {
    if (state == GRPC_CHANNEL_TRANSIENT_FAILURE || state == GRPC_CHANNEL_SHUTDOWN) return false;
    if (stop.stop_requested()) return false;
    channel.WaitForStateChange(state, deadlineIn(kStateWaitSliceNs));
    state = channel.GetState(/*try_to_connect=*/true);
  }
  return true;
}

void StreamFollower::run(const std::stop_token& stop) {
  Clock& clock = worker_.clock();
  const char* what = options_.what.c_str();
  bool logged_down = false;
  while (!stop.stop_requested()) {
    std::shared_ptr<grpc::Channel> channel = ring_->current();
    if (!waitChannelReady(*channel, stop)) {
      if (stop.stop_requested()) break;
      const int64_t delay = backoff_.nextDelayNs();
      const std::string failed = ring_->currentTarget();
      const std::string next = ring_->failover();  // a fresh channel either way
      if (!logged_down) {
        TQ_LOG(kWarn, "%s: %s unreachable; retrying with backoff%s", what, failed.c_str(),
               ring_->size() > 1 ? " over every replica" : "");
        logged_down = true;
      }
      TQ_LOG(kDebug, "%s: %s not ready; trying %s in %lld ms", what, failed.c_str(), next.c_str(),
             static_cast<long long>(delay / 1'000'000));
      backoffs_++;
      worker_.waitFor(delay);
      continue;
    }

    grpc::ClientContext ctx;
    ctx.set_wait_for_ready(false);
    // Runs at once if stop was already requested; else stop() cancels the read.
    std::stop_callback cancel(stop, [&ctx] { ctx.TryCancel(); });
    const std::string target = ring_->currentTarget();
    streams_opened_++;
    if (on_connected_) on_connected_(true);
    if (logged_down) TQ_LOG(kInfo, "%s: %s reachable again", what, target.c_str());
    logged_down = false;
    const int64_t opened_at = clock.nowNs();
    const StreamEnd end = session_(channel, ctx, target);
    if (on_connected_) on_connected_(false);
    if (stop.stop_requested()) break;
    if (end.delivered || clock.nowNs() - opened_at > options_.lived_ns) backoff_.reset();
    const int64_t delay = backoff_.nextDelayNs();
    const std::string next = ring_->failover();
    TQ_LOG(kWarn, "%s on %s ended: %s (grpc code %d); reconnecting to %s in %lld ms", what,
           target.c_str(), end.status.error_message().c_str(),
           static_cast<int>(end.status.error_code()), next.c_str(),
           static_cast<long long>(delay / 1'000'000));
    backoffs_++;
    worker_.waitFor(delay);
  }
  if (on_connected_) on_connected_(false);
}

}  // namespace tq::rpc
