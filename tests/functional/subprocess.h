// Test helper: run real binaries (tenantqos-policyd, tenantqosctl) as child processes.
// Output goes to files (no pipes to drain), waits poll with a deadline, and every child still
// running when its handle is destroyed is killed with SIGKILL (tests clean up on failure too).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace tq::test {

struct ProcessResult {
  int exit_code = -1;  // -1 if killed by a signal or timed out
  int term_signal = 0;
  bool timed_out = false;
  std::string out;
  std::string err;
};

// Runs argv[0] with argv, extra "NAME=VALUE" environment entries, and `input` on stdin.
ProcessResult runProcess(const std::vector<std::string>& argv,
                         const std::vector<std::string>& env = {}, const std::string& input = "",
                         std::chrono::milliseconds timeout = std::chrono::seconds(30));

// A long-running child whose stdout+stderr go to `log_path`.
class ChildProcess {
 public:
  ChildProcess(const std::vector<std::string>& argv, const std::string& log_path);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  bool running();
  void signal(int sig);
  // Waits for exit; the raw wait status, or nullopt on timeout.
  std::optional<int> wait(std::chrono::milliseconds timeout);

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  int status_ = 0;
};

std::string readWholeFile(const std::string& path);

// Polls `pred` every few milliseconds until it is true or `timeout` passes.
template <typename Pred>
bool pollUntil(Pred pred, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    struct timespec ts {
      0, 5'000'000
    };
    nanosleep(&ts, nullptr);
  }
  return true;
}

}  // namespace tq::test
