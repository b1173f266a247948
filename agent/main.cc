// tenantqos-agent: the node agent. Parses flags, blocks SIGTERM/SIGINT in every thread and
// waits for them on the main thread (common/daemon.h), then stops the Agent (leaving
// enforcement in place).
#include <cstdio>

#include "agent/agent.h"
#include "common/daemon.h"
#include "common/file_util.h"
#include "common/log.h"
#include "common/policy.h"
#include "rpc/runtime.h"

int main(int argc, char** argv) {
  tq::rpc::configureGrpcRuntime();  // first: before any gRPC object (rpc/runtime.h)
  using namespace tq::agent;
  auto config = parseAgentArgs(argc, argv);
  if (!config.ok()) {
    std::fputs(tq::usageErrorText("tenantqos-agent", config.status()).c_str(), stderr);
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

  const tq::StopSignals signals;  // before any thread starts

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
  return tq::serveUntilStopped(
      "tenantqos-agent", signals, [&] { return agent.start(); }, [&] { agent.stop(); });
}
