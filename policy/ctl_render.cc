#include "policy/ctl_render.h"

#include <ostream>
#include <string>

#include "common/text.h"
#include "policy/ctl_policy.h"
#include "policy/qos_render.h"

namespace tq::policy::ctl {

int cmdRender(const Args& a, CtlContext& ctx, Client& client) {
  const std::string what = a.positional[0];
  if (what != "dcb" && what != "opensm") {
    return usageError(a, ctx, "render wants dcb or opensm, got \"" + what + "\"");
  }
  auto has = [&](const char* flag) { return a.values.count(flag) > 0; };
  if (!has("--link") || a.values.at("--link").empty()) {
    return usageError(a, ctx, "render " + what + " needs --link LINK");
  }
  const std::string link = a.values.at("--link");
  if (has("--filename") && has("--version")) {
    return usageError(a, ctx, "-f and --version exclude each other (--version is for the server)");
  }
  ib::IbQosOptions ib_options;
  OpenSmPart part = OpenSmPart::kBoth;
  std::string device;
  if (what == "dcb") {
    for (const char* f : {"--max-vls", "--mtu", "--part"}) {
      if (has(f)) return usageError(a, ctx, std::string(f) + " is for render opensm");
    }
    if (!has("--device")) return usageError(a, ctx, "render dcb needs --device DEV");
    device = a.values.at("--device");
    if (!isSafeDeviceName(device)) {
      return usageError(
          a, ctx,
          "--device \"" + device + "\" is not a network device name (1-15 of A-Z a-z 0-9 . _ -)");
    }
  } else {
    if (has("--device")) return usageError(a, ctx, "--device is for render dcb");
    if (has("--max-vls")) {
      auto v = parseU64(a.values.at("--max-vls"));
      if (!v || *v < 1 || *v > 15) return usageError(a, ctx, "--max-vls needs 1..15");
      ib_options.max_vls = static_cast<int>(*v);
    }
    if (has("--mtu")) {
      auto v = parseU64(a.values.at("--mtu"));
      if (!v || (*v != 256 && *v != 512 && *v != 1024 && *v != 2048 && *v != 4096)) {
        return usageError(a, ctx, "--mtu needs 256, 512, 1024, 2048 or 4096");
      }
      ib_options.mtu = static_cast<int>(*v);
    }
    if (has("--part")) {
      const std::string p = a.values.at("--part");
      if (p == "both") {
        part = OpenSmPart::kBoth;
      } else if (p == "options") {
        part = OpenSmPart::kOptions;
      } else if (p == "qos-policy") {
        part = OpenSmPart::kQosPolicy;
      } else {
        return usageError(a, ctx, "--part wants both, options or qos-policy, got \"" + p + "\"");
      }
    }
  }

  PolicySpec policy;
  std::string source;
  if (has("--filename")) {
    const std::string file = a.values.at("--filename");
    if (!loadValidatedPolicy(file, ctx, &policy)) return kExitRejected;
    source = "file " + (file == "-" ? std::string("<stdin>") : file);
  } else {
    PolicyRecord r;
    if (int rc = fetchPolicy(a, ctx, client, "render " + what + ": get policy", &r)) return rc;
    policy = std::move(r.policy);
    source = "tenantqos-policyd at " + client.server() + ", version " + std::to_string(r.version);
  }

  Result<std::string> text = what == "dcb" ? renderDcb(policy, link, device, source)
                                           : renderOpenSm(policy, link, ib_options, part, source);
  if (!text.ok()) {
    ctx.err << "tenantqosctl: render " << what << ": " << text.status().message() << "\n";
    return kExitRejected;
  }
  ctx.out << *text;
  return kExitOk;
}

}  // namespace tq::policy::ctl
