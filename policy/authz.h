// Who may call which PolicyService method: roles from the caller's verified client certificate
// (docs/policy.md, "Authentication and roles"). Pure: the gRPC layer builds the Caller from the
// connection and asks here before doing anything else.
//
//   tenantqos:admins   every method
//   tenantqos:viewers  GetPolicy, ListVersions (history), GetUsage (top)
//   tenantqos:agents   WatchPolicy, and ReportUsage and Allocate (the cluster allocator's
//                      demand and caps) for the node named by the certificate's CN
// A server run with --insecure authenticates nobody: every caller is "insecure:HOST" (its peer
// address without the port) with every role, so plaintext is for a loopback sandbox only.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "rpc/tls.h"

namespace tq::policy {

inline constexpr std::string_view kAdminsGroup = "tenantqos:admins";
inline constexpr std::string_view kViewersGroup = "tenantqos:viewers";
inline constexpr std::string_view kAgentsGroup = "tenantqos:agents";

enum class Permission {
  kChange,    // ApplyPolicy, Rollback
  kRead,      // GetPolicy, ListVersions
  kUsage,     // GetUsage
  kWatch,     // WatchPolicy
  kReport,    // ReportUsage (agents: their own node only)
  kAllocate,  // Allocate: demand in, caps out (agents: their own node only)
};

struct Caller {
  std::string identity;  // the certificate's CN, or "insecure:HOST"
  std::vector<std::string> groups;
  bool authenticated = false;  // a verified certificate with a CN
  bool insecure = false;       // the server runs --insecure: every role
};

// The caller of a call on a server that is (not) --insecure; `peer` is gRPC's peer string
// ("ipv4:10.0.0.1:5432").
Caller makeCaller(const rpc::PeerIdentity& peer_identity, bool insecure, std::string_view peer);

// ok, or kUnauthenticated (no verified identity) / kPermissionDenied naming the method, the
// identity, its groups and the role it lacks. `node`: the node a ReportUsage or Allocate
// request names, which an agent must be (nullopt: the role alone, before the request is parsed).
Status authorize(const Caller& caller, std::string_view method, Permission permission,
                 std::optional<std::string_view> node = std::nullopt);

}  // namespace tq::policy
