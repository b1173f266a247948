#include "tests/support/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>

extern char** environ;

namespace tq::testing {
namespace {

int64_t nowMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000 + ts.tv_nsec / 1'000'000;
}

std::vector<char*> cArgv(const std::vector<std::string>& argv) {
  std::vector<char*> out;
  for (const std::string& a : argv) out.push_back(const_cast<char*>(a.c_str()));
  out.push_back(nullptr);
  return out;
}

int exitCodeOf(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }

}  // namespace

std::string joinArgs(const std::vector<std::string>& argv) {
  std::string s;
  for (const std::string& a : argv) {
    if (!s.empty()) s += ' ';
    s += a;
  }
  return s;
}

Result<CommandResult> runCommand(const std::vector<std::string>& argv, int timeout_ms) {
  if (argv.empty()) return invalidArgument("runCommand: empty argv");
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return errnoStatus("pipe");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
  pid_t pid = -1;
  auto args = cArgv(argv);
  int rc = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    return errnoStatus(rc, "spawn " + joinArgs(argv));
  }
  CommandResult result;
  const int64_t deadline = nowMs() + timeout_ms;
  bool timed_out = false;
  char buf[4096];
  for (;;) {
    int64_t left = deadline - nowMs();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    int n = poll(&p, 1, static_cast<int>(left));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;
    ssize_t got = read(fds[0], buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;  // EOF: the child (and its children) closed stdout
    result.output.append(buf, static_cast<size_t>(got));
  }
  close(fds[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out)
    return deadlineExceeded(joinArgs(argv) + ": still running after " + std::to_string(timeout_ms) +
                            " ms (killed); output: " + result.output);
  result.exit_code = exitCodeOf(status);
  return result;
}

Result<std::string> runOk(const std::vector<std::string>& argv, int timeout_ms) {
  TQ_ASSIGN_OR_RETURN(CommandResult r, runCommand(argv, timeout_ms));
  if (r.exit_code != 0)
    return internalError(joinArgs(argv) + ": exit code " + std::to_string(r.exit_code) + ": " +
                         r.output);
  return r.output;
}

Result<Subprocess> Subprocess::start(const std::vector<std::string>& argv,
                                     const std::string& output_path) {
  if (argv.empty()) return invalidArgument("Subprocess: empty argv");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  const char* out = output_path.empty() ? "/dev/null" : output_path.c_str();
  posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = -1;
  auto args = cArgv(argv);
  int rc = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return errnoStatus(rc, "spawn " + joinArgs(argv));
  return Subprocess(pid);
}

Subprocess::~Subprocess() { kill(); }

bool Subprocess::running() {
  if (pid_ < 0) return false;
  int status = 0;
  pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    exit_code_ = exitCodeOf(status);
    pid_ = -1;
    return false;
  }
  return true;
}

Result<int> Subprocess::wait(int timeout_ms) {
  const int64_t deadline = nowMs() + timeout_ms;
  while (running()) {
    if (nowMs() >= deadline) {
      pid_t pid = pid_;
      kill();
      return deadlineExceeded("process " + std::to_string(pid) + " still running after " +
                              std::to_string(timeout_ms) + " ms (killed)");
    }
    usleep(5000);  // polling a child with a deadline; tests only
  }
  return exit_code_;
}

void Subprocess::kill() {
  if (pid_ < 0) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  exit_code_ = -1;
  pid_ = -1;
}

}  // namespace tq::testing
