// The reconcile thread: owns a Reconciler and is the only thread that calls it. Other threads
// post work (a new policy, a probe for tests) and return at once; the thread runs posted work
// in order, then Reconciler::tick(), and sleeps until the next due time or the next post.
// Time is the Reconciler's Clock (a FakeClock in tests moves the loop too).
#pragma once

#include <atomic>
#include <deque>
#include <functional>

#include "agent/reconciler.h"
#include "common/worker.h"

namespace tq::agent {

class ReconcileLoop {
 public:
  explicit ReconcileLoop(Reconciler& reconciler);
  ~ReconcileLoop();  // stops the thread

  void start();
  // Runs queued work, then returns after the thread has exited. Idempotent.
  void stop();

  // Thread-safe. `fn` runs on the reconcile thread. False (and `fn` dropped) once stopped.
  bool post(std::function<void(Reconciler&)> fn);
  bool postPolicy(VersionedPolicy policy, PolicySource source);
  // Runs `fn` on the reconcile thread and waits for it (tests, benchmarks). False if stopped.
  bool runSync(std::function<void(Reconciler&)> fn);
  // CLOCK_MONOTONIC ns at which the thread last finished a pass (posted work + tick); the
  // start time before the first. Thread-safe: /healthz reads it to catch a stuck thread.
  int64_t lastPassNs() const { return last_pass_ns_.load(std::memory_order_relaxed); }

  const Worker& worker() const { return worker_; }

 private:
  void run();
  void drainQueue();

  Reconciler& reconciler_;
  std::atomic<int64_t> last_pass_ns_;
  std::deque<std::function<void(Reconciler&)>> queue_;  // under worker_.withLock()
  bool stopped_ = false;                                // under worker_.withLock()
  Worker worker_;
};

}  // namespace tq::agent
