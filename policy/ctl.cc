#include "policy/ctl.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <sstream>

#include "common/endpoints.h"
#include "common/file_util.h"
#include "common/text.h"
#include "common/units.h"
#include "policy/policy_file.h"
#include "policy/qos_render.h"
#include "policy/topology_file.h"
#include "policy/volcano_import.h"
#include "policy/wire.h"
#include "proto/convert.h"
#include "rpc/tls.h"
#include "tenantqos/v1/policy.grpc.pb.h"

namespace tq::policy {
namespace {

namespace v1 = tenantqos::v1;

constexpr const char* kDefaultServer = "127.0.0.1:7400";
constexpr auto kConnectTimeout = std::chrono::seconds(3);
constexpr int kMaxResponseBytes = 16 << 20;

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

struct CommandSpec {
  const char* name;
  const char* help;
  // Flags with a value and boolean flags this command accepts (besides the global ones).
  std::vector<std::string> value_flags;
  std::vector<std::string> bool_flags;
  size_t min_args, max_args;
};

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

const CommandSpec* findCommand(const std::string& name) {
  for (const CommandSpec& c : commands()) {
    if (name == c.name) return &c;
  }
  return nullptr;
}

struct Args {
  std::string server;
  rpc::TlsConfig tls;
  double timeout_s = 10;
  const CommandSpec* cmd = nullptr;
  std::map<std::string, std::string> values;  // canonical long flag -> value
  std::map<std::string, bool> bools;
  std::vector<std::string> positional;
  bool help = false;
};

// A bad argument found after parsing: message and the command's help on stderr.
int usageError(const Args& a, CtlContext& ctx, const std::string& message) {
  ctx.err << "tenantqosctl: " << message << "\n" << a.cmd->help;
  return kExitUsage;
}

std::string canonical(const std::string& flag) {
  if (flag == "-f") return "--filename";
  if (flag == "-o") return "--output";
  return flag;
}

std::optional<uint64_t> parseU64(const std::string& s) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

// Returns an error message, or "" on success.
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

std::string timeText(int64_t unix_ms) { return unix_ms <= 0 ? "-" : utcTimestamp(unix_ms); }

std::string ageText(int64_t unix_ms) {
  if (unix_ms <= 0) return "-";
  int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  int64_t s = std::max<int64_t>(0, (now_ms - unix_ms) / 1000);
  if (s < 120) return std::to_string(s) + "s";
  if (s < 7200) return std::to_string(s / 60) + "m";
  return std::to_string(s / 3600) + "h";
}

std::string jsonNumber(double d) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, d);
  return std::string(buf, ec == std::errc() ? end : buf);
}

std::string toJson(const PolicyRecord& r) {
  std::ostringstream o;
  o << "{\n";
  o << "  \"version\": " << r.version << ",\n";
  o << "  \"appliedAt\": " << jsonQuote(timeText(r.applied_at_unix_ms)) << ",\n";
  o << "  \"appliedAtUnixMs\": " << r.applied_at_unix_ms << ",\n";
  o << "  \"appliedBy\": " << jsonQuote(r.applied_by) << ",\n";
  o << "  \"rollbackOf\": " << r.rollback_of << ",\n";
  o << "  \"checksum\": " << r.checksum << ",\n";
  o << "  \"apiVersion\": " << jsonQuote(kApiVersion) << ",\n";
  o << "  \"kind\": " << jsonQuote(kKind) << ",\n";
  o << "  \"links\": [";
  for (size_t i = 0; i < r.policy.links.size(); ++i) {
    const LinkSpec& l = r.policy.links[i];
    o << (i ? "," : "") << "\n    {\"name\": " << jsonQuote(l.name)
      << ", \"capacityBytesPerSecond\": " << l.capacity_bytes_per_second
      << ", \"headroomPercent\": " << jsonNumber(l.headroom_percent) << "}";
  }
  o << (r.policy.links.empty() ? "],\n" : "\n  ],\n");
  o << "  \"tenants\": [";
  for (size_t i = 0; i < r.policy.tenants.size(); ++i) {
    const TenantSpec& t = r.policy.tenants[i];
    o << (i ? "," : "") << "\n    {\"name\": " << jsonQuote(t.name)
      << ", \"link\": " << jsonQuote(t.link)
      << ", \"guaranteeBytesPerSecond\": " << t.guarantee_bytes_per_second
      << ", \"limitBytesPerSecond\": " << t.limit_bytes_per_second << ", \"weight\": " << t.weight
      << ", \"serviceLevel\": " << t.service_level << ", \"dscp\": " << t.dscp
      << ", \"trafficClasses\": [";
    for (size_t k = 0; k < t.traffic_classes.size(); ++k)
      o << (k ? ", " : "") << t.traffic_classes[k];
    o << "], \"shareClass\": " << (t.share_class ? "true" : "false");
    for (auto [key, list] :
         {std::pair{"namespaces", &t.namespaces}, std::pair{"volcanoQueues", &t.volcano_queues}}) {
      o << ", \"" << key << "\": [";
      for (size_t k = 0; k < list->size(); ++k) o << (k ? ", " : "") << jsonQuote((*list)[k]);
      o << "]";
    }
    o << ", \"default\": " << (t.is_default ? "true" : "false")
      << ", \"unixGroup\": " << jsonQuote(t.unix_group) << ", "
      << tenantLinkValuesJson(t.shared_links) << "}";
  }
  o << (r.policy.tenants.empty() ? "],\n" : "\n  ],\n");
  o << "  " << sharedLinksJson(r.policy.shared_links) << "\n";
  o << "}\n";
  return o.str();
}

void printTable(std::ostream& out, const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  // Cells hold what servers and nodes reported: escaped, so none can forge a row.
  std::vector<std::vector<std::string>> cells;
  for (const auto& row : rows) {
    cells.emplace_back();
    for (const std::string& cell : row) cells.back().push_back(escapeControl(cell));
  }
  for (const auto& row : cells) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  for (const auto& row : cells) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line += std::string(width[c] - row[c].size() + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  }
}

std::string codeName(grpc::StatusCode c) {
  switch (c) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS: return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED: return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS: return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED: return "UNAUTHENTICATED";
    default: return "UNKNOWN";
  }
}

// A connected client, or the exit code and message for "unreachable". `server` may list
// several policyd replicas (A,B,C): connect() takes the first that answers, in order.
class Client {
 public:
  Client(const std::string& server, double timeout_s, rpc::TlsConfig tls)
      : server_(server), timeout_s_(timeout_s), tls_(std::move(tls)) {}

  // 0 when connected to one of the --server replicas (tried in order); else the exit code after
  // printing why: kExitUsage for unusable TLS files or a bad list, kExitUnreachable if no server
  // can be reached within kConnectTimeout each.
  int connect(std::ostream& err) {
    Result<std::shared_ptr<grpc::ChannelCredentials>> credentials = rpc::channelCredentials(tls_);
    if (!credentials.ok()) {
      err << "tenantqosctl: " << credentials.status().message()
          << " (flags or $TENANTQOS_TLS_CA, $TENANTQOS_TLS_CERT, $TENANTQOS_TLS_KEY)\n";
      return kExitUsage;
    }
    auto targets = splitEndpointList(server_, "--server");
    if (!targets.ok()) {
      err << "tenantqosctl: " << targets.status().message() << "\n";
      return kExitUsage;
    }
    std::string why;
    for (const std::string& target : *targets) {
      if (connectTo(target, *credentials, &why)) return 0;
      if (targets->size() > 1) err << "tenantqosctl: " << why << "; trying the next server\n";
    }
    err << "tenantqosctl: " << why << " (is it running? set --server or TENANTQOS_SERVER; "
        << (tls_.insecure ? "a TLS server refuses --insecure clients"
                          : "or the TLS handshake failed: does its certificate chain to "
                            "--tls-ca and name this address, is yours signed by its CA "
                            "and valid?")
        << ")\n";
    return kExitUnreachable;
  }

  void prepare(grpc::ClientContext* c) const {
    c->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(static_cast<int64_t>(timeout_s_ * 1000)));
  }

  // Maps a failed call to an exit code and prints why.
  int fail(const grpc::Status& s, const std::string& what, std::ostream& err) const {
    if (s.error_code() == grpc::StatusCode::UNAVAILABLE ||
        s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      err << "tenantqosctl: " << what << ": tenantqos-policyd at " << server_ << " did not answer ("
          << codeName(s.error_code()) << ": " << escapeControl(s.error_message()) << ")\n";
      return kExitUnreachable;
    }
    err << "tenantqosctl: " << what << " failed (" << codeName(s.error_code()) << "):\n"
        << escapeControl(s.error_message(), /*keep_newlines=*/true) << "\n";
    return kExitRejected;
  }

  v1::PolicyService::Stub& stub() { return *stub_; }
  const std::string& server() const { return server_; }

 private:
  bool connectTo(const std::string& target,
                 const std::shared_ptr<grpc::ChannelCredentials>& credentials, std::string* why) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(kMaxResponseBytes);
    args.SetInt(GRPC_ARG_MAX_METADATA_SIZE, 64 * 1024);  // long error lists travel in trailers
    channel_ = grpc::CreateCustomChannel(target, credentials, args);
    stub_ = v1::PolicyService::NewStub(channel_);
    auto deadline = std::chrono::system_clock::now() + kConnectTimeout;
    grpc_connectivity_state state = channel_->GetState(/*try_to_connect=*/true);
    while (state != GRPC_CHANNEL_READY) {
      if (state == GRPC_CHANNEL_TRANSIENT_FAILURE || state == GRPC_CHANNEL_SHUTDOWN) {
        *why = "cannot reach tenantqos-policyd at " + target + ": connection failed";
        return false;
      }
      if (!channel_->WaitForStateChange(state, deadline)) {
        *why = "cannot reach tenantqos-policyd at " + target + ": no connection within " +
               std::to_string(kConnectTimeout.count()) + "s";
        return false;
      }
      state = channel_->GetState(false);
    }
    server_ = target;  // named in later messages
    return true;
  }

  std::string server_;
  double timeout_s_;
  rpc::TlsConfig tls_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::PolicyService::Stub> stub_;
};

void printDiff(std::ostream& out, const PolicyDiff& diff) {
  size_t unchanged = 0;
  auto print = [&](const char* kind, const ObjectChange& c) {
    if (c.kind == ChangeKind::kUnchanged) {
      if (std::string_view(kind) == "tenant") ++unchanged;
      return;
    }
    const char* mark = c.kind == ChangeKind::kAdded     ? "+"
                       : c.kind == ChangeKind::kRemoved ? "-"
                                                        : "~";
    out << mark << " " << kind << " " << escapeControl(c.name) << ": " << changeKindName(c.kind);
    if (c.kind == ChangeKind::kAdded && !c.details.empty()) {
      out << " (" << escapeControl(c.details.front()) << ")\n";
      return;
    }
    out << "\n";
    if (c.kind == ChangeKind::kChanged) {
      for (const std::string& d : c.details) out << "    " << escapeControl(d) << "\n";
    }
  };
  for (const ObjectChange& c : diff.links) print("link", c);
  for (const ObjectChange& c : diff.shared_links) print("shared link", c);
  for (const ObjectChange& c : diff.tenants) print("tenant", c);
  if (unchanged > 0)
    out << "  (" << unchanged << (unchanged == 1 ? " tenant" : " tenants") << " unchanged)\n";
}

int printApplyResponse(std::ostream& out, const v1::ApplyPolicyResponse& r, const char* verb) {
  PolicyDiff diff = diffFromProto(r);
  if (!r.changed()) {
    out << "no change: the policy equals version " << r.version() << " (nothing stored)\n";
    return kExitOk;
  }
  printDiff(out, diff);
  if (r.dry_run()) {
    out << "dry run: would become version " << r.version() << " (nothing stored)\n";
  } else {
    out << verb << ": version " << r.version() << "\n";
  }
  return kExitOk;
}

// Reads and validates a policy file like `validate` ("-" = ctx.in). On errors prints every
// one and "FILE: invalid (N errors)" on stderr and returns false.
bool loadValidatedPolicy(const std::string& file, CtlContext& ctx, PolicySpec* policy) {
  ParsedPolicy p;
  if (file == "-") {
    std::string text((std::istreambuf_iterator<char>(ctx.in)), std::istreambuf_iterator<char>());
    p = parsePolicyYaml(text, "<stdin>");
  } else {
    p = loadPolicyFile(file);
  }
  if (!p.ok()) {
    for (const PolicyError& e : p.errors) ctx.err << e.toString() << "\n";
    ctx.err << file << ": invalid (" << p.errors.size()
            << (p.errors.size() == 1 ? " error" : " errors") << ")\n";
    return false;
  }
  *policy = std::move(p.policy);
  return true;
}

int cmdValidate(const Args& a, CtlContext& ctx) {
  std::string file = !a.positional.empty()          ? a.positional[0]
                     : a.values.count("--filename") ? a.values.at("--filename")
                                                    : "";
  if (file.empty()) return usageError(a, ctx, "validate needs FILE");
  const std::string format = a.values.count("--output") ? a.values.at("--output") : "";
  if (!format.empty() && format != "json")
    return usageError(a, ctx, "-o wants json, got \"" + format + "\"");
  PolicySpec policy;
  if (!loadValidatedPolicy(file, ctx, &policy)) return kExitRejected;
  if (format == "json") {
    PolicyRecord r;
    r.policy = std::move(policy);
    ctx.out << toJson(r);
    return kExitOk;
  }
  ctx.out << file << ": valid (" << policy.links.size()
          << (policy.links.size() == 1 ? " link, " : " links, ") << policy.tenants.size()
          << (policy.tenants.size() == 1 ? " tenant" : " tenants");
  if (!policy.shared_links.empty()) {
    ctx.out << ", " << policy.shared_links.size()
            << (policy.shared_links.size() == 1 ? " shared link" : " shared links");
  }
  ctx.out << ")\n";
  return kExitOk;
}

int cmdApply(const Args& a, CtlContext& ctx, Client& client) {
  if (!a.values.count("--filename")) return usageError(a, ctx, "apply needs -f FILE");
  const std::string file = a.values.at("--filename");
  std::optional<uint64_t> expected;
  if (a.values.count("--expected-version")) {
    expected = parseU64(a.values.at("--expected-version"));
    if (!expected) return usageError(a, ctx, "--expected-version needs a version number");
  }
  std::string text;
  if (file == "-") {
    text.assign(std::istreambuf_iterator<char>(ctx.in), std::istreambuf_iterator<char>());
  } else {
    auto r = readFile(file, kMaxPolicyBytes);
    if (!r.ok()) {
      ctx.err << "tenantqosctl: " << r.status().message() << "\n";
      return kExitRejected;
    }
    text = std::move(*r);
  }
  if (int rc = client.connect(ctx.err)) return rc;
  v1::ApplyPolicyRequest req;
  req.set_policy_yaml(text);
  req.set_source_name(file == "-" ? "<stdin>" : file);
  req.set_dry_run(a.bools.count("--dry-run") > 0);
  if (expected) req.set_expected_version(*expected);
  v1::ApplyPolicyResponse resp;
  grpc::ClientContext c;
  client.prepare(&c);
  grpc::Status s = client.stub().ApplyPolicy(&c, req, &resp);
  if (!s.ok()) return client.fail(s, "apply " + file, ctx.err);
  return printApplyResponse(ctx.out, resp, "applied");
}

// The policy of --version N, else the latest, from the server: 0, or the exit code after saying
// why (`what` names the operation in the message).
int fetchPolicy(const Args& a, CtlContext& ctx, Client& client, const std::string& what,
                PolicyRecord* out) {
  v1::GetPolicyRequest req;
  if (a.values.count("--version")) {
    auto v = parseU64(a.values.at("--version"));
    if (!v || *v == 0) return usageError(a, ctx, "--version needs a version number >= 1");
    req.set_version(*v);
  }
  if (int rc = client.connect(ctx.err)) return rc;
  v1::PolicySnapshot snap;
  grpc::ClientContext c;
  client.prepare(&c);
  grpc::Status s = client.stub().GetPolicy(&c, req, &snap);
  if (!s.ok()) return client.fail(s, what, ctx.err);
  *out = fromSnapshot(snap);
  return kExitOk;
}

int cmdGet(const Args& a, CtlContext& ctx, Client& client) {
  std::string format = a.values.count("--output") ? a.values.at("--output") : "yaml";
  if (format != "yaml" && format != "json")
    return usageError(a, ctx, "-o wants yaml or json, got \"" + format + "\"");
  PolicyRecord r;
  if (int rc = fetchPolicy(a, ctx, client, "get", &r)) return rc;
  if (format == "json") {
    ctx.out << toJson(r);
    return kExitOk;
  }
  std::string header = "tenantqos policy version " + std::to_string(r.version) + ", applied " +
                       timeText(r.applied_at_unix_ms) + " by " +
                       (r.applied_by.empty() ? "?" : r.applied_by);
  if (!r.source_name.empty()) header += " from " + r.source_name;
  if (r.rollback_of) header += " (rollback of version " + std::to_string(r.rollback_of) + ")";
  ctx.out << toYaml(r.policy, escapeControl(header));
  return kExitOk;
}

int cmdHistory(const Args&, CtlContext& ctx, Client& client) {
  if (int rc = client.connect(ctx.err)) return rc;
  v1::ListVersionsResponse resp;
  grpc::ClientContext c;
  client.prepare(&c);
  grpc::Status s = client.stub().ListVersions(&c, v1::ListVersionsRequest(), &resp);
  if (!s.ok()) return client.fail(s, "history", ctx.err);
  if (resp.versions().empty()) {
    ctx.out << "no policy has been applied yet\n";
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows = {
      {"VERSION", "APPLIED (UTC)", "BY", "TENANTS", "SOURCE", "CHANGES", "NOTE"}};
  bool latest_marked = false;
  for (const auto& m : resp.versions()) {
    VersionSummary v = fromVersionInfo(m);
    std::string note;
    if (!v.intact) {
      note = "CORRUPT, not served: " + v.problem;
    } else {
      if (!latest_marked) note = "latest", latest_marked = true;
      if (v.rollback_of)
        note +=
            std::string(note.empty() ? "" : ", ") + "rollback of " + std::to_string(v.rollback_of);
    }
    auto orDash = [&](const std::string& s) { return v.intact && !s.empty() ? s : "-"; };
    rows.push_back({std::to_string(v.version), v.intact ? timeText(v.applied_at_unix_ms) : "-",
                    orDash(v.applied_by), v.intact ? std::to_string(v.tenants) : "-",
                    orDash(v.source_name), orDash(v.diff_summary), note});
  }
  printTable(ctx.out, rows);
  return kExitOk;
}

int cmdRollback(const Args& a, CtlContext& ctx, Client& client) {
  auto v = parseU64(a.positional[0]);
  if (!v || *v == 0) return usageError(a, ctx, "rollback needs a version number >= 1");
  v1::RollbackRequest req;
  req.set_version(*v);
  if (a.values.count("--expected-version")) {
    auto e = parseU64(a.values.at("--expected-version"));
    if (!e) return usageError(a, ctx, "--expected-version needs a version number");
    req.set_expected_version(*e);
  }
  if (int rc = client.connect(ctx.err)) return rc;
  v1::ApplyPolicyResponse resp;
  grpc::ClientContext c;
  client.prepare(&c);
  grpc::Status s = client.stub().Rollback(&c, req, &resp);
  if (!s.ok()) return client.fail(s, "rollback to version " + std::to_string(*v), ctx.err);
  return printApplyResponse(ctx.out, resp, "rolled back");
}

// Every page of one replica's usage view (the first page's totals cover all its nodes).
grpc::Status fetchUsage(Client& client, v1::GetUsageResponse* resp) {
  v1::GetUsageRequest req;
  for (size_t page = 0; page == 0 || !req.page_token().empty(); ++page) {
    v1::GetUsageResponse part;
    grpc::ClientContext c;
    client.prepare(&c);
    grpc::Status s = client.stub().GetUsage(&c, req, &part);
    if (!s.ok()) return s;
    // A page token that does not advance would loop forever: stop at the node count.
    if (page > part.total_nodes() || part.next_page_token() <= req.page_token()) {
      part.clear_next_page_token();
    }
    req.set_page_token(part.next_page_token());
    if (page == 0) {
      *resp = std::move(part);
    } else {
      for (auto& n : *part.mutable_nodes()) *resp->add_nodes() = std::move(n);
    }
  }
  return grpc::Status::OK;
}

// Usage is held per replica (an agent reports to the replica it watches), so with several
// --server replicas `top` asks each, keeps every node's newest report and sums the totals
// again. A replica that does not answer is named; the others still print.
int mergedUsage(const Args& a, CtlContext& ctx, const std::vector<std::string>& targets,
                v1::GetUsageResponse* out, std::vector<std::string>* missing) {
  std::map<std::string, v1::NodeUsage> nodes;
  uint64_t latest = 0;
  int rc = kExitOk;
  for (const std::string& target : targets) {
    Client one(target, a.timeout_s, a.tls);
    std::ostringstream why;
    v1::GetUsageResponse r;
    if (int c = one.connect(why); c != 0) {
      if (c == kExitUsage) {
        ctx.err << why.str();
        return c;
      }
      missing->push_back(target + " (unreachable)");
      rc = c;
      continue;
    }
    if (grpc::Status s = fetchUsage(one, &r); !s.ok()) {
      missing->push_back(target + " (" + codeName(s.error_code()) + ": " +
                         escapeControl(s.error_message()) + ")");
      rc = one.fail(s, "top", why);
      continue;
    }
    latest = std::max(latest, r.latest_version());
    for (auto& n : *r.mutable_nodes()) {
      auto [it, fresh] = nodes.try_emplace(n.node(), n);
      if (!fresh && n.last_report_unix_ms() > it->second.last_report_unix_ms()) it->second = n;
    }
  }
  if (missing->size() == targets.size()) {
    ctx.err << "tenantqosctl: top: no replica answered: ";
    for (size_t i = 0; i < missing->size(); ++i) ctx.err << (i ? ", " : "") << (*missing)[i];
    ctx.err << "\n";
    return rc;
  }
  std::map<std::string, TenantUsageReport> totals;
  for (auto& [name, n] : nodes) {
    for (const auto& t : n.tenants()) {
      TenantUsageReport& sum = totals[t.tenant()];
      sum.tenant = t.tenant();
      sum += proto::fromProto(t);
    }
    *out->add_nodes() = std::move(n);
  }
  for (const auto& [name, t] : totals) *out->add_tenants() = proto::toProto(t);
  out->set_latest_version(latest);
  return kExitOk;
}

int cmdTop(const Args& a, CtlContext& ctx, Client& client) {
  auto targets = splitEndpointList(client.server(), "--server");
  v1::GetUsageResponse resp;
  std::vector<std::string> missing;  // replicas whose nodes are not shown
  if (targets.ok() && targets->size() > 1) {
    if (int rc = mergedUsage(a, ctx, *targets, &resp, &missing)) return rc;
  } else {
    if (int rc = client.connect(ctx.err)) return rc;
    if (grpc::Status s = fetchUsage(client, &resp); !s.ok()) return client.fail(s, "top", ctx.err);
  }
  for (const std::string& m : missing) {
    ctx.out << "replica " << m << ": the nodes that report to it are missing\n";
  }
  if (resp.nodes().empty()) {
    ctx.out << "no node has reported usage yet (policy version " << resp.latest_version() << ")\n";
    return kExitOk;
  }
  ctx.out << "policy version " << resp.latest_version() << ", " << resp.nodes_size()
          << (resp.nodes_size() == 1 ? " node" : " nodes") << " reporting\n";
  std::vector<std::vector<std::string>> rows = {{"NODE", "VERSION", "AGE", "TENANT", "TX RATE",
                                                 "ALLOCATED", "GUARANTEE", "LIMIT", "TX TOTAL",
                                                 "RX TOTAL", "THROTTLED", "PROCS"}};
  auto row = [](const std::string& node, const std::string& version, const std::string& age,
                const TenantUsageReport& t) {
    char throttled[32];
    std::snprintf(throttled, sizeof throttled, "%.1fs", t.throttled_seconds_total);
    return std::vector<std::string>{node,
                                    version,
                                    age,
                                    t.tenant,
                                    formatRate(t.transmit_rate_bytes_per_second),
                                    formatRate(t.allocated_rate_bytes_per_second),
                                    formatRate(t.guarantee_bytes_per_second),
                                    formatRate(t.limit_bytes_per_second),
                                    formatSize(t.transmit_bytes_total),
                                    formatSize(t.receive_bytes_total),
                                    throttled,
                                    std::to_string(t.processes)};
  };
  std::vector<std::string> errors;
  for (const auto& n : resp.nodes()) {
    NodeUsageReport r = proto::fromNodeUsage(n);
    std::string version = std::to_string(r.policy_version);
    if (r.policy_version != resp.latest_version()) version += " (behind)";
    if (r.tenants.empty()) rows.push_back({r.node, version, ageText(n.last_report_unix_ms()), "-"});
    for (const TenantUsageReport& t : r.tenants) {
      rows.push_back(row(r.node, version, ageText(n.last_report_unix_ms()), t));
    }
    for (const std::string& e : r.errors) errors.push_back(r.node + ": " + e);
  }
  for (const auto& t : resp.tenants()) rows.push_back(row("TOTAL", "", "", proto::fromProto(t)));
  printTable(ctx.out, rows);
  if (resp.omitted_tenants() > 0) {
    ctx.out << "(" << resp.omitted_tenants()
            << " node entries of tenants beyond the server's cap are not in the totals)\n";
  }
  if (!errors.empty()) {
    ctx.out << "node errors:\n";
    for (const std::string& e : errors) ctx.out << "  " << escapeControl(e) << "\n";
  }
  return kExitOk;
}

int cmdRender(const Args& a, CtlContext& ctx, Client& client) {
  const std::string what = a.positional[0];
  if (what != "dcb" && what != "opensm") {
    return usageError(a, ctx, "render wants dcb or opensm, got \"" + what + "\"");
  }
  auto has = [&](const char* flag) { return a.values.count(flag) > 0; };
  if (!has("--link") || a.values.at("--link").empty()) {
    return usageError(a, ctx, "render " + what + " needs --link LINK");
  }
  const std::string link = a.values.at("--link");
  if (has("--filename") && has("--version")) {
    return usageError(a, ctx, "-f and --version exclude each other (--version is for the server)");
  }
  ib::IbQosOptions ib_options;
  OpenSmPart part = OpenSmPart::kBoth;
  std::string device;
  if (what == "dcb") {
    for (const char* f : {"--max-vls", "--mtu", "--part"}) {
      if (has(f)) return usageError(a, ctx, std::string(f) + " is for render opensm");
    }
    if (!has("--device")) return usageError(a, ctx, "render dcb needs --device DEV");
    device = a.values.at("--device");
    if (!isSafeDeviceName(device)) {
      return usageError(
          a, ctx,
          "--device \"" + device + "\" is not a network device name (1-15 of A-Z a-z 0-9 . _ -)");
    }
  } else {
    if (has("--device")) return usageError(a, ctx, "--device is for render dcb");
    if (has("--max-vls")) {
      auto v = parseU64(a.values.at("--max-vls"));
      if (!v || *v < 1 || *v > 15) return usageError(a, ctx, "--max-vls needs 1..15");
      ib_options.max_vls = static_cast<int>(*v);
    }
    if (has("--mtu")) {
      auto v = parseU64(a.values.at("--mtu"));
      if (!v || (*v != 256 && *v != 512 && *v != 1024 && *v != 2048 && *v != 4096)) {
        return usageError(a, ctx, "--mtu needs 256, 512, 1024, 2048 or 4096");
      }
      ib_options.mtu = static_cast<int>(*v);
    }
    if (has("--part")) {
      const std::string p = a.values.at("--part");
      if (p == "both") {
        part = OpenSmPart::kBoth;
      } else if (p == "options") {
        part = OpenSmPart::kOptions;
      } else if (p == "qos-policy") {
        part = OpenSmPart::kQosPolicy;
      } else {
        return usageError(a, ctx, "--part wants both, options or qos-policy, got \"" + p + "\"");
      }
    }
  }

  PolicySpec policy;
  std::string source;
  if (has("--filename")) {
    const std::string file = a.values.at("--filename");
    if (!loadValidatedPolicy(file, ctx, &policy)) return kExitRejected;
    source = "file " + (file == "-" ? std::string("<stdin>") : file);
  } else {
    PolicyRecord r;
    if (int rc = fetchPolicy(a, ctx, client, "render " + what + ": get policy", &r)) return rc;
    policy = std::move(r.policy);
    source = "tenantqos-policyd at " + client.server() + ", version " + std::to_string(r.version);
  }

  Result<std::string> text = what == "dcb" ? renderDcb(policy, link, device, source)
                                           : renderOpenSm(policy, link, ib_options, part, source);
  if (!text.ok()) {
    ctx.err << "tenantqosctl: render " << what << ": " << text.status().message() << "\n";
    return kExitRejected;
  }
  ctx.out << *text;
  return kExitOk;
}

// "1=400Gbps,2=800Gbps" into options.tier_capacity; the problem, or "".
std::string parseTierCapacities(const std::string& text, VolcanoImportOptions* options) {
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(start, comma - start);
    const size_t eq = item.find('=');
    int64_t tier = -1;
    const char* end = item.data() + (eq == std::string::npos ? 0 : eq);
    auto [p, ec] = std::from_chars(item.data(), end, tier);
    if (eq == std::string::npos || ec != std::errc() || p != end || tier < 0) {
      return "\"" + item + "\" is not TIER=RATE";
    }
    auto rate = parseRate(item.substr(eq + 1));
    if (!rate.ok() || *rate == 0) {
      return "\"" + item +
             "\": " + (rate.ok() ? "the rate must be above 0" : rate.status().message());
    }
    options->tier_capacity[tier] = *rate;
    start = comma + 1;
  }
  return "";
}

int cmdImport(const Args& a, CtlContext& ctx) {
  if (a.positional[0] != "volcano") {
    return usageError(a, ctx, "import wants volcano, got \"" + a.positional[0] + "\"");
  }
  if (!a.values.count("--filename")) return usageError(a, ctx, "import volcano needs -f FILE");
  const std::string file = a.values.at("--filename");
  VolcanoImportOptions options;
  if (a.values.count("--link")) options.link = a.values.at("--link");
  if (a.values.count("--capacity")) {
    auto rate = parseRate(a.values.at("--capacity"));
    if (!rate.ok()) return usageError(a, ctx, "--capacity: " + rate.status().message());
    options.capacity = *rate;
  }
  if (a.values.count("--tier-capacity")) {
    std::string problem = parseTierCapacities(a.values.at("--tier-capacity"), &options);
    if (!problem.empty()) return usageError(a, ctx, "--tier-capacity: " + problem);
  }
  if (a.values.count("--nodes")) {
    options.nodes_source = a.values.at("--nodes");
    auto nodes = readFile(options.nodes_source, kMaxPolicyBytes);
    if (!nodes.ok()) {
      ctx.err << "tenantqosctl: import volcano: " << options.nodes_source << ": "
              << nodes.status().message() << "\n";
      return kExitRejected;
    }
    options.nodes_yaml = std::move(*nodes);
  }
  // Standard input is read whole, like `apply -f -`; importVolcanoQueues checks the size.
  Result<std::string> text =
      file == "-" ? Result<std::string>(std::string(std::istreambuf_iterator<char>(ctx.in),
                                                    std::istreambuf_iterator<char>()))
                  : readFile(file, kMaxPolicyBytes);
  if (!text.ok()) {
    ctx.err << "tenantqosctl: import volcano: " << file << ": " << text.status().message() << "\n";
    return kExitRejected;
  }
  const std::string source = file == "-" ? "<stdin>" : file;
  VolcanoImport imported = importVolcanoQueues(*text, source, options);
  if (!imported.errors.empty()) {
    for (const PolicyError& e : imported.errors) ctx.err << e.toString() << "\n";
    return kExitRejected;
  }
  ctx.out << imported.yaml;
  for (const std::string& t : imported.todos) ctx.err << "tenantqosctl: TODO: " << t << "\n";
  for (const std::string& u : imported.unmapped)
    ctx.err << "tenantqosctl: not mapped: " << u << "\n";
  const bool strict = a.bools.count("--strict") != 0;
  if (!imported.todos.empty()) return strict ? kExitRejected : kExitOk;
  if (strict && !imported.unmapped.empty()) return kExitRejected;
  // Complete: the skeleton must already be a valid policy (admission, for one).
  ParsedPolicy check = parsePolicyYaml(imported.yaml, "<import of " + source + ">");
  for (const PolicyError& e : check.errors) ctx.err << e.toString() << "\n";
  return check.ok() ? kExitOk : kExitRejected;
}

}  // namespace

int runCtl(const std::vector<std::string>& args, CtlContext& ctx) {
  Args a;
  std::string problem = parseArgs(args, &a);
  if (!problem.empty()) {
    ctx.err << "tenantqosctl: " << problem << "\n";
    if (a.cmd != nullptr) {
      ctx.err << a.cmd->help;
    } else {
      ctx.err << kMainHelp;
    }
    return kExitUsage;
  }
  if (a.help) {
    ctx.out << (a.cmd != nullptr ? a.cmd->help : kMainHelp);
    return kExitOk;
  }
  if (a.server.empty()) a.server = ctx.getenv("TENANTQOS_SERVER");
  if (a.server.empty()) a.server = kDefaultServer;
  // Each TLS setting: the flag, else its environment variable.
  for (auto [field, env] : {std::pair{&a.tls.ca_file, "TENANTQOS_TLS_CA"},
                            std::pair{&a.tls.cert_file, "TENANTQOS_TLS_CERT"},
                            std::pair{&a.tls.key_file, "TENANTQOS_TLS_KEY"}}) {
    if (field->empty()) *field = ctx.getenv(env);
  }
  if (!a.tls.insecure) a.tls.insecure = ctx.getenv("TENANTQOS_INSECURE") == "1";
  Client client(a.server, a.timeout_s, a.tls);
  const std::string cmd = a.cmd->name;
  if (cmd == "validate") return cmdValidate(a, ctx);
  if (cmd == "apply") return cmdApply(a, ctx, client);
  if (cmd == "get") return cmdGet(a, ctx, client);
  if (cmd == "history") return cmdHistory(a, ctx, client);
  if (cmd == "rollback") return cmdRollback(a, ctx, client);
  if (cmd == "top") return cmdTop(a, ctx, client);
  if (cmd == "render") return cmdRender(a, ctx, client);
  if (cmd == "import") return cmdImport(a, ctx);
  return usageError(a, ctx, "unknown command");
}

int ctlMain(int argc, char** argv) {
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
