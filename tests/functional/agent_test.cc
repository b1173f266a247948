// tenantqos-agent against the real tenantqos-policyd, real tc in a namespace made by the test,
// real shm files read through the plugin-side reader. See agent_harness.h for the fixture.
#include <gtest/gtest.h>

#include "agent_harness.h"
#include "common/units.h"
#include "tc/plan.h"
#include "tests/support/fake_sysfs.h"
#include "tests/support/tiny_json.h"

namespace tq::agent::functional {
namespace {

constexpr uint64_t kMbit = 1'000'000;

const std::vector<YamlLink> kFabric = {{"fabric", "1Gbps"}};
const YamlTenant kA = {"tenant-a", "fabric", "400Mbps", "600Mbps", 2, 1, 26, 1};
const YamlTenant kB = {"tenant-b", "fabric", "200Mbps", "400Mbps", 1, 2, 18, 2};

std::string v1() { return policyYaml(kFabric, {kA, kB}); }
// What v1 enforces: tenant -> {guarantee, limit} in bits/s.
const std::map<std::string, std::pair<uint64_t, uint64_t>> kV1Rates = {
    {"tenant-a", {400 * kMbit, 600 * kMbit}}, {"tenant-b", {200 * kMbit, 400 * kMbit}}};
std::string v2() {
  YamlTenant b = kB;
  b.limit = "500Mbps";
  YamlTenant c = {"tenant-c", "fabric", "100Mbps", "900Mbps", 1, 3, 10, 3};
  return policyYaml(kFabric, {kA, b, c});
}

// The agent programs payload rates as the wire rates that carry them (tc/plan.h) on the test's
// veths (MTU 1500); tc prints rates in whole kbit.
bool tcRateCarries(uint64_t tc_bits, uint64_t payload_bits) {
  tq::tc::WireFraming veth;
  veth.mtu = 1500;
  const uint64_t wire = tq::tc::wireRateForPayload(payload_bits / 8, veth) * 8;
  return (tc_bits > wire ? tc_bits - wire : wire - tc_bits) <= 1000;
}

class PrivilegedAgentTest : public AgentHarness {
 protected:
  // tc on dev0 and the shm files show `version` with these tenants' (guarantee, limit) in bits.
  // `attachable`: also check what a process attaching now gets (needs a running agent).
  bool enforces(uint64_t version,
                const std::map<std::string, std::pair<uint64_t, uint64_t>>& tenants,
                bool attachable = true) {
    auto classes = tcClasses(dev0_);
    if (classes.count("1:1") == 0 || classes["1:1"].ceil_bits != 1000 * kMbit) return false;
    if (classes.count("1:2") == 0) return false;  // default class
    if (classes.size() != 2 + tenants.size()) return false;
    for (const auto& [name, gl] : tenants) {
      const std::string id = tenantClass(dev0_, name);
      if (id.empty() || classes.count(id) == 0) return false;
      if (!tcRateCarries(classes[id].rate_bits, gl.first)) return false;
      if (!tcRateCarries(classes[id].ceil_bits, gl.second)) return false;
      if (classes[id].parent != "1:1") return false;
      if (!attachable) continue;
      auto p = shmParams(name);
      if (!p || p->policy_version != version || p->deleted) return false;
      if (p->guarantee_bytes_per_second * 8 != gl.first) return false;
      if (p->limit_bytes_per_second * 8 != gl.second) return false;
    }
    return true;
  }
  std::string describe() {
    std::string s = "tc:\n" + tcQdisc(dev0_);
    auto r = ns_->run({"tc", "class", "show", "dev", dev0_});
    s += r.ok() ? *r : r.status().toString();
    s += "\ntc-classes:\n" + readText(state_dir_ + "/tc-classes");
    s += "\nshm:\n" + describeShm({"tenant-a", "tenant-b", "tenant-c"});
    s += "\nagent log:\n" + readText(agent_log_);
    return s;
  }
};

TEST_F(PrivilegedAgentTest, AppliesV1ThenV2WithinOneSecond) {
  startPolicyd();
  startAgent();
  EXPECT_TRUE(eventually([&] { return get("/readyz").status == 503; }, 5000));
  EXPECT_EQ(get("/healthz").status, 200);

  apply(v1());
  ASSERT_TRUE(eventually([&] { return enforces(1, kV1Rates); }, 1000)) << describe();
  auto a = shmParams("tenant-a");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->dscp, 26u);
  EXPECT_EQ(a->service_level, 1u);
  EXPECT_EQ(a->weight, 2u);
  EXPECT_EQ(a->traffic_classes, std::vector<int32_t>{1});
  ASSERT_EQ(a->buckets.size(), 2u) << "tx and rx on the one device";
  for (const BucketSpec& b : a->buckets) {
    EXPECT_GT(b.rate_bytes_per_second, 0u);
    EXPECT_LE(b.rate_bytes_per_second, 600 * kMbit / 8);
    EXPECT_EQ(b.name, dev0_);
  }
  EXPECT_TRUE(a->paced);
  EXPECT_TRUE(eventually([&] { return get("/readyz").status == 200; }, 1000));
  EXPECT_NE(get("/readyz").body.find("policy v1"), std::string::npos);
  EXPECT_TRUE(eventually([&] { return metric("tenantqos_policy_version") == 1.0; }, 1000));
  EXPECT_EQ(metric("tenantqos_policyd_connected"), 1.0);
  const std::string class_a = tenantClass(dev0_, "tenant-a");

  apply(v2());
  ASSERT_TRUE(eventually(
      [&] {
        return enforces(2, {{"tenant-a", {400 * kMbit, 600 * kMbit}},
                            {"tenant-b", {200 * kMbit, 500 * kMbit}},
                            {"tenant-c", {100 * kMbit, 900 * kMbit}}});
      },
      1000))
      << describe();
  EXPECT_EQ(tenantClass(dev0_, "tenant-a"), class_a) << "an unchanged tenant kept its class";

  // v3 removes tenant-b: its class, filters and (unused) shm file go.
  apply(policyYaml(kFabric, {kA}));
  ASSERT_TRUE(eventually(
      [&] {
        return enforces(3, {{"tenant-a", {400 * kMbit, 600 * kMbit}}}) && !shmExists("tenant-b");
      },
      1000))
      << describe();
  auto filters = ns_->run({"tc", "filter", "show", "dev", dev0_});
  ASSERT_TRUE(filters.ok());
  EXPECT_EQ(filters->find("flowid " + tenantClass(dev0_, "tenant-b") + " "), std::string::npos);

  // Usage reaches policyd (tenantqosctl top), with the plugin's counters.
  {
    auto r = tq::testing::attachAs(attach::tenantSocketPath(run_dir_, "tenant-a"), "tenant-a");
    ASSERT_TRUE(r.ok()) << r.status().toString();
    shm::Counters* slot = r->view->counters(0);
    ASSERT_NE(slot, nullptr);
    slot->bytes.store(123'456'789);
    EXPECT_TRUE(eventually(
        [&] {
          auto top = ctl({"top"});
          return top.output.find("node1") != std::string::npos &&
                 top.output.find("tenant-a") != std::string::npos &&
                 top.output.find(formatSize(123'456'789)) != std::string::npos;
        },
        5000))
        << ctl({"top"}).output;
    EXPECT_TRUE(eventually(
        [&] {
          return metric(
                     R"(tenantqos_tenant_transmit_bytes_total{node="node1",tenant="tenant-a"})") ==
                 123456789.0;
        },
        2000));
    EXPECT_EQ(metric(R"(tenantqos_tenant_processes{node="node1",tenant="tenant-a"})"), 1.0);
  }
  stopAgent();
}

TEST_F(PrivilegedAgentTest, PolicydKilledLeavesEnforcementAndReportsDisconnected) {
  startPolicyd();
  startAgent();
  apply(v1());
  const auto& want = kV1Rates;
  ASSERT_TRUE(eventually([&] { return enforces(1, want); }, 1000)) << describe();
  ASSERT_TRUE(eventually([&] { return metric("tenantqos_policyd_connected") == 1.0; }, 2000));

  killPolicyd();
  EXPECT_TRUE(eventually([&] { return metric("tenantqos_policyd_connected") == 0.0; }, 3000))
      << readText(agent_log_);
  // Three more reconnect attempts later (backoff from 100 ms), nothing changed.
  const double waits = metric("tenantqos_policyd_reconnect_waits_total").value_or(0);
  ASSERT_TRUE(eventually(
      [&] { return metric("tenantqos_policyd_reconnect_waits_total").value_or(0) >= waits + 3; },
      10'000))
      << readText(agent_log_);
  EXPECT_TRUE(enforces(1, want)) << describe();
  EXPECT_EQ(get("/readyz").status, 200);
  EXPECT_EQ(metric("tenantqos_policy_version"), 1.0);
  EXPECT_EQ(metric("tenantqos_policyd_connected"), 0.0);
  EXPECT_TRUE(agent_->running());
}

TEST_F(PrivilegedAgentTest, RefusesAPolicydWhoseCertificateDoesNotChainToItsCa) {
  // A rogue policyd: it trusts our CA (so it would accept the agent) but its own certificate
  // comes from another CA.
  ASSERT_TRUE(pki_->newCa("rogue-ca"));
  ASSERT_TRUE(pki_->issue("rogue", "tenantqos-policyd", {}, "rogue-ca",
                          "--san IP:127.0.0.1,DNS:localhost"));
  policyd_cert_ = "rogue";
  startPolicyd();
  const int port = policyd_port_;
  startAgent();
  // Three connection attempts refused (each waits its backoff): never connected.
  ASSERT_TRUE(eventually(
      [&] { return metric("tenantqos_policyd_reconnect_waits_total").value_or(0) >= 3; }, 10'000))
      << readText(agent_log_);
  EXPECT_EQ(metric("tenantqos_policyd_connected"), 0.0) << readText(agent_log_);
  EXPECT_TRUE(agent_->running());
  // The real policyd on the same address: the agent connects and enforces.
  killPolicyd();
  policyd_cert_ = "policyd";
  startPolicyd(port);
  apply(v1());
  EXPECT_TRUE(eventually([&] { return metric("tenantqos_policyd_connected") == 1.0; }, 10000))
      << readText(agent_log_);
  EXPECT_TRUE(eventually([&] { return metric("tenantqos_policy_version") == 1.0; }, 5000));
}

// The agent's certificate files are replaced in place (as cert-manager does) by ones from a new
// CA, and policyd restarts trusting and presenting that CA only: the old client certificate is
// refused, so the agent keeps following (and reporting) only if it re-read its files.
TEST_F(PrivilegedAgentTest, FollowsPolicydAcrossACertificateRotationWithoutARestart) {
  const std::string live = tmp_ + "/live";
  ASSERT_EQ(::mkdir(live.c_str(), 0700), 0);
  auto install = [&](const std::string& ca, const std::string& cert) {
    for (const auto& [from, to] :
         {std::pair{pki_->crt(ca), live + "/ca.crt"}, std::pair{pki_->crt(cert), live + "/tls.crt"},
          std::pair{pki_->key(cert), live + "/tls.key"}}) {
      auto bytes = readFile(from);
      ASSERT_TRUE(bytes.ok()) << bytes.status().toString();
      ASSERT_TRUE(writeFileAtomic(to, *bytes, 0600).ok());
    }
  };
  install("ca", "agent-node1");
  agent_tls_ = {"--tls-ca",        live + "/ca.crt", "--tls-cert",
                live + "/tls.crt", "--tls-key",      live + "/tls.key"};
  startPolicyd();
  startAgent();
  apply(v1());
  ASSERT_TRUE(eventually([&] { return metric("tenantqos_policy_version") == 1.0; }, 5000))
      << readText(agent_log_);

  ASSERT_TRUE(pki_->newCa("ca2"));
  ASSERT_TRUE(
      pki_->issue("policyd2", "tenantqos-policyd", {}, "ca2", "--san IP:127.0.0.1,DNS:localhost"));
  ASSERT_TRUE(pki_->issue("agent2-node1", "node1", {"tenantqos:agents"}, "ca2"));
  ASSERT_TRUE(pki_->issue("admin2", "admin", {"tenantqos:admins"}, "ca2"));
  install("ca2", "agent2-node1");
  const int port = policyd_port_;
  killPolicyd();
  ca_ = "ca2";
  policyd_cert_ = "policyd2";
  admin_cert_ = "admin2";
  startPolicyd(port);
  apply(v2());
  EXPECT_TRUE(eventually([&] { return metric("tenantqos_policy_version") == 2.0; }, 20'000))
      << readText(agent_log_);
  EXPECT_TRUE(
      eventually([&] { return ctl({"top"}).output.find("node1") != std::string::npos; }, 10'000))
      << "usage reports over the rotated certificate: " << ctl({"top"}).output;
  EXPECT_TRUE(agent_->running());
}

TEST_F(PrivilegedAgentTest, RestartWhilePolicydDownRestoresFromPersistedSnapshot) {
  startPolicyd();
  startAgent();
  apply(v1());
  const auto& want = kV1Rates;
  ASSERT_TRUE(eventually([&] { return enforces(1, want); }, 1000)) << describe();
  killPolicyd();

  // SIGTERM leaves enforcement in place (fail-static).
  stopAgent();
  EXPECT_TRUE(enforces(1, want, /*attachable=*/false)) << "SIGTERM must not remove enforcement\n"
                                                       << describe();

  // Wipe enforcement, then restart the agent with policyd still down: the persisted snapshot
  // alone brings it back.
  ASSERT_TRUE(ns_->run({"tc", "qdisc", "del", "dev", dev0_, "root"}).ok());
  ASSERT_EQ(std::system(("rm -rf " + run_dir_ + "/tenants/*").c_str()), 0);
  ASSERT_FALSE(shmExists("tenant-a"));
  startAgent();
  EXPECT_TRUE(eventually([&] { return enforces(1, want); }, 2000)) << describe();
  EXPECT_EQ(get("/readyz").status, 200);
  EXPECT_EQ(metric("tenantqos_policyd_connected"), 0.0);
  EXPECT_NE(readText(agent_log_).find("enforcing persisted policy v1"), std::string::npos);
}

TEST_F(PrivilegedAgentTest, CorruptedSnapshotIsIgnoredAndAgentWaitsForPolicyd) {
  startPolicyd();
  const int port = policyd_port_;
  startAgent();
  apply(v1());
  const auto& want = kV1Rates;
  ASSERT_TRUE(eventually([&] { return enforces(1, want); }, 1000)) << describe();
  stopAgent();
  killPolicyd();

  // Corrupt one byte of the persisted snapshot's body; wipe enforcement.
  const std::string snap = state_dir_ + "/policy.snapshot";
  std::string data = readText(snap);
  ASSERT_GT(data.size(), 80u);
  data[data.size() - 10] ^= 0x5a;
  ASSERT_TRUE(writeFileAtomic(snap, data).ok());
  ASSERT_TRUE(ns_->run({"tc", "qdisc", "del", "dev", dev0_, "root"}).ok());
  ASSERT_EQ(std::system(("rm -rf " + run_dir_ + "/tenants/*").c_str()), 0);

  startAgent();
  EXPECT_TRUE(eventually(
      [&] {
        return readText(agent_log_).find("ignoring the persisted policy") != std::string::npos;
      },
      2000))
      << readText(agent_log_);
  EXPECT_NE(readText(agent_log_).find("checksum mismatch"), std::string::npos);
  // Two reads of the kernel's counters: the reconcile thread is running and enforces nothing.
  ASSERT_TRUE(
      eventually([&] { return metric("tenantqos_stats_reads_total").value_or(0) >= 2; }, 5000));
  auto ready = get("/readyz");
  EXPECT_EQ(ready.status, 503);
  EXPECT_NE(ready.body.find("not ready"), std::string::npos) << ready.body;
  EXPECT_EQ(tcClasses(dev0_).size(), 0u) << "nothing may be enforced from a corrupt snapshot";
  EXPECT_FALSE(shmExists("tenant-a"));

  // policyd comes back on its address: the agent connects (backoff <= 5 s) and enforces.
  startPolicyd(port);
  ASSERT_EQ(policyd_port_, port);
  EXPECT_TRUE(eventually([&] { return enforces(1, want); }, 10'000)) << describe();
  EXPECT_TRUE(eventually([&] { return get("/readyz").status == 200; }, 2000));
  EXPECT_TRUE(eventually([&] { return metric("tenantqos_policyd_connected") == 1.0; }, 2000));
}

TEST_F(PrivilegedAgentTest, UnknownDeviceKeepsLastGoodStateCountsReportsAndRetries) {
  const std::string ghost = prefix_ + "g";
  extra_agent_args_ = {"--device", ghost + "=storage"};
  startPolicyd();
  startAgent();
  apply(v1());  // no "storage" link yet: ghost is simply not managed
  const auto& want = kV1Rates;
  ASSERT_TRUE(eventually([&] { return enforces(1, want); }, 1000)) << describe();

  // v2 changes tenant-a and puts tenant-s on link storage = the missing device.
  YamlTenant a = kA;
  a.limit = "700Mbps";
  YamlTenant s = {"tenant-s", "storage", "10Mbps", "50Mbps", 1, 4, 12, 4};
  apply(policyYaml({{"fabric", "1Gbps"}, {"storage", "100Mbps"}}, {a, kB, s}));
  EXPECT_TRUE(eventually(
      [&] {
        auto e = metric("tenantqos_reconcile_errors_total");
        return e && *e >= 2;  // the first attempt and at least one retry
      },
      3000))
      << readText(agent_log_);
  EXPECT_TRUE(enforces(1, want)) << "last good state must be kept\n" << describe();
  EXPECT_FALSE(shmExists("tenant-s"));
  EXPECT_EQ(metric("tenantqos_policy_version"), 1.0);
  EXPECT_EQ(metric("tenantqos_reconcile_unresolved_errors"), 1.0);
  EXPECT_EQ(get("/readyz").status, 200) << "still enforcing v1";
  // Reported to policyd.
  EXPECT_TRUE(eventually(
      [&] {
        auto top = ctl({"top"});
        return top.output.find("node1: apply policy v2: ") != std::string::npos &&
               top.output.find(ghost) != std::string::npos;
      },
      3000))
      << ctl({"top"}).output;

  // The device appears: the next retry (backoff <= 30 s; early retries are sub-second) applies.
  ASSERT_TRUE(tq::testing::addVethPair(*ns_, ghost, *ns_, prefix_ + "h").ok());
  EXPECT_TRUE(eventually([&] { return metric("tenantqos_policy_version") == 2.0; }, 10'000))
      << readText(agent_log_);
  EXPECT_EQ(metric("tenantqos_reconcile_unresolved_errors"), 0.0);
  EXPECT_TRUE(shmExists("tenant-s"));
  EXPECT_EQ(tcClasses(ghost).count(tenantClass(ghost, "tenant-s")), 1u) << describe();
  EXPECT_TRUE(
      tcRateCarries(tcClasses(dev0_)[tenantClass(dev0_, "tenant-a")].ceil_bits, 700 * kMbit));
  EXPECT_TRUE(eventually(
      [&] { return ctl({"top"}).output.find("node errors:") == std::string::npos; }, 3000));
}

TEST_F(PrivilegedAgentTest, ForeignQdiscRefusedRollsBackOtherDevicesAndRetries) {
  extra_agent_args_ = {"--device", dev1_ + "=storage"};
  startPolicyd();
  startAgent();
  apply(v1());
  const auto& want = kV1Rates;
  ASSERT_TRUE(eventually([&] { return enforces(1, want); }, 1000)) << describe();

  // Someone else's root qdisc on dev1: the node cannot apply a policy that manages dev1.
  ASSERT_TRUE(ns_->run({"tc", "qdisc", "add", "dev", dev1_, "root", "handle", "5:", "tbf", "rate",
                        "10mbit", "burst", "10kb", "latency", "50ms"})
                  .ok());
  YamlTenant a = kA;
  a.limit = "800Mbps";  // dev0 changes first (applied, then rolled back when dev1 fails)
  YamlTenant s = {"tenant-s", "storage", "10Mbps", "50Mbps", 1, 4, 12, 4};
  apply(policyYaml({{"fabric", "1Gbps"}, {"storage", "100Mbps"}}, {a, kB, s}));
  EXPECT_TRUE(eventually(
      [&] {
        auto e = metric("tenantqos_reconcile_errors_total");
        return e && *e >= 2;
      },
      3000))
      << readText(agent_log_);
  EXPECT_TRUE(enforces(1, want)) << "dev0 must be back on v1\n" << describe();
  EXPECT_NE(tcQdisc(dev1_).find("tbf 5:"), std::string::npos) << "foreign qdisc touched";
  EXPECT_NE(readText(agent_log_).find("root qdisc tbf"), std::string::npos);
  EXPECT_TRUE(eventually(
      [&] { return ctl({"top"}).output.find("node1: apply policy v2: ") != std::string::npos; },
      3000));

  // The operator removes the foreign qdisc: a retry applies v2 on both devices.
  ASSERT_TRUE(ns_->run({"tc", "qdisc", "del", "dev", dev1_, "root"}).ok());
  EXPECT_TRUE(eventually([&] { return metric("tenantqos_policy_version") == 2.0; }, 10'000))
      << readText(agent_log_);
  EXPECT_TRUE(
      tcRateCarries(tcClasses(dev0_)[tenantClass(dev0_, "tenant-a")].ceil_bits, 800 * kMbit));
  EXPECT_EQ(tcClasses(dev1_).count(tenantClass(dev1_, "tenant-s")), 1u) << describe();
}

TEST_F(PrivilegedAgentTest, NoneModeProgramsNoTcAndRemovesItsOldTree) {
  // htb first: the agent builds its tree on dev0 ...
  startPolicyd();
  startAgent();
  apply(v1());
  ASSERT_TRUE(eventually([&] { return tcClasses(dev0_).size() == 4; }, 1000)) << describe();
  stopAgent();
  // ... a link emulation (foreign root) sits on dev1 ...
  ASSERT_TRUE(ns_->run({"tc", "qdisc", "add", "dev", dev1_, "root", "handle", "5:", "tbf", "rate",
                        "1gbit", "burst", "128kb", "latency", "10ms"})
                  .ok());
  // ... then in none mode the agent removes its own tree and touches nothing else.
  extra_agent_args_ = {"--tc-mode", "none"};
  startAgent();
  ASSERT_TRUE(eventually([&] { return tcClasses(dev0_).empty(); }, 2000)) << describe();
  EXPECT_EQ(tcQdisc(dev0_).find("htb"), std::string::npos);
  EXPECT_NE(tcQdisc(dev1_).find("tbf 5:"), std::string::npos) << "foreign qdisc touched";
  auto filters = ns_->run({"tc", "filter", "show", "dev", dev0_});
  ASSERT_TRUE(filters.ok());
  EXPECT_EQ(filters->find("u32"), std::string::npos) << "no DSCP filters in none mode";
  ASSERT_TRUE(shmExists("tenant-a") && shmExists("tenant-b"));
  EXPECT_EQ(shmParams("tenant-a")->dscp, 26u);
}

TEST_F(PrivilegedAgentTest, CleanupRemovesEverythingItCreated) {
  startPolicyd();
  startAgent();
  apply(v1());
  ASSERT_TRUE(
      eventually([&] { return tcClasses(dev0_).size() == 4 && shmExists("tenant-a"); }, 1000))
      << describe();
  stopAgent();
  // An unrelated device keeps its own qdisc.
  ASSERT_TRUE(ns_->run({"tc", "qdisc", "add", "dev", dev1_, "root", "handle", "5:", "tbf", "rate",
                        "10mbit", "burst", "10kb", "latency", "50ms"})
                  .ok());
  auto r =
      runCommand(ns_->exec({TQ_AGENT_BIN, "--cleanup", "--device", dev0_ + "=fabric", "--device",
                            dev1_ + "=storage", "--run-dir", run_dir_, "--state-dir", state_dir_}),
                 20'000);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 0) << r->output;
  EXPECT_TRUE(tcClasses(dev0_).empty()) << describe();
  EXPECT_EQ(tcQdisc(dev0_).find("htb"), std::string::npos);
  EXPECT_NE(tcQdisc(dev1_).find("tbf 5:"), std::string::npos) << "foreign qdisc removed";
  EXPECT_NE(::access((run_dir_ + "/tenants/tenant-a").c_str(), F_OK), 0) << "tenant directory";
  EXPECT_NE(::access((run_dir_ + "/tenants/tenant-b").c_str(), F_OK), 0);
  EXPECT_NE(::access((run_dir_ + "/traffic-classes").c_str(), F_OK), 0);
  EXPECT_NE(::access((state_dir_ + "/policy.snapshot").c_str(), F_OK), 0);
  EXPECT_NE(::access((state_dir_ + "/tc-classes").c_str(), F_OK), 0);
}

// RDMA port metrics: the agent reads a fake sysfs tree (--sysfs-root; this host has no RDMA)
// with an InfiniBand HCA (PMA counters; port 2 down) and rxe0 (packets only).
const std::string kIbPort1 = R"({device="mlx5_0",link_layer="InfiniBand",netdev="",port="1"})";
const std::string kIbPort2 = R"({device="mlx5_0",link_layer="InfiniBand",netdev="",port="2"})";
const std::string kRxePort = R"({device="rxe0",link_layer="Ethernet",netdev="rxeveth0",port="1"})";

int countOf(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

TEST_F(PrivilegedAgentTest, RdmaPortCountersFromSysfs) {
  tq::testing::FakeSysfs sysfs;
  sysfs.mlx5Ib();
  sysfs.rxe0();
  extra_agent_args_ = {"--sysfs-root", sysfs.root()};
  startPolicyd();
  startAgent();  // no policy needed: ports are node facts
  ASSERT_TRUE(eventually(
      [&] { return metric("tenantqos_rdma_port_transmit_bytes_total" + kIbPort1) == 4000.0; },
      3000))
      << get("/metrics").body << readText(agent_log_);
  EXPECT_EQ(metric("tenantqos_rdma_port_receive_bytes_total" + kIbPort1), 1000.0);
  EXPECT_EQ(metric("tenantqos_rdma_port_transmit_packets_total" + kIbPort1), 40.0);
  EXPECT_EQ(metric("tenantqos_rdma_port_receive_packets_total" + kIbPort1), 10.0);
  EXPECT_EQ(metric("tenantqos_rdma_port_up" + kIbPort1), 1.0);
  EXPECT_EQ(metric("tenantqos_rdma_port_up" + kIbPort2), 0.0);
  EXPECT_FALSE(metric("tenantqos_rdma_port_transmit_packets_total" + kIbPort2).has_value());
  EXPECT_EQ(metric("tenantqos_rdma_port_transmit_packets_total" + kRxePort), 12345.0);
  EXPECT_EQ(metric("tenantqos_rdma_port_receive_packets_total" + kRxePort), 678.0);
  EXPECT_FALSE(metric("tenantqos_rdma_port_transmit_bytes_total" + kRxePort).has_value())
      << "rxe has no PMA byte counters";
  EXPECT_EQ(metric("tenantqos_rdma_port_up" + kRxePort), 1.0);

  // promtool accepts the exposition with these families.
  const std::string exposition = tmp_ + "/metrics-rdma.txt";
  ASSERT_TRUE(writeFileAtomic(exposition, get("/metrics").body).ok());
  auto lint = runCommand({"sh", "-c", "promtool check metrics < '" + exposition + "'"}, 20'000);
  ASSERT_TRUE(lint.ok()) << lint.status().toString();
  EXPECT_EQ(lint->exit_code, 0) << lint->output;

  // Counters and state are re-read about every second.
  sysfs.counter("mlx5_0", 1, "port_xmit_data", 2'000'000'000);
  sysfs.setState("rxe0", 1, "1: DOWN");
  EXPECT_TRUE(eventually(
      [&] {
        return metric("tenantqos_rdma_port_transmit_bytes_total" + kIbPort1) == 8e9 &&
               metric("tenantqos_rdma_port_up" + kRxePort) == 0.0;
      },
      3000))
      << get("/metrics").body;
  // A device that goes away leaves the exposition at the next read.
  sysfs.remove("class/infiniband/mlx5_0");
  EXPECT_TRUE(eventually(
      [&] { return get("/metrics").body.find(R"(device="mlx5_0")") == std::string::npos; }, 3000))
      << get("/metrics").body;
  EXPECT_EQ(metric("tenantqos_rdma_port_transmit_packets_total" + kRxePort), 12345.0);
  EXPECT_EQ(get("/metrics").body.find("tenantqos_rdma_port_transmit_bytes_total"),
            std::string::npos);
  const std::string log = readText(agent_log_);
  EXPECT_EQ(countOf(log,
                    "RDMA port metrics for 3 port(s): mlx5_0:1 (InfiniBand), mlx5_0:2 "
                    "(InfiniBand), rxe0:1 (Ethernet, rxeveth0)"),
            1)
      << log;
  EXPECT_EQ(countOf(log, "RDMA port metrics for 1 port(s): rxe0:1 (Ethernet, rxeveth0)"), 1) << log;
}

TEST_F(PrivilegedAgentTest, NoRdmaDevicesNoSeriesAndNoLogSpam) {
  tq::testing::FakeSysfs sysfs;  // empty: no class/infiniband at all
  // The QP scan every 100 ms: many scans of a kernel without RDMA netlink (this machine's).
  extra_agent_args_ = {"--sysfs-root", sysfs.root(), "--qp-scan-interval-ms", "100"};
  startPolicyd();
  startAgent();
  apply(v1());
  ASSERT_TRUE(eventually([&] { return get("/readyz").status == 200; }, 3000));
  // Three more reads of the counters (about one a second) and ten more QP scans: what does NOT
  // happen meanwhile is the point.
  const double reads = metric("tenantqos_stats_reads_total").value_or(0);
  const double scans = metric("tenantqos_qp_scans_total").value_or(0);
  ASSERT_TRUE(eventually(
      [&] {
        return metric("tenantqos_stats_reads_total").value_or(0) >= reads + 3 &&
               metric("tenantqos_qp_scans_total").value_or(0) >= scans + 10;
      },
      10'000));
  const std::string body = get("/metrics").body;
  EXPECT_NE(body.find("tenantqos_tc_class_bytes_total"), std::string::npos) << body;
  EXPECT_EQ(body.find("tenantqos_rdma"), std::string::npos) << body;
  EXPECT_EQ(body.find("tenantqos_ungoverned_qp"), std::string::npos) << body;
  const std::string log = readText(agent_log_);
  int rdma_lines = 0;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);)
    rdma_lines += line.find("RDMA") != std::string::npos;
  // "no RDMA ports under ...", once, at start; "cannot list RDMA QPs", once.
  EXPECT_EQ(rdma_lines, 2) << log;
  EXPECT_EQ(countOf(log, "no RDMA ports under " + sysfs.root() + "/class/infiniband"), 1) << log;
  EXPECT_EQ(countOf(log, "cannot list RDMA QPs: RDMA netlink: the kernel has no NETLINK_RDMA"), 1)
      << log;
}

TEST_F(PrivilegedAgentTest, UsageErrorsExitTwo) {
  auto r = runCommand({TQ_AGENT_BIN, "--device", "x"}, 10'000);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 2);
  EXPECT_NE(r->output.find("DEV=LINK"), std::string::npos) << r->output;
  EXPECT_NE(r->output.find("(see tenantqos-agent --help)"), std::string::npos) << r->output;
  r = runCommand({TQ_AGENT_BIN, "--help"}, 10'000);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 0);
}

}  // namespace
}  // namespace tq::agent::functional

namespace tq::agent::functional {
namespace {

// A real Prometheus (Debian's) scraping the agent inside the test's namespace, and promtool's
// lint of the exposition.
class PrivilegedAgentPrometheusTest : public PrivilegedAgentTest {
 protected:
  // Number of series Prometheus returns for an instant query (-1 on any error).
  int promSeries(int port, const std::string& query) {
    auto r = runCommand(ns_->exec({"curl", "-s", "-m", "5", "-G",
                                   "http://127.0.0.1:" + std::to_string(port) + "/api/v1/query",
                                   "--data-urlencode", "query=" + query}),
                        10'000);
    if (!r.ok() || r->exit_code != 0) return -1;
    auto j = tq::testing::Json::parse(r->output);
    if (!j.ok()) return -1;
    const tq::testing::Json* status = j->get("status");
    const tq::testing::Json* result = j->path("data.result");
    if (status == nullptr || status->str() != "success" || result == nullptr) return -1;
    last_prom_answer_ = r->output;
    return static_cast<int>(result->items().size());
  }
  std::string last_prom_answer_;
};

TEST_F(PrivilegedAgentPrometheusTest, RealPrometheusScrapesAgentAndPromtoolAccepts) {
  tq::testing::FakeSysfs sysfs;  // RDMA port series too (see RdmaPortCountersFromSysfs)
  sysfs.mlx5Ib();
  sysfs.rxe0();
  extra_agent_args_ = {"--sysfs-root", sysfs.root()};
  startPolicyd();
  startAgent();
  apply(v1());
  ASSERT_TRUE(eventually([&] { return get("/readyz").status == 200; }, 2000));
  auto proc = tq::testing::attachAs(attach::tenantSocketPath(run_dir_, "tenant-a"), "tenant-a");
  ASSERT_TRUE(proc.ok()) << proc.status().toString();
  shm::Counters* slot = proc->view->counters(0);
  ASSERT_NE(slot, nullptr);
  slot->bytes.store(4242);
  ASSERT_TRUE(eventually(
      [&] {
        return metric(R"(tenantqos_tc_class_bytes_total{class="1:1",device=")" + dev0_ +
                      R"(",tenant=""})")
            .has_value();
      },
      3000));

  // promtool: 0 = clean (3 would be lint warnings, 1 a parse error).
  const std::string exposition = tmp_ + "/metrics.txt";
  ASSERT_TRUE(writeFileAtomic(exposition, get("/metrics").body).ok());
  auto lint = runCommand({"sh", "-c", "promtool check metrics < '" + exposition + "'"}, 20'000);
  ASSERT_TRUE(lint.ok()) << lint.status().toString();
  EXPECT_EQ(lint->exit_code, 0) << lint->output;

  // Prometheus on a port of the test's own namespace, 1 s scrape interval.
  const int prom_port = 19090;
  const std::string config = tmp_ + "/prometheus.yml";
  ASSERT_TRUE(writeFileAtomic(config,
                              "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                              "scrape_configs:\n  - job_name: tenantqos-agent\n"
                              "    static_configs:\n      - targets: ['127.0.0.1:" +
                                  std::to_string(metrics_port_) + "']\n")
                  .ok());
  auto p = Subprocess::start(
      ns_->exec({"prometheus", "--config.file=" + config, "--storage.tsdb.path=" + tmp_ + "/prom",
                 "--web.listen-address=127.0.0.1:" + std::to_string(prom_port),
                 "--log.level=warn"}),
      tmp_ + "/prometheus.log");
  ASSERT_TRUE(p.ok()) << p.status().toString();
  prometheus_ = std::make_unique<Subprocess>(std::move(*p));
  ASSERT_TRUE(eventually([&] { return get("/-/ready", prom_port).status == 200; }, 10'000))
      << readText(tmp_ + "/prometheus.log");

  // The first scrape comes ~6 s after start (a fixed 5 s target-sync delay).
  EXPECT_TRUE(eventually(
      [&] {
        return promSeries(prom_port,
                          R"(tenantqos_tenant_transmit_bytes_total{tenant="tenant-a"} == 4242)") ==
               1;
      },
      20'000))
      << last_prom_answer_ << readText(tmp_ + "/prometheus.log");
  EXPECT_EQ(promSeries(prom_port, R"(tenantqos_tenant_transmit_bytes_total)"), 2);
  // link, default and two tenant classes on dev0
  EXPECT_EQ(promSeries(prom_port, R"(tenantqos_tc_class_bytes_total{device=")" + dev0_ + R"("})"),
            4)
      << last_prom_answer_;
  // What the default class carried counts as ungoverned TCP bytes, one series per device.
  EXPECT_EQ(promSeries(prom_port,
                       R"(tenantqos_ungoverned_bytes_total{path="tcp",device=")" + dev0_ + R"("})"),
            1)
      << last_prom_answer_;
  EXPECT_EQ(promSeries(prom_port, R"(up{job="tenantqos-agent"} == 1)"), 1);
  EXPECT_EQ(promSeries(prom_port, R"(tenantqos_policy_version == 1)"), 1);
  EXPECT_EQ(
      promSeries(prom_port, R"(tenantqos_rdma_port_transmit_bytes_total{device="mlx5_0"} == 4000)"),
      1)
      << last_prom_answer_;
  EXPECT_EQ(promSeries(prom_port, R"(tenantqos_rdma_port_up)"), 3) << last_prom_answer_;
  EXPECT_EQ(promSeries(prom_port, R"(tenantqos_rdma_port_transmit_packets_total)"), 2)
      << last_prom_answer_;

  ASSERT_EQ(::kill(prometheus_->pid(), SIGTERM), 0);
  EXPECT_TRUE(prometheus_->wait(10'000).ok());
  prometheus_.reset();
}

}  // namespace
}  // namespace tq::agent::functional
