// Lists of service endpoints as flags take them: "A,B,C" (--policyd, --server, --etcd-endpoints).
// Each entry is a gRPC target (HOST:PORT; a DNS name may resolve to several addresses, which
// gRPC's pick_first tries in turn). Pure string handling; callers validate each entry.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tq {

// Splits on commas and trims blanks around entries. kInvalidArgument for an empty list or an
// empty entry ("a,,b"), naming `what` (the flag).
Result<std::vector<std::string>> splitEndpointList(std::string_view list, std::string_view what);

}  // namespace tq
