// Tests of the shared-memory contract from both sides: the agent's writer and the plugin's
// reader, in one process, across threads and across real processes (fork).
#include "common/tenant_shm.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <thread>

#include "common/file_util.h"

namespace tq {
namespace {

class TenantShmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tq-shm-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { ASSERT_EQ(system(("rm -rf " + dir_).c_str()), 0); }

  std::unique_ptr<TenantShmWriter> writer(const std::string& tenant = "tenant-a") {
    auto w = TenantShmWriter::openOrCreate(dir_, tenant);
    EXPECT_TRUE(w.ok()) << w.status().toString();
    return w.ok() ? std::move(w).value() : nullptr;
  }
  std::string dir_;
};

TenantParams sample(uint64_t k) {
  TenantParams p;
  p.policy_version = k;
  p.rate_bytes_per_second = k * 3;
  p.burst_bytes = k * 5;
  p.guarantee_bytes_per_second = k * 7;
  p.limit_bytes_per_second = k * 11;
  p.weight = static_cast<uint32_t>(k % 1000);
  p.service_level = static_cast<uint32_t>(k % 16);
  p.dscp = static_cast<uint32_t>(k % 64);
  p.traffic_classes = {static_cast<int32_t>(k), static_cast<int32_t>(k + 1)};
  return p;
}

// Every field is a function of k: a torn read shows as a mismatch.
bool consistent(const TenantParams& p) {
  const uint64_t k = p.policy_version;
  return p == sample(k) || (k == 0 && p.rate_bytes_per_second == 0);
}

TEST_F(TenantShmTest, WriterPublishesReaderReads) {
  auto w = writer();
  TenantParams p = sample(42);
  w->publish(p);
  auto r = TenantShmReader::attach(dir_, "tenant-a");
  ASSERT_TRUE(r.ok()) << r.status().toString();
  uint64_t seq = 0;
  EXPECT_EQ((*r)->readParams(&seq), p);
  EXPECT_FALSE((*r)->paramsChanged(seq));
  w->publish(sample(43));
  EXPECT_TRUE((*r)->paramsChanged(seq));
  EXPECT_EQ((*r)->readParams(), sample(43));
}

TEST_F(TenantShmTest, ReopenKeepsBucketAndSlots) {
  auto w = writer();
  w->publish(sample(1));
  auto r = TenantShmReader::attach(dir_, "tenant-a");
  ASSERT_TRUE(r.ok());
  ASSERT_NE((*r)->claimSlot(), nullptr);
  (*r)->bucketState().store(12345);
  w.reset();
  auto w2 = writer();  // an agent restart
  EXPECT_EQ(w2->file()->bucket.empty_at_ns.load(), 12345);
  EXPECT_EQ(w2->liveProcesses(), 1);
  EXPECT_EQ(w2->published(), sample(1));
}

TEST_F(TenantShmTest, AttachErrors) {
  auto missing = TenantShmReader::attach(dir_, "nobody");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);

  auto bad_name = TenantShmReader::attach(dir_, "../etc");
  ASSERT_FALSE(bad_name.ok());
  EXPECT_EQ(bad_name.status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(TenantShmWriter::openOrCreate(dir_, "Tenant_A").ok());

  auto w = writer();
  w.reset();
  // Another layout version: same size, version field changed.
  int fd = open(tenantShmPath(dir_, "tenant-a").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  uint32_t v = 99;
  ASSERT_EQ(pwrite(fd, &v, sizeof v, offsetof(shm::Header, layout_version)), 4);
  auto wrong_version = TenantShmReader::attach(dir_, "tenant-a");
  ASSERT_FALSE(wrong_version.ok());
  EXPECT_EQ(wrong_version.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(wrong_version.status().message().find("layout version 99"), std::string::npos);
  // Truncated file.
  ASSERT_EQ(ftruncate(fd, 100), 0);
  close(fd);
  auto truncated = TenantShmReader::attach(dir_, "tenant-a");
  ASSERT_FALSE(truncated.ok());
  EXPECT_NE(truncated.status().message().find("truncated"), std::string::npos);
  // The writer replaces a file it cannot use.
  auto w2 = writer();
  ASSERT_NE(w2, nullptr);
  EXPECT_TRUE(TenantShmReader::attach(dir_, "tenant-a").ok());
}

TEST_F(TenantShmTest, NoTornReadsAcrossThreads) {
  auto w = writer();
  w->publish(sample(1));
  auto r = TenantShmReader::attach(dir_, "tenant-a");
  ASSERT_TRUE(r.ok());
  std::atomic<bool> stop{false};
  std::thread writer_thread([&] {
    for (uint64_t k = 2; !stop.load(std::memory_order_relaxed); ++k) w->publish(sample(k));
  });
  uint64_t torn = 0, reads = 0, last = 0, regressions = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  while (std::chrono::steady_clock::now() < deadline) {
    TenantParams p = (*r)->readParams();
    torn += consistent(p) ? 0 : 1;
    regressions += p.policy_version < last ? 1 : 0;
    last = p.policy_version;
    ++reads;
  }
  stop = true;
  writer_thread.join();
  EXPECT_EQ(torn, 0u);
  EXPECT_EQ(regressions, 0u);
  EXPECT_GT(reads, 1000u);
  EXPECT_GT(last, 2u);  // the writer really ran concurrently
}

TEST_F(TenantShmTest, NoTornReadsAcrossProcesses) {
  auto w = writer();
  w->publish(sample(1));
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // A separate process attaches the way a plugin does and checks every read.
    auto r = TenantShmReader::attach(dir_, "tenant-a");
    if (!r.ok()) _exit(2);
    uint64_t last = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
    while (std::chrono::steady_clock::now() < deadline) {
      TenantParams p = (*r)->readParams();
      if (!consistent(p)) _exit(3);
      last = p.policy_version;
    }
    _exit(last > 1 ? 0 : 4);
  }
  for (uint64_t k = 2;; ++k) {
    w->publish(sample(k));
    int status = 0;
    if (waitpid(child, &status, WNOHANG) == child) {
      ASSERT_TRUE(WIFEXITED(status));
      EXPECT_EQ(WEXITSTATUS(status), 0) << "2: attach failed, 3: torn read, 4: no progress";
      break;
    }
  }
}

TEST_F(TenantShmTest, SlotsAreExclusiveWithinAndAcrossProcesses) {
  auto w = writer();
  auto r1 = TenantShmReader::attach(dir_, "tenant-a");
  auto r2 = TenantShmReader::attach(dir_, "tenant-a");
  ASSERT_TRUE(r1.ok() && r2.ok());
  shm::Slot* s1 = (*r1)->claimSlot();
  shm::Slot* s2 = (*r2)->claimSlot();
  ASSERT_NE(s1, nullptr);
  ASSERT_NE(s2, nullptr);
  EXPECT_EQ((*r1)->claimSlot(), s1);  // idempotent
  EXPECT_NE(static_cast<void*>(s1), static_cast<void*>(s2));
  EXPECT_EQ(w->liveProcesses(), 2);
  EXPECT_EQ(w->reclaimDeadSlots(), 0);  // both alive
}

TEST_F(TenantShmTest, KilledProcessSlotIsReclaimedAndTotalsStayMonotonic) {
  auto w = writer();
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto r = TenantShmReader::attach(dir_, "tenant-a");
    if (!r.ok()) _exit(2);
    shm::Slot* s = (*r)->claimSlot();
    if (s == nullptr) _exit(3);
    s->tx_bytes.store(1000);
    s->rx_bytes.store(500);
    s->throttled_ns.store(7);
    char c = 1;
    if (write(ready[1], &c, 1) != 1) _exit(4);
    pause();  // killed by the parent
    _exit(0);
  }
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  EXPECT_EQ(w->liveProcesses(), 1);
  EXPECT_EQ(w->reclaimDeadSlots(), 0);
  TenantUsage before = w->usage(0);
  EXPECT_EQ(before.tx_bytes, 1000u);
  EXPECT_EQ(before.processes, 1u);

  ASSERT_EQ(kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_EQ(w->liveProcesses(), 0);
  EXPECT_EQ(w->reclaimDeadSlots(), 1);
  TenantUsage after = w->usage(0);
  EXPECT_EQ(after.tx_bytes, 1000u);  // folded into retired totals
  EXPECT_EQ(after.rx_bytes, 500u);
  EXPECT_EQ(after.throttled_ns, 7u);
  EXPECT_EQ(after.processes, 0u);
  EXPECT_EQ(w->reclaimDeadSlots(), 0);
  close(ready[0]);
  close(ready[1]);

  // The freed slot can be claimed again.
  auto r = TenantShmReader::attach(dir_, "tenant-a");
  ASSERT_TRUE(r.ok());
  EXPECT_NE((*r)->claimSlot(), nullptr);
}

TEST_F(TenantShmTest, ThrottledTimeIncludesOpenInterval) {
  auto w = writer();
  auto r = TenantShmReader::attach(dir_, "tenant-a");
  ASSERT_TRUE(r.ok());
  shm::Slot* s = (*r)->claimSlot();
  s->throttled_ns.store(100);
  s->throttled_since_ns.store(1000);
  s->backlog_bytes.store(4096);
  s->busy_ns.store(50);
  s->busy_since_ns.store(1200);
  TenantUsage u = w->usage(1500);
  EXPECT_EQ(u.busy_ns, 350u);
  EXPECT_EQ(u.throttled_ns, 600u);
  EXPECT_EQ(u.throttled_processes, 1u);
  EXPECT_EQ(u.backlog_bytes, 4096u);
}

TEST_F(TenantShmTest, RemoveOnlyWhenUnused) {
  auto w = writer();
  w->publish(sample(5));
  {
    auto r = TenantShmReader::attach(dir_, "tenant-a");
    ASSERT_TRUE(r.ok());
    (*r)->claimSlot();
    auto removed = w->removeIfUnused();
    ASSERT_TRUE(removed.ok());
    EXPECT_FALSE(*removed);
    EXPECT_TRUE((*r)->readParams().deleted);  // attached processes learn it is going away
  }
  auto removed = w->removeIfUnused();
  ASSERT_TRUE(removed.ok());
  EXPECT_TRUE(*removed);
  EXPECT_EQ(TenantShmReader::attach(dir_, "tenant-a").status().code(), StatusCode::kNotFound);
}

TEST_F(TenantShmTest, TrafficClassLookup) {
  auto a = writer("tenant-a");
  auto b = writer("tenant-b");
  TenantParams pa = sample(1);
  pa.traffic_classes = {1, 7};
  TenantParams pb = sample(2);
  pb.traffic_classes = {2};
  a->publish(pa);
  b->publish(pb);
  EXPECT_EQ(listTenantFiles(dir_), (std::vector<std::string>{"tenant-a", "tenant-b"}));
  EXPECT_EQ(tenantForTrafficClass(dir_, 7), "tenant-a");
  EXPECT_EQ(tenantForTrafficClass(dir_, 2), "tenant-b");
  EXPECT_EQ(tenantForTrafficClass(dir_, 3), std::nullopt);
  EXPECT_EQ(tenantForTrafficClass(dir_ + "/nonexistent", 1), std::nullopt);
}

}  // namespace
}  // namespace tq
