// The agent's command line: a plain AgentConfig plus its flag table (common/flags.h), which
// parses, writes --help and the table of docs/agent.md. Pure (no I/O besides gethostname for the
// --node default; the TLS files are read by Agent::start), so every flag rule is unit-tested.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/flags.h"
#include "common/log.h"
#include "common/node_contract.h"
#include "common/status.h"
#include "rpc/tls.h"

namespace tq::agent {

// How per-tenant enforcement reaches the wire.
enum class TcMode {
  kHtb,  // HTB tree per managed device: a class per tenant, DSCP filters (TCP/IPoIB/rxe path)
  // "RDMA-like": no per-tenant classes; the device gets only a link-rate shaper (HTB class at
  // the link capacity over a FIFO, standing in for the NIC's line rate). Tenants are separated
  // by plugin pacing + the allocator alone, as on an RDMA NIC where tc sees nothing.
  kNone,
};
std::string_view tcModeName(TcMode mode);

// --device DEV=LINK: the kernel device `device` carries the policy's link `link`.
struct DeviceMapping {
  std::string device;
  std::string link;
  // The rail the device is on (--device DEV=LINK,rail=N): a shared link class with a rail is
  // charged only by this rail's devices' connections; absent: every rail's (docs/fabric.md).
  std::optional<uint32_t> rail;
  friend bool operator==(const DeviceMapping&, const DeviceMapping&) = default;
};

struct AgentConfig {
  std::string policyd;  // --policyd as given: HOST:PORT[,HOST:PORT...] (policyd replicas)
  std::vector<std::string> policyd_endpoints;  // its entries
  rpc::TlsConfig tls;  // mutual TLS to policyd (checked when the agent starts)
  std::string node;    // this node's name (default: the host name)
  std::vector<DeviceMapping> devices;
  std::string run_dir = kDefaultRunDir;
  std::string state_dir = "/var/lib/tenantqos";
  std::string metrics_address = "127.0.0.1:9464";  // HOST:PORT; port 0 picks a free port
  std::string metrics_port_file;                   // if set, the bound port is written here
  std::string sysfs_root = "/sys";  // RDMA ports are read from <sysfs_root>/class/infiniband
  LogLevel log_level = LogLevel::kInfo;
  int64_t period_ns = 10'000'000;                   // allocation period
  int64_t report_interval_ns = 1'000'000'000;       // usage reports to policyd
  int64_t fabric_report_interval_ns = 100'000'000;  // demand reports to the cluster allocator
  int64_t qp_scan_interval_ns = 5'000'000'000;      // RDMA QP listing (ungoverned QPs); 0 = off
  TcMode tc_mode = TcMode::kHtb;
  // Token-bucket depth published to the plugin: the tokens of bucket_depth_ns at the bucket's
  // rate, at least burst_bytes (common/token_bucket.h: bucketDepthBytes).
  int64_t bucket_depth_ns = 1'000'000;
  uint64_t burst_bytes = 4096;
  std::string default_tenant = "default";  // the node-wide socket's tenant
  bool cleanup = false;
  bool help = false;
};

// Parses argv (argv[0] is skipped). Errors are usage errors (the caller prints them with the
// usage text and exits 2). --help sets `help` and skips the required-flag checks.
Result<AgentConfig> parseAgentArgs(int argc, const char* const* argv);

// The agent's flags in `table`, bound to `config` (whose values are the defaults shown).
void addAgentFlags(FlagTable& table, AgentConfig* config);

// --help: the synopsis, the flags of addAgentFlags, the exit codes.
std::string agentUsage();
// The flag table of docs/agent.md.
std::string agentFlagsMarkdown();

}  // namespace tq::agent
