#include "policy/ctl_args.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <ostream>
#include <utility>

namespace tq::policy::ctl {
namespace {

constexpr const char* kMainHelp =
    R"(Usage: tenantqosctl [--server HOST:PORT] [--timeout SECONDS] COMMAND [flags]

Manage tenantqos policies on tenantqos-policyd.

Commands:
  apply -f FILE      apply a policy file (prints the per-tenant diff and the new version)
  get                print the current (or a given) policy version as YAML or JSON
  history            list stored policy versions, newest first
  rollback N         make the content of version N the new latest version
  validate FILE      check a policy file offline (no server), printing every error
  top                per-tenant usage per node, as reported by the node agents
  render dcb|opensm  hardware QoS configuration for one link: RoCE dcb script, OpenSM files
  import volcano     a policy skeleton from Volcano Queue and HyperNode objects (offline)

Global flags:
  --server HOST:PORT[,HOST:PORT...]
                       policyd address (default: $TENANTQOS_SERVER, else 127.0.0.1:7400);
                       several replicas: the first that answers is used
  --timeout SECONDS    deadline for each request (default 10)
  --tls-ca FILE        CA that policyd's certificate must chain to ($TENANTQOS_TLS_CA)
  --tls-cert FILE      your client certificate ($TENANTQOS_TLS_CERT): its CN is who you are
                       in history, its O your role (tenantqos:admins or tenantqos:viewers)
  --tls-key FILE       its private key ($TENANTQOS_TLS_KEY)
  --insecure           plaintext, no authentication ($TENANTQOS_INSECURE=1), for a policyd
                       run with --insecure
  -h, --help           help; `tenantqosctl COMMAND --help` for a command

Exit codes: 0 ok, 1 rejected or invalid, 2 usage error, 3 server unreachable.
)";

}  // namespace

const std::vector<CommandSpec>& commands() {
  static const std::vector<CommandSpec> kCommands = {
      {"apply",
       R"(Usage: tenantqosctl apply -f FILE [--dry-run] [--expected-version N]

Applies the policy in FILE ("-" reads standard input). The whole policy is replaced; nothing is
applied if any rule fails (every error is printed). Prints the per-tenant diff and the version.
An identical policy stores nothing ("no change").
  -f, --filename FILE       the policy file (YAML, at most 4 MiB)
  --dry-run                 validate and diff only; store nothing
  --expected-version N      apply only if the latest version is still N (else exit 1)
)",
       {"-f", "--filename", "--expected-version"},
       {"--dry-run"},
       0,
       0},
      {"get",
       R"(Usage: tenantqosctl get [-o yaml|json] [--version N]

Prints the latest policy (or version N). YAML output is a valid policy file (applying it again
changes nothing); JSON carries rates as integer bytes per second.
  -o, --output FORMAT   yaml (default) or json
  --version N           a stored version instead of the latest
)",
       {"-o", "--output", "--version"},
       {},
       0,
       0},
      {"history",
       R"(Usage: tenantqosctl history

Lists stored versions, newest first, with who applied them and when. A version whose stored
record failed its checksum is shown as CORRUPT and is never served.
)",
       {},
       {},
       0,
       0},
      {"rollback",
       R"(Usage: tenantqosctl rollback N [--expected-version M]

Stores the content of version N as a new version (history is never rewritten).
  --expected-version M   roll back only if the latest version is still M (else exit 1)
)",
       {"--expected-version"},
       {},
       1,
       1},
      {"validate",
       R"(Usage: tenantqosctl validate FILE [-o json]

Checks FILE against every policy rule without contacting a server. Prints every error as
FILE:LINE:COL: FIELD: reason (on stderr) and exits 1 if there is any.
  -o, --output json     on success, print the validated policy as JSON (rates as integer
                        bytes per second, like `get -o json`; version 0: not stored)
)",
       {"-f", "--filename", "-o", "--output"},
       {},
       0,
       1},
      {"top",
       R"(Usage: tenantqosctl top

Prints per-tenant usage per node as last reported by the node agents, and cluster totals.
Usage is held by the replica each agent reports to: with several --server replicas, top asks
every one, shows each node's newest report, and names a replica that did not answer.
)",
       {},
       {},
       0,
       0},
      {"render",
       R"(Usage: tenantqosctl render dcb --link LINK --device DEV [-f FILE | --version N]
       tenantqosctl render opensm --link LINK [-f FILE | --version N] [--max-vls N] [--mtu N]
                                  [--part both|options|qos-policy]

Renders the hardware QoS configuration for the tenants of one link of the policy, for an
operator to install (docs/ib.md explains the plans and their arithmetic):
  dcb      RoCE: a shell script of iproute2 dcb commands for device DEV: DSCP -> priority ->
           traffic class, ETS shares from the guarantees, per-class max rate from the limits
  opensm   InfiniBand: the OpenSM options (SL2VL, VL arbitration weights from the guarantees)
           for opensm.conf, and a qos-levels section (one level per tenant) for
           qos-policy.conf, each under a banner that names its file
The policy comes from FILE (checked like `validate`; "-" reads standard input) or, without
-f, from the server: the latest version, or version N.
  --link LINK           the policy's link whose tenants are rendered (capacity from the link)
  --device DEV          dcb: the node's network device that carries LINK (e.g. eth2)
  -f, --filename FILE   a local policy file instead of the server's policy
  --version N           a stored version instead of the latest (server only)
  --max-vls N           opensm: data VLs the fabric runs, 1-15 (default 8)
  --mtu N               opensm: fabric MTU in bytes, 256|512|1024|2048|4096 (default 4096)
  --part PART           opensm: both (default), options (opensm.conf only) or qos-policy
                        (qos-policy.conf only)
)",
       {"--link", "--device", "-f", "--filename", "--version", "--max-vls", "--mtu", "--part"},
       {},
       1,
       1},
      {"import",
       R"(Usage: tenantqosctl import volcano -f FILE [--link LINK] [--capacity RATE]
                               [--tier-capacity T=RATE[,T=RATE...]] [--nodes FILE] [--strict]

Turns Volcano objects (YAML: one or more documents, or a List as printed by
`kubectl get queues.scheduling.volcano.sh,hypernodes.topology.volcano.sh -o yaml`; "-" reads
standard input) into a policy skeleton on standard output, offline.
Queues: one tenant per queue, named after it, with volcanoQueues: [QUEUE]; weight from
spec.weight; guarantee and limit from the queue's annotations tenantqos.io/guarantee and
tenantqos.io/limit (rates such as 40Gbps); serviceLevel and dscp assigned in queue order.
HyperNodes: one shared link per tier (tier-T), one group per HyperNode with its nodes (Node
members by exact name, regex or labels; HyperNode members recursively); capacity from the
HyperNode's annotation tenantqos.io/uplink-capacity, else --tier-capacity.
What the objects do not say is written as TODO with a comment and listed on stderr; the output
is then not a valid policy until filled in. What cannot be mapped is left out and listed on
stderr ("not mapped: ...").
  -f, --filename FILE   the Volcano objects
  --link LINK           the link the tenants are on (default fabric)
  --capacity RATE       the link's capacity (default: a TODO)
  --tier-capacity T=RATE[,...]  the uplink capacity of tier T's HyperNodes, per direction
  --nodes FILE          the cluster's nodes (kubectl get nodes -o yaml), for regex and label
                        members
  --strict              exit 1 if anything is left TODO or not mapped
Exit codes: 0 written (complete and valid, or with TODOs without --strict), 1 unusable input,
an invalid result, or TODOs or unmapped parts under --strict.
)",
       {"-f", "--filename", "--link", "--capacity", "--tier-capacity", "--nodes"},
       {"--strict"},
       1,
       1},
  };
  return kCommands;
}

const CommandSpec* findCommand(std::string_view name) {
  for (const CommandSpec& c : commands()) {
    if (name == c.name) return &c;
  }
  return nullptr;
}

const char* mainHelp() { return kMainHelp; }

int usageError(const Args& a, CtlContext& ctx, const std::string& message) {
  ctx.err << "tenantqosctl: " << message << "\n" << a.cmd->help;
  return kExitUsage;
}

namespace {

std::string canonical(const std::string& flag) {
  if (flag == "-f") return "--filename";
  if (flag == "-o") return "--output";
  return flag;
}

}  // namespace

std::optional<uint64_t> parseU64(std::string_view s) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::string parseArgs(const std::vector<std::string>& args, Args* a) {
  for (size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    std::string value;
    bool has_inline = false;
    if (arg.size() > 2 && arg.rfind("--", 0) == 0) {
      size_t eq = arg.find('=');
      if (eq != std::string::npos) {
        value = arg.substr(eq + 1);
        arg = arg.substr(0, eq);
        has_inline = true;
      }
    }
    auto needValue = [&]() -> std::optional<std::string> {
      if (has_inline) return value;
      if (i + 1 >= args.size()) return std::nullopt;
      return args[++i];
    };
    if (arg == "-h" || arg == "--help") {
      a->help = true;
      continue;
    }
    if (arg == "--server") {
      auto v = needValue();
      if (!v) return "--server needs HOST:PORT";
      a->server = *v;
      continue;
    }
    if (arg == "--insecure") {
      if (has_inline) return "--insecure takes no value";
      a->tls.insecure = true;
      continue;
    }
    if (arg == "--tls-ca" || arg == "--tls-cert" || arg == "--tls-key") {
      auto v = needValue();
      if (!v || v->empty()) return arg + " needs a FILE";
      rpc::setTlsFlag(&a->tls, arg, *v);
      continue;
    }
    if (arg == "--timeout") {
      auto v = needValue();
      char* end = nullptr;
      double t = v ? std::strtod(v->c_str(), &end) : 0;
      if (!v || end == v->c_str() || *end != '\0' || !(t > 0 && t <= 3600)) {
        return "--timeout needs a number of seconds in (0, 3600]";
      }
      a->timeout_s = t;
      continue;
    }
    if (arg.size() > 1 && arg[0] == '-' && arg != "-") {
      if (a->cmd == nullptr) return "unknown flag " + arg + " (flags of a command go after it)";
      const auto& vf = a->cmd->value_flags;
      const auto& bf = a->cmd->bool_flags;
      if (std::find(vf.begin(), vf.end(), arg) != vf.end()) {
        auto v = needValue();
        if (!v) return arg + " needs a value";
        a->values[canonical(arg)] = *v;
        continue;
      }
      if (std::find(bf.begin(), bf.end(), arg) != bf.end() && !has_inline) {
        a->bools[arg] = true;
        continue;
      }
      return "unknown flag " + arg + " for " + a->cmd->name;
    }
    if (a->cmd == nullptr) {
      if (arg == "help") {
        a->help = true;
        continue;
      }
      a->cmd = findCommand(arg);
      if (a->cmd == nullptr) return "unknown command \"" + arg + "\"";
      continue;
    }
    a->positional.push_back(arg);
  }
  if (a->help) return "";
  if (a->cmd == nullptr) return "no command given";
  if (a->positional.size() < a->cmd->min_args || a->positional.size() > a->cmd->max_args) {
    return std::string("wrong number of arguments for ") + a->cmd->name;
  }
  return "";
}

void applyEnvironment(const CtlContext& ctx, Args* a) {
  if (a->server.empty()) {
    a->server = ctx.getenv("TENANTQOS_SERVER");
    a->server_from = "$TENANTQOS_SERVER";
  }
  if (a->server.empty()) {
    a->server = kDefaultServer;
    a->server_from = "the default server";
  }
  // Each TLS setting: the flag, else its environment variable.
  for (auto [field, env] : {std::pair{&a->tls.ca_file, "TENANTQOS_TLS_CA"},
                            std::pair{&a->tls.cert_file, "TENANTQOS_TLS_CERT"},
                            std::pair{&a->tls.key_file, "TENANTQOS_TLS_KEY"}}) {
    if (field->empty()) *field = ctx.getenv(env);
  }
  if (!a->tls.insecure) a->tls.insecure = ctx.getenv("TENANTQOS_INSECURE") == "1";
}

}  // namespace tq::policy::ctl
