// `tenantqosctl render`: the hardware QoS configuration an operator installs by hand, rendered
// from a policy — the RoCE plan as a `dcb` shell script for one node's device, and the
// InfiniBand plan as the two pieces of OpenSM configuration (opensm.conf options and the
// qos-policy.conf `qos-levels` section), for one link class of the policy.
//
// Pure: the policy (already validated, from a file or from policyd) goes in, text comes out.
// The plans themselves and their arithmetic are ib/qos_plan.h; the policy -> plan input
// conversion is ib/qos_input.h. This unit only adds the framing: where each part goes, where
// the policy came from.
#pragma once

#include <string>
#include <string_view>

#include "common/policy.h"
#include "common/status.h"
#include "ib/qos_plan.h"

namespace tq::policy {

// Which OpenSM file(s) to print: both, each under a banner naming its file, or one alone (to
// redirect into that file).
enum class OpenSmPart { kBoth, kOptions, kQosPolicy };

// `source` says where the policy came from ("file policy.yaml", "tenantqos-policyd at
// 127.0.0.1:7400, version 3"); it is printed in a comment. Errors: kNotFound for a link the
// policy does not have, kInvalidArgument if the plan cannot be made (the message says why).
Result<std::string> renderDcb(const PolicySpec& policy, std::string_view link,
                              std::string_view device, std::string_view source);
Result<std::string> renderOpenSm(const PolicySpec& policy, std::string_view link,
                                 const ib::IbQosOptions& options, OpenSmPart part,
                                 std::string_view source);

// A netdev name that is safe to put in a shell script unquoted: 1-15 of [A-Za-z0-9._-], not
// "." or "..".
bool isSafeDeviceName(std::string_view device);

}  // namespace tq::policy
