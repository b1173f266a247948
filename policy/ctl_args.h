// tenantqosctl's command line (docs/cli.md): the table of commands (name, help, the flags each
// takes, how many arguments), the global flags, and the parser that fills Args from them. The
// commands themselves are ctl_policy.h (validate, apply, get, history, rollback), ctl_top.h,
// ctl_render.h and ctl_import.h; ctl.h runs one.
// Pure: no I/O except usageError()'s message; the environment comes in through CtlContext.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "policy/ctl.h"
#include "rpc/tls.h"

namespace tq::policy::ctl {

inline constexpr const char* kDefaultServer = "127.0.0.1:7400";

struct CommandSpec {
  const char* name;
  const char* help;
  // Flags with a value and boolean flags this command accepts (besides the global ones).
  std::vector<std::string> value_flags;
  std::vector<std::string> bool_flags;
  size_t min_args, max_args;
};

// Every command, in the order of the main help.
const std::vector<CommandSpec>& commands();
// nullptr for a name that is no command.
const CommandSpec* findCommand(std::string_view name);
// `tenantqosctl --help`.
const char* mainHelp();

struct Args {
  std::string server;  // --server as given, else $TENANTQOS_SERVER, else kDefaultServer
  std::string server_from = "--server";  // where `server` came from, for messages
  rpc::TlsConfig tls;
  double timeout_s = 10;
  const CommandSpec* cmd = nullptr;
  std::map<std::string, std::string> values;  // canonical long flag -> value
  std::map<std::string, bool> bools;
  std::vector<std::string> positional;
  bool help = false;
};

// Parses `args` (without the program name) into *a. Returns the problem ("" on success): an
// unknown flag or command, a missing value, a wrong number of arguments. -f and -o are stored
// under --filename and --output.
std::string parseArgs(const std::vector<std::string>& args, Args* a);

// What the flags left unset, from the environment: the server ($TENANTQOS_SERVER, else
// kDefaultServer) and each TLS setting ($TENANTQOS_TLS_CA, _CERT, _KEY, $TENANTQOS_INSECURE=1).
void applyEnvironment(const CtlContext& ctx, Args* a);

// A bad argument found after parsing: prints the message and the command's help on stderr;
// returns kExitUsage.
int usageError(const Args& a, CtlContext& ctx, const std::string& message);

// A decimal unsigned integer, the whole text; nullopt otherwise.
std::optional<uint64_t> parseU64(std::string_view s);

}  // namespace tq::policy::ctl
