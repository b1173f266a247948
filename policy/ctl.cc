#include "policy/ctl.h"

#include <cstdlib>
#include <exception>
#include <iostream>

#include "policy/ctl_args.h"
#include "policy/ctl_client.h"
#include "policy/ctl_import.h"
#include "policy/ctl_policy.h"
#include "policy/ctl_render.h"
#include "policy/ctl_top.h"
#include "rpc/runtime.h"

namespace tq::policy {

int runCtl(const std::vector<std::string>& args, CtlContext& ctx) {
  ctl::Args a;
  std::string problem = ctl::parseArgs(args, &a);
  if (!problem.empty()) {
    ctx.err << "tenantqosctl: " << problem << "\n"
            << (a.cmd != nullptr ? a.cmd->help : ctl::mainHelp());
    return kExitUsage;
  }
  if (a.help) {
    ctx.out << (a.cmd != nullptr ? a.cmd->help : ctl::mainHelp());
    return kExitOk;
  }
  ctl::applyEnvironment(ctx, &a);
  ctl::Client client(a.server, a.timeout_s, a.tls, a.server_from);
  const std::string cmd = a.cmd->name;
  if (cmd == "validate") return ctl::cmdValidate(a, ctx);
  if (cmd == "apply") return ctl::cmdApply(a, ctx, client);
  if (cmd == "get") return ctl::cmdGet(a, ctx, client);
  if (cmd == "history") return ctl::cmdHistory(a, ctx, client);
  if (cmd == "rollback") return ctl::cmdRollback(a, ctx, client);
  if (cmd == "top") return ctl::cmdTop(a, ctx, client);
  if (cmd == "render") return ctl::cmdRender(a, ctx, client);
  if (cmd == "import") return ctl::cmdImport(a, ctx);
  return ctl::usageError(a, ctx, "unknown command");
}

int ctlMain(int argc, char** argv) {
  rpc::configureGrpcRuntime();  // first: before any gRPC object (rpc/runtime.h)
  std::vector<std::string> args(argv + 1, argv + argc);
  CtlContext ctx{std::cout, std::cerr, std::cin, [](const std::string& name) {
                   const char* v = std::getenv(name.c_str());
                   return std::string(v ? v : "");
                 }};
  // Our code throws nothing; this only stops a third-party exception (std::bad_alloc from
  // gRPC or protobuf) from ending the process without a message.
  try {
    return runCtl(args, ctx);
  } catch (const std::exception& e) {
    std::cerr << "tenantqosctl: internal error: " << e.what() << "\n";
    return kExitRejected;
  }
}

}  // namespace tq::policy
