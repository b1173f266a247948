#include "agent/reconcile_loop.h"

#include <future>
#include <memory>
#include <utility>

namespace tq::agent {

ReconcileLoop::ReconcileLoop(Reconciler& reconciler)
    : reconciler_(reconciler),
      last_pass_ns_(reconciler.clock().nowNs()),
      worker_(reconciler.clock()) {}

ReconcileLoop::~ReconcileLoop() { stop(); }

void ReconcileLoop::start() {
  worker_.start("tq-reconcile", [this](std::stop_token) { run(); });
}

void ReconcileLoop::stop() {
  worker_.withLock([this] { stopped_ = true; });
  worker_.stop();
  drainQueue();  // only if the thread never started: runSync callers are released
}

bool ReconcileLoop::post(std::function<void(Reconciler&)> fn) {
  return worker_.withLock([&] {
    if (stopped_) return false;
    queue_.push_back(std::move(fn));
    return true;
  });
}

bool ReconcileLoop::postPolicy(VersionedPolicy policy, PolicySource source) {
  return post([p = std::move(policy), source](Reconciler& r) { r.onPolicy(p, source); });
}

bool ReconcileLoop::runSync(std::function<void(Reconciler&)> fn) {
  auto done = std::make_shared<std::promise<void>>();
  auto fut = done->get_future();
  if (!post([fn = std::move(fn), done](Reconciler& r) {
        fn(r);
        done->set_value();
      })) {
    return false;
  }
  fut.wait();  // queued work always runs, on the thread or in stop()
  return true;
}

void ReconcileLoop::drainQueue() {
  std::deque<std::function<void(Reconciler&)>> work;
  worker_.withLock([&] { work.swap(queue_); });
  for (auto& fn : work) fn(reconciler_);
}

void ReconcileLoop::run() {
  for (;;) {
    drainQueue();
    if (worker_.stopRequested()) break;
    reconciler_.tick();
    last_pass_ns_.store(reconciler_.clock().nowNs(), std::memory_order_relaxed);
    worker_.waitUntil(reconciler_.nextDueNs(), [this] { return !queue_.empty(); });
  }
  drainQueue();  // posted before stop() refused new work
}

}  // namespace tq::agent
