// bench/tc_reconcile: how long does the tc executor take to reconcile real kernel state?
//
// Creates a network namespace "tqtc<pid>bench" with two veth pairs, plans 64 tenants on each of
// two devices (63 with a DSCP and its two u32 rules, one without: there are only 63 usable
// DSCPs), and measures, over --runs repetitions each:
//   from-empty   both devices from the kernel default root to the full tree (removeAll between)
//   one-tenant   one tenant's limit changes (on both devices: 2 class changes)
//   no-op        the same plan again (reads + diff, zero writes): the baseline
//   tc(8)        one `tc class change` through fork/exec (what shelling out would cost)
// and prints p50/p99 per scenario and the ratio to the no-op baseline. Target from issue 4:
// a one-tenant change applied in <= 10 ms.
//
// Usage: tc_reconcile [--runs N]    (root; removes its namespace on exit, also on failure)
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/clock.h"
#include "tc/executor.h"
#include "tests/support/netns.h"
#include "tests/support/process.h"

using namespace tq;
using namespace tq::tc;

namespace {

constexpr uint64_t kMbit = 125'000;
constexpr int kTenants = 64;

struct Stats {
  double p50_ms = 0, p99_ms = 0, max_ms = 0;
};

Stats summarize(std::vector<int64_t> ns) {
  std::sort(ns.begin(), ns.end());
  auto at = [&](double q) {
    size_t i = static_cast<size_t>(q * static_cast<double>(ns.size() - 1) + 0.5);
    return static_cast<double>(ns[std::min(i, ns.size() - 1)]) / 1e6;
  };
  return Stats{at(0.50), at(0.99), static_cast<double>(ns.back()) / 1e6};
}

DevicePolicy policyFor(const std::string& dev, uint64_t changed_limit) {
  DevicePolicy p;
  p.device = dev;
  p.capacity = 100'000 * kMbit;  // 100 Gbit/s
  for (int i = 0; i < kTenants; ++i) {
    TenantClassSpec t;
    char name[32];
    std::snprintf(name, sizeof name, "tenant-%02d", i);
    t.name = name;
    t.guarantee = 1'400 * kMbit;
    t.limit = i == 17 ? changed_limit : 50'000 * kMbit;
    t.weight = 1 + static_cast<uint32_t>(i % 4);
    if (i < 63) t.dscp = static_cast<uint8_t>(i + 1);
    p.tenants.push_back(t);
  }
  return p;
}

int fail(const std::string& what, const Status& st) {
  std::fprintf(stderr, "tc_reconcile: %s: %s\n", what.c_str(), st.toString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 50;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
      runs = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: %s [--runs N]\n", argv[0]);
      return 2;
    }
  }
  if (!testing::runningAsRoot()) {
    std::fprintf(stderr, "tc_reconcile: needs root (creates a network namespace)\n");
    return 1;
  }
  const std::string prefix = "tqtc" + std::to_string(getpid());
  auto ns = testing::TestNetns::create(prefix + "bench");
  if (!ns.ok()) return fail("create namespace", ns.status());
  const std::string devs[2] = {prefix + "x0", prefix + "x1"};
  for (int i = 0; i < 2; ++i) {
    Status st = testing::addVethPair(**ns, devs[i], **ns, prefix + "y" + std::to_string(i));
    if (!st.ok()) return fail("create veth", st);
  }
  auto nl = openTcNetlink({.netns = (*ns)->name()});
  if (!nl.ok()) return fail("open netlink", nl.status());
  Executor ex(**nl);
  Clock& clock = realClock();

  DevicePlan plans[2][2];  // [device][variant]: variant 1 has tenant-17's limit changed
  for (int d = 0; d < 2; ++d)
    for (int v = 0; v < 2; ++v) {
      auto p = makeDevicePlan(policyFor(devs[d], v ? 20'000 * kMbit : 50'000 * kMbit));
      if (!p.ok()) return fail("plan", p.status());
      plans[d][v] = *p;
    }

  auto reconcile = [&](int variant, int expect_writes, std::vector<int64_t>* out) -> Status {
    int64_t t0 = clock.nowNs();
    int writes = 0;
    for (int d = 0; d < 2; ++d) {
      auto r = ex.apply(plans[d][variant]);
      if (!r.ok()) return r.status();
      writes += r->writes();
    }
    out->push_back(clock.nowNs() - t0);
    if (expect_writes >= 0 && writes != expect_writes)
      return internalError("expected " + std::to_string(expect_writes) + " writes, made " +
                           std::to_string(writes));
    return okStatus();
  };

  const int full_writes = 2 * (1 + 2 + kTenants + 2 * 63);
  std::vector<int64_t> empty, change, noop, shell;
  for (int i = 0; i < runs; ++i) {
    for (const std::string& d : devs) {
      Status st = ex.removeAll(d);
      if (!st.ok()) return fail("removeAll", st);
    }
    Status st = reconcile(0, full_writes, &empty);
    if (!st.ok()) return fail("from-empty reconcile", st);
  }
  int variant = 0;
  for (int i = 0; i < runs * 4; ++i) {
    variant ^= 1;
    Status st = reconcile(variant, 2, &change);
    if (!st.ok()) return fail("one-tenant reconcile", st);
    st = reconcile(variant, 0, &noop);
    if (!st.ok()) return fail("no-op reconcile", st);
  }
  const std::string cls = formatHandle(makeHandle(1, plans[0][0].tenant_minors.at("tenant-17")));
  for (int i = 0; i < std::min(runs, 20); ++i) {
    int64_t t0 = clock.nowNs();
    auto out = (*ns)->run({"tc", "class", "change", "dev", devs[0], "parent", "1:1", "classid", cls,
                           "htb", "rate", "11200mbit", "ceil", i % 2 ? "400gbit" : "160gbit",
                           "quantum", "160000"});
    if (!out.ok()) return fail("tc class change", out.status());
    shell.push_back(clock.nowNs() - t0);
  }

  Stats e = summarize(empty), c = summarize(change), n = summarize(noop), s = summarize(shell);
  std::printf("tc_reconcile: %d tenants x 2 devices (veth in netns %s), libnl-route 3.7\n",
              kTenants, (*ns)->name().c_str());
  std::printf("%-34s %6s %9s %9s %9s %8s\n", "scenario", "runs", "p50 ms", "p99 ms", "max ms",
              "p50/noop");
  auto row = [&](const char* name, size_t count, const Stats& st) {
    std::printf("%-34s %6zu %9.3f %9.3f %9.3f %8.1f\n", name, count, st.p50_ms, st.p99_ms,
                st.max_ms, st.p50_ms / n.p50_ms);
  };
  row("no-op (read + diff, 0 writes)", noop.size(), n);
  row("one-tenant change (2 writes)", change.size(), c);
  row("from empty (386 writes)", empty.size(), e);
  row("tc(8) one class change, fork/exec", shell.size(), s);
  std::printf("target: one-tenant change <= 10 ms: %s (p99 %.3f ms)\n",
              c.p99_ms <= 10.0 ? "met" : "MISSED", c.p99_ms);
  for (const std::string& d : devs) (void)ex.removeAll(d);
  return 0;
}
