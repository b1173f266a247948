#include "common/endpoints.h"

namespace tq {

Result<std::vector<std::string>> splitEndpointList(std::string_view list, std::string_view what) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t comma = list.find(',', start);
    std::string_view item =
        list.substr(start, comma == std::string_view::npos ? list.npos : comma - start);
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
    if (item.empty()) {
      return invalidArgument(std::string(what) + ": empty entry in \"" + std::string(list) +
                             "\" (want HOST:PORT[,HOST:PORT...])");
    }
    out.emplace_back(item);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace tq
