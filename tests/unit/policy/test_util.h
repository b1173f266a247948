// Helpers of the policy/ tests: documents edited line by line, assertions on positioned errors,
// tenantqosctl run offline.
#pragma once

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "policy/ctl.h"
#include "policy/policy_file.h"

namespace tq::policy::testing {

// `doc` with line `n` (1-based) replaced by `text` (which may hold several lines, or be empty
// to delete the line).
inline std::string replaceLine(const std::string& doc, int n, const std::string& text) {
  std::istringstream in(doc);
  std::string line, out;
  for (int i = 1; std::getline(in, line); ++i) {
    if (i == n) {
      if (!text.empty()) out += text + "\n";
    } else {
      out += line + "\n";
    }
  }
  return out;
}

inline std::string allErrors(const ParsedPolicy& p) {
  std::string s;
  for (const auto& e : p.errors) s += "  " + e.toString() + "\n";
  return s.empty() ? "  (no errors)\n" : s;
}

inline ParsedPolicy parse(const std::string& yaml) { return parsePolicyYaml(yaml, "p.yaml"); }

// Asserts an error at exactly line:col for `field` whose reason contains `reason`.
inline void expectError(const ParsedPolicy& p, int line, int col, const std::string& field,
                        const std::string& reason) {
  EXPECT_FALSE(p.ok());
  for (const auto& e : p.errors) {
    if (e.line == line && e.column == col && e.field == field &&
        e.reason.find(reason) != std::string::npos) {
      EXPECT_EQ(e.file, "p.yaml");
      return;
    }
  }
  ADD_FAILURE() << "no error " << line << ":" << col << " " << field << ": ..." << reason
                << "...; got:\n"
                << allErrors(p);
}

inline void expectOnlyError(const ParsedPolicy& p, int line, int col, const std::string& field,
                            const std::string& reason) {
  EXPECT_EQ(p.errors.size(), 1u) << allErrors(p);
  expectError(p, line, col, field, reason);
}

inline void expectOk(const ParsedPolicy& p) { EXPECT_TRUE(p.ok()) << allErrors(p); }

// Runs tenantqosctl offline (no server, empty standard input): its exit code, stdout, stderr.
// Only for tests that link tq_policy_ctl.
inline int ctl(std::vector<std::string> args, std::string* out, std::string* err) {
  std::ostringstream o, e;
  std::istringstream in;
  CtlContext ctx{o, e, in, [](const std::string&) { return std::string(); }};
  int rc = runCtl(args, ctx);
  *out = o.str();
  *err = e.str();
  return rc;
}

}  // namespace tq::policy::testing
