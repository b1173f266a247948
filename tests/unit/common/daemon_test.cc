#include "common/daemon.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>

namespace tq {
namespace {

// Each TEST runs in a process of its own (ctest runs one gtest case per process), so blocking
// the stop signals here does not leak into other tests.

TEST(StopSignalsTest, ThreadsStartedAfterItNeverTakeTheSignal) {
  const StopSignals signals;
  std::atomic<bool> ran{false};
  std::thread t([&] {
    sigset_t mask;
    pthread_sigmask(SIG_BLOCK, nullptr, &mask);
    ran = sigismember(&mask, SIGTERM) == 1 && sigismember(&mask, SIGINT) == 1;
  });
  t.join();
  EXPECT_TRUE(ran) << "a thread started after StopSignals must inherit the blocked mask";
  EXPECT_EQ(signal(SIGPIPE, SIG_IGN), SIG_IGN) << "SIGPIPE is ignored";
}

TEST(StopSignalsTest, WaitReturnsTheSignal) {
  const StopSignals signals;
  EXPECT_EQ(signals.waitFor(0), 0);  // nothing pending
  ASSERT_EQ(::kill(::getpid(), SIGTERM), 0);
  EXPECT_EQ(signals.wait(), SIGTERM);
  ASSERT_EQ(::kill(::getpid(), SIGINT), 0);
  EXPECT_EQ(signals.waitFor(1'000'000'000), SIGINT);
  EXPECT_EQ(signalName(SIGTERM), "SIGTERM");
  EXPECT_EQ(signalName(SIGINT), "SIGINT");
  EXPECT_EQ(signalName(SIGHUP), "signal 1");
}

TEST(StopSignalsTest, ServeUntilStoppedStartsWaitsAndStops) {
  const StopSignals signals;
  int started = 0;
  int stopped = 0;
  // A thread of the "daemon" sends the signal, as an operator's kill would.
  std::thread killer;
  const int rc = serveUntilStopped(
      "test-daemon", signals,
      [&] {
        ++started;
        killer = std::thread([] { ::kill(::getpid(), SIGTERM); });
        return okStatus();
      },
      [&] { ++stopped; });
  killer.join();
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(started, 1);
  EXPECT_EQ(stopped, 1);
}

TEST(StopSignalsTest, FailedStartStopsAndExitsOne) {
  const StopSignals signals;
  int stopped = 0;
  const int rc = serveUntilStopped(
      "test-daemon", signals, [] { return unavailable("cannot listen"); }, [&] { ++stopped; });
  EXPECT_EQ(rc, 1);
  EXPECT_EQ(stopped, 1);
  EXPECT_EQ(signals.waitFor(0), 0);  // it did not wait for a signal
}

TEST(StopSignalsTest, AChildGetsTheDefaultsBack) {
  const StopSignals signals;
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    StopSignals::restoreInChild();
    ::pause();  // SIGTERM's default action ends it
    std::_Exit(3);
  }
  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << status;
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
}

}  // namespace
}  // namespace tq
