// The policy file: YAML text -> validated PolicySpec, PolicySpec -> canonical YAML.
//
// This is the only unit that sees YAML (read with libyaml: policy/yaml_doc.h). Syntax errors and
// any exception are turned into positioned errors here, so callers only ever see PolicyError
// values.
//
// Errors are collected, not just the first: a file with three mistakes reports three lines,
//   policy.yaml:12:12: tenants[1].limit: must be >= guarantee (limit 10Gbps < guarantee 20Gbps)
// FILE:LINE:COL are 1-based; FIELD is a path with 0-based indexes. Any error rejects the whole
// file (ParsedPolicy::ok() is false and `policy` must not be used).
//
// Rules (docs/policy.md is the user-facing reference):
//   - apiVersion "tenantqos/v1", kind "TenantPolicy", `links` and `tenants` sequences required;
//   - unknown fields, duplicate keys, wrong types and malformed YAML are errors;
//   - links: DNS-1123 name (unique), capacity > 0, 0 <= headroom < 100 (default 0);
//   - tenants: DNS-1123 name (unique), link must exist, guarantee <= limit <= link capacity,
//     limit > 0, weight 1..10000 (default 1), serviceLevel 0..15, dscp 0..63, trafficClasses
//     0..2^31-1 each mapping to exactly one tenant, shareClass (default false);
//   - namespaces (DNS-1123 labels) and volcanoQueues (DNS-1123 subdomains): each names one
//     tenant; at most one tenant sets default: true;
//   - two tenants with the same serviceLevel or dscp need shareClass: true on both;
//   - admission per link: sum of guarantees <= allocatableCapacity() (common/capacity.h);
//   - at most kMaxTenants tenants, kMaxLinks links, kMaxTrafficClasses per tenant;
//   - the file is at most kMaxPolicyBytes, kMaxYamlDepth deep, kMaxYamlNodes nodes (checked
//     before parsing).
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/policy.h"
#include "common/shm_layout.h"
#include "common/status.h"

namespace tq::policy {

inline constexpr std::string_view kApiVersion = "tenantqos/v1";
inline constexpr std::string_view kKind = "TenantPolicy";
inline constexpr uint64_t kMaxPolicyBytes = 4u << 20;       // 4 MiB
inline constexpr size_t kMaxTenants = kMaxTenantsPerAgent;  // common/policy.h
inline constexpr size_t kMaxLinks = 1000;
// Per tenant: what the node contract (the tenant's shared-memory file) holds.
inline constexpr size_t kMaxTrafficClasses = shm::kMaxTrafficClasses;
inline constexpr size_t kMaxPlatformNames = 1000;  // per tenant: namespaces, volcanoQueues
inline constexpr uint32_t kMaxWeight = 10000;
// The parse budget (memory): before the parser builds its tree, a scan of the bytes rejects text
// nested deeper than kMaxYamlDepth (flow brackets, block indentation levels, "- " indicators)
// or with more than kMaxYamlNodes nodes. Within these, one parse holds a bounded tree (measured
// figures: docs/policy.md, "Resource limits").
inline constexpr size_t kMaxYamlDepth = 32;
inline constexpr size_t kMaxYamlNodes = 200'000;
inline constexpr uint32_t kMaxServiceLevel = 15;
inline constexpr uint32_t kMaxDscp = 63;

struct PolicyError {
  std::string file;
  int line = 0;       // 1-based; 0 when the error has no position (structured input)
  int column = 0;     // 1-based
  std::string field;  // "tenants[1].limit"; "(yaml)" for syntax errors, "(file)" for the file
  std::string reason;

  // "FILE:LINE:COL: FIELD: reason" ("FILE: FIELD: reason" without a position).
  std::string toString() const;
  friend bool operator==(const PolicyError&, const PolicyError&) = default;
};

struct ParsedPolicy {
  PolicySpec policy;                // valid only when ok()
  std::vector<PolicyError> errors;  // sorted by position

  bool ok() const { return errors.empty(); }
  // kInvalidArgument listing every error, one per line; ok when there are none.
  Status status() const;
};

// Parses and validates policy YAML. `source_name` is the FILE shown in errors.
ParsedPolicy parsePolicyYaml(std::string_view text, std::string_view source_name);

// Reads `path` (rejecting files over kMaxPolicyBytes before reading them) and parses it.
// Read failures are reported as a single "(file)" error.
ParsedPolicy loadPolicyFile(const std::string& path);

// The semantic rules alone, for a PolicySpec that did not come from YAML. Errors carry no
// position. parsePolicyYaml applies the same rules.
std::vector<PolicyError> validatePolicy(const PolicySpec& policy,
                                        std::string_view source_name = "<policy>");

// Joins errors into one kInvalidArgument Status (one error per line).
Status errorsToStatus(const std::vector<PolicyError>& errors);

// Canonical YAML for a policy: fixed key order, rates written with formatRate when that is
// exact (else as "<n>B/s"), optional fields only when not default. parsePolicyYaml(toYaml(p))
// gives back p exactly. `header_comment` (may be empty) is emitted as leading "# " lines.
std::string toYaml(const PolicySpec& policy, std::string_view header_comment = {});

// Kubernetes object names (a Volcano Queue's): DNS-1123 labels joined by dots, <= 253 chars.
bool isDns1123Subdomain(std::string_view name);

// Exact text for a rate that parses back to the same bytes/s: "40Gbps", or "1234567B/s".
std::string exactRateText(uint64_t bytes_per_second);

}  // namespace tq::policy
