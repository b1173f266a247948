// Translation between the wire (tenantqos.v1 protobuf) and the domain model (common/policy.h).
// The only place both kinds of type meet.
#pragma once

#include "common/policy.h"
#include "tenantqos/v1/policy.pb.h"

namespace tq::proto {

tenantqos::v1::Policy toProto(const PolicySpec& policy);
PolicySpec fromProto(const tenantqos::v1::Policy& policy);

// WatchPolicy / GetPolicy snapshot -> what the agent holds (version, policy, store epoch).
VersionedPolicy fromSnapshot(const tenantqos::v1::PolicySnapshot& snapshot);

tenantqos::v1::TenantUsage toProto(const TenantUsageReport& usage);
TenantUsageReport fromProto(const tenantqos::v1::TenantUsage& usage);

// ReportUsage: the agent sends its node's report.
tenantqos::v1::ReportUsageRequest toReportUsageRequest(const NodeUsageReport& report);
NodeUsageReport fromReportUsageRequest(const tenantqos::v1::ReportUsageRequest& request);

// GetUsage: a node's latest report as the service holds it; `received_unix_ms` is when policyd
// received it (NodeUsage.last_report_unix_ms). The agent's own timestamp is not carried.
tenantqos::v1::NodeUsage toNodeUsage(const NodeUsageReport& report, int64_t received_unix_ms);
NodeUsageReport fromNodeUsage(const tenantqos::v1::NodeUsage& node);

}  // namespace tq::proto
