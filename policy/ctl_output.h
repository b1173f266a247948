// What tenantqosctl prints, shared by its commands: times, a policy as JSON, aligned tables and
// a policy diff. Everything another party wrote (names, identities, messages from a server or a
// node) is escaped before it reaches the terminal, so none can forge a row or a line.
// Pure: no I/O beyond the stream given.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "policy/policy_diff.h"
#include "policy/store.h"

namespace tq::policy::ctl {

// "2026-01-02T03:04:05Z" (UTC); "-" for no time (<= 0).
std::string timeText(int64_t unix_ms);
// How long before `now_unix_ms` `unix_ms` was: "42s", "5m", "3h"; "-" for no time.
std::string ageText(int64_t unix_ms, int64_t now_unix_ms);

// `get -o json` and `validate -o json`: the record's metadata and its policy, rates as integer
// bytes per second.
std::string policyJson(const PolicyRecord& r);

// Rows as columns two spaces apart (each as wide as its widest cell), trailing blanks trimmed,
// every cell escaped.
void printTable(std::ostream& out, const std::vector<std::vector<std::string>>& rows);

// "+ tenant a: added (...)", "~ tenant b: changed" and its details, "- ...": what changed, then
// how many tenants did not.
void printDiff(std::ostream& out, const PolicyDiff& diff);

}  // namespace tq::policy::ctl
