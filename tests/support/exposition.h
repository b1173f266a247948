// Reading a Prometheus text exposition (an agent's or policyd's /metrics body) in tests.
#pragma once

#include <optional>
#include <sstream>
#include <string>

namespace tq::testing {

// The value of one exposition line "name{labels} value" (the series text exactly as exposed,
// labels in their order), if present.
inline std::optional<double> seriesValue(const std::string& exposition, const std::string& series) {
  std::istringstream in(exposition);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  }
  return std::nullopt;
}

}  // namespace tq::testing
