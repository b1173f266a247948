#include "ib/qos_input.h"

#include <string>

namespace tq::ib {

Result<QosPlanInput> qosPlanInputForLink(const PolicySpec& policy, std::string_view link) {
  const LinkSpec* spec = policy.findLink(std::string(link));
  if (spec == nullptr) {
    std::string known;
    for (const LinkSpec& l : policy.links) known += (known.empty() ? "" : ", ") + l.name;
    return notFound("link \"" + std::string(link) + "\" is not in the policy (its links: " +
                    (known.empty() ? std::string("none") : known) + ")");
  }
  QosPlanInput in;
  in.capacity = spec->capacity_bytes_per_second;
  for (const TenantSpec& t : policy.tenants) {
    if (t.link != spec->name) continue;
    QosTenant q;
    q.name = t.name;
    q.service_level = static_cast<int>(t.service_level);
    q.dscp = static_cast<int>(t.dscp);
    q.guarantee = t.guarantee_bytes_per_second;
    q.limit = t.limit_bytes_per_second;
    q.weight = t.weight;
    in.tenants.push_back(std::move(q));
  }
  return in;
}

}  // namespace tq::ib
