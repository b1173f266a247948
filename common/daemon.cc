#include "common/daemon.h"

#include <cerrno>
#include <ctime>
#include <string>

#include "common/log.h"

namespace tq {

StopSignals::StopSignals() {
  sigemptyset(&set_);
  sigaddset(&set_, SIGTERM);
  sigaddset(&set_, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set_, nullptr);
  ignoreSigpipe();
}

void ignoreSigpipe() { ::signal(SIGPIPE, SIG_IGN); }

StopSignals::~StopSignals() = default;

int StopSignals::wait() const {
  int sig = 0;
  // sigwait returns an error number (never EINTR on Linux, but a debugger may interrupt it).
  while (sigwait(&set_, &sig) != 0) {
  }
  return sig;
}

int StopSignals::waitFor(int64_t timeout_ns) const {
  timespec ts{static_cast<time_t>(timeout_ns / 1'000'000'000),
              static_cast<long>(timeout_ns % 1'000'000'000)};
  for (;;) {
    const int sig = sigtimedwait(&set_, nullptr, &ts);
    if (sig > 0) return sig;
    if (errno == EAGAIN) return 0;
    // EINTR (another signal's handler ran): wait again. The remaining time is not tracked: the
    // callers poll in a loop with their own deadline.
  }
}

void StopSignals::restoreInChild() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  ::signal(SIGPIPE, SIG_DFL);
}

std::string_view signalName(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    default: break;
  }
  static thread_local std::string other;
  other = "signal " + std::to_string(sig);
  return other;
}

int serveUntilStopped(std::string_view program, const StopSignals& signals,
                      const std::function<Status()>& start, const std::function<void()>& stop) {
  const std::string name(program);
  Status s = start();
  if (!s.ok()) {
    TQ_LOG(kError, "%s cannot start: %s", name.c_str(), s.message().c_str());
    stop();
    return 1;
  }
  const int sig = signals.wait();
  TQ_LOG(kInfo, "%s: %s received, stopping", name.c_str(), std::string(signalName(sig)).c_str());
  stop();
  TQ_LOG(kInfo, "%s stopped", name.c_str());
  return 0;
}

}  // namespace tq
