#include "policy/ctl_top.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "common/endpoints.h"
#include "common/text.h"
#include "common/units.h"
#include "policy/ctl_output.h"
#include "proto/convert.h"

namespace tq::policy::ctl {
namespace {

namespace v1 = tenantqos::v1;

// Every page of one replica's usage view (the first page's totals cover all its nodes).
grpc::Status fetchUsage(Client& client, v1::GetUsageResponse* resp) {
  v1::GetUsageRequest req;
  for (size_t page = 0; page == 0 || !req.page_token().empty(); ++page) {
    v1::GetUsageResponse part;
    grpc::ClientContext c;
    client.prepare(&c);
    grpc::Status s = client.stub().GetUsage(&c, req, &part);
    if (!s.ok()) return s;
    // A page token that does not advance would loop forever: stop at the node count.
    if (page > part.total_nodes() || part.next_page_token() <= req.page_token()) {
      part.clear_next_page_token();
    }
    req.set_page_token(part.next_page_token());
    if (page == 0) {
      *resp = std::move(part);
    } else {
      for (auto& n : *part.mutable_nodes()) *resp->add_nodes() = std::move(n);
    }
  }
  return grpc::Status::OK;
}

// Usage is held per replica (an agent reports to the replica it watches), so with several
// --server replicas `top` asks each, keeps every node's newest report and sums the totals
// again. A replica that does not answer is named; the others still print.
int mergedUsage(const Args& a, CtlContext& ctx, const std::vector<std::string>& targets,
                v1::GetUsageResponse* out, std::vector<std::string>* missing) {
  std::map<std::string, v1::NodeUsage> nodes;
  uint64_t latest = 0;
  int rc = kExitOk;
  for (const std::string& target : targets) {
    Client one(target, a.timeout_s, a.tls);
    std::ostringstream why;
    v1::GetUsageResponse r;
    if (int c = one.connect(why); c != 0) {
      if (c == kExitUsage) {
        ctx.err << why.str();
        return c;
      }
      missing->push_back(target + " (unreachable)");
      rc = c;
      continue;
    }
    if (grpc::Status s = fetchUsage(one, &r); !s.ok()) {
      missing->push_back(target + " (" + codeName(s.error_code()) + ": " +
                         escapeControl(s.error_message()) + ")");
      rc = one.fail(s, "top", why);
      continue;
    }
    latest = std::max(latest, r.latest_version());
    for (auto& n : *r.mutable_nodes()) {
      auto [it, fresh] = nodes.try_emplace(n.node(), n);
      if (!fresh && n.last_report_unix_ms() > it->second.last_report_unix_ms()) it->second = n;
    }
  }
  if (missing->size() == targets.size()) {
    ctx.err << "tenantqosctl: top: no replica answered: ";
    for (size_t i = 0; i < missing->size(); ++i) ctx.err << (i ? ", " : "") << (*missing)[i];
    ctx.err << "\n";
    return rc;
  }
  std::map<std::string, TenantUsageReport> totals;
  for (auto& [name, n] : nodes) {
    for (const auto& t : n.tenants()) {
      TenantUsageReport& sum = totals[t.tenant()];
      sum.tenant = t.tenant();
      sum += proto::fromProto(t);
    }
    *out->add_nodes() = std::move(n);
  }
  for (const auto& [name, t] : totals) *out->add_tenants() = proto::toProto(t);
  out->set_latest_version(latest);
  return kExitOk;
}

}  // namespace

int cmdTop(const Args& a, CtlContext& ctx, Client& client) {
  auto targets = splitEndpointList(client.server(), "--server");
  v1::GetUsageResponse resp;
  std::vector<std::string> missing;  // replicas whose nodes are not shown
  if (targets.ok() && targets->size() > 1) {
    if (int rc = mergedUsage(a, ctx, *targets, &resp, &missing)) return rc;
  } else {
    if (int rc = client.connect(ctx.err)) return rc;
    if (grpc::Status s = fetchUsage(client, &resp); !s.ok()) return client.fail(s, "top", ctx.err);
  }
  for (const std::string& m : missing) {
    ctx.out << "replica " << m << ": the nodes that report to it are missing\n";
  }
  if (resp.nodes().empty()) {
    ctx.out << "no node has reported usage yet (policy version " << resp.latest_version() << ")\n";
    return kExitOk;
  }
  ctx.out << "policy version " << resp.latest_version() << ", " << resp.nodes_size()
          << (resp.nodes_size() == 1 ? " node" : " nodes") << " reporting\n";
  std::vector<std::vector<std::string>> rows = {{"NODE", "VERSION", "AGE", "TENANT", "TX RATE",
                                                 "ALLOCATED", "GUARANTEE", "LIMIT", "TX TOTAL",
                                                 "RX TOTAL", "THROTTLED", "PROCS"}};
  auto row = [](const std::string& node, const std::string& version, const std::string& age,
                const TenantUsageReport& t) {
    char throttled[32];
    std::snprintf(throttled, sizeof throttled, "%.1fs", t.throttled_seconds_total);
    return std::vector<std::string>{node,
                                    version,
                                    age,
                                    t.tenant,
                                    formatRate(t.transmit_rate_bytes_per_second),
                                    formatRate(t.allocated_rate_bytes_per_second),
                                    formatRate(t.guarantee_bytes_per_second),
                                    formatRate(t.limit_bytes_per_second),
                                    formatSize(t.transmit_bytes_total),
                                    formatSize(t.receive_bytes_total),
                                    throttled,
                                    std::to_string(t.processes)};
  };
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  std::vector<std::string> errors;
  for (const auto& n : resp.nodes()) {
    NodeUsageReport r = proto::fromNodeUsage(n);
    std::string version = std::to_string(r.policy_version);
    if (r.policy_version != resp.latest_version()) version += " (behind)";
    if (r.tenants.empty())
      rows.push_back({r.node, version, ageText(n.last_report_unix_ms(), now_ms), "-"});
    for (const TenantUsageReport& t : r.tenants) {
      rows.push_back(row(r.node, version, ageText(n.last_report_unix_ms(), now_ms), t));
    }
    for (const std::string& e : r.errors) errors.push_back(r.node + ": " + e);
  }
  for (const auto& t : resp.tenants()) rows.push_back(row("TOTAL", "", "", proto::fromProto(t)));
  printTable(ctx.out, rows);
  if (resp.omitted_tenants() > 0) {
    ctx.out << "(" << resp.omitted_tenants()
            << " node entries of tenants beyond the server's cap are not in the totals)\n";
  }
  if (!errors.empty()) {
    ctx.out << "node errors:\n";
    for (const std::string& e : errors) ctx.out << "  " << escapeControl(e) << "\n";
  }
  return kExitOk;
}

}  // namespace tq::policy::ctl
