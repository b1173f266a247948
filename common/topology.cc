#include "common/topology.h"

namespace tq {

const TenantLinkValues* findTenantLinkValues(const TenantSpec& tenant, std::string_view link) {
  for (const TenantLinkValues& v : tenant.shared_links)
    if (v.link == link) return &v;
  return nullptr;
}

LinkShare tenantShareOn(const TenantSpec& tenant, std::string_view link) {
  LinkShare s{tenant.guarantee_bytes_per_second, tenant.limit_bytes_per_second, tenant.weight};
  if (const TenantLinkValues* v = findTenantLinkValues(tenant, link)) {
    s.guarantee = v->guarantee_bytes_per_second.value_or(s.guarantee);
    s.limit = v->limit_bytes_per_second.value_or(s.limit);
    s.weight = v->weight.value_or(s.weight);
  }
  return s;
}

}  // namespace tq
