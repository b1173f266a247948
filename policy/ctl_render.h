// `tenantqosctl render dcb|opensm`: the hardware QoS configuration of one link's tenants
// (policy/qos_render.h) from a policy file or the server's policy, for an operator to install.
#pragma once

#include "policy/ctl_args.h"
#include "policy/ctl_client.h"

namespace tq::policy::ctl {

int cmdRender(const Args& a, CtlContext& ctx, Client& client);

}  // namespace tq::policy::ctl
