// The signal handling every long-running tenantqos process shares (agent, policyd, webhook, the
// perf tool's launcher): SIGTERM and SIGINT are taken by one thread with sigwait, never by an
// asynchronous handler, and SIGPIPE is ignored (a peer closing mid-write must not end the
// process: the write fails with EPIPE instead).
//
// StopSignals blocks SIGTERM and SIGINT in the calling thread. Threads inherit the mask when they
// are created, so it must exist before the process starts any thread (gRPC, civetweb, workers):
// then no thread is ever interrupted by them and the waiting thread alone receives them.
// serveUntilStopped() is the life of a daemon around it: start, wait for a stop signal, stop,
// with the same log lines and exit codes in every program (0 after a clean stop, 1 when the
// start fails).
//
// Thread-safety: construct on the main thread before any other thread; wait() from one thread.
#pragma once

#include <signal.h>

#include <cstdint>
#include <functional>
#include <string_view>

#include "common/status.h"

namespace tq {

class StopSignals {
 public:
  StopSignals();   // blocks SIGTERM and SIGINT in this thread, ignores SIGPIPE
  ~StopSignals();  // leaves the mask as it is (a pending stop signal must not kill the process)
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // Blocks until SIGTERM or SIGINT arrives; returns its number.
  int wait() const;
  // Waits at most `timeout_ns` (0: a poll); returns the signal, or 0 when none arrived.
  int waitFor(int64_t timeout_ns) const;
  // In a child after fork(), before exec or its own work: the default mask and dispositions, so
  // that a stop signal sent to the child ends it.
  static void restoreInChild();

 private:
  sigset_t set_;
};

// SIGPIPE ignored in the whole process: a write to a closed socket or pipe fails with EPIPE.
void ignoreSigpipe();

// "SIGTERM", "SIGINT", else "signal N".
std::string_view signalName(int sig);

// A daemon's life: `start()`; if it fails, logs "<program> cannot start: <why>", calls `stop()`
// (to release what was started) and returns 1. Otherwise waits for SIGTERM/SIGINT on `signals`,
// logs "<program>: SIGTERM received, stopping", calls `stop()`, logs "<program> stopped" and
// returns 0.
int serveUntilStopped(std::string_view program, const StopSignals& signals,
                      const std::function<Status()>& start, const std::function<void()>& stop);

}  // namespace tq
