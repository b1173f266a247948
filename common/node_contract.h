// The node contract: the names and paths the agent makes on a node and the NCCL plugin and the
// admission webhook rely on, in the one header all three include. Change one here and every
// side follows (docs/agent.md: the node contract; docs/deploy.md: the pod recipe).
//
// Under the run directory (the agent's --run-dir, the plugin's TENANTQOS_RUN_DIR, the webhook's
// --run-dir):
//   tenants/<tenant>/agent.sock  one per tenant, in a directory whose group and mode decide who
//                                reaches it (common/attach_protocol.h); a pod mounts only its
//                                tenant's directory (hostPath of type kTenantDirHostPathType).
//   agent.sock                   node-wide: the default tenant, for every process.
//   traffic-classes              which tenant lists which NCCL trafficClass.
//   fabric-peers                 which peers are behind which shared fabric link
//                                (common/fabric_peers.h).
// Pure string handling; thread-safe.
#pragma once

#include <string>

namespace tq {

inline constexpr char kDefaultRunDir[] = "/run/tenantqos";

// The plugin's environment variables (nccl-plugin/params.h) that the webhook writes into a pod:
// the tenant the process asks for and where the agent's sockets are. Every variable of the
// plugin starts with kPluginEnvPrefix (the webhook refuses pods that set others of them).
inline constexpr char kPluginEnvPrefix[] = "TENANTQOS_";
inline constexpr char kTenantEnv[] = "TENANTQOS_TENANT";
inline constexpr char kRunDirEnv[] = "TENANTQOS_RUN_DIR";

// The hostPath type of a pod's tenant directory: the kubelet waits until the agent made it.
inline constexpr char kTenantDirHostPathType[] = "Directory";

namespace attach {

// <run_dir>/tenants: the tenants' directories.
std::string tenantsDir(const std::string& run_dir);
std::string tenantDir(const std::string& run_dir, const std::string& tenant);
std::string tenantSocketPath(const std::string& run_dir, const std::string& tenant);
std::string nodeSocketPath(const std::string& run_dir);
std::string trafficClassesPath(const std::string& run_dir);
std::string fabricPeersPath(const std::string& run_dir);

}  // namespace attach

}  // namespace tq
