// The reconcile thread: owns a Reconciler and is the only thread that calls it. Other threads
// post work (a new policy, a probe for tests) and return at once; the thread runs posted work
// in order, then Reconciler::tick(), and sleeps until the next due time or the next post.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "agent/reconciler.h"

namespace tq::agent {

class ReconcileLoop {
 public:
  // The Reconciler must use a Clock whose nowNs() is CLOCK_MONOTONIC (realClock()): the loop
  // sleeps on std::chrono::steady_clock, which libstdc++ implements with CLOCK_MONOTONIC.
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

 private:
  void run();

  Reconciler& reconciler_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void(Reconciler&)>> queue_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace tq::agent
