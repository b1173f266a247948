// Translation between the wire (tenantqos.v1 protobuf) and the domain model (common/policy.h).
// The only place both kinds of type meet.
#pragma once

#include "common/policy.h"
#include "tenantqos/v1/policy.pb.h"

namespace tq::proto {

tenantqos::v1::Policy toProto(const PolicySpec& policy);
PolicySpec fromProto(const tenantqos::v1::Policy& policy);

}  // namespace tq::proto
