// `tenantqosctl top`: per-tenant usage per node as the agents reported it, and cluster totals.
// Usage is held by the replica each agent reports to, so with several --server replicas top
// asks every one, keeps each node's newest report, sums the totals again and names a replica
// that did not answer.
#pragma once

#include "policy/ctl_args.h"
#include "policy/ctl_client.h"

namespace tq::policy::ctl {

int cmdTop(const Args& a, CtlContext& ctx, Client& client);

}  // namespace tq::policy::ctl
