// Inputs of the tc plan (tc/plan.h) for tests, one tenant a line.
#pragma once

#include <cstdint>
#include <string>

#include "tc/plan.h"

namespace tq::testing {

// A tenant's class: guarantee and limit in bytes/s, weight, DSCP.
inline tc::TenantClassSpec tenantClass(std::string name, uint64_t guarantee, uint64_t limit,
                                       uint32_t weight, uint8_t dscp) {
  tc::TenantClassSpec t;
  t.name = std::move(name);
  t.guarantee = guarantee;
  t.limit = limit;
  t.weight = weight;
  t.dscp = dscp;
  return t;
}

}  // namespace tq::testing
