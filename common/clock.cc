#include "common/clock.h"

#include <ctime>

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

Clock& realClock() {
  static SteadyClock clock;
  return clock;
}

}  // namespace tq
