#include "bench/fabric/caps_push.h"

#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <map>
#include <thread>
#include <vector>

#include "bench/allocate_agents.h"
#include "rpc/runtime.h"
#include "rpc/tls.h"
#include "tenantqos/v1/policy.grpc.pb.h"
#include "tests/functional/subprocess.h"
#include "tests/support/temp_dir.h"

namespace tq::bench {
namespace {

namespace v1 = tenantqos::v1;
using SteadyClock = std::chrono::steady_clock;

double percentileOf(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size()))) - 1;
  return v[std::min(i, v.size() - 1)];
}

// T tenants on N nodes (node i runs tenant i % T, so each tenant's nodes spread over the
// leaves); every tenant 2 Gbit/s guaranteed per node and on the leaf uplinks (4:1 of 400 Gbit/s
// NICs), limit half a NIC.
std::string pushPolicy(const std::vector<std::string>& nodes, size_t tenants, size_t leaf_size) {
  std::string y =
      "apiVersion: tenantqos/v1\nkind: TenantPolicy\nlinks:\n  - name: nic\n"
      "    capacity: 400Gbps\n    headroom: 5%\n";
  y += leafUplinksYaml(nodes, leaf_size, "leaf-uplink", std::to_string(leaf_size * 100) + "Gbps");
  y += "tenants:\n";
  for (size_t t = 0; t < tenants; ++t) {
    char name[32];
    std::snprintf(name, sizeof name, "team-%04zu-train", t);
    y += std::string("  - name: ") + name +
         "\n    link: nic\n    guarantee: 2Gbps\n    limit: 200Gbps\n    weight: " +
         std::to_string(1 + t % 4) + "\n    serviceLevel: " + std::to_string(t % 16) +
         "\n    dscp: " + std::to_string(t % 64) + "\n    trafficClasses: [" + std::to_string(t) +
         "]\n    shareClass: true\n";
  }
  return y;
}

}  // namespace

Result<CapsPushResult> measureCapsPush(const CapsPushOptions& o) {
  const auto t0 = SteadyClock::now();
  rpc::configureGrpcRuntime();  // the agents stand for 1,000 processes (rpc/runtime.h)
  // A TCP connection per agent, both ends here and in policyd (which inherits the limit).
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  tq::testing::TempDir dir("tq-fabric-push");
  if (!dir.ok()) return internalError("caps push: " + dir.error());
  const std::string pki = dir.path() + "/pki";
  if (std::system((o.certs_script + " cluster " + pki + " 127.0.0.1 >/dev/null").c_str()) != 0) {
    return internalError(o.certs_script + " cluster " + pki + " failed");
  }
  std::vector<std::string> nodes;
  for (size_t i = 0; i < o.agents; ++i) nodes.push_back(agentNodeName(i));
  std::cerr << "fabric_sim: caps push: issuing " << nodes.size()
            << " agent certificates (openssl)...\n";
  Status issued = issueAgentCerts(pki, nodes, 4);
  if (!issued.ok()) return issued;

  const std::string port_file = dir.path() + "/port", log = dir.path() + "/policyd.log";
  test::ChildProcess policyd(
      {o.policyd, "--listen", "127.0.0.1:0", "--data-dir", dir.path() + "/data", "--port-file",
       port_file, "--log-level", "warn", "--allocator-period", std::to_string(o.period_ms),
       // The period's round to every agent is what is measured: the load's +-20 % reports
       // include edges, whose early rounds would push to a few nodes each.
       "--allocator-coalesce-ms", "0", "--tls-ca", pki + "/ca.crt", "--tls-cert",
       pki + "/policyd.crt", "--tls-key", pki + "/policyd.key"},
      log);
  if (!test::pollUntil(
          [&] { return !test::readWholeFile(port_file).empty() || !policyd.running(); },
          std::chrono::seconds(20)) ||
      !policyd.running()) {
    return unavailable("tenantqos-policyd did not start: " + test::readWholeFile(log));
  }
  const std::string address =
      "127.0.0.1:" + std::to_string(std::atoi(test::readWholeFile(port_file).c_str()));

  // The policy, as an admin.
  rpc::TlsConfig admin;
  admin.ca_file = pki + "/ca.crt";
  admin.cert_file = pki + "/admin.crt";
  admin.key_file = pki + "/admin.key";
  auto creds = rpc::channelCredentials(admin);
  if (!creds.ok()) return creds.status();
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(16 << 20);
  auto stub = v1::PolicyService::NewStub(grpc::CreateCustomChannel(address, *creds, args));
  const size_t tenants = std::max<size_t>(1, o.agents / 16);
  v1::ApplyPolicyRequest req;
  req.set_policy_yaml(pushPolicy(nodes, tenants, o.leaf_size));
  v1::ApplyPolicyResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  const grpc::Status applied = stub->ApplyPolicy(&ctx, req, &resp);
  if (!applied.ok()) return internalError("ApplyPolicy: " + applied.error_message());

  std::vector<AllocateAgents::Node> agent_nodes;
  for (size_t i = 0; i < nodes.size(); ++i) {
    char t[32];
    std::snprintf(t, sizeof t, "team-%04zu-train", i % tenants);
    agent_nodes.push_back({nodes[i], {t}});
  }
  AllocateAgents agents({address, pki, "leaf-uplink", resp.version()}, std::move(agent_nodes));
  std::cerr << "fabric_sim: caps push: opening " << nodes.size()
            << " Allocate streams (mutual TLS, a connection each)...\n";
  // 8 Gbit/s per node: above its part of the tenant's guarantee (2 Gbit/s), so its cap is its
  // rate (not the guarantee's part); a tenant's nodes behind one leaf (at most 16 here, the smoke
  // test's) stay under its limit there (200 Gbit/s) and no uplink is full: every node's rate,
  // and cap, follows its demand.
  constexpr uint64_t kDemand = 1'000'000'000;
  Status opened = agents.open(kDemand, std::chrono::seconds(120));
  if (!opened.ok()) return opened;
  CapsPushResult r;
  r.agents = nodes.size();
  r.setup_s = std::chrono::duration<double>(SteadyClock::now() - t0).count();

  // The agents report as node agents do, every period (staggered over it, each report's
  // demand +-20 % so that nearly every round moves nearly every node's cap), and policyd runs
  // its rounds at the same period: per round, from its computation to the moment the LAST
  // agent to get a message of that round holds it. A round that reached fewer than half the
  // agents (their reports landed in the round before or after, on a busy machine) is counted,
  // not measured; one that reached fewer than 90 % is measured and counted as partial.
  agents.takeReceipts();
  agents.startLoad(1000.0 / o.period_ms, kDemand);
  // Warm-up of a second, then the measured rounds (and one more for the last round's push).
  const auto measure_for = std::chrono::milliseconds(o.period_ms * (o.rounds + 1) + 1000);
  std::this_thread::sleep_for(std::chrono::seconds(1));  // the load's warm-up, not a wait
  agents.takeReceipts();
  std::this_thread::sleep_for(measure_for - std::chrono::seconds(1));
  std::vector<std::vector<CapsReceipt>> receipts = agents.takeReceipts();
  agents.stopLoad();
  std::map<uint64_t, std::pair<size_t, int64_t>> rounds;  // round -> (agents, last ns)
  std::map<uint64_t, int64_t> computed_ms;
  for (const std::vector<CapsReceipt>& per_node : receipts) {
    for (const CapsReceipt& c : per_node) {
      auto& [count, last] = rounds[c.round];
      ++count;
      last = std::max(last, c.received_unix_ns);
      computed_ms[c.round] = c.computed_unix_ms;
    }
  }
  if (!rounds.empty()) rounds.erase(std::prev(rounds.end()));  // may still be arriving
  std::vector<double> lat;
  std::vector<double> reached;
  for (const auto& [round, got] : rounds) {
    if (got.first * 2 < nodes.size()) {
      ++r.split_rounds;
      continue;
    }
    if (got.first * 10 < nodes.size() * 9) ++r.partial_rounds;
    reached.push_back(static_cast<double>(got.first));
    lat.push_back(static_cast<double>(got.second - computed_ms[round] * 1'000'000) / 1e6);
    if (static_cast<int>(lat.size()) == o.rounds) break;
  }
  r.agents_per_round_p50 = percentileOf(reached, 0.5);
  r.rounds = static_cast<int>(lat.size());
  r.p50_ms = percentileOf(lat, 0.50);
  r.p99_ms = percentileOf(lat, 0.99);
  r.max_ms = lat.empty() ? 0 : *std::max_element(lat.begin(), lat.end());
  agents.close();
  policyd.signal(SIGTERM);
  policyd.wait(std::chrono::seconds(10));
  return r;
}

}  // namespace tq::bench
