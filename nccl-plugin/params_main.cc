// tenantqos-plugin-params: prints the plugin's environment parameters.
//   tenantqos-plugin-params --markdown   the table of docs/plugin.md
//   tenantqos-plugin-params              NAME=DEFAULT lines
#include <cstdio>
#include <cstring>

#include "nccl-plugin/params.h"

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--markdown") == 0) {
    std::fputs(tq::plugin::paramsMarkdownTable().c_str(), stdout);
    return 0;
  }
  for (const auto& spec : tq::plugin::paramSpecs()) {
    std::printf("%s=%s\n", spec.env, spec.default_text);
  }
  return 0;
}
