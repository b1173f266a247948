#include "policy/qos_render.h"

#include "common/units.h"
#include "ib/qos_input.h"

namespace tq::policy {

bool isSafeDeviceName(std::string_view d) {
  if (d.empty() || d.size() > 15 || d == "." || d == "..") return false;
  for (char c : d) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

Result<std::string> renderDcb(const PolicySpec& policy, std::string_view link,
                              std::string_view device, std::string_view source) {
  if (!isSafeDeviceName(device)) {
    return invalidArgument("device \"" + std::string(device) +
                           "\" is not a network device name (1-15 of A-Z a-z 0-9 . _ -)");
  }
  TQ_ASSIGN_OR_RETURN(ib::QosPlanInput in, ib::qosPlanInputForLink(policy, link));
  auto plan = ib::planRoceQos(in);
  if (!plan.ok()) return plan.status().withContext("link " + std::string(link));
  const std::string dev(device);
  std::string out;
  out += "#!/bin/sh\n";
  out += "# tenantqosctl render dcb: link " + std::string(link) + " (" + formatRate(in.capacity) +
         ", " + std::to_string(in.tenants.size()) +
         (in.tenants.size() == 1 ? " tenant" : " tenants") + ") on device " + dev + "\n";
  out += "# Policy: " + std::string(source) + "\n";
  out += "# Run as root on every node whose " + dev + " carries link " + std::string(link) +
         " (iproute2 dcb, a DCB-capable NIC).\n";
  out += "# Switches must trust DSCP and map priorities to the same classes.\n";
  out += "# `dcb app replace` leaves DSCPs it does not name alone: list the table with\n";
  out += "#   dcb app show dev " + dev + " dscp-prio\n";
  out += "# and delete entries of DSCPs no tenant uses any more with\n";
  out += "#   dcb app del dev " + dev + " dscp-prio DSCP:PRIO\n";
  out += "set -e\n";
  out += ib::renderDcbScript(*plan, dev);
  return out;
}

Result<std::string> renderOpenSm(const PolicySpec& policy, std::string_view link,
                                 const ib::IbQosOptions& options, OpenSmPart part,
                                 std::string_view source) {
  TQ_ASSIGN_OR_RETURN(ib::QosPlanInput in, ib::qosPlanInputForLink(policy, link));
  auto plan = ib::planIbQos(in, options);
  if (!plan.ok()) return plan.status().withContext("link " + std::string(link));
  std::string out;
  out += "# tenantqosctl render opensm: link " + std::string(link) + " (" +
         formatRate(in.capacity) + ", " + std::to_string(in.tenants.size()) +
         (in.tenants.size() == 1 ? " tenant" : " tenants") + "), " +
         std::to_string(options.max_vls) + " data VLs, MTU " + std::to_string(options.mtu) + "\n";
  out += "# Policy: " + std::string(source) + "\n";
  const std::string options_banner =
      "opensm.conf, OpenSM's options file (default /etc/opensm/opensm.conf).\n"
      "# Set these keys there, replacing lines with the same key, and restart OpenSM: it reads\n"
      "# its options at start.\n";
  const std::string policy_banner =
      "qos-policy.conf, the file OpenSM's qos_policy_file option names\n"
      "# (default /etc/opensm/qos-policy.conf). OpenSM re-reads it at every heavy sweep.\n";
  switch (part) {
    case OpenSmPart::kOptions:
      out += "# For " + options_banner;
      out += ib::renderOpenSmOptions(*plan);
      break;
    case OpenSmPart::kQosPolicy:
      out += "# For " + policy_banner;
      out += ib::renderOpenSmQosPolicy(*plan);
      break;
    case OpenSmPart::kBoth:
      out += "# Two parts for two different files follow; copy each into its own file (or print\n";
      out += "# one part alone with --part options or --part qos-policy).\n";
      out += "#\n";
      out += "# ======== Part 1 of 2: " + options_banner;
      out += ib::renderOpenSmOptions(*plan);
      out += "#\n";
      out += "# ======== Part 2 of 2: " + policy_banner;
      out += ib::renderOpenSmQosPolicy(*plan);
      break;
  }
  return out;
}

}  // namespace tq::policy
