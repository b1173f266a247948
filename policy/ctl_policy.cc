#include "policy/ctl_policy.h"

#include <istream>
#include <iterator>
#include <optional>
#include <ostream>
#include <vector>

#include "common/file_util.h"
#include "common/text.h"
#include "policy/ctl_output.h"
#include "policy/policy_file.h"
#include "policy/wire.h"

namespace tq::policy::ctl {

namespace v1 = tenantqos::v1;

bool loadValidatedPolicy(const std::string& file, CtlContext& ctx, PolicySpec* policy) {
  ParsedPolicy p;
  if (file == "-") {
    std::string text((std::istreambuf_iterator<char>(ctx.in)), std::istreambuf_iterator<char>());
    p = parsePolicyYaml(text, "<stdin>");
  } else {
    p = loadPolicyFile(file);
  }
  if (!p.ok()) {
    for (const PolicyError& e : p.errors) ctx.err << e.toString() << "\n";
    ctx.err << file << ": invalid (" << p.errors.size()
            << (p.errors.size() == 1 ? " error" : " errors") << ")\n";
    return false;
  }
  *policy = std::move(p.policy);
  return true;
}

namespace {

int printApplyResponse(std::ostream& out, const v1::ApplyPolicyResponse& r, const char* verb) {
  PolicyDiff diff = diffFromProto(r);
  if (!r.changed()) {
    out << "no change: the policy equals version " << r.version() << " (nothing stored)\n";
    return kExitOk;
  }
  printDiff(out, diff);
  if (r.dry_run()) {
    out << "dry run: would become version " << r.version() << " (nothing stored)\n";
  } else {
    out << verb << ": version " << r.version() << "\n";
  }
  return kExitOk;
}

}  // namespace

int cmdValidate(const Args& a, CtlContext& ctx) {
  std::string file = !a.positional.empty()          ? a.positional[0]
                     : a.values.count("--filename") ? a.values.at("--filename")
                                                    : "";
  if (file.empty()) return usageError(a, ctx, "validate needs FILE");
  const std::string format = a.values.count("--output") ? a.values.at("--output") : "";
  if (!format.empty() && format != "json")
    return usageError(a, ctx, "-o wants json, got \"" + format + "\"");
  PolicySpec policy;
  if (!loadValidatedPolicy(file, ctx, &policy)) return kExitRejected;
  if (format == "json") {
    PolicyRecord r;
    r.policy = std::move(policy);
    ctx.out << policyJson(r);
    return kExitOk;
  }
  ctx.out << file << ": valid (" << policy.links.size()
          << (policy.links.size() == 1 ? " link, " : " links, ") << policy.tenants.size()
          << (policy.tenants.size() == 1 ? " tenant" : " tenants");
  if (!policy.shared_links.empty()) {
    ctx.out << ", " << policy.shared_links.size()
            << (policy.shared_links.size() == 1 ? " shared link" : " shared links");
  }
  ctx.out << ")\n";
  return kExitOk;
}

int cmdApply(const Args& a, CtlContext& ctx, Client& client) {
  if (!a.values.count("--filename")) return usageError(a, ctx, "apply needs -f FILE");
  const std::string file = a.values.at("--filename");
  std::optional<uint64_t> expected;
  if (a.values.count("--expected-version")) {
    expected = parseU64(a.values.at("--expected-version"));
    if (!expected) return usageError(a, ctx, "--expected-version needs a version number");
  }
  std::string text;
  if (file == "-") {
    text.assign(std::istreambuf_iterator<char>(ctx.in), std::istreambuf_iterator<char>());
  } else {
    auto r = readFile(file, kMaxPolicyBytes);
    if (!r.ok()) {
      ctx.err << "tenantqosctl: " << r.status().message() << "\n";
      return kExitRejected;
    }
    text = std::move(*r);
  }
  if (int rc = client.connect(ctx.err)) return rc;
  v1::ApplyPolicyRequest req;
  req.set_policy_yaml(text);
  req.set_source_name(file == "-" ? "<stdin>" : file);
  req.set_dry_run(a.bools.count("--dry-run") > 0);
  if (expected) req.set_expected_version(*expected);
  v1::ApplyPolicyResponse resp;
  grpc::ClientContext c;
  client.prepare(&c);
  grpc::Status s = client.stub().ApplyPolicy(&c, req, &resp);
  if (!s.ok()) return client.fail(s, "apply " + file, ctx.err);
  return printApplyResponse(ctx.out, resp, "applied");
}

int cmdGet(const Args& a, CtlContext& ctx, Client& client) {
  std::string format = a.values.count("--output") ? a.values.at("--output") : "yaml";
  if (format != "yaml" && format != "json")
    return usageError(a, ctx, "-o wants yaml or json, got \"" + format + "\"");
  PolicyRecord r;
  if (int rc = fetchPolicy(a, ctx, client, "get", &r)) return rc;
  if (format == "json") {
    ctx.out << policyJson(r);
    return kExitOk;
  }
  std::string header = "tenantqos policy version " + std::to_string(r.version) + ", applied " +
                       timeText(r.applied_at_unix_ms) + " by " +
                       (r.applied_by.empty() ? "?" : r.applied_by);
  if (!r.source_name.empty()) header += " from " + r.source_name;
  if (r.rollback_of) header += " (rollback of version " + std::to_string(r.rollback_of) + ")";
  ctx.out << toYaml(r.policy, escapeControl(header));
  return kExitOk;
}

int cmdHistory(const Args&, CtlContext& ctx, Client& client) {
  if (int rc = client.connect(ctx.err)) return rc;
  v1::ListVersionsResponse resp;
  grpc::ClientContext c;
  client.prepare(&c);
  grpc::Status s = client.stub().ListVersions(&c, v1::ListVersionsRequest(), &resp);
  if (!s.ok()) return client.fail(s, "history", ctx.err);
  if (resp.versions().empty()) {
    ctx.out << "no policy has been applied yet\n";
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows = {
      {"VERSION", "APPLIED (UTC)", "BY", "TENANTS", "SOURCE", "CHANGES", "NOTE"}};
  bool latest_marked = false;
  for (const auto& m : resp.versions()) {
    VersionSummary v = fromVersionInfo(m);
    std::string note;
    if (!v.intact) {
      note = "CORRUPT, not served: " + v.problem;
    } else {
      if (!latest_marked) note = "latest", latest_marked = true;
      if (v.rollback_of)
        note +=
            std::string(note.empty() ? "" : ", ") + "rollback of " + std::to_string(v.rollback_of);
    }
    auto orDash = [&](const std::string& s) { return v.intact && !s.empty() ? s : "-"; };
    rows.push_back({std::to_string(v.version), v.intact ? timeText(v.applied_at_unix_ms) : "-",
                    orDash(v.applied_by), v.intact ? std::to_string(v.tenants) : "-",
                    orDash(v.source_name), orDash(v.diff_summary), note});
  }
  printTable(ctx.out, rows);
  return kExitOk;
}

int cmdRollback(const Args& a, CtlContext& ctx, Client& client) {
  auto v = parseU64(a.positional[0]);
  if (!v || *v == 0) return usageError(a, ctx, "rollback needs a version number >= 1");
  v1::RollbackRequest req;
  req.set_version(*v);
  if (a.values.count("--expected-version")) {
    auto e = parseU64(a.values.at("--expected-version"));
    if (!e) return usageError(a, ctx, "--expected-version needs a version number");
    req.set_expected_version(*e);
  }
  if (int rc = client.connect(ctx.err)) return rc;
  v1::ApplyPolicyResponse resp;
  grpc::ClientContext c;
  client.prepare(&c);
  grpc::Status s = client.stub().Rollback(&c, req, &resp);
  if (!s.ok()) return client.fail(s, "rollback to version " + std::to_string(*v), ctx.err);
  return printApplyResponse(ctx.out, resp, "rolled back");
}

}  // namespace tq::policy::ctl
