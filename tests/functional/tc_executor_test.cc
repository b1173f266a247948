// The tc executor against the real kernel, in network namespaces each test creates and removes.
// Everything the executor reads back through libnl is cross-checked with tc(8)'s own view
// (`tc -s -d class show` as text: iproute2 6.1 prints classes without JSON; `tc -j filter show`
// and `tc -j qdisc show` as JSON), and packets sent with each tenant's DSCP over IPv4 and IPv6
// must land in that tenant's class.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <map>
#include <sstream>
#include <thread>

#include "tc/executor.h"
#include "tc/netns.h"
#include "tests/support/netns.h"
#include "tests/support/process.h"
#include "tests/support/recording_tc_netlink.h"
#include "tests/support/tc_spec.h"
#include "tests/support/tiny_json.h"

namespace tq::tc {
namespace {

using testing::tenantClass;

using testing::Json;
using testing::RecordingTcNetlink;
using testing::TestNetns;

constexpr uint64_t kMbit = 125'000;
constexpr uint64_t kGbit = 1000 * kMbit;

// ---- tc(8) output parsing ----------------------------------------------------------------------

struct TcClassText {
  std::string parent;
  int prio = -1;         // leaves only
  int64_t quantum = -1;  // leaves only
  double rate_bits = 0;
  double ceil_bits = 0;
  double burst = 0;
  double cburst = 0;
  uint64_t bytes = 0, packets = 0, drops = 0, overlimits = 0;
};

double parseTcRate(const std::string& s) {  // "400Mbit"
  size_t i = 0;
  double v = std::stod(s, &i);
  std::string unit = s.substr(i);
  if (unit == "Kbit")
    v *= 1e3;
  else if (unit == "Mbit")
    v *= 1e6;
  else if (unit == "Gbit")
    v *= 1e9;
  else if (unit == "Tbit")
    v *= 1e12;
  else if (unit != "bit")
    ADD_FAILURE() << "unknown tc rate unit in " << s;
  return v;
}

double parseTcSize(const std::string& s) {  // "131000b/1", "128Kb", "1Mb"
  size_t i = 0;
  double v = std::stod(s, &i);
  std::string unit =
      s.substr(i, s.find('/') == std::string::npos ? std::string::npos : s.find('/') - i);
  if (unit == "Kb")
    v *= 1024;
  else if (unit == "Mb")
    v *= 1024 * 1024;
  else if (unit != "b")
    ADD_FAILURE() << "unknown tc size unit in " << s;
  return v;
}

std::map<std::string, TcClassText> parseTcClasses(const std::string& text) {
  std::map<std::string, TcClassText> out;
  std::istringstream in(text);
  std::string word;
  TcClassText* cur = nullptr;
  std::vector<std::string> w;
  while (in >> word) w.push_back(word);
  for (size_t i = 0; i < w.size(); ++i) {
    auto next = [&]() -> std::string { return i + 1 < w.size() ? w[++i] : ""; };
    if (w[i] == "class" && i + 2 < w.size()) {
      ++i;                 // kind
      cur = &out[w[++i]];  // classid
      continue;
    }
    if (!cur) continue;
    if (w[i] == "parent")
      cur->parent = next();
    else if (w[i] == "root")
      cur->parent = "root";
    else if (w[i] == "prio")
      cur->prio = std::stoi(next());
    else if (w[i] == "quantum")
      cur->quantum = std::stoll(next());
    else if (w[i] == "rate")
      cur->rate_bits = parseTcRate(next());
    else if (w[i] == "ceil")
      cur->ceil_bits = parseTcRate(next());
    else if (w[i] == "burst")
      cur->burst = parseTcSize(next());
    else if (w[i] == "cburst")
      cur->cburst = parseTcSize(next());
    else if (w[i] == "Sent") {
      cur->bytes = std::stoull(next());
      ++i;  // "bytes"
      cur->packets = std::stoull(next());
    } else if (w[i] == "(dropped") {
      std::string d = next();
      cur->drops = std::stoull(d.substr(0, d.size() - 1));
    } else if (w[i] == "overlimits") {
      cur->overlimits = std::stoull(next());
    }
  }
  return out;
}

uint32_t parseHexHandle(const std::string& s) {  // "1:1a2b"
  size_t colon = s.find(':');
  uint32_t major = static_cast<uint32_t>(std::stoul(s.substr(0, colon), nullptr, 16));
  std::string minor = s.substr(colon + 1);
  return makeHandle(static_cast<uint16_t>(major),
                    minor.empty() ? 0 : static_cast<uint16_t>(std::stoul(minor, nullptr, 16)));
}

// ---- fixture -----------------------------------------------------------------------------------

class PrivilegedTcExecutor : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::runningAsRoot()) GTEST_SKIP() << "needs root (network namespaces, tc)";
    const std::string p = "tqtc" + std::to_string(getpid());
    auto s = TestNetns::create(p + "s");
    ASSERT_TRUE(s.ok()) << s.status().toString();
    sender_ = std::move(*s);
    auto r = TestNetns::create(p + "r");
    ASSERT_TRUE(r.ok()) << r.status().toString();
    receiver_ = std::move(*r);
    for (int i = 0; i < 4; ++i) {
      dev_[i] = p + "a" + std::to_string(i);
      std::string peer = p + "b" + std::to_string(i);
      std::string net = "10.9" + std::to_string(i) + ".0.";
      ASSERT_TRUE(
          testing::addVethPair(*sender_, dev_[i], *receiver_, peer, net + "1/24", net + "2/24")
              .ok());
      if (i == 0) peer0_ = peer;
    }
    auto nl = openTcNetlink({.netns = sender_->name()});
    ASSERT_TRUE(nl.ok()) << nl.status().toString();
    real_ = std::move(*nl);
    rec_ = std::make_unique<RecordingTcNetlink>(*real_);
    ex_ = std::make_unique<Executor>(*rec_);
  }

  DevicePolicy policy(int dev) {
    DevicePolicy p;
    p.device = dev_[dev];
    p.capacity = kGbit;
    p.tenants = {tenantClass("tenant-a", 400 * kMbit, 600 * kMbit, 2, 34),
                 tenantClass("tenant-b", 200 * kMbit, 400 * kMbit, 1, 10),
                 tenantClass("tenant-c", 100 * kMbit, 900 * kMbit, 1, 18)};
    return p;
  }

  DevicePlan plan(const DevicePolicy& p) {
    auto r = makeDevicePlan(p);
    EXPECT_TRUE(r.ok()) << r.status().toString();
    return *r;
  }

  std::string tc(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"tc"};
    argv.insert(argv.end(), args.begin(), args.end());
    auto out = sender_->run(argv);
    EXPECT_TRUE(out.ok()) << out.status().toString();
    return out.ok() ? *out : "";
  }

  // Checks the device's tree, as the kernel reports it to libnl AND to tc(8), against the plan.
  void expectTreeMatches(const DevicePlan& want) {
    SCOPED_TRACE("dev " + want.device);
    auto st = ex_->read(want.device);
    ASSERT_TRUE(st.ok()) << st.status().toString();
    ASSERT_EQ(st->owner, RootOwner::kOurs);
    EXPECT_EQ(st->root.htb, want.root);
    ASSERT_EQ(st->classes.size(), want.classes.size());
    for (const PlannedClass& c : want.classes) {
      const ClassInfo* have = st->findClass(c.htb.classid);
      ASSERT_NE(have, nullptr) << formatHandle(c.htb.classid);
      EXPECT_EQ(have->htb.parent, c.htb.parent);
      EXPECT_EQ(have->htb.rate, c.htb.rate);
      EXPECT_EQ(have->htb.ceil, c.htb.ceil);
      EXPECT_EQ(have->htb.quantum, c.htb.quantum);
      EXPECT_EQ(have->htb.prio, c.htb.prio);
      EXPECT_TRUE(burstEquivalent(c.htb.burst, have->htb.burst, c.htb.rate))
          << c.htb.burst << " vs " << have->htb.burst;
      EXPECT_TRUE(burstEquivalent(c.htb.cburst, have->htb.cburst, c.htb.ceil));
    }
    std::map<std::pair<uint16_t, uint32_t>, const FilterInfo*> rules;
    for (const FilterInfo& f : st->filters)
      if (!f.u32_table) rules[{f.u32.pref, u32Node(f.u32.handle)}] = &f;
    ASSERT_EQ(rules.size(), want.filters.size());
    for (const PlannedFilter& f : want.filters) {
      auto it = rules.find({f.u32.pref, u32Node(f.u32.handle)});
      ASSERT_NE(it, rules.end());
      EXPECT_EQ(it->second->u32.protocol, f.u32.protocol);
      EXPECT_EQ(it->second->u32.keys, f.u32.keys);
      EXPECT_EQ(it->second->u32.classid, f.u32.classid);
    }

    // tc(8): qdisc
    auto qj = Json::parse(tc({"-j", "qdisc", "show", "dev", want.device, "root"}));
    ASSERT_TRUE(qj.ok()) << qj.status().toString();
    ASSERT_EQ(qj->items().size(), 1u);
    const Json& q = qj->items()[0];
    EXPECT_EQ(q.get("kind")->str(), "htb");
    EXPECT_EQ(q.get("handle")->str(), "1:");
    EXPECT_EQ(q.path("options.r2q")->integer(), static_cast<int64_t>(kOwnerR2q));
    char def[16];
    std::snprintf(def, sizeof def, "0x%x", want.root.default_minor);
    EXPECT_EQ(q.path("options.default")->str(), def);

    // tc(8): classes (text)
    auto classes = parseTcClasses(tc({"-s", "-d", "class", "show", "dev", want.device}));
    EXPECT_EQ(classes.size(), want.classes.size());
    for (const PlannedClass& c : want.classes) {
      auto it = classes.find(formatHandle(c.htb.classid));
      ASSERT_NE(it, classes.end()) << formatHandle(c.htb.classid);
      const TcClassText& t = it->second;
      EXPECT_EQ(t.parent, c.htb.parent == kRootHandle ? "root" : formatHandle(c.htb.parent));
      EXPECT_NEAR(t.rate_bits, c.htb.rate * 8.0, c.htb.rate * 8e-3);
      EXPECT_NEAR(t.ceil_bits, c.htb.ceil * 8.0, c.htb.ceil * 8e-3);
      const ClassInfo* have = st->findClass(c.htb.classid);
      EXPECT_NEAR(t.burst, have->htb.burst, 1100);  // tc prints "128Kb"/"1Mb" when close
      EXPECT_NEAR(t.cburst, have->htb.cburst, 1100);
      if (t.quantum >= 0) {  // tc shows prio/quantum for leaf classes only
        EXPECT_EQ(t.quantum, c.htb.quantum);
        EXPECT_EQ(t.prio, static_cast<int>(c.htb.prio));
      }
    }

    // tc(8): filters (JSON)
    auto fj = Json::parse(tc({"-j", "filter", "show", "dev", want.device}));
    ASSERT_TRUE(fj.ok()) << fj.status().toString();
    size_t seen = 0;
    for (const Json& f : fj->items()) {
      const Json* fh = f.path("options.fh");
      if (!fh || !f.path("options.flowid")) continue;
      ++seen;
      uint32_t node = static_cast<uint32_t>(
          std::stoul(fh->str().substr(fh->str().rfind(':') + 1), nullptr, 16));
      uint16_t pref = static_cast<uint16_t>(f.get("pref")->integer());
      const PlannedFilter* match = nullptr;
      for (const PlannedFilter& pf : want.filters)
        if (pf.u32.pref == pref && pf.u32.handle == node) match = &pf;
      ASSERT_NE(match, nullptr) << fh->str();
      EXPECT_EQ(f.get("protocol")->str(), match->u32.protocol == kEthPIp ? "ip" : "ipv6");
      EXPECT_EQ(parseHexHandle(f.path("options.flowid")->str()), match->u32.classid);
      EXPECT_EQ(std::stoul(f.path("options.match.value")->str(), nullptr, 16),
                match->u32.keys[0].value);
      EXPECT_EQ(std::stoul(f.path("options.match.mask")->str(), nullptr, 16),
                match->u32.keys[0].mask);
      EXPECT_EQ(f.path("options.match.off")->integer(), 0);
    }
    EXPECT_EQ(seen, want.filters.size());
    // Terminal rules ("*flowid" in the text form), like tc's own "flowid".
    std::string text = tc({"filter", "show", "dev", want.device});
    size_t terminal = 0;
    for (size_t pos = 0; (pos = text.find("*flowid", pos)) != std::string::npos; ++pos) ++terminal;
    EXPECT_EQ(terminal, want.filters.size()) << text;
  }

  // The plan-relevant part of what tc(8) shows, for before/after comparisons.
  std::string tcView(const std::string& dev) {
    std::string s;
    std::istringstream qdisc(tc({"qdisc", "show", "dev", dev, "root"}));
    for (std::string word; qdisc >> word;) {
      if (word == "direct_packets_stat") {  // a counter (e.g. IPv6 router solicitations)
        qdisc >> word;
        continue;
      }
      s += word + " ";
    }
    s += "\n";
    for (auto& [id, c] : parseTcClasses(tc({"-d", "class", "show", "dev", dev}))) {
      char buf[200];
      std::snprintf(buf, sizeof buf, "class %s parent %s rate %.0f ceil %.0f prio %d q %lld\n",
                    id.c_str(), c.parent.c_str(), c.rate_bits, c.ceil_bits, c.prio,
                    static_cast<long long>(c.quantum));
      s += buf;
    }
    std::string filters = tc({"filter", "show", "dev", dev});
    // "order N" is the rule's position in its table; it changes when a rule is recreated.
    std::istringstream in(filters);
    std::string word;
    bool skip = false;
    while (in >> word) {
      if (skip) {
        skip = false;
        continue;
      }
      if (word == "order") {
        skip = true;
        continue;
      }
      s += word + " ";
    }
    return s;
  }

  // Sends `count` UDP datagrams from the sender namespace to the peer of dev 0 with the DS
  // field set to dscp<<2, over IPv4 or IPv6. Static neighbours avoid ARP/ND delays.
  void sendTagged(uint8_t dscp, bool v6, int count) {
    auto ns = ScopedNetns::enter(sender_->name());
    ASSERT_TRUE(ns.ok()) << ns.status().toString();
    int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    int tos = dscp << 2;
    if (v6) {
      ASSERT_EQ(setsockopt(fd, IPPROTO_IPV6, IPV6_TCLASS, &tos, sizeof tos), 0);
    } else {
      ASSERT_EQ(setsockopt(fd, IPPROTO_IP, IP_TOS, &tos, sizeof tos), 0);
    }
    char payload[200] = {};
    for (int i = 0; i < count; ++i) {
      ssize_t n;
      if (v6) {
        sockaddr_in6 to{};
        to.sin6_family = AF_INET6;
        to.sin6_port = htons(9);
        inet_pton(AF_INET6, "fd00:90::2", &to.sin6_addr);
        n = sendto(fd, payload, sizeof payload, 0, reinterpret_cast<sockaddr*>(&to), sizeof to);
      } else {
        sockaddr_in to{};
        to.sin_family = AF_INET;
        to.sin_port = htons(9);
        inet_pton(AF_INET, "10.90.0.2", &to.sin_addr);
        n = sendto(fd, payload, sizeof payload, 0, reinterpret_cast<sockaddr*>(&to), sizeof to);
      }
      ASSERT_EQ(n, static_cast<ssize_t>(sizeof payload)) << strerror(errno);
    }
    close(fd);
  }

  void setUpNeighbours() {
    auto lj = Json::parse(*receiver_->run({"ip", "-j", "link", "show", "dev", peer0_}));
    ASSERT_TRUE(lj.ok());
    std::string mac = lj->items().at(0).get("address")->str();
    ASSERT_TRUE(
        sender_->run({"ip", "-6", "addr", "add", "fd00:90::1/64", "dev", dev_[0], "nodad"}).ok());
    ASSERT_TRUE(
        receiver_->run({"ip", "-6", "addr", "add", "fd00:90::2/64", "dev", peer0_, "nodad"}).ok());
    ASSERT_TRUE(sender_
                    ->run({"ip", "neigh", "replace", "10.90.0.2", "lladdr", mac, "dev", dev_[0],
                           "nud", "permanent"})
                    .ok());
    ASSERT_TRUE(sender_
                    ->run({"ip", "-6", "neigh", "replace", "fd00:90::2", "lladdr", mac, "dev",
                           dev_[0], "nud", "permanent"})
                    .ok());
  }

  std::unique_ptr<TestNetns> sender_, receiver_;
  std::string dev_[4];
  std::string peer0_;
  std::unique_ptr<TcNetlink> real_;
  std::unique_ptr<RecordingTcNetlink> rec_;
  std::unique_ptr<Executor> ex_;
};

TEST_F(PrivilegedTcExecutor, ApplyThenReadBackThroughLibnlAndTc) {
  DevicePlan p = plan(policy(0));
  auto r = ex_->apply(p);
  ASSERT_TRUE(r.ok()) << r.status().toString();
  EXPECT_EQ(r->qdisc_creates, 1);
  EXPECT_EQ(r->class_creates, 5);
  EXPECT_EQ(r->filter_creates, 6);
  expectTreeMatches(p);
}

TEST_F(PrivilegedTcExecutor, TaggedPacketsLandInTheirTenantsClassAndStatsMatchTc) {
  setUpNeighbours();
  DevicePlan p = plan(policy(0));
  ASSERT_TRUE(ex_->apply(p).ok());
  struct Send {
    const char* tenant;
    uint8_t dscp;
    int v4, v6;
  };
  const Send kSends[] = {{"tenant-a", 34, 7, 5}, {"tenant-b", 10, 3, 11}, {"tenant-c", 18, 2, 0}};
  for (const Send& s : kSends) {
    sendTagged(s.dscp, false, s.v4);
    sendTagged(s.dscp, true, s.v6);
  }
  sendTagged(0, false, 4);  // untagged -> default class
  sendTagged(46, true, 3);  // a DSCP no tenant has -> default class
  // Poll (bounded) until every tenant class has dequeued what was sent.
  std::map<std::string, uint64_t> packets;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  DeviceState st;
  for (;;) {
    auto read = ex_->read(dev_[0]);
    ASSERT_TRUE(read.ok());
    st = *read;
    bool done = true;
    for (const Send& s : kSends) {
      const ClassInfo* c = st.findClass(makeHandle(1, p.tenant_minors.at(s.tenant)));
      ASSERT_NE(c, nullptr);
      packets[s.tenant] = c->stats.packets;
      done = done && c->stats.packets >= static_cast<uint64_t>(s.v4 + s.v6);
    }
    if (done || std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (const Send& s : kSends)
    EXPECT_EQ(packets[s.tenant], static_cast<uint64_t>(s.v4 + s.v6)) << s.tenant;
  const ClassInfo* def = st.findClass(makeHandle(1, kDefaultClassMinor));
  ASSERT_NE(def, nullptr);
  EXPECT_GE(def->stats.packets, 7u);  // plus neighbour/MLD chatter, if any
  // libnl's counters are tc's counters.
  auto tc_classes = parseTcClasses(tc({"-s", "-d", "class", "show", "dev", dev_[0]}));
  auto again = ex_->read(dev_[0]);
  ASSERT_TRUE(again.ok());
  for (const ClassInfo& c : again->classes) {
    const TcClassText& t = tc_classes.at(formatHandle(c.htb.classid));
    if (c.htb.classid == makeHandle(1, kDefaultClassMinor)) continue;  // may still see chatter
    EXPECT_EQ(t.bytes, c.stats.bytes) << formatHandle(c.htb.classid);
    EXPECT_EQ(t.packets, c.stats.packets) << formatHandle(c.htb.classid);
    EXPECT_EQ(t.drops, c.stats.drops);
    EXPECT_EQ(t.overlimits, c.stats.overlimits);
  }
  const ClassInfo* a = again->findClass(makeHandle(1, p.tenant_minors.at("tenant-a")));
  // 7 x (14 eth + 20 ip + 8 udp + 200) + 5 x (14 + 40 + 8 + 200)
  EXPECT_EQ(a->stats.bytes, 7u * 242 + 5u * 262);
}

TEST_F(PrivilegedTcExecutor, ReapplyPerformsNoNetlinkWrites) {
  DevicePolicy pol = policy(0);
  ASSERT_TRUE(ex_->apply(plan(pol)).ok());
  rec_->resetLog();
  for (int i = 0; i < 3; ++i) {
    auto r = ex_->apply(plan(pol));
    ASSERT_TRUE(r.ok()) << r.status().toString();
    EXPECT_EQ(r->writes(), 0) << r->toString();
  }
  EXPECT_EQ(rec_->writes(), 0);
  // Also for a multi-Gbit link, where burst rounding is largest in bytes.
  pol.capacity = 100 * kGbit;
  pol.tenants[0].guarantee = 40 * kGbit;
  pol.tenants[0].limit = 60 * kGbit;
  ASSERT_TRUE(ex_->apply(plan(pol)).ok());
  rec_->resetLog();
  auto r = ex_->apply(plan(pol));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(rec_->writes(), 0);
  expectTreeMatches(plan(pol));
}

TEST_F(PrivilegedTcExecutor, OneTenantsLimitChangeIsOneClassChange) {
  DevicePolicy pol = policy(0);
  ASSERT_TRUE(ex_->apply(plan(pol)).ok());
  rec_->resetLog();
  pol.tenants[1].limit = 500 * kMbit;
  DevicePlan changed = plan(pol);
  auto r = ex_->apply(changed);
  ASSERT_TRUE(r.ok()) << r.status().toString();
  EXPECT_EQ(r->writes(), 1);
  ASSERT_EQ(rec_->log().size(), 1u);
  EXPECT_EQ(rec_->log()[0],
            "change class " + formatHandle(makeHandle(1, changed.tenant_minors.at("tenant-b"))));
  expectTreeMatches(changed);
}

TEST_F(PrivilegedTcExecutor, DeletedTenantsClassAndFiltersGo) {
  DevicePolicy pol = policy(0);
  DevicePlan before = plan(pol);
  ASSERT_TRUE(ex_->apply(before).ok());
  pol.tenants.erase(pol.tenants.begin() + 1);  // tenant-b (dscp 10)
  DevicePlan after = plan(pol);
  auto r = ex_->apply(after);
  ASSERT_TRUE(r.ok()) << r.status().toString();
  EXPECT_EQ(r->class_deletes, 1);
  EXPECT_EQ(r->filter_deletes, 2);
  EXPECT_EQ(r->writes(), 3);
  expectTreeMatches(after);
  const std::string gone = formatHandle(makeHandle(1, before.tenant_minors.at("tenant-b")));
  EXPECT_EQ(tc({"class", "show", "dev", dev_[0]}).find(gone + " "), std::string::npos);
  std::string filters = tc({"filter", "show", "dev", dev_[0]});
  EXPECT_EQ(filters.find("flowid " + gone), std::string::npos) << filters;
  EXPECT_EQ(filters.find("::10a"), std::string::npos) << filters;  // DSCP 10's rules
}

TEST_F(PrivilegedTcExecutor, TwoManagedDevicesAndUnmanagedOnesUntouched) {
  // dev 2 has someone else's qdisc; dev 3 keeps the kernel default. Neither is in a plan.
  ASSERT_TRUE(sender_
                  ->run({"tc", "qdisc", "add", "dev", dev_[2], "root", "tbf", "rate", "100mbit",
                         "burst", "32k", "latency", "50ms"})
                  .ok());
  const std::string dev2_before = tcView(dev_[2]);
  const std::string dev3_before = tcView(dev_[3]);
  DevicePolicy p0 = policy(0), p1 = policy(1);
  p1.capacity = 10 * kGbit;
  p1.tenants[0].limit = 5 * kGbit;
  ASSERT_TRUE(ex_->apply(plan(p0)).ok());
  ASSERT_TRUE(ex_->apply(plan(p1)).ok());
  expectTreeMatches(plan(p0));
  expectTreeMatches(plan(p1));
  rec_->resetLog();
  EXPECT_EQ(ex_->apply(plan(p0))->writes() + ex_->apply(plan(p1))->writes(), 0);
  p1.tenants.pop_back();
  ASSERT_TRUE(ex_->apply(plan(p1)).ok());
  // A plan for the foreign device is refused and changes nothing there.
  auto refused = ex_->apply(plan(policy(2)));
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition)
      << refused.status().toString();
  // The kernel picks the tbf's handle (8001:, 8011:, ...): match the kind and the reason.
  EXPECT_NE(refused.status().message().find(": root qdisc tbf "), std::string::npos)
      << refused.status().message();
  EXPECT_NE(refused.status().message().find("was not created by tenantqos"), std::string::npos)
      << refused.status().message();
  ASSERT_TRUE(ex_->removeAll(dev_[0]).ok());
  ASSERT_TRUE(ex_->removeAll(dev_[2]).ok());  // not ours: left alone
  EXPECT_EQ(tcView(dev_[2]), dev2_before);
  EXPECT_EQ(tcView(dev_[3]), dev3_before);
  expectTreeMatches(plan(p1));  // dev 1 unaffected by dev 0's removal
}

TEST_F(PrivilegedTcExecutor, InjectedFailureLeavesTheOldTree) {
  DevicePolicy pol = policy(0);
  DevicePlan old_plan = plan(pol);
  ASSERT_TRUE(ex_->apply(old_plan).ok());
  const std::string before = tcView(dev_[0]);
  // New plan: a limit change, a removed tenant, an added tenant, a moved DSCP.
  pol.tenants[0].limit = 700 * kMbit;
  pol.tenants.erase(pol.tenants.begin() + 1);
  pol.tenants.push_back(tenantClass("tenant-d", 50 * kMbit, 100 * kMbit, 1, 46));
  pol.tenants[1].dscp = 20;
  DevicePlan new_plan = plan(pol);
  rec_->resetLog();
  {
    // Count the writes of this transition on a scratch device first.
    DevicePolicy scratch = policy(1);
    ASSERT_TRUE(ex_->apply(plan(scratch)).ok());
    DevicePolicy target = pol;
    target.device = dev_[1];
    rec_->resetLog();
    ASSERT_TRUE(ex_->apply(plan(target)).ok());
  }
  const int total = rec_->writes();
  ASSERT_GE(total, 6);
  for (int fail_at : {1, total / 2, total}) {
    SCOPED_TRACE("write " + std::to_string(fail_at) + " of " + std::to_string(total) + " fails");
    rec_->resetLog();
    rec_->failWrite(fail_at, internalError("injected failure"));
    auto r = ex_->apply(new_plan);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("injected failure; rolled back"), std::string::npos)
        << r.status().message();
    EXPECT_EQ(tcView(dev_[0]), before);
    rec_->resetLog();
    auto again = ex_->apply(old_plan);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->writes(), 0) << "old plan no longer a no-op: " << again->toString();
  }
  // And the new plan still applies cleanly afterwards.
  ASSERT_TRUE(ex_->apply(new_plan).ok());
  expectTreeMatches(new_plan);
}

TEST_F(PrivilegedTcExecutor, KernelRefusalMidApplyRollsBackAndNamesTheObject) {
  DevicePolicy pol = policy(0);
  DevicePlan old_plan = plan(pol);
  ASSERT_TRUE(ex_->apply(old_plan).ok());
  const std::string before = tcView(dev_[0]);
  pol.tenants[0].limit = 700 * kMbit;  // a class change, executed before any filter write
  DevicePlan bad = plan(pol);
  // An IPv6 rule at the IPv4 classifier's pref: the kernel refuses a second protocol there.
  PlannedFilter bogus{ipv6DscpFilter(50, bad.classes.back().htb.classid), "bogus"};
  bogus.u32.pref = kIpv4FilterPref;
  bad.filters.push_back(bogus);
  auto r = ex_->apply(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "apply plan on dev " + dev_[0] + ": create filter ipv6 pref 1 handle 0::132 flowid " +
                formatHandle(bogus.u32.classid) + " (bogus) on dev " + dev_[0] +
                ": Invalid input data or parameter (EINVAL); kernel: Protocol mismatch for filter "
                "with specified priority; rolled back");
  EXPECT_EQ(tcView(dev_[0]), before);
}

TEST_F(PrivilegedTcExecutor, KernelReasonIsKeptInErrors) {
  DevicePlan p = plan(policy(0));
  ASSERT_TRUE(ex_->apply(p).ok());
  auto ifindex = real_->linkIndex(dev_[0]);
  ASSERT_TRUE(ifindex.ok());
  // Not something the executor does (it deletes filters first); the raw seam shows the text.
  Status st = real_->deleteClass(*ifindex, makeHandle(1, p.tenant_minors.at("tenant-a")));
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_EQ(st.message(), "Object busy (EBUSY); kernel: HTB class in use");
  auto missing = ex_->apply(plan(DevicePolicy{"tqtcnosuch0", kGbit, {}, 0}));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(),
            "apply plan on dev tqtcnosuch0: no such device \"tqtcnosuch0\"");
  auto no_ns = openTcNetlink({.netns = "tqtc-no-such-ns"});
  EXPECT_EQ(no_ns.status().code(), StatusCode::kNotFound) << no_ns.status().toString();
}

TEST_F(PrivilegedTcExecutor, ForeignRootIsReplacedOnlyWhenAllowed) {
  ASSERT_TRUE(sender_
                  ->run({"tc", "qdisc", "add", "dev", dev_[0], "root", "handle", "1:", "htb",
                         "default", "10"})
                  .ok());
  const std::string before = tcView(dev_[0]);
  DevicePlan p = plan(policy(0));
  auto refused = ex_->apply(p);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(rec_->writes(), 0);
  EXPECT_EQ(tcView(dev_[0]), before);
  auto replaced = ex_->apply(p, ApplyOptions{.replace_foreign_root = true});
  ASSERT_TRUE(replaced.ok()) << replaced.status().toString();
  EXPECT_EQ(replaced->qdisc_deletes, 1);
  expectTreeMatches(p);
}

TEST_F(PrivilegedTcExecutor, LinkShaperModeAndSwitchingModes) {
  auto shaper = makeLinkShaperPlan(dev_[0], kGbit);
  ASSERT_TRUE(shaper.ok());
  auto r = ex_->apply(*shaper);
  ASSERT_TRUE(r.ok()) << r.status().toString();
  expectTreeMatches(*shaper);
  EXPECT_NE(tc({"qdisc", "show", "dev", dev_[0], "invisible"}).find("qdisc pfifo 0: parent 1:1"),
            std::string::npos)
      << "the single class has the kernel's FIFO as its leaf";
  rec_->resetLog();
  EXPECT_EQ(ex_->apply(*shaper)->writes(), 0);
  DevicePlan tenants = plan(policy(0));
  auto sw = ex_->apply(tenants);
  ASSERT_TRUE(sw.ok()) << sw.status().toString();
  EXPECT_TRUE(sw->rebuilt);
  expectTreeMatches(tenants);
  ASSERT_TRUE(ex_->removeAll(dev_[0]).ok());
  EXPECT_NE(tc({"qdisc", "show", "dev", dev_[0], "root"}).find("noqueue 0: root"),
            std::string::npos);
  auto st = ex_->read(dev_[0]);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->owner, RootOwner::kKernelDefault);
}

}  // namespace
}  // namespace tq::tc
