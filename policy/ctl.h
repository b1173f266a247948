// tenantqosctl: the command-line client of tenantqos-policyd (docs/cli.md is the reference).
// This runs one command: ctl_args.h parses, ctl_client.h connects, and one file per group of
// commands does the work (ctl_policy.h, ctl_top.h, ctl_render.h, ctl_import.h).
//
//   tenantqosctl [--server HOST:PORT] [--timeout SECONDS] COMMAND [flags]
//     apply -f FILE [--dry-run] [--expected-version N]
//     get [-o yaml|json] [--version N]
//     history
//     rollback N [--expected-version N]
//     validate FILE            (offline: no server needed)
//     top
//     render dcb --link LINK --device DEV [-f FILE | --version N]
//     render opensm --link LINK [-f FILE | --version N] [--max-vls N] [--mtu N] [--part P]
// The server address comes from --server, else $TENANTQOS_SERVER, else 127.0.0.1:7400.
// Exit codes: 0 ok, 1 rejected or invalid (message on stderr), 2 usage error, 3 server
// unreachable (connect deadline 3 s; the message names the address).
#pragma once

#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

namespace tq::policy {

inline constexpr int kExitOk = 0;
inline constexpr int kExitRejected = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitUnreachable = 3;

struct CtlContext {
  std::ostream& out;
  std::ostream& err;
  std::istream& in;  // for `apply -f -`
  // Environment lookup (TENANTQOS_SERVER, USER); returns "" when unset.
  std::function<std::string(const std::string&)> getenv;
};

// Runs one command. `args` excludes the program name.
int runCtl(const std::vector<std::string>& args, CtlContext& ctx);

// main(): real streams and environment.
int ctlMain(int argc, char** argv);

}  // namespace tq::policy
