// Test helpers: run commands and background processes with bounded durations.
//
// Every wait has a deadline; a process still running at its deadline (or when its Subprocess is
// destroyed) is killed with SIGKILL by PID, never by name. Blocking; thread-compatible.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace tq::testing {

struct CommandResult {
  int exit_code = -1;  // -1 if killed by a signal
  std::string output;  // stdout and stderr, interleaved
};

// Runs argv[0] (PATH lookup) and collects its output. kDeadlineExceeded (after killing it) if it
// runs longer than timeout_ms.
Result<CommandResult> runCommand(const std::vector<std::string>& argv, int timeout_ms = 10'000);

// Same, but a non-zero exit is an error whose message has the command line and its output.
Result<std::string> runOk(const std::vector<std::string>& argv, int timeout_ms = 10'000);

class Subprocess {
 public:
  // Starts argv with stdout+stderr written to `output_path` ("" = /dev/null).
  static Result<Subprocess> start(const std::vector<std::string>& argv,
                                  const std::string& output_path = "");
  Subprocess(Subprocess&& o) noexcept : pid_(o.pid_), exit_code_(o.exit_code_) { o.pid_ = -1; }
  Subprocess& operator=(Subprocess&&) = delete;
  ~Subprocess();

  pid_t pid() const { return pid_; }
  bool running();
  // Waits for exit; kDeadlineExceeded (process killed) after timeout_ms. Returns the exit code.
  Result<int> wait(int timeout_ms);
  // SIGKILL + reap; no-op if already reaped.
  void kill();

 private:
  explicit Subprocess(pid_t pid) : pid_(pid) {}
  pid_t pid_ = -1;
  int exit_code_ = -1;
};

std::string joinArgs(const std::vector<std::string>& argv);

}  // namespace tq::testing
