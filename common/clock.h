// Injectable time source. Anything timed takes a Clock& so tests can use FakeClock and never sleep.
//
// Units: nanoseconds. nowNs() is monotonic (CLOCK_MONOTONIC for SteadyClock); wallNs() is
// CLOCK_REALTIME and only for timestamps shown to people or stored in records.
// Thread-safety: all implementations here are safe to call from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "common/thread_annotations.h"

namespace tq {

// Told when a clock that does not flow by itself (FakeClock) moves, so a thread waiting for a
// time on it (tq::Worker) re-checks. Called with the clock's listener lock held: do not
// subscribe or unsubscribe from inside onClockMoved().
class ClockListener {
 public:
  virtual void onClockMoved() = 0;

 protected:
  ~ClockListener() = default;
};

class Clock {
 public:
  virtual ~Clock() = default;
  virtual int64_t nowNs() const = 0;
  virtual int64_t wallNs() const = 0;
  // A real clock flows by itself and never calls listeners: timed waits on it are enough.
  virtual void subscribe(ClockListener*) {}
  virtual void unsubscribe(ClockListener*) {}
};

class SteadyClock final : public Clock {
 public:
  int64_t nowNs() const override;
  int64_t wallNs() const override;
};

// The process-wide real clock.
Clock& realClock();

// A clock that only moves when told to. Starts at `start_ns` (monotonic and wall alike).
// Moving it wakes the threads waiting on it (tq::Worker), which then see the new time.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(int64_t start_ns = 1'000'000'000) : now_(start_ns) {}
  int64_t nowNs() const override { return now_.load(std::memory_order_acquire); }
  int64_t wallNs() const override { return nowNs(); }
  void advanceNs(int64_t ns) {
    now_.fetch_add(ns, std::memory_order_acq_rel);
    notifyListeners();
  }
  void setNs(int64_t ns) {
    now_.store(ns, std::memory_order_release);
    notifyListeners();
  }
  void subscribe(ClockListener* l) override;
  void unsubscribe(ClockListener* l) override;

 private:
  void notifyListeners() TQ_EXCLUDES(listeners_mu_);

  std::atomic<int64_t> now_;
  Mutex listeners_mu_;
  std::vector<ClockListener*> listeners_ TQ_GUARDED_BY(listeners_mu_);
};

constexpr int64_t kNsPerUs = 1000;
constexpr int64_t kNsPerMs = 1000 * 1000;
constexpr int64_t kNsPerSec = 1000 * 1000 * 1000;

}  // namespace tq
