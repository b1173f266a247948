// The reconcile thread: owns a Reconciler and is the only thread that calls it. Other threads
// post work (a new policy, a probe for tests) and return at once; the thread runs posted work
// in order, then Reconciler::tick(), and sleeps until the next due time or the next post.
// Time is the Reconciler's Clock (a FakeClock in tests moves the loop too).
#pragma once

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

  const Worker& worker() const { return worker_; }

 private:
  void run();
  void drainQueue();

  Reconciler& reconciler_;
  std::deque<std::function<void(Reconciler&)>> queue_;  // under worker_.withLock()
  bool stopped_ = false;                                // under worker_.withLock()
  Worker worker_;
};

}  // namespace tq::agent
