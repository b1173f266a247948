// Does the HTB tree actually enforce guarantees and limits? Two namespaces joined by a veth pair,
// our plan on the sender's side (link 1 Gbit/s), backlogged iperf3 TCP senders marked with each
// tenant's DSCP (`--tos`), goodput measured at the receiver (iperf3 -J, sum_received, first
// second omitted).
//
// Accounting: HTB charges L2 bytes (a GSO skb counts as its segments with their headers), iperf3
// reports TCP payload. On a 1500-byte MTU with TCP timestamps a segment carries 1448 payload
// bytes in a 1514-byte frame, so full use of a class at rate R delivers R x 1448/1514
// (= 0.956 R) of goodput. Every threshold below is (target fraction) x (configured rate) x
// 1448/1514.
//
// The machine is shared (2 cores; other builds run at the same time), and a starved iperf3 can
// fall short for reasons that have nothing to do with tc. So a scenario whose LOWER bounds are
// missed runs once more, and the better attempt counts. Upper bounds (limits, capacity) must
// hold in every attempt. Every attempt's figures are printed.
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "tc/executor.h"
#include "tests/support/netns.h"
#include "tests/support/process.h"
#include "tests/support/tiny_json.h"

namespace tq::tc {
namespace {

using testing::Json;
using testing::Subprocess;
using testing::TestNetns;

constexpr uint64_t kMbit = 125'000;  // bytes/s
constexpr double kGoodputPerL2Byte = 1448.0 / 1514.0;
constexpr int kSeconds = 3;  // measured; plus 1 omitted second of ramp-up

struct Flow {
  const char* tenant;
  uint8_t dscp;
  int port;
  // iperf3 --bidir: a second stream from the receiver back, whose ACKs leave through the
  // tenant's class as a ring allreduce's do. Goodput counted: the forward direction.
  bool bidir = false;
};

class PrivilegedTcEnforcement : public ::testing::Test {
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
    dev_ = p + "a";
    ASSERT_TRUE(
        testing::addVethPair(*sender_, dev_, *receiver_, p + "b", "10.77.0.1/24", "10.77.0.2/24")
            .ok());
    auto nl = openTcNetlink({.netns = sender_->name()});
    ASSERT_TRUE(nl.ok()) << nl.status().toString();
    nl_ = std::move(*nl);
    ex_ = std::make_unique<Executor>(*nl_);
    out_dir_ = "/tmp/" + p + "-iperf";
    ASSERT_TRUE(testing::runOk({"mkdir", "-p", out_dir_}).ok());
  }
  void TearDown() override {
    if (!out_dir_.empty()) (void)testing::runCommand({"rm", "-rf", out_dir_});
  }

  void applyPolicy(uint64_t a_limit, uint64_t b_limit) {
    DevicePolicy pol;
    pol.device = dev_;
    pol.capacity = 1000 * kMbit;
    TenantClassSpec a{"tenant-a", 400 * kMbit, a_limit, 2, 34, 0};
    TenantClassSpec b{"tenant-b", 200 * kMbit, b_limit, 1, 10, 0};
    pol.tenants = {a, b};
    apply(pol);
  }

  void apply(const DevicePolicy& pol) {
    auto plan = makeDevicePlan(pol);
    ASSERT_TRUE(plan.ok()) << plan.status().toString();
    auto r = ex_->apply(*plan);
    ASSERT_TRUE(r.ok()) << r.status().toString();
  }

  Status waitListening(int port) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < deadline) {
      auto out = receiver_->run({"ss", "-Hltn", "sport", "=", ":" + std::to_string(port)});
      if (out.ok() && !out->empty()) return okStatus();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return deadlineExceeded("iperf3 server on port " + std::to_string(port) + " not listening");
  }

  // Runs the flows at the same time; returns receiver goodput per flow in Mbit/s.
  std::vector<double> run(const std::vector<Flow>& flows) {
    std::vector<Subprocess> servers, clients;
    for (const Flow& f : flows) {
      auto s =
          Subprocess::start(receiver_->exec({"iperf3", "-s", "-1", "-p", std::to_string(f.port)}));
      EXPECT_TRUE(s.ok()) << s.status().toString();
      if (!s.ok()) return {};
      servers.push_back(std::move(*s));
    }
    for (const Flow& f : flows) {
      Status st = waitListening(f.port);
      EXPECT_TRUE(st.ok()) << st.toString();
      if (!st.ok()) return {};
    }
    char tos[8];
    for (const Flow& f : flows) {
      std::snprintf(tos, sizeof tos, "0x%02x", f.dscp << 2);
      std::vector<std::string> argv = {"iperf3",
                                       "-c",
                                       "10.77.0.2",
                                       "-p",
                                       std::to_string(f.port),
                                       "-t",
                                       std::to_string(kSeconds),
                                       "-O",
                                       "1",
                                       "--tos",
                                       tos,
                                       "-J"};
      if (f.bidir) argv.push_back("--bidir");
      auto c = Subprocess::start(sender_->exec(argv), out_dir_ + "/" + f.tenant + ".json");
      EXPECT_TRUE(c.ok()) << c.status().toString();
      if (!c.ok()) return {};
      clients.push_back(std::move(*c));
    }
    std::vector<double> mbps;
    for (size_t i = 0; i < flows.size(); ++i) {
      auto rc = clients[i].wait((kSeconds + 10) * 1000);
      EXPECT_TRUE(rc.ok() && *rc == 0)
          << flows[i].tenant << ": " << (rc.ok() ? std::to_string(*rc) : rc.status().toString());
      auto text = testing::runOk({"cat", out_dir_ + "/" + flows[i].tenant + ".json"});
      auto json = text.ok() ? Json::parse(*text) : Result<Json>(text.status());
      const Json* bps = json.ok() ? json->path("end.sum_received.bits_per_second") : nullptr;
      EXPECT_NE(bps, nullptr) << (text.ok() ? *text : text.status().toString());
      mbps.push_back(bps ? bps->number() / 1e6 : 0.0);
    }
    for (Subprocess& s : servers) (void)s.wait(3000);
    return mbps;
  }

  // Runs `flows` up to twice (see the file header); returns the attempt that best meets
  // `min_mbps` (per flow) after checking `max_mbps` on every attempt.
  std::vector<double> measure(const char* what, const std::vector<Flow>& flows,
                              const std::vector<double>& min_mbps,
                              const std::vector<double>& max_mbps) {
    std::vector<double> best;
    double best_score = -1;
    for (int attempt = 1; attempt <= 2; ++attempt) {
      std::vector<double> got = run(flows);
      if (got.size() != flows.size()) return {};
      double score = 1e9, sum = 0;
      std::string line;
      for (size_t i = 0; i < flows.size(); ++i) {
        EXPECT_LE(got[i], max_mbps[i]) << what << ": " << flows[i].tenant << " above its cap";
        score = std::min(score, got[i] / min_mbps[i]);
        sum += got[i];
        char buf[96];
        std::snprintf(buf, sizeof buf, "%s%s %.1f Mbit/s (needs >= %.1f)", i ? ", " : "",
                      flows[i].tenant, got[i], min_mbps[i]);
        line += buf;
      }
      EXPECT_LE(sum, 1.01 * 1000) << what << ": above the link capacity";
      std::printf("[figures] %s, attempt %d: %s\n", what, attempt, line.c_str());
      std::fflush(stdout);
      if (score > best_score) {
        best_score = score;
        best = got;
      }
      if (score >= 1.0) break;
    }
    return best;
  }

  std::unique_ptr<TestNetns> sender_, receiver_;
  std::string dev_, out_dir_;
  std::unique_ptr<TcNetlink> nl_;
  std::unique_ptr<Executor> ex_;
};

constexpr Flow kA{"tenant-a", 34, 5201};
constexpr Flow kB{"tenant-b", 10, 5202};

TEST_F(PrivilegedTcEnforcement, BackloggedTenantsGetTheirGuarantees) {
  applyPolicy(600 * kMbit, 400 * kMbit);
  const double a_min = 0.95 * 400 * kGoodputPerL2Byte, b_min = 0.95 * 200 * kGoodputPerL2Byte;
  auto got = measure("both backlogged, guarantees 400/200, limits 600/400", {kA, kB},
                     {a_min, b_min}, {1.01 * 600, 1.01 * 400});
  ASSERT_EQ(got.size(), 2u);
  EXPECT_GE(got[0], a_min);
  EXPECT_GE(got[1], b_min);
}

TEST_F(PrivilegedTcEnforcement, AloneEachTenantReachesItsLimit) {
  applyPolicy(600 * kMbit, 400 * kMbit);
  const double a_min = 0.90 * 600 * kGoodputPerL2Byte, b_min = 0.90 * 400 * kGoodputPerL2Byte;
  auto a = measure("tenant-a alone, limit 600", {kA}, {a_min}, {1.01 * 600});
  ASSERT_EQ(a.size(), 1u);
  EXPECT_GE(a[0], a_min);
  auto b = measure("tenant-b alone, limit 400", {kB}, {b_min}, {1.01 * 400});
  ASSERT_EQ(b.size(), 1u);
  EXPECT_GE(b[0], b_min);
}

// Limits at link capacity: the 400 Mbit/s nobody is guaranteed is split 2:1 by weight, i.e.
// 666.7 / 333.3 Mbit/s at L2 (637.6 / 318.8 goodput). The lower bounds accept a spare ratio
// down to 1.5:1 (a 1:1 split, what a too-small quantum gives, would be 573.7 / 382.5).
TEST_F(PrivilegedTcEnforcement, SpareCapacityIsSplitByWeight) {
  applyPolicy(1000 * kMbit, 1000 * kMbit);
  const double a_min = (400 + 400 * 0.6) * kGoodputPerL2Byte * 0.97;
  const double b_min = 0.95 * 200 * kGoodputPerL2Byte;
  auto got = measure("spare split, weights 2:1, limits 1000", {kA, kB}, {a_min, b_min},
                     {1.01 * 1000, 1.01 * 1000});
  ASSERT_EQ(got.size(), 2u);
  double a_l2 = got[0] / kGoodputPerL2Byte, b_l2 = got[1] / kGoodputPerL2Byte;
  double ratio = (a_l2 - 400) / std::max(b_l2 - 200, 1.0);
  std::printf("[figures] L2 spare ratio %.2f (ideal 2.00)\n", ratio);
  EXPECT_GE(got[0], a_min);
  EXPECT_GE(got[1], b_min);
  EXPECT_GT(ratio, 1.5);
  EXPECT_LT(ratio, 2.7);
}

// Issue 16's gap: a tenant whose limit is its guarantee (300/300 Mbit/s) next to another. With
// the plan's framing (the device's MTU: rates as the wire rates that carry the payload, ACKs of
// the reverse stream included) the forward goodput is the payload rate itself; programmed as
// given (framing.mtu 0) the same run delivered 283-286 Mbit/s.
TEST_F(PrivilegedTcEnforcement, FramedLimitEqualToGuaranteeDeliversItsPayloadRate) {
  DevicePolicy pol;
  pol.device = dev_;
  pol.capacity = 1000 * kMbit;
  pol.framing.mtu = 1500;  // the veth's
  pol.tenants = {TenantClassSpec{"tenant-a", 400 * kMbit, 1000 * kMbit, 2, 34, 0},
                 TenantClassSpec{"flat", 300 * kMbit, 300 * kMbit, 1, 12, 0}};
  apply(pol);
  const Flow flat{"flat", 12, 5203, true};
  // Upper bound 1.03: iperf3's receiver ACKs less often than one per two segments (measured
  // 305.6 Mbit/s), so the ACK allowance is a little generous here; the plugin's pacing bounds
  // a tenant at its limit in the TCP mode.
  auto got = measure("300/300 framed next to a backlogged tenant-a", {kA, flat},
                     {0.95 * 400, 0.97 * 300}, {1.01 * 1000, 1.03 * 300});
  ASSERT_EQ(got.size(), 2u);
  EXPECT_GE(got[1], 0.97 * 300);
}

}  // namespace
}  // namespace tq::tc
