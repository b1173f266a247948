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
    out.tenants.push_back(std::move(t));
  }
  return out;
}

}  // namespace tq::proto
