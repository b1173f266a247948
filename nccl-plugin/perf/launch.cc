#include "nccl-plugin/perf/launch.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "common/daemon.h"
#include "common/text.h"
#include "nccl-plugin/perf/rank.h"
#include "nccl-plugin/perf/report.h"

namespace tq::perf {
namespace {

void applyEnv(const Options& o, int rank) {
  auto set = [](const std::string& kv) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) return;
    ::setenv(kv.substr(0, eq).c_str(), kv.substr(eq + 1).c_str(), 1);
  };
  for (const std::string& kv : o.env) set(kv);
  for (const auto& [r, kv] : o.rank_env) {
    if (r == rank) set(kv);
  }
}

}  // namespace

int runRank(const Options& o, int rank, Fd listen) {
  applyEnv(o, rank);
  setPluginLogPrefix(format("[rank %d] ", rank));
  Status s;
  {
    Rank r(o, rank, o.nranks);
    s = r.run(std::move(listen));
  }
  if (s.ok()) return 0;
  if (o.json) {
    emitLine(format("{\"type\":\"error\",\"rank\":%d,\"message\":%s}", rank,
                    jsonQuote(s.message()).c_str()));
  }
  std::fprintf(stderr, "[rank %d] tenantqos-perf: error: %s\n", rank, s.message().c_str());
  return 1;
}

int runLocal(Options o) {
  Fd lfd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t alen = sizeof a;
  if (!lfd.valid() || ::bind(lfd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::listen(lfd.get(), 256) != 0 ||
      ::getsockname(lfd.get(), reinterpret_cast<sockaddr*>(&a), &alen) != 0) {
    std::perror("tenantqos-perf: rendezvous socket");
    return 1;
  }
  o.rendezvous = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  std::fflush(stdout);
  // SIGTERM/SIGINT stop the ranks too (the launcher's clean stop); each rank gets the default
  // dispositions back.
  const StopSignals signals;
  std::vector<pid_t> kids;
  for (int r = 0; r < o.local; ++r) {
    const pid_t pid = ::fork();
    if (pid < 0) {
      std::perror("tenantqos-perf: fork");
      for (pid_t k : kids) ::kill(k, SIGKILL);
      return 1;
    }
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // a killed launcher takes its ranks along
      StopSignals::restoreInChild();
      if (r != 0) lfd.reset();
      std::_Exit(runRank(o, r, std::move(lfd)));
    }
    kids.push_back(pid);
  }
  lfd.reset();
  int failed = 0;
  size_t left = kids.size();
  int64_t kill_at = -1;
  while (left > 0) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      --left;
      const auto it = std::find(kids.begin(), kids.end(), pid);
      const int r = static_cast<int>(it - kids.begin());
      if (it != kids.end()) *it = -1;
      const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (!ok) {
        ++failed;
        if (WIFSIGNALED(status)) {
          std::fprintf(stderr, "tenantqos-perf: rank %d killed by signal %d\n", r,
                       WTERMSIG(status));
        }
        // The others notice within their --timeout at worst; do not wait longer than that.
        if (kill_at < 0) kill_at = nowNs() + static_cast<int64_t>((o.timeout_s + 5) * 1e9);
      }
      continue;
    }
    if (kill_at >= 0 && nowNs() > kill_at) {
      for (pid_t k : kids) {
        if (k > 0) ::kill(k, SIGKILL);
      }
      kill_at = nowNs() + 60'000'000'000;
    }
    if (const int sig = signals.waitFor(10'000'000); sig != 0) {
      std::fprintf(stderr, "tenantqos-perf: %s received, stopping the ranks\n",
                   std::string(signalName(sig)).c_str());
      for (pid_t k : kids) {
        if (k > 0) ::kill(k, SIGTERM);
      }
      ++failed;                           // the run did not finish
      kill_at = nowNs() + 5'000'000'000;  // then SIGKILL
    }
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace tq::perf
