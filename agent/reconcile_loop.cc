#include "agent/reconcile_loop.h"

#include <pthread.h>

#include <chrono>
#include <future>

#include "common/clock.h"

namespace tq::agent {

ReconcileLoop::ReconcileLoop(Reconciler& reconciler) : reconciler_(reconciler) {}

ReconcileLoop::~ReconcileLoop() { stop(); }

void ReconcileLoop::start() {
  thread_ = std::thread([this] { run(); });
}

void ReconcileLoop::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool ReconcileLoop::post(std::function<void(Reconciler&)> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return false;
    queue_.push_back(std::move(fn));
  }
  cv_.notify_one();
  return true;
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
  fut.wait();  // queued work always runs before the thread exits
  return true;
}

void ReconcileLoop::run() {
  pthread_setname_np(pthread_self(), "tq-reconcile");
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    while (!queue_.empty()) {
      auto fn = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      fn(reconciler_);
      lock.lock();
    }
    if (stop_) return;
    lock.unlock();
    reconciler_.tick();
    const int64_t wait_ns = reconciler_.nextDueNs() - realClock().nowNs();
    lock.lock();
    if (!queue_.empty() || stop_) continue;
    if (wait_ns > 0) {
      cv_.wait_for(lock, std::chrono::nanoseconds(wait_ns),
                   [this] { return !queue_.empty() || stop_; });
    }
  }
}

}  // namespace tq::agent
