#include "common/node_contract.h"

namespace tq::attach {

std::string tenantsDir(const std::string& run_dir) { return run_dir + "/tenants"; }
std::string tenantDir(const std::string& run_dir, const std::string& tenant) {
  return tenantsDir(run_dir) + "/" + tenant;
}
std::string tenantSocketPath(const std::string& run_dir, const std::string& tenant) {
  return tenantDir(run_dir, tenant) + "/agent.sock";
}
std::string nodeSocketPath(const std::string& run_dir) { return run_dir + "/agent.sock"; }
std::string trafficClassesPath(const std::string& run_dir) { return run_dir + "/traffic-classes"; }
std::string fabricPeersPath(const std::string& run_dir) { return run_dir + "/fabric-peers"; }

}  // namespace tq::attach
