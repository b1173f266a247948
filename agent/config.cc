#include "agent/config.h"

#include <unistd.h>

#include "common/endpoints.h"
#include "common/flags.h"
#include "common/policy.h"
#include "common/tenant_shm.h"
#include "common/units.h"

namespace tq::agent {
namespace {

bool validDeviceName(const std::string& d) {
  // IFNAMSIZ is 16 including the NUL; '/' and whitespace are never valid in a netdev name.
  if (d.empty() || d.size() > 15 || d == "." || d == "..") return false;
  for (char c : d) {
    if (c == '/' || c == ':' || c == ' ' || c == '\t' || c == '\n') return false;
  }
  return true;
}

constexpr const char* kUsageHead =
    R"(usage: tenantqos-agent --policyd HOST:PORT[,...] --device DEV=LINK [--device ...] [flags]
       tenantqos-agent --cleanup --device DEV=LINK [--device ...] [--run-dir DIR] [--state-dir DIR]

Turns the tenantqos policy into enforcement on this node (tc HTB classes, per-tenant shared
memory for the NCCL plugin, work-conserving rate allocation) and exports metrics.

)";

constexpr const char* kUsageTail = R"(
SIGTERM/SIGINT stop the agent and LEAVE enforcement in place (fail-static).
Exit codes: 0 after SIGTERM/SIGINT or a finished --cleanup, 1 cannot start, 2 usage error.
)";

}  // namespace

std::string_view tcModeName(TcMode mode) { return mode == TcMode::kHtb ? "htb" : "none"; }

void addAgentFlags(FlagTable& t, AgentConfig* c) {
  t.hostPortList("--policyd", &c->policyd_endpoints,
                 "tenantqos-policyd replicas to watch; on failure the agent moves to the next, "
                 "resuming from the version it holds (a DNS name with several addresses works "
                 "too)",
                 &c->policyd)
      .requiredWhen("unless --cleanup");
  t.nonEmpty("--node", "NAME", &c->node,
             "this node's name in reports; policyd accepts usage reports only for the node named "
             "by the client certificate's CN")
      .defaultText("the host name");
  rpc::addTlsFlags(t, &c->tls,
                   "policyd's certificate (its SAN must name each --policyd host: any other "
                   "server is refused)",
                   "CN = the node name, O = tenantqos:agents");
  t.add("--device", "DEV=LINK[,rail=N]",
        "manage kernel device DEV as the policy's link LINK; several devices (rails, at most " +
            std::to_string(shm::kMaxDeviceBuckets) + ") may carry the same link; rail=N (0.." +
            std::to_string(kMaxRail) +
            ") puts DEV on rail N of the fabric, so only its connections are charged to the "
            "shared links of rail N (without it, to every rail's)",
        [c](std::string_view v) -> Status {
          const size_t eq = v.find('=');
          const std::string_view rest = eq == std::string_view::npos ? "" : v.substr(eq + 1);
          const std::string_view link = rest.substr(0, rest.find(','));
          if (eq == std::string_view::npos || eq == 0 || link.empty()) {
            return invalidArgument("\"" + std::string(v) + "\" is not DEV=LINK[,rail=N]");
          }
          DeviceMapping m{std::string(v.substr(0, eq)), std::string(link)};
          if (link.size() < rest.size()) {
            const std::string_view option = rest.substr(link.size() + 1);
            if (option.substr(0, 5) != "rail=") {
              return invalidArgument("\"" + std::string(v) + "\": \"" + std::string(option) +
                                     "\" is not rail=N");
            }
            auto rail = FlagTable::parseInteger(option.substr(5), 0, kMaxRail);
            if (!rail.ok()) {
              return invalidArgument("\"" + std::string(v) + "\": rail " + rail.status().message());
            }
            m.rail = static_cast<uint32_t>(*rail);
          }
          if (!validDeviceName(m.device)) {
            return invalidArgument("\"" + m.device + "\" is not a valid device name");
          }
          size_t same_link = 0;
          for (const DeviceMapping& d : c->devices) {
            if (d.device == m.device) return invalidArgument(m.device + " given twice");
            same_link += d.link == m.link;
          }
          if (same_link >= shm::kMaxDeviceBuckets) {
            return invalidArgument("more than " + std::to_string(shm::kMaxDeviceBuckets) +
                                   " devices carry link " + m.link +
                                   " (a tenant's buckets hold that many devices, "
                                   "common/shm_layout.h)");
          }
          c->devices.push_back(std::move(m));
          return okStatus();
        })
      .repeated()
      .requiredWhen("at least once");
  t.nonEmpty("--run-dir", "DIR", &c->run_dir,
             "attach sockets: DIR/tenants/<tenant>/agent.sock per tenant and DIR/agent.sock "
             "node-wide, and DIR/traffic-classes (the plugin's TENANTQOS_RUN_DIR)");
  t.add("--default-tenant", "NAME",
        "the tenant of the node-wide socket; without it in the policy, a built-in one paced at "
        "100 Mbit/s",
        [c](std::string_view v) -> Status {
          if (!isDns1123Label(std::string(v))) {
            return invalidArgument("\"" + std::string(v) + "\" is not a DNS-1123 label");
          }
          c->default_tenant = std::string(v);
          return okStatus();
        })
      .defaultValue(c->default_tenant);
  t.nonEmpty("--state-dir", "DIR", &c->state_dir, "the persisted policy snapshot and tc class ids");
  t.hostPort("--metrics", &c->metrics_address,
             "HTTP for /metrics, /healthz and /readyz; port 0 picks a free port (the bound "
             "address is logged)");
  t.text("--metrics-port-file", "FILE", &c->metrics_port_file,
         "write the bound metrics port to FILE (atomically)");
  t.nonEmpty("--sysfs-root", "DIR", &c->sysfs_root,
             "read RDMA devices and port counters from DIR/class/infiniband and netdev MTUs from "
             "DIR/class/net (a test points it at a fake tree)");
  t.logLevel("--log-level", &c->log_level, "error, warn, info, debug or trace");
  t.millis("--period-ms", &c->period_ns, 1, 10'000, "the allocation period");
  t.millis("--report-interval-ms", &c->report_interval_ns, 10, 600'000,
           "usage reports to policyd every this many ms");
  t.millis("--fabric-report-interval-ms", &c->fabric_report_interval_ns, 20, 10'000,
           "while the node is behind a shared link of the policy, a move of its demand goes to "
           "the cluster allocator within this long; an edge (a tenant starting or stopping, a "
           "step over 25 %) at once, at most one report per 30 ms (docs/fabric.md)");
  t.millis("--qp-scan-interval-ms", &c->qp_scan_interval_ns, 0, 600'000,
           "list the node's RDMA QPs this often for the ungoverned-QP metrics (at least 100; 0: "
           "off)");
  t.choice<TcMode>("--tc-mode", &c->tc_mode, {{"htb", TcMode::kHtb}, {"none", TcMode::kNone}},
                   "htb: an HTB class per tenant; none: \"RDMA-like\", no tc at all (tc cannot see "
                   "RDMA): tenants are separated by plugin pacing and the allocator, and a tree "
                   "left from htb mode is removed");
  t.micros("--bucket-depth-us", &c->bucket_depth_ns, 10, 1'000'000,
           "token-bucket depth given to the plugin, as time at the bucket's rate: over any "
           "window T a tenant sends at most rate x (T + this) (1 ms: 1 % over 100 ms)");
  t.size("--burst", &c->burst_bytes, 1500, 1ull << 32, "smallest token-bucket depth");
  t.toggle("--cleanup", &c->cleanup,
           "remove everything the agent created (tc trees on the --device devices, sockets and "
           "tenant directories, persisted state), then exit");
}

std::string agentUsage() {
  return kUsageHead + std::string("Flags:\n") + flagDocs("tenantqos-agent", addAgentFlags).usage +
         kUsageTail;
}

std::string agentFlagsMarkdown() { return flagDocs("tenantqos-agent", addAgentFlags).markdown; }

Result<AgentConfig> parseAgentArgs(int argc, const char* const* argv) {
  AgentConfig c;
  FlagTable t("tenantqos-agent");
  addAgentFlags(t, &c);
  TQ_ASSIGN_OR_RETURN(FlagTable::Parsed parsed, t.parse(argc, argv));
  if (parsed.help) {
    c.help = true;
    return c;
  }
  if (c.devices.empty()) return invalidArgument("at least one --device DEV=LINK is required");
  if (!c.cleanup && !parsed.has("--policyd")) {
    return invalidArgument("--policyd HOST:PORT is required");
  }
  if (c.qp_scan_interval_ns != 0 && c.qp_scan_interval_ns < 100'000'000) {
    return invalidArgument(
        "--qp-scan-interval-ms: " + std::to_string(c.qp_scan_interval_ns / 1'000'000) +
        " is below 100 (0 turns it off)");
  }
  if (!parsed.has("--node")) {
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') {
      return invalidArgument("--node not given and the host name is unavailable");
    }
    c.node = host;
  }
  return c;
}

}  // namespace tq::agent
