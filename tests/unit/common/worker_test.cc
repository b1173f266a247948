// tq::Worker on a FakeClock: waits end when the test moves the clock, never by sleeping.
#include "common/worker.h"

#include <atomic>
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

namespace tq {
namespace {

// Polls `pred` until it holds or 10 s of real time pass (only a broken Worker takes long).
template <typename Pred>
bool eventually(Pred pred) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::yield();
  }
  return true;
}

TEST(WorkerTest, WaitsEndWhenTheFakeClockReachesTheirDeadline) {
  FakeClock clock(1'000);
  Worker w(clock);
  std::atomic<int> rounds{0};
  w.start("tq-test", [&](std::stop_token) {
    while (w.waitFor(100)) rounds++;
  });
  ASSERT_TRUE(eventually([&] { return w.sleepingUntilNs() == 1'100; }));
  clock.advanceNs(99);
  ASSERT_TRUE(eventually([&] { return w.sleepingUntilNs() == 1'100; }));
  EXPECT_EQ(rounds.load(), 0) << "woke before its deadline";
  clock.advanceNs(1);
  ASSERT_TRUE(eventually([&] { return rounds.load() == 1; }));
  ASSERT_TRUE(eventually([&] { return w.sleepingUntilNs() == 1'200; }));
  clock.setNs(5'000);
  ASSERT_TRUE(eventually([&] { return rounds.load() == 2; }));
  w.stop();
  EXPECT_EQ(w.sleepingUntilNs(), -1);
}

TEST(WorkerTest, StopEndsAWaitAtOnceAndRunsStopCallbacks) {
  FakeClock clock;
  Worker w(clock);
  std::atomic<bool> waited_true{true};
  std::atomic<bool> callback_ran{false};
  w.start("tq-test", [&](std::stop_token st) {
    std::stop_callback cb(st, [&] { callback_ran = true; });
    waited_true = w.waitFor(3'600 * kNsPerSec);
  });
  ASSERT_TRUE(eventually([&] { return w.sleepingUntilNs() > 0; }));
  const auto t0 = std::chrono::steady_clock::now();
  w.stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
  EXPECT_FALSE(waited_true.load());
  EXPECT_TRUE(callback_ran.load());
  EXPECT_TRUE(w.stopRequested());
  w.stop();  // idempotent
}

TEST(WorkerTest, WithLockWakesAWaitWhoseConditionItChanged) {
  FakeClock clock;
  Worker w(clock);
  int queued = 0;  // under w.withLock()
  std::atomic<int> taken{0};
  w.start("tq-test", [&](std::stop_token) {
    while (w.waitFor(3'600 * kNsPerSec, [&] { return queued > 0; })) {
      w.withLock([&] { taken += queued, queued = 0; });
    }
  });
  w.withLock([&] { queued = 3; });
  ASSERT_TRUE(eventually([&] { return taken.load() == 3; }));
  w.withLock([&] { queued = 2; });
  ASSERT_TRUE(eventually([&] { return taken.load() == 5; }));
}

TEST(WorkerTest, RealClockWaitsAreTimed) {
  Worker w(realClock());
  std::atomic<bool> done{false};
  w.start("tq-test", [&](std::stop_token) {
    w.waitFor(2 * kNsPerMs);
    done = true;
  });
  EXPECT_TRUE(eventually([&] { return done.load(); }));
}

TEST(WorkerTest, StopWithoutStartAndDestructionStop) {
  FakeClock clock;
  { Worker idle(clock); }
  std::atomic<bool> ended{false};
  {
    Worker w(clock);
    w.start("tq-test", [&](std::stop_token) {
      while (w.waitFor(kNsPerSec)) {
      }
      ended = true;
    });
  }  // ~Worker stops and joins
  EXPECT_TRUE(ended.load());
}

}  // namespace
}  // namespace tq
