// tq::Worker: one named background thread (std::jthread) that waits on an injected Clock.
//
// The body runs once on the thread and loops on waitUntil()/waitFor(); stop() requests stop
// (the body's stop token fires, every wait returns false at once, std::stop_callbacks the
// body registered run, e.g. to cancel a blocking RPC) and joins. Waits follow the Clock: on
// the real clock they are timed waits; on a FakeClock they return when the test moves the
// clock past the deadline, so tests drive time instead of sleeping. sleepingUntilNs() tells a
// test what the body waits for.
//
// Thread-safety: stop(), wake(), withLock() and sleepingUntilNs() from any thread; wait*()
// from the body only. The mutex behind withLock() is the one a wait's `ready` predicate is
// checked under: change what the predicate reads inside withLock(), and the wait notices.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <stop_token>
#include <string>
#include <thread>

#include "common/clock.h"
#include "common/thread_annotations.h"

namespace tq {

class Worker final : private ClockListener {
 public:
  explicit Worker(Clock& clock);
  ~Worker();  // stop()
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Starts `body` on a thread named `name` (at most 15 characters: the kernel's limit). Once.
  void start(std::string name, std::function<void(std::stop_token)> body);
  // Requests stop, wakes every wait and joins the thread. Idempotent; not from the body.
  void stop();
  bool stopRequested() const;

  // Runs `fn` under the wait mutex, then wakes the body's wait so it re-checks `ready`.
  template <typename F>
  auto withLock(F&& fn) TQ_EXCLUDES(mu_) {
    struct Waker {
      Worker* w;
      ~Waker() { w->cv_.notify_all(); }
    } waker{this};
    MutexLock lock(mu_);
    ++generation_;
    return fn();
  }

  // Body only. Waits until clock().nowNs() >= deadline_ns, or `ready()` (checked under the
  // wait mutex; may be empty) holds. False if stop was requested (then at once), else true.
  bool waitUntil(int64_t deadline_ns, const std::function<bool()>& ready = {}) TQ_EXCLUDES(mu_);
  bool waitFor(int64_t ns, const std::function<bool()>& ready = {}) TQ_EXCLUDES(mu_) {
    return waitUntil(clock_.nowNs() + ns, ready);
  }

  // The deadline the body is waiting for now, -1 when it is not waiting (tests: advance a
  // FakeClock to it).
  int64_t sleepingUntilNs() const;
  Clock& clock() const { return clock_; }

 private:
  void onClockMoved() override TQ_EXCLUDES(mu_);

  Clock& clock_;
  mutable Mutex mu_;
  std::condition_variable_any cv_;  // waits on a MutexLock of mu_ (and the stop token)
  int64_t sleeping_until_ns_ TQ_GUARDED_BY(mu_) = -1;
  uint64_t generation_ TQ_GUARDED_BY(mu_) = 0;  // bumped by withLock() and clock moves
  // Assigned and read under mu_; joined by stop() alone, without it (the body may need mu_ to
  // end), so it is not GUARDED_BY.
  std::jthread thread_;
};

}  // namespace tq
