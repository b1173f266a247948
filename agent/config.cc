#include "agent/config.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <set>

#include "common/endpoints.h"
#include "common/tenant_shm.h"
#include "common/units.h"

namespace tq::agent {
namespace {

Result<int64_t> parseMillis(const std::string& flag, const std::string& text, int64_t min_ms,
                            int64_t max_ms) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size()) {
    return invalidArgument(flag + ": \"" + text + "\" is not an integer number of milliseconds");
  }
  if (v < min_ms || v > max_ms) {
    return invalidArgument(flag + ": " + text + " ms is outside [" + std::to_string(min_ms) + ", " +
                           std::to_string(max_ms) + "]");
  }
  return v * 1'000'000;
}

bool validDeviceName(const std::string& d) {
  // IFNAMSIZ is 16 including the NUL; '/' and whitespace are never valid in a netdev name.
  if (d.empty() || d.size() > 15 || d == "." || d == "..") return false;
  for (char c : d) {
    if (c == '/' || c == ':' || c == ' ' || c == '\t' || c == '\n') return false;
  }
  return true;
}

}  // namespace

std::string_view tcModeName(TcMode mode) { return mode == TcMode::kHtb ? "htb" : "none"; }

Result<std::pair<std::string, int>> splitHostPort(const std::string& text) {
  std::string host;
  std::string port;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return invalidArgument("\"" + text + "\" is not [HOST]:PORT");
    }
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      return invalidArgument("\"" + text + "\" is not HOST:PORT");
    }
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  int p = -1;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || p < 0 || p > 65535) {
    return invalidArgument("\"" + text + "\": port \"" + port + "\" is not 0..65535");
  }
  return std::make_pair(host, p);
}

std::string agentUsage() {
  return R"(usage: tenantqos-agent --policyd HOST:PORT[,...] --device DEV=LINK [--device ...] [opts]
       tenantqos-agent --cleanup --device DEV=LINK [--device ...] [--run-dir DIR] [--state-dir DIR]

Turns the tenantqos policy into enforcement on this node (tc HTB classes, per-tenant shared
memory for the NCCL plugin, work-conserving rate allocation) and exports metrics.

  --policyd HOST:PORT[,HOST:PORT...]
                            tenantqos-policyd replicas to watch (required unless --cleanup);
                            on failure the agent moves to the next, resuming from the version
                            it holds (a DNS name with several addresses works too)
  --node NAME               this node's name in reports (default: host name); policyd accepts
                            usage reports only for the node named by the certificate's CN
  --tls-ca FILE             mutual TLS to policyd (required unless --insecure or --cleanup):
                            the CA that policyd's certificate must chain to (its SAN must
                            name the --policyd host)
  --tls-cert FILE           this agent's certificate: CN = the node name, O = tenantqos:agents
  --tls-key FILE            its key (the three files are re-read every 2 s: rotation)
  --insecure                plaintext to policyd without authentication (logs a warning)
  --device DEV=LINK         manage kernel device DEV as the policy's link LINK (repeatable, >= 1)
  --run-dir DIR             attach sockets: DIR/tenants/<tenant>/agent.sock per tenant and
                            DIR/agent.sock node-wide (default /run/tenantqos)
  --default-tenant NAME     the tenant of the node-wide socket (default "default"); without it
                            in the policy, a built-in one paced at 100 Mbit/s
  --state-dir DIR           persisted policy snapshot (default /var/lib/tenantqos)
  --metrics HOST:PORT       /metrics, /healthz, /readyz (default 127.0.0.1:9464; port 0 = any)
  --metrics-port-file FILE  write the bound metrics port to FILE (with port 0)
  --sysfs-root DIR          read RDMA devices and port counters from DIR/class/infiniband
                            (default /sys; a test points it at a fake tree)
  --log-level LEVEL         error|warn|info|debug|trace (default info)
  --period-ms N             allocation period in ms (default 10, 1..10000)
  --report-interval-ms N    usage reports to policyd every N ms (default 1000, 10..600000)
  --qp-scan-interval-ms N   list the node's RDMA QPs every N ms for the ungoverned-QP metrics
                            (default 5000, 100..600000; 0 = off)
  --tc-mode htb|none        htb: an HTB class per tenant (default); none: "RDMA-like", no tc at
                            all (tc cannot see RDMA): tenants are separated by plugin pacing and
                            the allocator; a tree left from htb mode is removed
  --bucket-depth-us N       token-bucket depth given to the plugin, as time at the bucket's
                            rate (default 1000: a tenant exceeds its rate by at most 1 % over
                            100 ms; 10..1000000)
  --burst SIZE              smallest token-bucket depth (default 4KiB, 1500B..4GiB)
  --cleanup                 remove everything the agent created (tc trees on the --device
                            devices, sockets and tenant directories, persisted state), then exit
  --help                    this text

SIGTERM/SIGINT stop the agent and LEAVE enforcement in place (fail-static).
)";
}

Result<AgentConfig> parseAgentArgs(int argc, const char* const* argv) {
  AgentConfig c;
  bool have_policyd = false;
  bool have_node = false;
  std::set<std::string> devices;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    bool has_inline = false;
    if (arg.rfind("--", 0) == 0) {
      const size_t eq = arg.find('=');
      if (eq != std::string::npos) {
        value = arg.substr(eq + 1);
        arg = arg.substr(0, eq);
        has_inline = true;
      }
    }
    auto need = [&]() -> Result<std::string> {
      if (has_inline) return value;
      if (i + 1 >= argc) return invalidArgument(arg + " needs a value");
      return std::string(argv[++i]);
    };
    if (arg == "--help" || arg == "-h") {
      c.help = true;
      return c;
    } else if (arg == "--cleanup") {
      if (has_inline) return invalidArgument("--cleanup takes no value");
      c.cleanup = true;
    } else if (arg == "--policyd") {
      TQ_ASSIGN_OR_RETURN(c.policyd, need());
      TQ_ASSIGN_OR_RETURN(c.policyd_endpoints, splitEndpointList(c.policyd, "--policyd"));
      for (const std::string& e : c.policyd_endpoints) {
        TQ_RETURN_IF_ERROR_CTX(splitHostPort(e).status(), "--policyd");
      }
      have_policyd = true;
    } else if (arg == "--insecure") {
      if (has_inline) return invalidArgument("--insecure takes no value");
      c.tls.insecure = true;
    } else if (arg == "--tls-ca" || arg == "--tls-cert" || arg == "--tls-key") {
      TQ_ASSIGN_OR_RETURN(std::string v, need());
      if (v.empty()) return invalidArgument(arg + ": empty path");
      rpc::setTlsFlag(&c.tls, arg, v);
    } else if (arg == "--node") {
      TQ_ASSIGN_OR_RETURN(c.node, need());
      if (c.node.empty()) return invalidArgument("--node: empty name");
      have_node = true;
    } else if (arg == "--device") {
      TQ_ASSIGN_OR_RETURN(std::string v, need());
      const size_t eq = v.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == v.size()) {
        return invalidArgument("--device: \"" + v + "\" is not DEV=LINK");
      }
      DeviceMapping m{v.substr(0, eq), v.substr(eq + 1)};
      if (!validDeviceName(m.device)) {
        return invalidArgument("--device: \"" + m.device + "\" is not a valid device name");
      }
      if (!devices.insert(m.device).second) {
        return invalidArgument("--device: " + m.device + " given twice");
      }
      const auto same_link =
          std::count_if(c.devices.begin(), c.devices.end(),
                        [&](const DeviceMapping& d) { return d.link == m.link; });
      if (same_link >= static_cast<std::ptrdiff_t>(shm::kMaxDeviceBuckets)) {
        return invalidArgument("--device: more than " + std::to_string(shm::kMaxDeviceBuckets) +
                               " devices carry link " + m.link +
                               " (a tenant's buckets hold that many devices, "
                               "common/shm_layout.h)");
      }
      c.devices.push_back(std::move(m));
    } else if (arg == "--run-dir") {
      TQ_ASSIGN_OR_RETURN(c.run_dir, need());
      if (c.run_dir.empty()) return invalidArgument("--run-dir: empty path");
    } else if (arg == "--state-dir") {
      TQ_ASSIGN_OR_RETURN(c.state_dir, need());
      if (c.state_dir.empty()) return invalidArgument("--state-dir: empty path");
    } else if (arg == "--metrics") {
      TQ_ASSIGN_OR_RETURN(c.metrics_address, need());
      TQ_RETURN_IF_ERROR_CTX(splitHostPort(c.metrics_address).status(), "--metrics");
    } else if (arg == "--metrics-port-file") {
      TQ_ASSIGN_OR_RETURN(c.metrics_port_file, need());
    } else if (arg == "--sysfs-root") {
      TQ_ASSIGN_OR_RETURN(c.sysfs_root, need());
      if (c.sysfs_root.empty()) return invalidArgument("--sysfs-root: empty path");
    } else if (arg == "--log-level") {
      TQ_ASSIGN_OR_RETURN(std::string v, need());
      auto level = parseLogLevel(v);
      if (!level.ok()) return level.status().withContext("--log-level");
      c.log_level = *level;
    } else if (arg == "--period-ms") {
      TQ_ASSIGN_OR_RETURN(std::string v, need());
      TQ_ASSIGN_OR_RETURN(c.period_ns, parseMillis(arg, v, 1, 10'000));
    } else if (arg == "--report-interval-ms") {
      TQ_ASSIGN_OR_RETURN(std::string v, need());
      TQ_ASSIGN_OR_RETURN(c.report_interval_ns, parseMillis(arg, v, 10, 600'000));
    } else if (arg == "--qp-scan-interval-ms") {
      TQ_ASSIGN_OR_RETURN(std::string v, need());
      TQ_ASSIGN_OR_RETURN(c.qp_scan_interval_ns, parseMillis(arg, v, 0, 600'000));
      if (c.qp_scan_interval_ns != 0 && c.qp_scan_interval_ns < 100'000'000) {
        return invalidArgument("--qp-scan-interval-ms: " + v + " is below 100 (0 turns it off)");
      }
    } else if (arg == "--tc-mode") {
      TQ_ASSIGN_OR_RETURN(std::string v, need());
      if (v == "htb") {
        c.tc_mode = TcMode::kHtb;
      } else if (v == "none") {
        c.tc_mode = TcMode::kNone;
      } else {
        return invalidArgument("--tc-mode: \"" + v + "\" is not htb or none");
      }
    } else if (arg == "--default-tenant") {
      TQ_ASSIGN_OR_RETURN(c.default_tenant, need());
      if (!isDns1123Label(c.default_tenant)) {
        return invalidArgument("--default-tenant: \"" + c.default_tenant +
                               "\" is not a DNS-1123 label");
      }
    } else if (arg == "--bucket-depth-us") {
      TQ_ASSIGN_OR_RETURN(std::string v, need());
      int64_t us = 0;
      const char* end = v.data() + v.size();
      const auto r = std::from_chars(v.data(), end, us);
      if (r.ec != std::errc() || r.ptr != end || us < 10 || us > 1'000'000) {
        return invalidArgument("--bucket-depth-us: \"" + v +
                               "\" is not a whole number of microseconds in 10..1000000");
      }
      c.bucket_depth_ns = us * 1'000;
    } else if (arg == "--burst") {
      TQ_ASSIGN_OR_RETURN(std::string v, need());
      auto b = parseSize(v);
      if (!b.ok()) return b.status().withContext("--burst");
      if (*b < 1500 || *b > (1ull << 32)) {
        return invalidArgument("--burst: " + v + " is outside [1500B, 4GiB]");
      }
      c.burst_bytes = *b;
    } else {
      return invalidArgument("unknown argument \"" + std::string(argv[i]) + "\"");
    }
  }
  if (c.devices.empty()) return invalidArgument("at least one --device DEV=LINK is required");
  if (!c.cleanup && !have_policyd) return invalidArgument("--policyd HOST:PORT is required");
  if (!have_node) {
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') {
      return invalidArgument("--node not given and the host name is unavailable");
    }
    c.node = host;
  }
  return c;
}

}  // namespace tq::agent
