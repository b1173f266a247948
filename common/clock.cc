#include "common/clock.h"

#include <ctime>
#include <vector>

namespace tq {
namespace {
int64_t readClock(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<int64_t>(ts.tv_sec) * kNsPerSec + ts.tv_nsec;
}
}  // namespace

int64_t SteadyClock::nowNs() const { return readClock(CLOCK_MONOTONIC); }
int64_t SteadyClock::wallNs() const { return readClock(CLOCK_REALTIME); }

void FakeClock::subscribe(ClockListener* l) {
  MutexLock lock(listeners_mu_);
  listeners_.push_back(l);
}

void FakeClock::unsubscribe(ClockListener* l) {
  MutexLock lock(listeners_mu_);
  std::erase(listeners_, l);
}

void FakeClock::notifyListeners() {
  // Held while calling, so unsubscribe() (from a listener's destructor) waits for it.
  MutexLock lock(listeners_mu_);
  for (ClockListener* l : listeners_) l->onClockMoved();
}

Clock& realClock() {
  static SteadyClock clock;
  return clock;
}

}  // namespace tq
