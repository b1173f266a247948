#include "common/worker.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <utility>

namespace tq {
namespace {
constexpr int64_t kMaxSliceNs = 3600 * kNsPerSec;
}  // namespace

Worker::Worker(Clock& clock) : clock_(clock) { clock_.subscribe(this); }

Worker::~Worker() {
  stop();
  clock_.unsubscribe(this);
}

void Worker::start(std::string name, std::function<void(std::stop_token)> body) {
  MutexLock lock(mu_);  // the body's first wait reads thread_ under it
  thread_ = std::jthread([name = std::move(name), body = std::move(body)](std::stop_token st) {
    pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
    body(std::move(st));
  });
}

void Worker::stop() {
  {
    // Under the mutex, so a wait between its stop check and blocking cannot miss it.
    MutexLock lock(mu_);
    if (!thread_.joinable()) return;
    thread_.request_stop();
  }
  cv_.notify_all();
  thread_.join();
}

bool Worker::stopRequested() const {
  MutexLock lock(mu_);
  return thread_.get_stop_token().stop_requested();
}

bool Worker::waitUntil(int64_t deadline_ns, const std::function<bool()>& ready) {
  MutexLock lock(mu_);  // `ready` runs under it
  const std::stop_token st = thread_.get_stop_token();
  sleeping_until_ns_ = deadline_ns;
  for (;;) {
    if (st.stop_requested()) break;
    if (ready && ready()) break;
    const int64_t left = deadline_ns - clock_.nowNs();
    if (left <= 0) break;
    // Real clock: this times out at the deadline. FakeClock: it may time out early in real
    // time, or end when the clock moves (generation_); both re-read the clock above.
    // Slices of at most an hour: steady_clock::now() + a far deadline must not overflow.
    const uint64_t seen = generation_;
    cv_.wait_for(lock, st, std::chrono::nanoseconds(std::min<int64_t>(left, kMaxSliceNs)),
                 [&]() TQ_REQUIRES(mu_) { return generation_ != seen; });
  }
  sleeping_until_ns_ = -1;
  return !st.stop_requested();
}

int64_t Worker::sleepingUntilNs() const {
  MutexLock lock(mu_);
  return sleeping_until_ns_;
}

void Worker::onClockMoved() {
  {
    MutexLock lock(mu_);
    ++generation_;
  }
  cv_.notify_all();
}

}  // namespace tq
