#include "tests/functional/plugin_proc_util.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

extern char** environ;

namespace tq::plugin::testing {

bool doneTrying(int attempt, double ratio, double floor) {
  if (ratio >= floor) return true;
  if (attempt < 2) {
    std::printf("short of the rate (%.4f < %.2f) on try %d: measuring again\n", ratio, floor,
                attempt);
    return false;
  }
  ADD_FAILURE() << "short of the rate on both tries: " << ratio << " < " << floor;
  return true;
}

double monotonicSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

Proc::Proc(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) return;
  start_ = monotonicSeconds();
  pid_ = ::fork();
  if (pid_ == 0) {
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  out_fd_ = out[0];
  err_fd_ = err[0];
  ::fcntl(out_fd_, F_SETFL, O_NONBLOCK);
  ::fcntl(err_fd_, F_SETFL, O_NONBLOCK);
}

Proc::~Proc() {
  if (pid_ > 0 && !exited_) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  if (out_fd_ >= 0) ::close(out_fd_);
  if (err_fd_ >= 0) ::close(err_fd_);
}

bool Proc::poll() {
  char buf[65536];
  for (int fd : {out_fd_, err_fd_}) {
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n <= 0) break;
      (fd == out_fd_ ? out_ : err_).append(buf, static_cast<size_t>(n));
    }
  }
  if (!exited_ && pid_ > 0 && ::waitpid(pid_, &status_, WNOHANG) == pid_) exited_ = true;
  return !exited_;
}

void Proc::kill(int sig) {
  if (pid_ > 0 && !exited_) ::kill(pid_, sig);
}

ProcResult Proc::wait(double timeout_s) {
  ProcResult r;
  const double deadline = monotonicSeconds() + timeout_s;
  while (poll()) {
    if (monotonicSeconds() > deadline) {
      r.timed_out = true;
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status_, 0);
      exited_ = true;
      break;
    }
    pollfd p[2] = {{out_fd_, POLLIN, 0}, {err_fd_, POLLIN, 0}};
    ::poll(p, 2, 20);
  }
  poll();
  r.seconds = monotonicSeconds() - start_;
  if (!r.timed_out) {
    if (WIFEXITED(status_)) r.exit_code = WEXITSTATUS(status_);
    if (WIFSIGNALED(status_)) r.signal = WTERMSIG(status_);
  }
  r.out = out_;
  r.err = err_;
  return r;
}

ProcResult run(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
               double timeout_s) {
  Proc p(argv, env);
  return p.wait(timeout_s);
}

std::vector<std::string> jsonLines(const std::string& out, const std::string& type) {
  std::vector<std::string> lines;
  const std::string tag = "\"type\":\"" + type + "\"";
  size_t pos = 0;
  while (pos < out.size()) {
    size_t nl = out.find('\n', pos);
    if (nl == std::string::npos) nl = out.size();
    const std::string line = out.substr(pos, nl - pos);
    if (!line.empty() && line[0] == '{' && line.find(tag) != std::string::npos)
      lines.push_back(line);
    pos = nl + 1;
  }
  return lines;
}

std::optional<double> jsonNumber(const std::string& line, const std::string& key) {
  const std::string k = "\"" + key + "\":";
  const size_t at = line.find(k);
  if (at == std::string::npos) return std::nullopt;
  return std::strtod(line.c_str() + at + k.size(), nullptr);
}

std::optional<std::string> jsonText(const std::string& line, const std::string& key) {
  const std::string k = "\"" + key + "\":\"";
  const size_t at = line.find(k);
  if (at == std::string::npos) return std::nullopt;
  const size_t end = line.find('"', at + k.size());
  return line.substr(at + k.size(), end - at - k.size());
}

std::pair<double, double> intervalSpan(const std::string& out, int rank) {
  double first = 1e300, last = 0;
  for (const std::string& l : jsonLines(out, "interval")) {
    if (rank >= 0 && jsonNumber(l, "rank").value_or(-1) != rank) continue;
    const double end = jsonNumber(l, "wall_ns").value_or(0) / 1e9;
    first = std::min(first, end - jsonNumber(l, "interval_s").value_or(0));
    last = std::max(last, end);
  }
  return {first, last};
}

std::pair<double, double> commonSpan(const std::vector<const std::string*>& outs, int rank) {
  double from = 0, to = 1e300;
  for (const std::string* out : outs) {
    const auto [first, last] = intervalSpan(*out, rank);
    from = std::max(from, first);
    to = std::min(to, last);
  }
  return {from, to};
}

TogetherWindows togetherWindows(const std::vector<const std::string*>& outs, double warmup_s,
                                double tail_s, int span_rank) {
  const auto [first, last] = commonSpan(outs, span_rank);
  const double from = first + warmup_s, to = last - tail_s;
  TogetherWindows t;
  t.span_s = to - from;
  for (const std::string* out : outs) t.windows.push_back(receiverWindow(*out, 1, from, to));
  return t;
}

std::vector<std::string> perfArgv(const PerfRun& r) {
  std::vector<std::string> a = {r.bin, r.mode};
  if (r.local > 0) {
    a.insert(a.end(), {"--local", std::to_string(r.local)});
  } else {
    a.insert(a.end(), {"--rank", std::to_string(r.rank), "--nranks", std::to_string(r.nranks),
                       "--rendezvous", r.rendezvous});
  }
  a.push_back("--unidirectional");
  if (r.seconds > 0) a.insert(a.end(), {"--duration", std::to_string(r.seconds)});
  if (!r.size.empty()) a.insert(a.end(), {"--size", r.size});
  if (r.report_interval_ms > 0) {
    a.insert(a.end(), {"--report-interval", std::to_string(r.report_interval_ms)});
  }
  if (r.json) a.push_back("--json");
  a.insert(a.end(), {"--plugin", r.plugin});
  if (r.tenant) a.insert(a.end(), {"--tenant", *r.tenant});
  a.insert(a.end(), {"--timeout", std::to_string(r.timeout_s)});
  a.insert(a.end(), r.extra.begin(), r.extra.end());
  return a;
}

uint16_t freePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

RateWindow receiverWindow(const std::string& out, int rank, double from_wall, double to_wall) {
  RateWindow w;
  for (const std::string& l : jsonLines(out, "interval")) {
    if (jsonNumber(l, "rank").value_or(-1) != rank) continue;
    const double t = jsonNumber(l, "t_s").value_or(0);
    const double dt = jsonNumber(l, "interval_s").value_or(0);
    const double end_wall = jsonNumber(l, "wall_ns").value_or(0) / 1e9;
    if (dt < 0.09 || t - dt < kRateWarmupS) continue;  // partial last interval, warm-up
    if (end_wall - dt < from_wall || end_wall > to_wall) continue;
    w.bytes += jsonNumber(l, "rx_bytes").value_or(0);
    w.seconds += dt;
  }
  return w;
}

}  // namespace tq::plugin::testing
