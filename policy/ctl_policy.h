// tenantqosctl's commands on the policy itself: validate (offline), apply, get, history and
// rollback (docs/cli.md). Each returns the program's exit code (ctl.h) after printing its result
// on ctx.out or why not on ctx.err.
#pragma once

#include <string>

#include "common/policy.h"
#include "policy/ctl_args.h"
#include "policy/ctl_client.h"

namespace tq::policy::ctl {

// Reads and validates a policy file like `validate` ("-" reads ctx.in). On errors prints every
// one and "FILE: invalid (N errors)" on stderr and returns false.
bool loadValidatedPolicy(const std::string& file, CtlContext& ctx, PolicySpec* policy);

int cmdValidate(const Args& a, CtlContext& ctx);
int cmdApply(const Args& a, CtlContext& ctx, Client& client);
int cmdGet(const Args& a, CtlContext& ctx, Client& client);
int cmdHistory(const Args& a, CtlContext& ctx, Client& client);
int cmdRollback(const Args& a, CtlContext& ctx, Client& client);

}  // namespace tq::policy::ctl
