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
    for (const TenantLinkValues& v : t.shared_links) {
      auto* pv = pt->add_shared_links();
      pv->set_link(v.link);
      if (v.guarantee_bytes_per_second) {
        pv->set_guarantee_bytes_per_second(*v.guarantee_bytes_per_second);
      }
      if (v.limit_bytes_per_second) pv->set_limit_bytes_per_second(*v.limit_bytes_per_second);
      if (v.weight) pv->set_weight(*v.weight);
    }
  }
  for (const SharedLinkSpec& l : policy.shared_links) {
    auto* pl = out.add_shared_links();
    pl->set_name(l.name);
    pl->set_capacity_bytes_per_second(l.capacity_bytes_per_second);
    pl->set_headroom_percent(l.headroom_percent);
    if (l.rail) pl->set_rail(*l.rail);
    for (const LinkGroupSpec& g : l.groups) {
      auto* pg = pl->add_groups();
      pg->set_name(g.name);
      for (const std::string& n : g.nodes) pg->add_nodes(n);
      pg->set_capacity_bytes_per_second(g.capacity_bytes_per_second);
    }
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
    for (const auto& pv : pt.shared_links()) {
      TenantLinkValues v;
      v.link = pv.link();
      if (pv.has_guarantee_bytes_per_second()) {
        v.guarantee_bytes_per_second = pv.guarantee_bytes_per_second();
      }
      if (pv.has_limit_bytes_per_second()) v.limit_bytes_per_second = pv.limit_bytes_per_second();
      if (pv.has_weight()) v.weight = pv.weight();
      t.shared_links.push_back(std::move(v));
    }
    out.tenants.push_back(std::move(t));
  }
  for (const auto& pl : policy.shared_links()) {
    SharedLinkSpec l;
    l.name = pl.name();
    l.capacity_bytes_per_second = pl.capacity_bytes_per_second();
    l.headroom_percent = pl.headroom_percent();
    if (pl.has_rail()) l.rail = pl.rail();
    for (const auto& pg : pl.groups()) {
      l.groups.push_back(
          {pg.name(), {pg.nodes().begin(), pg.nodes().end()}, pg.capacity_bytes_per_second()});
    }
    out.shared_links.push_back(std::move(l));
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
