// The one conversion from the policy domain model (common/policy.h) to a hardware QoS plan's
// input (ib/qos_plan.h): the tenants of one link class, with that link's capacity.
//
// Used by tenantqosctl (`render dcb`, `render opensm`) and meant for the agent when it programs
// DCB itself, so both derive the hardware classes from a policy the same way. Pure; no
// protobuf or YAML: callers translate their wire or file format to PolicySpec first.
#pragma once

#include <string_view>

#include "common/policy.h"
#include "common/status.h"
#include "ib/qos_plan.h"

namespace tq::ib {

// capacity = the link's capacity (the whole link: the policy's headroom only limits admission
// of guarantees, the hardware shares are computed against the line rate); tenants = every
// tenant whose `link` is `link`, in policy order, with name, SL, DSCP, guarantee, limit and
// weight. kNotFound naming the links the policy has when `link` is not one of them. A link
// without tenants is not an error (the plan then has only the default class).
Result<QosPlanInput> qosPlanInputForLink(const PolicySpec& policy, std::string_view link);

}  // namespace tq::ib
