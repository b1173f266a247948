#include "tests/functional/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char** environ;

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace tq::test {
namespace {

// argv/envp arrays built before fork(): the child of a multi-threaded parent (gRPC threads)
// may only call async-signal-safe functions, so no allocation happens after fork.
struct ExecArgs {
  ExecArgs(const std::vector<std::string>& argv, const std::vector<std::string>& env)
      : strings(argv) {
    for (char** e = environ; *e != nullptr; ++e) envs.push_back(*e);
    envs.insert(envs.end(), env.begin(), env.end());
    for (std::string& a : strings) args.push_back(a.data());
    args.push_back(nullptr);
    for (std::string& e : envs) envp.push_back(e.data());
    envp.push_back(nullptr);
  }
  [[noreturn]] void exec() {
    execve(args[0], args.data(), envp.data());
    _exit(127);
  }
  std::vector<std::string> strings, envs;
  std::vector<char*> args, envp;
};

std::string tempName(const char* what) {
  char tmpl[64];
  snprintf(tmpl, sizeof tmpl, "/tmp/tqpol-%s-XXXXXX", what);
  int fd = mkstemp(tmpl);
  if (fd >= 0) close(fd);
  return tmpl;
}

}  // namespace

std::string readWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ProcessResult runProcess(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                         const std::string& input, std::chrono::milliseconds timeout) {
  ProcessResult r;
  std::string out = tempName("out"), err = tempName("err"), in = tempName("in");
  { std::ofstream(in, std::ios::binary) << input; }
  ExecArgs exec(argv, env);
  pid_t pid = fork();
  if (pid == 0) {
    int i = open(in.c_str(), O_RDONLY), o = open(out.c_str(), O_WRONLY | O_TRUNC),
        e = open(err.c_str(), O_WRONLY | O_TRUNC);
    dup2(i, 0);
    dup2(o, 1);
    dup2(e, 2);
    exec.exec();
  }
  int status = 0;
  bool done = pollUntil([&] { return waitpid(pid, &status, WNOHANG) == pid; }, timeout);
  if (!done) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    r.timed_out = true;
  }
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.term_signal = WTERMSIG(status);
  r.out = readWholeFile(out);
  r.err = readWholeFile(err);
  unlink(out.c_str());
  unlink(err.c_str());
  unlink(in.c_str());
  return r;
}

ChildProcess::ChildProcess(const std::vector<std::string>& argv, const std::string& log_path) {
  ExecArgs exec(argv, {});
  pid_ = fork();
  if (pid_ == 0) {
    int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    int devnull = open("/dev/null", O_RDONLY);
    dup2(devnull, 0);
    dup2(fd, 1);
    dup2(fd, 2);
    exec.exec();
  }
}

bool ChildProcess::running() {
  if (reaped_) return false;
  if (waitpid(pid_, &status_, WNOHANG) == pid_) reaped_ = true;
  return !reaped_;
}

void ChildProcess::signal(int sig) {
  if (!reaped_) kill(pid_, sig);
}

std::optional<int> ChildProcess::wait(std::chrono::milliseconds timeout) {
  if (!pollUntil([&] { return !running(); }, timeout)) return std::nullopt;
  return status_;
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && running()) {
    kill(pid_, SIGKILL);
    waitpid(pid_, &status_, 0);
  }
}

}  // namespace tq::test
