// Selection of RDMA devices and ports with NCCL_IB_HCA syntax (TENANTQOS_IB_HCA).
//
//   ""                    every device and port
//   "mlx5"                devices whose name starts with "mlx5" (prefix match), any port
//   "mlx5_0:1,mlx5_1"     port 1 of mlx5_0* and every port of mlx5_1*
//   "=mlx5_0"             exact name match
//   "^mlx5_2"             every device except mlx5_2*
//   "^=rxe0:1"            every device and port except exactly rxe0 port 1
// Spaces around entries are ignored. Thread-safety: values.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tq::ib {

struct HcaFilter {
  struct Entry {
    std::string name;
    int port = -1;  // -1: any port
  };
  bool exclude = false;  // leading '^'
  bool exact = false;    // leading '=' (after an optional '^')
  std::vector<Entry> entries;

  // An empty filter matches everything.
  bool matches(std::string_view device, int port) const;
  // Text form that parses back to the same filter.
  std::string toString() const;
};

// kInvalidArgument for an empty entry name, a bad or zero port, or a port above 255.
Result<HcaFilter> parseHcaFilter(std::string_view spec);

}  // namespace tq::ib
