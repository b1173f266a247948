#include "policy/authz.h"

#include <algorithm>

#include "common/endpoints.h"

namespace tq::policy {
namespace {

bool inGroup(const Caller& c, std::string_view group) {
  return std::find(c.groups.begin(), c.groups.end(), group) != c.groups.end();
}

std::string groupsText(const Caller& c) {
  if (c.groups.empty()) return "no groups";
  std::string s = "groups ";
  for (size_t i = 0; i < c.groups.size(); ++i) s += (i ? "," : "") + c.groups[i];
  return s;
}

// The groups that grant `p` (besides admins), for the refusal message.
std::string rolesFor(Permission p) {
  switch (p) {
    case Permission::kChange: return std::string(kAdminsGroup);
    case Permission::kRead:
    case Permission::kUsage: return std::string(kAdminsGroup) + " or " + std::string(kViewersGroup);
    case Permission::kWatch:
    case Permission::kReport:
    case Permission::kAllocate:
      return std::string(kAdminsGroup) + " or " + std::string(kAgentsGroup);
  }
  return std::string(kAdminsGroup);
}

}  // namespace

Caller makeCaller(const rpc::PeerIdentity& id, bool insecure, std::string_view peer) {
  Caller c;
  c.insecure = insecure;
  if (insecure) {
    // gRPC's peer "ipv4:127.0.0.1:5555" -> "127.0.0.1"; "ipv6:[::1]:5555" -> "[::1]".
    const std::string_view address = peer.substr(std::min(peer.find(':') + 1, peer.size()));
    Result<HostPort> hp = parseHostPort(address);
    c.identity = "insecure:" + (hp.ok() ? hp->urlHost() : std::string(address));
    return c;
  }
  c.authenticated = id.authenticated;
  c.identity = id.name;
  c.groups = id.groups;
  return c;
}

Status authorize(const Caller& c, std::string_view method, Permission p,
                 std::optional<std::string_view> node) {
  if (c.insecure) return okStatus();
  if (!c.authenticated) {
    return unauthenticated(std::string(method) +
                           ": the client certificate has no subject CN (no identity)");
  }
  if (inGroup(c, kAdminsGroup)) return okStatus();
  const bool viewer = inGroup(c, kViewersGroup);
  const bool agent = inGroup(c, kAgentsGroup);
  bool allowed = false;
  switch (p) {
    case Permission::kChange: break;
    case Permission::kRead:
    case Permission::kUsage: allowed = viewer; break;
    case Permission::kWatch: allowed = agent; break;
    case Permission::kReport:
    case Permission::kAllocate:
      if (agent && node && *node != c.identity) {
        return permissionDenied(std::string(method) + ": " + c.identity + " (" + groupsText(c) +
                                ") may report " + (p == Permission::kReport ? "usage" : "demand") +
                                " only for node \"" + c.identity + "\", not for \"" +
                                std::string(*node) + "\" (needs " + std::string(kAdminsGroup) +
                                " for other nodes)");
      }
      allowed = agent;
      break;
  }
  if (allowed) return okStatus();
  return permissionDenied(std::string(method) + ": " + c.identity + " (" + groupsText(c) +
                          ") lacks the role " + rolesFor(p));
}

}  // namespace tq::policy
