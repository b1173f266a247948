// The node trust boundary, end to end, tried as a hostile tenant would: the real agent and
// policyd (agent_harness.h), tenants with their own Unix groups, and processes running as those
// tenants' uids (setpriv, not root). While tenant-b's process (tq-hostile-tenant) tries
// everything against tenant-a and writes garbage into everything of its own, both tenants run
// paced traffic through the real plugin: tenant-a keeps >= 0.95 of its allocation, tenant-b
// never exceeds its limit by more than one burst per 100 ms window, the agent stays up (/readyz
// 200 within 2 s after the tampering stops) and exits on SIGTERM within 1 s, and its log names
// the tenant and pid of every bad input.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>

#include "tests/functional/agent_harness.h"
#include "tests/functional/plugin_proc_util.h"

namespace tq::agent::functional {
namespace {

using plugin::testing::doneTrying;
using plugin::testing::jsonLines;
using plugin::testing::jsonNumber;
using plugin::testing::perfArgv;
using plugin::testing::Proc;
using plugin::testing::ProcResult;
using plugin::testing::RateWindow;
using plugin::testing::receiverWindow;
using plugin::testing::TogetherWindows;
using plugin::testing::togetherWindows;

constexpr uint64_t kLimitB = 100'000'000 / 8;  // tenant-b's limit, bytes/s
constexpr uint64_t kBurst = 256 * 1024;        // the agent's --burst default

std::string policy() {
  return "apiVersion: tenantqos/v1\nkind: TenantPolicy\nlinks:\n"
         "  - name: fabric\n    capacity: 400Mbps\n    headroom: 5%\n"
         "tenants:\n"
         "  - name: tenant-a\n    link: fabric\n    guarantee: 150Mbps\n    limit: 200Mbps\n"
         "    weight: 2\n    serviceLevel: 1\n    dscp: 26\n    unixGroup: \"41001\"\n"
         "  - name: tenant-b\n    link: fabric\n    guarantee: 50Mbps\n    limit: 100Mbps\n"
         "    weight: 1\n    serviceLevel: 2\n    dscp: 18\n    unixGroup: \"41002\"\n";
}

// The same with a default tenant ("shared", no unixGroup: only the node-wide socket reaches it)
// for the processes of users no tenant maps.
constexpr uint64_t kDefaultRate = 50'000'000 / 8;  // its limit, bytes/s
std::string policyWithDefault() {
  return policy() +
         "  - name: shared\n    link: fabric\n    guarantee: 20Mbps\n    limit: 50Mbps\n"
         "    weight: 1\n    serviceLevel: 3\n    dscp: 10\n    default: true\n";
}

std::vector<std::string> as(int id, std::vector<std::string> argv) {
  std::vector<std::string> v = {"/usr/bin/setpriv", "--reuid=" + std::to_string(id),
                                "--regid=" + std::to_string(id), "--clear-groups"};
  v.insert(v.end(), argv.begin(), argv.end());
  return v;
}

class PrivilegedHostileTenantTest : public AgentHarness {
 protected:
  void SetUp() override {
    if (::access("/usr/bin/setpriv", X_OK) != 0) GTEST_SKIP() << "needs /usr/bin/setpriv";
    AgentHarness::SetUp();
  }
  // policyd and the agent under `yaml`, the run directory reachable by other uids (as /run),
  // ready with `tenant`'s socket.
  void startNode(const std::string& yaml, const std::string& tenant) {
    ASSERT_EQ(::chmod(tmp_.c_str(), 0755), 0);
    startPolicyd();
    startAgent();
    apply(yaml);
    ASSERT_TRUE(eventually([&] { return get("/readyz").status == 200 && shmExists(tenant); }, 3000))
        << readText(agent_log_);
  }
  std::vector<std::string> perf(const std::string& tenant) {
    return perfArgv({.bin = TQ_PERF_BIN,
                     .plugin = TQ_PLUGIN_SO,
                     .seconds = 5,
                     .size = "64K",
                     .tenant = tenant});
  }
  // A job of a user no tenant maps: no --tenant, so it asks for the default and gets what the
  // node-wide socket gives.
  std::vector<std::string> unmappedPerf(int seconds) {
    return perfArgv({.bin = TQ_PERF_BIN,
                     .plugin = TQ_PLUGIN_SO,
                     .seconds = static_cast<double>(seconds),
                     .size = "64K",
                     .timeout_s = 10});
  }
  std::map<std::string, std::string> env() {
    return {
        {"TENANTQOS_RUN_DIR", run_dir_}, {"TENANTQOS_SOCKET_IFNAME", "lo"}, {"NCCL_DEBUG", "INFO"}};
  }
};

// tenant-a's share short of 0.95 is measured a second time, hostile tenant-b again
// (doneTrying(), plugin_proc_util.h: once in CI tenant-a got 0.78 while that run's pacing tests
// were short too); a tenant-b that starves tenant-a does so on both tries, and damage the first
// try left stays for the second.
TEST_F(PrivilegedHostileTenantTest, TenantBCannotChangeReachOrStarveTenantAOrWedgeTheAgent) {
  ASSERT_NO_FATAL_FAILURE(startNode(policy(), "tenant-b"));

  std::vector<pid_t> hostile_pids;
  for (int attempt = 1; attempt <= 2; ++attempt) {
    Proc hostile(as(41002, {TQ_HOSTILE_BIN, run_dir_, "tenant-a", "tenant-b", "3"}), {});
    hostile_pids.push_back(hostile.pid());
    Proc a(as(41001, perf("tenant-a")), env());
    Proc b(as(41002, perf("tenant-b")), env());
    // tenant-a's allocation while both run (sampled from the agent's metrics).
    double alloc_sum = 0;
    int samples = 0;
    const auto start = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(4000)) {
      if (std::chrono::steady_clock::now() - start > std::chrono::milliseconds(1500)) {
        auto v = metric(
            R"(tenantqos_tenant_allocated_rate_bytes_per_second{node="node1",tenant="tenant-a"})");
        if (v) {
          alloc_sum += *v;
          ++samples;
        }
      }
      hostile.poll();
      ::usleep(200'000);
    }
    ProcResult h = hostile.wait(30);
    const auto tampering_stopped = std::chrono::steady_clock::now();
    EXPECT_EQ(h.exit_code, 0) << h.out << h.err;
    EXPECT_EQ(h.out.find("ALLOWED"), std::string::npos) << h.out;
    EXPECT_NE(h.out.find("refused: write own parameters"), std::string::npos) << h.out;
    EXPECT_NE(h.out.find("refused: connect to"), std::string::npos) << h.out;
    ASSERT_TRUE(eventually([&] { return get("/readyz").status == 200; }, 2000))
        << "not ready within 2 s after the tampering stopped";
    EXPECT_LT(std::chrono::steady_clock::now() - tampering_stopped, std::chrono::seconds(2));
    EXPECT_EQ(get("/healthz").status, 200);

    ProcResult ra = a.wait(60), rb = b.wait(60);
    ASSERT_EQ(ra.exit_code, 0) << ra.err;
    ASSERT_EQ(rb.exit_code, 0) << rb.err;
    ASSERT_GT(samples, 0);
    // tenant-b, per 100 ms window at the receiver: at most limit x window + one burst (+ one
    // message in flight across a window edge).
    double worst = 0;
    for (const std::string& l : jsonLines(rb.out, "interval")) {
      if (jsonNumber(l, "rank").value_or(0) != 1) continue;
      const double dt = jsonNumber(l, "interval_s").value_or(0);
      const double bytes = jsonNumber(l, "rx_bytes").value_or(0);
      if (dt <= 0) continue;
      const double allowed = kLimitB * dt + kBurst + 64 * 1024;
      worst = std::max(worst, bytes / allowed);
      EXPECT_LE(bytes, allowed) << "tenant-b window of " << dt << " s: " << bytes << " bytes";
    }
    std::printf("try %d: tenant-b: worst 100 ms window at %.3f of limit x window + one burst\n",
                attempt, worst);
    const double alloc_a = alloc_sum / samples;
    const double got_a = receiverWindow(ra.out, 1).rate();
    std::printf("try %d: tenant-a: %.1f Mbit/s of an allocation of %.1f Mbit/s (%.3f)\n", attempt,
                got_a * 8e-6, alloc_a * 8e-6, got_a / alloc_a);
    if (doneTrying(attempt, got_a / alloc_a, 0.95)) break;
  }

  // Every bad input was logged with the tenant and the pid.
  const std::string log = readText(agent_log_);
  for (pid_t hostile_pid : hostile_pids) {
    const std::string pid = "pid " + std::to_string(hostile_pid);
    EXPECT_NE(log.find("tenant tenant-b: " + pid), std::string::npos) << log.substr(0, 4000);
  }
  EXPECT_NE(log.find("refused"), std::string::npos);

  const auto t0 = std::chrono::steady_clock::now();
  stopAgent();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1))
      << "the agent must exit on SIGTERM within 1 s";
}

// The sum of the receivers' rates of `rs` over the span all of them ran (bytes/s), and the least.
std::pair<double, double> togetherRate(const std::vector<ProcResult>& rs);

// Issue 23 item 6: the node-wide socket (0666) is every uid's. One uid holds every connection
// and slot it can get there and writes 9 s of debt into every bucket word it was handed, every
// millisecond, while other uids' jobs run as the default tenant. Before: the job next to it
// fell from 50 to about 1 Mbit/s, and three jobs refused by the full socket paced themselves at
// 100 Mbit/s each (299 Mbit/s against the default tenant's 50). After: each uid has its own
// buckets and slots, under the default tenant's rate together.
TEST_F(PrivilegedHostileTenantTest, UnmappedUsersCannotStarveOrLiftEachOther) {
  ASSERT_NO_FATAL_FAILURE(startNode(policyWithDefault(), "shared"));

  // A hostile uid attaches through the node-wide socket (as `connections` processes would) and
  // writes debt into the buckets it was given every millisecond.
  auto hostileUid = [&](int uid, int connections) {
    auto p = std::make_unique<Proc>(
        as(uid, {TQ_HOSTILE_BIN, "--node-wide", run_dir_, "30", std::to_string(connections)}),
        std::map<std::string, std::string>{});
    EXPECT_TRUE(eventually(
        [&] {
          p->poll();
          return p->out().find("node-wide:") != std::string::npos;
        },
        20'000))
        << p->out() << p->err();
    std::printf("hostile uid %d: %s", uid, p->out().c_str());
    return p;
  };

  // Starving: one job beside a uid that writes debt into what it was given.
  auto writer = hostileUid(41003, 1);
  Proc one(as(41004, unmappedPerf(4)), env());
  ProcResult r1 = one.wait(60);
  ASSERT_EQ(r1.exit_code, 0) << r1.err << r1.out;
  const double alone = receiverWindow(r1.out, 1).rate();
  std::printf("one unmapped job beside the hostile uid: %.1f Mbit/s (the default tenant: %.1f)\n",
              alone * 8e-6, kDefaultRate * 8e-6);
  EXPECT_GE(alone, 0.8 * kDefaultRate) << "another uid starved an unmapped job";

  // Lifting: another uid holds every connection and slot it can get; three jobs of three more
  // uids at once.
  auto holder = hostileUid(41007, 200);
  std::vector<std::unique_ptr<Proc>> jobs;
  for (int uid : {41004, 41005, 41006}) {
    jobs.push_back(std::make_unique<Proc>(as(uid, unmappedPerf(5)), env()));
  }
  std::vector<ProcResult> rs;
  for (auto& j : jobs) rs.push_back(j->wait(60));
  for (const ProcResult& r : rs) ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto [sum, least] = togetherRate(rs);
  ASSERT_GT(sum, 0) << "the three jobs did not run together";
  std::printf("three unmapped jobs of three uids: %.1f Mbit/s together, the least %.1f\n",
              sum * 8e-6, least * 8e-6);
  EXPECT_LE(sum, 1.1 * kDefaultRate) << "unmapped jobs together exceeded the default tenant";
  EXPECT_GE(least, 0.2 * kDefaultRate) << "one unmapped job was starved by the others";
}

std::pair<double, double> togetherRate(const std::vector<ProcResult>& rs) {
  std::vector<const std::string*> outs;
  for (const ProcResult& r : rs) outs.push_back(&r.out);
  const TogetherWindows t = togetherWindows(outs, 0, 0, /*span_rank=*/1);
  if (t.span_s < 1.0) return {0, 0};
  double sum = 0, least = 1e300;
  for (const RateWindow& w : t.windows) {
    sum += w.rate();
    least = std::min(least, w.rate());
  }
  return {sum, least};
}

// Issue 23 item 9: a process of tenant-b resets the tenant's bucket words to "full" every
// 100 us while three honest jobs of tenant-b send. Each honest process keeps its own floor, so
// before each got the whole allocation: 3 x the limit together. The limit must hold for the
// tenant: each process's own bucket (process-local, its share of the tenant's rate from the
// agent) is charged besides the shared one.
TEST_F(PrivilegedHostileTenantTest, ATenantsOwnProcessCannotLiftTheTenantsLimit) {
  ASSERT_NO_FATAL_FAILURE(startNode(policy(), "tenant-b"));
  Proc resetter(as(41002, {TQ_HOSTILE_BIN, "--reset-words", run_dir_, "tenant-b", "20"}), {});
  ASSERT_TRUE(eventually(
      [&] {
        resetter.poll();
        return resetter.out().find("reset-words:") != std::string::npos;
      },
      10'000))
      << resetter.out() << resetter.err();
  std::vector<std::unique_ptr<Proc>> jobs;
  for (int i = 0; i < 3; ++i)
    jobs.push_back(std::make_unique<Proc>(as(41002, perf("tenant-b")), env()));
  std::vector<ProcResult> rs;
  for (auto& j : jobs) rs.push_back(j->wait(60));
  for (const ProcResult& r : rs) ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto [sum, least] = togetherRate(rs);
  std::printf(
      "three jobs of tenant-b beside its word resetter: %.1f Mbit/s together (limit %.1f), "
      "the least %.1f\n",
      sum * 8e-6, kLimitB * 8e-6, least * 8e-6);
  ASSERT_GT(sum, 0) << "the three jobs did not run together";
  EXPECT_LE(sum, 1.1 * kLimitB) << "tenant-b's own process lifted its limit";
  EXPECT_GE(least, 0.2 * kLimitB) << "one honest job was starved by the others";
}

}  // namespace
}  // namespace tq::agent::functional
