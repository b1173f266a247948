// policy/ domain types <-> tenantqos.v1 messages (the policy and usage parts live in
// proto/convert.h). Only policy/*.cc include this; headers of policy/ stay protobuf-free.
#pragma once

#include "policy/policy_diff.h"
#include "policy/store.h"
#include "tenantqos/v1/policy.pb.h"

namespace tq::policy {

tenantqos::v1::PolicySnapshot toSnapshot(const PolicyRecord& record, bool with_source = true);
PolicyRecord fromSnapshot(const tenantqos::v1::PolicySnapshot& snapshot);

tenantqos::v1::VersionInfo toVersionInfo(const VersionSummary& summary);
VersionSummary fromVersionInfo(const tenantqos::v1::VersionInfo& info);

void toProto(const PolicyDiff& diff, tenantqos::v1::ApplyPolicyResponse* out);
PolicyDiff diffFromProto(const tenantqos::v1::ApplyPolicyResponse& response);

}  // namespace tq::policy
