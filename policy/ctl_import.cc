#include "policy/ctl_import.h"

#include <charconv>
#include <istream>
#include <iterator>
#include <ostream>

#include "common/file_util.h"
#include "common/units.h"
#include "policy/policy_file.h"

namespace tq::policy::ctl {

std::string parseTierCapacities(const std::string& text, VolcanoImportOptions* options) {
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(start, comma - start);
    const size_t eq = item.find('=');
    int64_t tier = -1;
    const char* end = item.data() + (eq == std::string::npos ? 0 : eq);
    auto [p, ec] = std::from_chars(item.data(), end, tier);
    if (eq == std::string::npos || ec != std::errc() || p != end || tier < 0) {
      return "\"" + item + "\" is not TIER=RATE";
    }
    auto rate = parseRate(item.substr(eq + 1));
    if (!rate.ok() || *rate == 0) {
      return "\"" + item +
             "\": " + (rate.ok() ? "the rate must be above 0" : rate.status().message());
    }
    options->tier_capacity[tier] = *rate;
    start = comma + 1;
  }
  return "";
}

int cmdImport(const Args& a, CtlContext& ctx) {
  if (a.positional[0] != "volcano") {
    return usageError(a, ctx, "import wants volcano, got \"" + a.positional[0] + "\"");
  }
  if (!a.values.count("--filename")) return usageError(a, ctx, "import volcano needs -f FILE");
  const std::string file = a.values.at("--filename");
  VolcanoImportOptions options;
  if (a.values.count("--link")) options.link = a.values.at("--link");
  if (a.values.count("--capacity")) {
    auto rate = parseRate(a.values.at("--capacity"));
    if (!rate.ok()) return usageError(a, ctx, "--capacity: " + rate.status().message());
    options.capacity = *rate;
  }
  if (a.values.count("--tier-capacity")) {
    std::string problem = parseTierCapacities(a.values.at("--tier-capacity"), &options);
    if (!problem.empty()) return usageError(a, ctx, "--tier-capacity: " + problem);
  }
  if (a.values.count("--nodes")) {
    options.nodes_source = a.values.at("--nodes");
    auto nodes = readFile(options.nodes_source, kMaxPolicyBytes);
    if (!nodes.ok()) {
      ctx.err << "tenantqosctl: import volcano: " << options.nodes_source << ": "
              << nodes.status().message() << "\n";
      return kExitRejected;
    }
    options.nodes_yaml = std::move(*nodes);
  }
  // Standard input is read whole, like `apply -f -`; importVolcanoQueues checks the size.
  Result<std::string> text =
      file == "-" ? Result<std::string>(std::string(std::istreambuf_iterator<char>(ctx.in),
                                                    std::istreambuf_iterator<char>()))
                  : readFile(file, kMaxPolicyBytes);
  if (!text.ok()) {
    ctx.err << "tenantqosctl: import volcano: " << file << ": " << text.status().message() << "\n";
    return kExitRejected;
  }
  const std::string source = file == "-" ? "<stdin>" : file;
  VolcanoImport imported = importVolcanoQueues(*text, source, options);
  if (!imported.errors.empty()) {
    for (const PolicyError& e : imported.errors) ctx.err << e.toString() << "\n";
    return kExitRejected;
  }
  ctx.out << imported.yaml;
  for (const std::string& t : imported.todos) ctx.err << "tenantqosctl: TODO: " << t << "\n";
  for (const std::string& u : imported.unmapped)
    ctx.err << "tenantqosctl: not mapped: " << u << "\n";
  const bool strict = a.bools.count("--strict") != 0;
  if (!imported.todos.empty()) return strict ? kExitRejected : kExitOk;
  if (strict && !imported.unmapped.empty()) return kExitRejected;
  // Complete: the skeleton must already be a valid policy (admission, for one).
  ParsedPolicy check = parsePolicyYaml(imported.yaml, "<import of " + source + ">");
  for (const PolicyError& e : check.errors) ctx.err << e.toString() << "\n";
  return check.ok() ? kExitOk : kExitRejected;
}

}  // namespace tq::policy::ctl
