// tenantqos-agent: the node agent. Parses flags, blocks SIGTERM/SIGINT in every thread and
// waits for them on the main thread, then stops the Agent (leaving enforcement in place).
#include <signal.h>

#include <cstdio>

#include "agent/agent.h"
#include "common/file_util.h"
#include "common/log.h"
#include "common/policy.h"

int main(int argc, char** argv) {
  using namespace tq::agent;
  auto config = parseAgentArgs(argc, argv);
  if (!config.ok()) {
    std::fprintf(stderr, "tenantqos-agent: %s\n\n%s", config.status().message().c_str(),
                 agentUsage().c_str());
    return 2;
  }
  if (config->help) {
    std::fputs(agentUsage().c_str(), stdout);
    return 0;
  }
  tq::setLogLevel(config->log_level);
  // Each tenant holds a shared-memory file open: use the hard limit, and say what it is.
  if (auto fds = tq::raiseOpenFileLimit(); fds.ok()) {
    TQ_LOG(kInfo, "open-file limit %llu (RLIMIT_NOFILE; %zu tenants at most)",
           static_cast<unsigned long long>(*fds), tq::kMaxTenantsPerAgent);
    if (*fds < tq::kMaxTenantsPerAgent + 256) {
      TQ_LOG(kWarn,
             "the open-file limit %llu is below what %zu tenants need (one file each plus about "
             "256): raise LimitNOFILE",
             static_cast<unsigned long long>(*fds), tq::kMaxTenantsPerAgent);
    }
  } else {
    TQ_LOG(kWarn, "%s", fds.status().message().c_str());
  }

  // Block the stop signals before any thread starts so only sigwait() below sees them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto kernel_tc = makeKernelTcApplier(config->state_dir);
  if (!kernel_tc.ok()) {
    TQ_LOG(kError, "tc: %s", kernel_tc.status().message().c_str());
    return 1;
  }
  std::unique_ptr<TcApplier> tc = std::move(kernel_tc).value();

  if (config->cleanup) {
    tq::Status s = runCleanup(*config, tc.get());
    return s.ok() ? 0 : 1;
  }

  Agent agent(*config, std::move(tc));
  tq::Status s = agent.start();
  if (!s.ok()) {
    TQ_LOG(kError, "start: %s", s.message().c_str());
    agent.stop();
    return 1;
  }
  int sig = 0;
  sigwait(&stop_signals, &sig);
  TQ_LOG(kInfo, "%s received; stopping", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  agent.stop();
  return 0;
}
