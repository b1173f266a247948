// agent/ungoverned_qps.h: classification of QPs by owner, the bounded top-N, the new-owner log
// lines and their rate limit (fake time), the /proc reader against a fake tree, and the scanner
// over a fake QP source publishing to a StateBoard.
#include "agent/ungoverned_qps.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "common/log.h"

namespace tq::agent {
namespace {

constexpr int64_t kSec = 1'000'000'000;

std::vector<std::string>* g_lines = nullptr;
void captureSink(LogLevel level, const char*, int, const char* message) {
  if (g_lines != nullptr && level <= LogLevel::kInfo) g_lines->push_back(message);
}

// tid -> process; a tid missing from the map has exited.
class FakeProcesses final : public ProcessTable {
 public:
  std::optional<ProcessIdentity> identify(int32_t tid) const override {
    lookups++;
    auto it = threads.find(tid);
    if (it == threads.end()) return std::nullopt;
    return it->second;
  }
  std::map<int32_t, ProcessIdentity> threads;
  mutable int lookups = 0;
};

ib::RdmaQp userQp(const std::string& dev, uint32_t qpn, std::optional<int32_t> pid) {
  ib::RdmaQp q;
  q.device = dev;
  q.qpn = qpn;
  q.port = 1;
  q.type = 2;
  q.pid = pid;
  return q;
}
ib::RdmaQp kernelQp(const std::string& dev, uint32_t qpn) {
  ib::RdmaQp q = userQp(dev, qpn, std::nullopt);
  q.kernel_owner = "ib_core";
  return q;
}

class UngovernedQpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_lines = &lines_;
    setLogSink(captureSink);
    procs_.threads[100] = {100, "trainer"};
    procs_.threads[101] = {100, "trainer"};  // its proxy thread
    procs_.threads[200] = {200, "ib_write_bw"};
    procs_.threads[300] = {300, "rogue"};
  }
  void TearDown() override {
    setLogSink(nullptr);
    g_lines = nullptr;
  }
  int linesWith(const std::string& needle) const {
    int n = 0;
    for (const std::string& l : lines_) n += l.find(needle) != std::string::npos;
    return n;
  }
  FakeProcesses procs_;
  std::vector<std::string> lines_;
};

TEST_F(UngovernedQpTest, ClassifiesEveryQpByItsOwnersProcess) {
  ib::QpListing l;
  l.devices = {{0, "mlx5_0"}, {1, "mlx5_1"}, {2, "rxe0"}};
  l.qps = {kernelQp("mlx5_0", 0),
           kernelQp("mlx5_0", 1),
           userQp("mlx5_0", 10, 100),
           userQp("mlx5_0", 11, 101),  // attached, via a thread
           userQp("mlx5_0", 12, 200),
           userQp("mlx5_0", 13, 200),
           userQp("mlx5_0", 14, std::nullopt),  // pid not visible
           userQp("mlx5_0", 15, 999),           // thread gone
           userQp("rxe0", 20, 300)};
  UngovernedQpTracker t(procs_);
  auto out = t.update(l, {{100, "tenant-a"}}, 0);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].device, "mlx5_0");
  EXPECT_EQ(out[0].kernel, 2u);
  EXPECT_EQ(out[0].governed, 2u);
  EXPECT_EQ(out[0].ungoverned, 2u);
  EXPECT_EQ(out[0].unknown, 2u);
  EXPECT_EQ(out[0].ungoverned_owners, 1u);
  EXPECT_EQ(out[0].top, (std::vector<UngovernedOwner>{{200, "ib_write_bw", 2}}));
  EXPECT_EQ(out[0].other_ungoverned, 0u);
  EXPECT_EQ(out[1], (RdmaQpCounts{"mlx5_1"}));  // idle device: zeros
  EXPECT_EQ(out[2].ungoverned, 1u);
  EXPECT_EQ(out[2].top, (std::vector<UngovernedOwner>{{300, "rogue", 1}}));
  EXPECT_EQ(procs_.lookups, 5);  // once per distinct creator thread
  EXPECT_EQ(linesWith("pid 200 (ib_write_bw) owns QPs (mlx5_0:2)"), 1)
      << ::testing::PrintToString(lines_);
  EXPECT_EQ(linesWith("pid 300 (rogue) owns QPs (rxe0:1)"), 1);
  EXPECT_EQ(linesWith("cannot see"), 1);
}

TEST_F(UngovernedQpTest, TopOwnersAreBoundedAndTheRestIsOther) {
  ib::QpListing l;
  l.devices = {{0, "mlx5_0"}};
  uint32_t qpn = 0;
  // pid p owns (p - 1000) QPs, for p = 1001..1020.
  for (int32_t p = 1001; p <= 1020; ++p) {
    procs_.threads[p] = {p, "p" + std::to_string(p)};
    for (int i = 0; i < p - 1000; ++i) l.qps.push_back(userQp("mlx5_0", qpn++, p));
  }
  procs_.threads[1021] = {1021, "tie"};  // ties with pid 1020: 20 QPs, higher pid
  for (int i = 0; i < 20; ++i) l.qps.push_back(userQp("mlx5_0", qpn++, 1021));
  UngovernedQpOptions o;
  o.top_owners = 3;
  UngovernedQpTracker t(procs_, o);
  auto out = t.update(l, {}, 0);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].ungoverned_owners, 21u);
  EXPECT_EQ(out[0].top, (std::vector<UngovernedOwner>{
                            {1020, "p1020", 20}, {1021, "tie", 20}, {1019, "p1019", 19}}));
  EXPECT_EQ(out[0].other_ungoverned, out[0].ungoverned - 59);
}

TEST_F(UngovernedQpTest, NewOwnersAreLoggedOnceAndRateLimited) {
  UngovernedQpOptions o;
  o.log_window_ns = 60 * kSec;
  o.log_lines_per_window = 3;
  UngovernedQpTracker t(procs_, o);
  ib::QpListing one;
  one.qps = {userQp("rxe0", 1, 200)};
  for (int i = 0; i < 5; ++i) (void)t.update(one, {}, i * kSec);
  EXPECT_EQ(linesWith("pid 200"), 1);  // once while it stays
  (void)t.update(ib::QpListing{}, {}, 6 * kSec);
  (void)t.update(one, {}, 7 * kSec);
  EXPECT_EQ(linesWith("pid 200"), 2);  // back again after it was gone: new again

  // Ten more new owners in one scan: one more line fits in this window, the rest are summed
  // when the window ends.
  ib::QpListing many = one;
  for (int32_t p = 2000; p < 2010; ++p) {
    procs_.threads[p] = {p, "burst"};
    many.qps.push_back(userQp("rxe0", static_cast<uint32_t>(p), p));
  }
  (void)t.update(many, {}, 8 * kSec);
  EXPECT_EQ(linesWith("(burst)"), 1);
  (void)t.update(many, {}, 59 * kSec);
  EXPECT_EQ(linesWith("not logged"), 0);
  (void)t.update(many, {}, 61 * kSec);
  EXPECT_EQ(linesWith("9 more process(es)"), 1) << ::testing::PrintToString(lines_);
  EXPECT_EQ(linesWith("(burst)"), 1);  // still the same owners: nothing new
}

TEST_F(UngovernedQpTest, OwnerLookupsPerScanAreBounded) {
  UngovernedQpOptions o;
  o.max_owner_lookups = 2;
  UngovernedQpTracker t(procs_, o);
  ib::QpListing l;
  l.qps = {userQp("rxe0", 1, 100), userQp("rxe0", 2, 200), userQp("rxe0", 3, 300),
           userQp("rxe0", 4, 200)};
  auto out = t.update(l, {}, 0);
  EXPECT_EQ(procs_.lookups, 2);
  EXPECT_EQ(out[0].ungoverned, 3u);
  EXPECT_EQ(out[0].unknown, 1u);
}

TEST(ProcFsProcessTableTest, ThreadToProcessAndASanitisedName) {
  const std::string root = ::testing::TempDir() + "/fakeproc" + std::to_string(::getpid());
  auto put = [&](const std::string& rel, const std::string& text) {
    std::filesystem::create_directories(std::filesystem::path(root + "/" + rel).parent_path());
    std::ofstream(root + "/" + rel) << text;
  };
  put("4242/status", "Name:\tmain\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t4242\nPid:\t4242\n");
  put("4242/comm", "ib_write_bw\n");
  put("4250/status", "Name:\tNCCL proxy\nTgid:\t4242\nPid:\t4250\n");
  put("77/status", "Name:\tx\nTgid:\t77\n");
  put("77/comm", std::string("a\"b\\c\x01\xff") + "0123456789abcdef\n");
  put("88/status", "Name:\tno tgid line\n");
  ProcFsProcessTable t(root);
  auto a = t.identify(4250);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->pid, 4242);
  EXPECT_EQ(a->comm, "ib_write_bw");
  auto b = t.identify(77);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->comm, "a\"b\\c??01234567");  // 15 bytes, printable
  EXPECT_FALSE(t.identify(88).has_value());
  EXPECT_FALSE(t.identify(5).has_value());
  std::filesystem::remove_all(root);
}

// A scripted source: each listQps() returns the next result (the last one repeats).
class FakeQpSource final : public ib::QpSource {
 public:
  Result<ib::QpListing> listQps() override {
    calls++;
    Result<ib::QpListing> r = results.front();
    if (results.size() > 1) results.erase(results.begin());
    return r;
  }
  std::vector<Result<ib::QpListing>> results;
  std::atomic<int> calls{0};
};

TEST_F(UngovernedQpTest, ScannerPublishesWhatItCountsAndLogsErrorsOnce) {
  auto source = std::make_unique<FakeQpSource>();
  FakeQpSource* src = source.get();
  ib::QpListing l;
  l.devices = {{2, "rxe0"}};
  l.qps = {userQp("rxe0", 17, 100), userQp("rxe0", 18, 200)};
  ib::QpListing with_device_error = l;
  with_device_error.device_errors = {"rxe1 (index 3): dump failed: No such device"};
  src->results = {Result<ib::QpListing>(unavailable("RDMA netlink: no NETLINK_RDMA")),
                  Result<ib::QpListing>(unavailable("RDMA netlink: no NETLINK_RDMA")), l,
                  with_device_error};
  auto procs = std::make_unique<FakeProcesses>();
  procs->threads = procs_.threads;
  std::optional<AttachedProcesses> attached;  // not known yet
  StateBoard board;
  FakeClock clock;
  UngovernedQpScanner scanner(
      std::move(source), std::move(procs), [&] { return attached; }, &board, clock, kSec);
  scanner.scanOnce();
  EXPECT_EQ(src->calls.load(), 0);  // nothing to compare owners with: no listing at all
  EXPECT_FALSE(board.snapshot().rdma_qps.has_value());

  attached = AttachedProcesses{{100, "tenant-a"}};
  scanner.scanOnce();
  scanner.scanOnce();
  EXPECT_FALSE(board.snapshot().rdma_qps.has_value());
  EXPECT_EQ(linesWith("cannot list RDMA QPs: RDMA netlink: no NETLINK_RDMA"), 1);

  scanner.scanOnce();
  auto qps = board.snapshot().rdma_qps;
  ASSERT_TRUE(qps.has_value());
  ASSERT_EQ(qps->size(), 1u);
  EXPECT_EQ((*qps)[0].governed, 1u);
  EXPECT_EQ((*qps)[0].top, (std::vector<UngovernedOwner>{{200, "ib_write_bw", 1}}));
  EXPECT_EQ(linesWith("works again"), 1);

  scanner.scanOnce();
  scanner.scanOnce();
  EXPECT_EQ(linesWith("rxe1 (index 3)"), 1);
}

// The scan thread waits one interval on the injected clock, scans, and stops at once.
TEST_F(UngovernedQpTest, ScannerThreadScansEveryIntervalOfTheClockAndStops) {
  auto source = std::make_unique<FakeQpSource>();
  FakeQpSource* src = source.get();
  source->results = {Result<ib::QpListing>(ib::QpListing{})};
  StateBoard board;
  FakeClock clock;
  UngovernedQpScanner scanner(
      std::move(source), std::make_unique<FakeProcesses>(),
      [] { return std::optional<AttachedProcesses>(AttachedProcesses{}); }, &board, clock, kSec);
  scanner.start();
  auto within = [](const std::function<bool()>& pred) {  // bounded real-time poll
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!pred() && std::chrono::steady_clock::now() < end) std::this_thread::yield();
    return pred();
  };
  ASSERT_TRUE(within([&] { return scanner.worker().sleepingUntilNs() == clock.nowNs() + kSec; }));
  EXPECT_EQ(src->calls.load(), 0);  // nothing before the first interval
  clock.advanceNs(kSec);
  ASSERT_TRUE(within([&] { return src->calls.load() == 1; }));
  ASSERT_TRUE(within([&] { return board.snapshot().rdma_qps.has_value(); }));
  const auto t0 = std::chrono::steady_clock::now();
  scanner.stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
  EXPECT_EQ(src->calls.load(), 1);
}

}  // namespace
}  // namespace tq::agent
