#include "proto/convert.h"

namespace tq::proto {

tenantqos::v1::Policy toProto(const PolicySpec& policy) {
  tenantqos::v1::Policy out;
  for (const LinkSpec& l : policy.links) {
    auto* pl = out.add_links();
    pl->set_name(l.name);
    pl->set_capacity_bytes_per_second(l.capacity_bytes_per_second);
    pl->set_headroom_percent(l.headroom_percent);
  }
  for (const TenantSpec& t : policy.tenants) {
    auto* pt = out.add_tenants();
    pt->set_name(t.name);
    pt->set_link(t.link);
    pt->set_guarantee_bytes_per_second(t.guarantee_bytes_per_second);
    pt->set_limit_bytes_per_second(t.limit_bytes_per_second);
    pt->set_weight(t.weight);
    pt->set_service_level(t.service_level);
    pt->set_dscp(t.dscp);
    for (int32_t tc : t.traffic_classes) pt->add_traffic_classes(tc);
    pt->set_share_class(t.share_class);
    for (const std::string& n : t.namespaces) pt->add_namespaces(n);
    for (const std::string& q : t.volcano_queues) pt->add_volcano_queues(q);
    pt->set_default_tenant(t.is_default);
    pt->set_unix_group(t.unix_group);
  }
  return out;
}

PolicySpec fromProto(const tenantqos::v1::Policy& policy) {
  PolicySpec out;
  for (const auto& pl : policy.links()) {
    out.links.push_back({pl.name(), pl.capacity_bytes_per_second(), pl.headroom_percent()});
  }
  for (const auto& pt : policy.tenants()) {
    TenantSpec t;
    t.name = pt.name();
    t.link = pt.link();
    t.guarantee_bytes_per_second = pt.guarantee_bytes_per_second();
    t.limit_bytes_per_second = pt.limit_bytes_per_second();
    t.weight = pt.weight();
    t.service_level = pt.service_level();
    t.dscp = pt.dscp();
    t.traffic_classes.assign(pt.traffic_classes().begin(), pt.traffic_classes().end());
    t.share_class = pt.share_class();
    t.namespaces.assign(pt.namespaces().begin(), pt.namespaces().end());
    t.volcano_queues.assign(pt.volcano_queues().begin(), pt.volcano_queues().end());
    t.is_default = pt.default_tenant();
    t.unix_group = pt.unix_group();
    out.tenants.push_back(std::move(t));
  }
  return out;
}

VersionedPolicy fromSnapshot(const tenantqos::v1::PolicySnapshot& snapshot) {
  return VersionedPolicy{snapshot.version(), fromProto(snapshot.policy()), snapshot.store_epoch()};
}

tenantqos::v1::TenantUsage toProto(const TenantUsageReport& u) {
  tenantqos::v1::TenantUsage m;
  m.set_tenant(u.tenant);
  m.set_transmit_bytes_total(u.transmit_bytes_total);
  m.set_receive_bytes_total(u.receive_bytes_total);
  m.set_transmit_rate_bytes_per_second(u.transmit_rate_bytes_per_second);
  m.set_allocated_rate_bytes_per_second(u.allocated_rate_bytes_per_second);
  m.set_guarantee_bytes_per_second(u.guarantee_bytes_per_second);
  m.set_limit_bytes_per_second(u.limit_bytes_per_second);
  m.set_throttled_seconds_total(u.throttled_seconds_total);
  m.set_processes(u.processes);
  return m;
}

TenantUsageReport fromProto(const tenantqos::v1::TenantUsage& m) {
  TenantUsageReport u;
  u.tenant = m.tenant();
  u.transmit_bytes_total = m.transmit_bytes_total();
  u.receive_bytes_total = m.receive_bytes_total();
  u.transmit_rate_bytes_per_second = m.transmit_rate_bytes_per_second();
  u.allocated_rate_bytes_per_second = m.allocated_rate_bytes_per_second();
  u.guarantee_bytes_per_second = m.guarantee_bytes_per_second();
  u.limit_bytes_per_second = m.limit_bytes_per_second();
  u.throttled_seconds_total = m.throttled_seconds_total();
  u.processes = m.processes();
  return u;
}

tenantqos::v1::ReportUsageRequest toReportUsageRequest(const NodeUsageReport& r) {
  tenantqos::v1::ReportUsageRequest m;
  m.set_node(r.node);
  m.set_policy_version(r.policy_version);
  m.set_timestamp_unix_ms(r.timestamp_unix_ms);
  for (const auto& t : r.tenants) *m.add_tenants() = toProto(t);
  for (const auto& e : r.errors) m.add_errors(e);
  return m;
}

NodeUsageReport fromReportUsageRequest(const tenantqos::v1::ReportUsageRequest& m) {
  NodeUsageReport r;
  r.node = m.node();
  r.policy_version = m.policy_version();
  r.timestamp_unix_ms = m.timestamp_unix_ms();
  for (const auto& t : m.tenants()) r.tenants.push_back(fromProto(t));
  r.errors.assign(m.errors().begin(), m.errors().end());
  return r;
}

tenantqos::v1::NodeUsage toNodeUsage(const NodeUsageReport& r, int64_t received_unix_ms) {
  tenantqos::v1::NodeUsage m;
  m.set_node(r.node);
  m.set_policy_version(r.policy_version);
  m.set_last_report_unix_ms(received_unix_ms);
  for (const auto& t : r.tenants) *m.add_tenants() = toProto(t);
  for (const auto& e : r.errors) m.add_errors(e);
  return m;
}

NodeUsageReport fromNodeUsage(const tenantqos::v1::NodeUsage& m) {
  NodeUsageReport r;
  r.node = m.node();
  r.policy_version = m.policy_version();
  r.timestamp_unix_ms = m.last_report_unix_ms();
  for (const auto& t : m.tenants()) r.tenants.push_back(fromProto(t));
  r.errors.assign(m.errors().begin(), m.errors().end());
  return r;
}

}  // namespace tq::proto
