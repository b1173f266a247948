// `tenantqosctl import volcano`: a policy skeleton from Volcano Queue and HyperNode objects
// (policy/volcano_import.h), offline.
#pragma once

#include <string>

#include "policy/ctl_args.h"
#include "policy/volcano_import.h"

namespace tq::policy::ctl {

// --tier-capacity "1=400Gbps,2=800Gbps" into options->tier_capacity; the problem, or "".
std::string parseTierCapacities(const std::string& text, VolcanoImportOptions* options);

int cmdImport(const Args& a, CtlContext& ctx);

}  // namespace tq::policy::ctl
