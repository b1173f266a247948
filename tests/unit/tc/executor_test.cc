// Executor logic against the in-memory fake kernel: diff, ordering, idempotence, ownership and
// rollback at every possible failure point. The same behaviours are checked on the real kernel
// in tests/functional/tc_executor_test.cc.
#include "tc/executor.h"

#include <gtest/gtest.h>

#include <functional>
#include <optional>

#include "tests/support/recording_tc_netlink.h"
#include "tests/support/tc_spec.h"
#include "tests/unit/tc/fake_tc_netlink.h"

namespace tq::tc {
namespace {

using testing::tenantClass;

using testing::RecordingTcNetlink;

constexpr uint64_t kMbit = 125'000;
constexpr uint64_t kGbit = 1000 * kMbit;

DevicePolicy basePolicy(const std::string& dev = "eth0") {
  DevicePolicy p;
  p.device = dev;
  p.capacity = kGbit;
  p.tenants = {tenantClass("tenant-a", 400 * kMbit, 600 * kMbit, 2, 34),
               tenantClass("tenant-b", 200 * kMbit, 400 * kMbit, 1, 10),
               tenantClass("tenant-c", 100 * kMbit, 900 * kMbit, 1, 18)};
  return p;
}

DevicePlan planOf(const DevicePolicy& p) {
  auto plan = makeDevicePlan(p);
  EXPECT_TRUE(plan.ok()) << plan.status().toString();
  return *plan;
}

// A canonical text of everything we own on a device (not counters; bursts within rounding).
std::string canon(Executor& ex, const std::string& dev) {
  auto st = ex.read(dev);
  if (!st.ok()) return "error: " + st.status().toString();
  std::string s = std::string(rootOwnerName(st->owner)) + " " + st->root.kind + " " +
                  formatHandle(st->root.handle) + "\n";
  for (const ClassInfo& c : st->classes)
    s += "class " + formatHandle(c.htb.classid) + " parent " + formatHandle(c.htb.parent) +
         " rate " + std::to_string(c.htb.rate) + " ceil " + std::to_string(c.htb.ceil) + " q " +
         std::to_string(c.htb.quantum) + " prio " + std::to_string(c.htb.prio) + "\n";
  for (const FilterInfo& f : st->filters) {
    if (f.u32_table) continue;
    s += "filter " + f.kind + " pref " + std::to_string(f.u32.pref) + " node " +
         std::to_string(u32Node(f.u32.handle)) + " -> " + formatHandle(f.u32.classid);
    for (const U32Key& k : f.u32.keys)
      s += " " + std::to_string(k.value) + "/" + std::to_string(k.mask);
    s += "\n";
  }
  return s;
}

class ExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_.addDevice("eth0");
    fake_.addDevice("eth1");
  }
  FakeTcNetlink fake_;
  RecordingTcNetlink nl_{fake_};
  Executor ex_{nl_};
};

TEST_F(ExecutorTest, FreshApplyBuildsTheTreeAndReapplyWritesNothing) {
  DevicePlan plan = planOf(basePolicy());
  auto r = ex_.apply(plan);
  ASSERT_TRUE(r.ok()) << r.status().toString();
  EXPECT_EQ(r->qdisc_creates, 1);
  EXPECT_EQ(r->class_creates, 5);   // link, default, 3 tenants
  EXPECT_EQ(r->filter_creates, 6);  // v4 + v6 per tenant
  EXPECT_TRUE(r->rebuilt);
  EXPECT_EQ(nl_.writes(), r->writes());
  EXPECT_EQ(nl_.log().front(), "create root 1:");

  nl_.resetLog();
  for (int i = 0; i < 3; ++i) {
    auto again = ex_.apply(plan);
    ASSERT_TRUE(again.ok()) << again.status().toString();
    EXPECT_EQ(again->writes(), 0) << again->toString();
  }
  EXPECT_EQ(nl_.writes(), 0);
  // A plan rebuilt from the same policy (fresh object, fresh minors) is still a no-op.
  auto same = ex_.apply(planOf(basePolicy()));
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(nl_.writes(), 0);
}

TEST_F(ExecutorTest, OneLimitChangeIsExactlyOneClassChange) {
  DevicePolicy p = basePolicy();
  ASSERT_TRUE(ex_.apply(planOf(p)).ok());
  nl_.resetLog();
  p.tenants[1].limit = 500 * kMbit;
  DevicePlan changed = planOf(p);
  auto r = ex_.apply(changed);
  ASSERT_TRUE(r.ok()) << r.status().toString();
  EXPECT_EQ(r->class_changes, 1);
  EXPECT_EQ(r->writes(), 1);
  ASSERT_EQ(nl_.log().size(), 1u);
  EXPECT_EQ(nl_.log()[0],
            "change class " + formatHandle(makeHandle(1, changed.tenant_minors.at("tenant-b"))));
  auto st = ex_.read("eth0");
  ASSERT_TRUE(st.ok());
  const ClassInfo* b = st->findClass(makeHandle(1, changed.tenant_minors.at("tenant-b")));
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->htb.ceil, 500 * kMbit);
}

TEST_F(ExecutorTest, WeightChangeIsOneQuantumChange) {
  DevicePolicy p = basePolicy();
  ASSERT_TRUE(ex_.apply(planOf(p)).ok());
  nl_.resetLog();
  p.tenants[2].weight = 3;
  auto r = ex_.apply(planOf(p));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->class_changes, 1);
  EXPECT_EQ(r->writes(), 1);
}

TEST_F(ExecutorTest, RemovedTenantLosesFiltersThenClass) {
  DevicePolicy p = basePolicy();
  DevicePlan first = planOf(p);
  ASSERT_TRUE(ex_.apply(first).ok());
  nl_.resetLog();
  p.tenants.erase(p.tenants.begin());  // tenant-a
  auto r = ex_.apply(planOf(p));
  ASSERT_TRUE(r.ok()) << r.status().toString();
  EXPECT_EQ(r->filter_deletes, 2);
  EXPECT_EQ(r->class_deletes, 1);
  EXPECT_EQ(r->writes(), 3);
  // The fake, like HTB, refuses to delete a class a filter points to: order matters.
  EXPECT_EQ(nl_.log().back(),
            "delete class " + formatHandle(makeHandle(1, first.tenant_minors.at("tenant-a"))));
  std::string state = canon(ex_, "eth0");
  EXPECT_EQ(state.find(formatHandle(makeHandle(1, first.tenant_minors.at("tenant-a")))),
            std::string::npos)
      << state;
}

TEST_F(ExecutorTest, AddedTenantTouchesOnlyItsObjects) {
  DevicePolicy p = basePolicy();
  ASSERT_TRUE(ex_.apply(planOf(p)).ok());
  nl_.resetLog();
  p.tenants.insert(p.tenants.begin(), tenantClass("tenant-d", 50 * kMbit, 100 * kMbit, 1, 46));
  auto r = ex_.apply(planOf(p));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->class_creates, 1);
  EXPECT_EQ(r->filter_creates, 2);
  EXPECT_EQ(r->writes(), 3);
}

TEST_F(ExecutorTest, DscpChangeReplacesOnlyThatTenantsFilters) {
  DevicePolicy p = basePolicy();
  ASSERT_TRUE(ex_.apply(planOf(p)).ok());
  nl_.resetLog();
  p.tenants[0].dscp = 40;
  auto r = ex_.apply(planOf(p));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->filter_deletes, 2);
  EXPECT_EQ(r->filter_creates, 2);
  EXPECT_EQ(r->writes(), 4);
}

TEST_F(ExecutorTest, TwoTenantsSwappingDscpsChangeFiltersInPlace) {
  DevicePolicy p = basePolicy();
  ASSERT_TRUE(ex_.apply(planOf(p)).ok());
  nl_.resetLog();
  std::swap(p.tenants[0].dscp, p.tenants[1].dscp);
  auto r = ex_.apply(planOf(p));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->filter_changes, 4);  // same DSCP rules, new flowid: no gap in classification
  EXPECT_EQ(r->writes(), 4);
}

TEST_F(ExecutorTest, OtherDevicesAreNeverTouched) {
  ASSERT_TRUE(ex_.apply(planOf(basePolicy("eth1"))).ok());
  std::string eth1 = canon(ex_, "eth1");
  fake_.setForeignRoot("eth1", "tbf", makeHandle(0x8001, 0));
  std::string eth1_foreign = canon(ex_, "eth1");
  ASSERT_TRUE(ex_.apply(planOf(basePolicy("eth0"))).ok());
  DevicePolicy p = basePolicy("eth0");
  p.tenants.pop_back();
  ASSERT_TRUE(ex_.apply(planOf(p)).ok());
  ASSERT_TRUE(ex_.removeAll("eth0").ok());
  EXPECT_EQ(canon(ex_, "eth1"), eth1_foreign);
  EXPECT_NE(eth1, eth1_foreign);
}

TEST_F(ExecutorTest, ForeignRootIsReplacedOnlyWhenAllowed) {
  fake_.setForeignRoot("eth0", "htb", makeHandle(1, 0));  // htb 1: but r2q 10: not ours
  auto st = ex_.read("eth0");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->owner, RootOwner::kForeign);
  auto refused = ex_.apply(planOf(basePolicy()));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(refused.status().message(),
            "apply plan on dev eth0: root qdisc htb 1: was not created by tenantqos; refusing to "
            "replace it (allow with replace_foreign_root)")
      << refused.status().message();
  EXPECT_EQ(nl_.writes(), 0);

  auto allowed = ex_.apply(planOf(basePolicy()), ApplyOptions{.replace_foreign_root = true});
  ASSERT_TRUE(allowed.ok()) << allowed.status().toString();
  EXPECT_EQ(allowed->qdisc_deletes, 1);
  EXPECT_EQ(nl_.log().front(), "delete root 1:");
  EXPECT_EQ(ex_.read("eth0")->owner, RootOwner::kOurs);
}

TEST_F(ExecutorTest, SwitchingToTheLinkShaperRebuilds) {
  ASSERT_TRUE(ex_.apply(planOf(basePolicy())).ok());
  nl_.resetLog();
  auto shaper = makeLinkShaperPlan("eth0", kGbit);
  ASSERT_TRUE(shaper.ok());
  auto r = ex_.apply(*shaper);
  ASSERT_TRUE(r.ok()) << r.status().toString();
  EXPECT_EQ(r->qdisc_deletes, 1);
  EXPECT_EQ(r->qdisc_creates, 1);
  EXPECT_EQ(r->class_creates, 1);
  EXPECT_EQ(r->filter_creates, 0);
  EXPECT_EQ(ex_.apply(*shaper)->writes(), 0);
  auto st = ex_.read("eth0");
  ASSERT_EQ(st->classes.size(), 1u);
  EXPECT_TRUE(st->filters.empty());
}

TEST_F(ExecutorTest, StrayObjectsBelowOurRootAreRemovedChildrenFirst) {
  DevicePlan plan = planOf(basePolicy());
  ASSERT_TRUE(ex_.apply(plan).ok());
  int ifindex = fake_.device("eth0").ifindex;
  HtbClass stray{makeHandle(1, 0x77), makeHandle(1, 1), kMbit, kMbit,
                 kMinBurst,           kMinBurst,        80000, 0};
  ASSERT_TRUE(fake_.createClass(ifindex, stray).ok());
  HtbClass child = stray;
  child.classid = makeHandle(1, 0x78);
  child.parent = stray.classid;
  ASSERT_TRUE(fake_.createClass(ifindex, child).ok());
  ASSERT_TRUE(fake_.createFilter(ifindex, kRootHandle, ipv4DscpFilter(50, child.classid)).ok());
  fake_.addForeignClassifier("eth0", 7, kEthPIp, "bpf");
  nl_.resetLog();
  auto r = ex_.apply(plan);
  ASSERT_TRUE(r.ok()) << r.status().toString();
  EXPECT_EQ(r->class_deletes, 2);
  EXPECT_EQ(r->filter_deletes, 2);  // the stray u32 rule and the bpf classifier
  EXPECT_EQ(nl_.log()[nl_.log().size() - 2], "delete class 1:78");
  EXPECT_EQ(nl_.log().back(), "delete class 1:77");
  EXPECT_EQ(ex_.apply(plan)->writes(), 0);
}

TEST_F(ExecutorTest, ErrorsNameOperationObjectDeviceAndReason) {
  DevicePolicy p = basePolicy();
  ASSERT_TRUE(ex_.apply(planOf(p)).ok());
  p.tenants[0].limit = 700 * kMbit;
  DevicePlan plan = planOf(p);
  nl_.failWrite(1, invalidArgument("Invalid input data or parameter (EINVAL)"));
  auto r = ex_.apply(plan);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  const std::string cls = formatHandle(makeHandle(1, plan.tenant_minors.at("tenant-a")));
  EXPECT_EQ(r.status().message(), "apply plan on dev eth0: change class " + cls +
                                      " (tenant-a) on dev eth0: Invalid input data or parameter "
                                      "(EINVAL); rolled back");
  auto missing = ex_.apply(planOf(basePolicy("eth9")));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "apply plan on dev eth9: no such device \"eth9\"");
}

struct Transition {
  const char* name;
  std::function<std::optional<DevicePlan>()> from;  // nullopt: device untouched
  std::function<DevicePlan()> to;
  bool foreign_before = false;
};

// Property: whatever write fails, the device ends up equivalent to what it was before.
TEST_F(ExecutorTest, AnyFailedWriteRollsBackToTheOldTree) {
  auto edited = [] {
    DevicePolicy p = basePolicy();
    p.tenants.erase(p.tenants.begin() + 1);                                  // remove b
    p.tenants[0].limit = 800 * kMbit;                                        // change a
    p.tenants[1].dscp = 20;                                                  // move c's filters
    p.tenants.push_back(tenantClass("tenant-e", 10 * kMbit, kGbit, 3, 46));  // add e
    p.capacity = 2 * kGbit;  // change link + default
    return planOf(p);
  };
  const Transition kTransitions[] = {
      {"empty -> plan", [] { return std::nullopt; }, [] { return planOf(basePolicy()); }},
      {"plan -> edited", [] { return planOf(basePolicy()); }, edited},
      {"plan -> shaper", [] { return planOf(basePolicy()); },
       [] { return *makeLinkShaperPlan("eth0", kGbit); }},
      {"foreign -> plan", [] { return std::nullopt; }, [] { return planOf(basePolicy()); }, true},
  };
  for (const Transition& t : kTransitions) {
    // Count the writes of the successful transition first.
    int total = 0;
    {
      FakeTcNetlink fake;
      fake.addDevice("eth0");
      RecordingTcNetlink nl(fake);
      Executor ex(nl);
      if (t.foreign_before) fake.setForeignRoot("eth0", "tbf", makeHandle(0x8001, 0));
      if (auto from = t.from()) {
        ASSERT_TRUE(ex.apply(*from).ok());
      }
      nl.resetLog();
      auto r = ex.apply(t.to(), ApplyOptions{.replace_foreign_root = true});
      ASSERT_TRUE(r.ok()) << t.name << ": " << r.status().toString();
      total = nl.writes();
      ASSERT_GT(total, 0) << t.name;
    }
    for (int fail_at = 1; fail_at <= total; ++fail_at) {
      SCOPED_TRACE(std::string(t.name) + ", write " + std::to_string(fail_at) + " of " +
                   std::to_string(total) + " fails");
      FakeTcNetlink fake;
      fake.addDevice("eth0");
      RecordingTcNetlink nl(fake);
      Executor ex(nl);
      if (t.foreign_before) fake.setForeignRoot("eth0", "tbf", makeHandle(0x8001, 0));
      std::optional<DevicePlan> from = t.from();
      if (from) {
        ASSERT_TRUE(ex.apply(*from).ok());
      }
      const std::string before = canon(ex, "eth0");
      nl.resetLog();
      nl.failWrite(fail_at, unavailable("injected"));
      auto r = ex.apply(t.to(), ApplyOptions{.replace_foreign_root = true});
      ASSERT_FALSE(r.ok());
      EXPECT_NE(r.status().message().find("injected"), std::string::npos);
      if (t.foreign_before && fail_at > 1) {
        // The foreign root is gone after write 1; we cannot rebuild it and say so.
        EXPECT_NE(r.status().message().find("cannot be recreated"), std::string::npos)
            << r.status().message();
        EXPECT_EQ(ex.read("eth0")->owner, RootOwner::kKernelDefault);
        continue;
      }
      EXPECT_NE(r.status().message().find("; rolled back"), std::string::npos)
          << r.status().message();
      EXPECT_EQ(canon(ex, "eth0"), before);
      if (from) {
        // And the old plan is again a no-op.
        nl.resetLog();
        auto again = ex.apply(*from);
        ASSERT_TRUE(again.ok());
        EXPECT_EQ(again->writes(), 0) << again->toString();
      }
    }
  }
}

TEST_F(ExecutorTest, FailingRollbackIsReported) {
  ASSERT_TRUE(ex_.apply(planOf(basePolicy())).ok());
  DevicePolicy p = basePolicy();
  p.tenants[0].limit = 700 * kMbit;
  p.tenants[1].limit = 700 * kMbit;
  nl_.failWrite(2, unavailable("injected"), /*persistent=*/true);
  auto r = ex_.apply(planOf(p));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("; rollback failed: "), std::string::npos)
      << r.status().message();
}

TEST_F(ExecutorTest, RemoveAllDeletesOnlyOurRoot) {
  ASSERT_TRUE(ex_.apply(planOf(basePolicy())).ok());
  ASSERT_TRUE(ex_.removeAll("eth0").ok());
  EXPECT_EQ(ex_.read("eth0")->owner, RootOwner::kKernelDefault);
  nl_.resetLog();
  ASSERT_TRUE(ex_.removeAll("eth0").ok());  // idempotent
  fake_.setForeignRoot("eth1", "tbf", makeHandle(0x8001, 0));
  ASSERT_TRUE(ex_.removeAll("eth1").ok());
  ASSERT_TRUE(ex_.removeAll("nosuch0").ok());
  EXPECT_EQ(nl_.writes(), 0);
  EXPECT_EQ(ex_.read("eth1")->owner, RootOwner::kForeign);
}

TEST(DiffDevice, PlanFromStateRoundTrips) {
  FakeTcNetlink fake;
  fake.addDevice("eth0");
  Executor ex(fake);
  DevicePlan plan = planOf(basePolicy());
  ASSERT_TRUE(ex.apply(plan).ok());
  auto st = ex.read("eth0");
  ASSERT_TRUE(st.ok());
  DevicePlan back = planFromState(*st);
  EXPECT_EQ(back.classes.size(), plan.classes.size());
  EXPECT_EQ(back.filters.size(), plan.filters.size());
  auto ops = diffDevice(back, *st);
  ASSERT_TRUE(ops.ok());
  EXPECT_TRUE(ops->empty());
  // Bursts read back rounded, and still count as equal to what the plan asked for.
  for (const PlannedClass& c : plan.classes) {
    const ClassInfo* have = st->findClass(c.htb.classid);
    ASSERT_NE(have, nullptr);
    EXPECT_TRUE(burstEquivalent(c.htb.burst, have->htb.burst, c.htb.rate));
  }
}

TEST(DiffDevice, DescribesOps) {
  TcOp o;
  o.kind = TcOp::Kind::kDeleteFilter;
  o.filter_ref = FilterRef{2, kEthPIpv6, "u32", 0x8010011a};
  o.label = "tenant-a";
  EXPECT_EQ(o.describe(), "delete filter ipv6 pref 2 u32 handle 801::11a (tenant-a)");
  o.kind = TcOp::Kind::kChangeClass;
  o.cls.classid = makeHandle(1, 0x12);
  o.label = "";
  EXPECT_EQ(o.describe(), "change class 1:12");
}

}  // namespace
}  // namespace tq::tc
