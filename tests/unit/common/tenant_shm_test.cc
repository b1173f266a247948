// Tests of the shared-memory contract from both sides: the agent's TenantShm and the plugin's
// TenantShmView over real memfds, the seals that keep a tenant from writing its parameters or
// resizing anything, the bounded readers of tenant-writable memory, and the attach protocol's
// parsers.
#include "common/tenant_shm.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "common/attach_protocol.h"

namespace tq {
namespace {

TenantParams sample(uint64_t k) {
  TenantParams p;
  p.policy_version = k;
  p.buckets = nodeBuckets(k * 3, k * 5, k * 11);
  BucketSpec rail;
  rail.index = 1;
  rail.direction = shm::kRx;
  rail.name = "eth" + std::to_string(k % 10);
  rail.rate_bytes_per_second = k * 13;
  rail.depth_bytes = k * 17;
  rail.guarantee_bytes_per_second = k * 7;
  rail.limit_bytes_per_second = k * 11;
  p.buckets.push_back(rail);
  p.guarantee_bytes_per_second = k * 7;
  p.limit_bytes_per_second = k * 11;
  p.weight = static_cast<uint32_t>(k % 1000);
  p.service_level = static_cast<uint32_t>(k % 16);
  p.dscp = static_cast<uint32_t>(k % 64);
  p.traffic_classes = {static_cast<int32_t>(k), static_cast<int32_t>(k + 1)};
  return p;
}

// `p` as a process reads it: with its own bucket rates (`rates`, else none: zeros).
TenantParams asRead(TenantParams p, std::vector<uint64_t> rates = {}) {
  if (rates.empty()) rates.assign(p.buckets.size(), 0);
  p.process_rates = std::move(rates);
  return p;
}

// The view a process gets from the agent's fds (dup'd: the agent keeps its own).
std::unique_ptr<TenantShmView> viewOf(const TenantShm& shm, uint32_t slot) {
  auto v = TenantShmView::map(Fd(::dup(shm.paramsFd())), Fd(::dup(shm.sharedFd())), slot);
  EXPECT_TRUE(v.ok()) << v.status().toString();
  return v.ok() ? std::move(v).value() : nullptr;
}

TEST(TenantShm, AgentPublishesProcessReads) {
  auto shm = TenantShm::create("tenant-a", 1).value();
  shm->publish(sample(42));
  auto v = viewOf(*shm, 0);
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->tenant(), "tenant-a");
  uint64_t seq = 0;
  EXPECT_EQ(v->readParams(&seq), asRead(sample(42)));
  EXPECT_FALSE(v->paramsChanged(seq));
  shm->publish(sample(43));
  EXPECT_TRUE(v->paramsChanged(seq));
  EXPECT_EQ(v->readParams(), asRead(sample(43)));
  EXPECT_EQ(shm->published(), sample(43));
}

// Each process reads its own row of the process buckets' rates (issue 23 item 9): its slot's, or
// the slotless one; a new table is a new sequence number, so it is read on the next admission.
TEST(TenantShm, EachProcessReadsItsOwnBucketRates) {
  auto shm = TenantShm::create("tenant-a", 1).value();
  shm->publish(sample(5));
  auto v0 = viewOf(*shm, 0), v3 = viewOf(*shm, 3), none = viewOf(*shm, shm::kMaxSlots);
  uint64_t seq = 0;
  ASSERT_TRUE(v0->readParams(&seq).has_value());
  ProcessRateTable t{};
  t[0] = {100, 200, 300};
  t[3] = {7, 8, 9};
  t[shm::kMaxSlots] = {1, 2, 3};
  shm->publishProcessRates(t);
  EXPECT_TRUE(v0->paramsChanged(seq));
  EXPECT_EQ(v0->readParams()->process_rates, (std::vector<uint64_t>{100, 200, 300}));
  EXPECT_EQ(v3->readParams()->process_rates, (std::vector<uint64_t>{7, 8, 9}));
  EXPECT_EQ(none->readParams()->process_rates, (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(shm->processRates(), t);
  EXPECT_EQ(shm->published(), sample(5)) << "the agent's copy has no process rows";
  // The same table again writes nothing.
  ASSERT_TRUE(v0->readParams(&seq).has_value());
  shm->publishProcessRates(t);
  EXPECT_FALSE(v0->paramsChanged(seq));
  // A process cannot write its rates (the page is sealed; the pwrite is refused).
  const uint64_t evil = 1ull << 40;
  EXPECT_LT(::pwrite(shm->paramsFd(), &evil, sizeof(evil), offsetof(shm::ParamsPage, processes)),
            0);
}

// What the kernel refuses a tenant's process, whatever it tries with the fds it was given.
TEST(TenantShm, ParametersCannotBeWrittenResizedOrMappedWritable) {
  auto shm = TenantShm::create("tenant-a", 1).value();
  shm->publish(sample(7));
  const int fd = shm->paramsFd();
  const uint64_t evil = 1ull << 60;
  EXPECT_LT(::pwrite(fd, &evil, sizeof(evil), 320 + 24), 0) << "write to the parameters";
  EXPECT_EQ(errno, EPERM);
  EXPECT_NE(::ftruncate(fd, 0), 0) << "truncate the parameters";
  EXPECT_NE(::ftruncate(fd, 1 << 20), 0) << "grow the parameters";
  EXPECT_EQ(::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0), MAP_FAILED);
  void* ro = ::mmap(nullptr, 4096, PROT_READ, MAP_SHARED, fd, 0);
  ASSERT_NE(ro, MAP_FAILED);
  EXPECT_NE(::mprotect(ro, 4096, PROT_READ | PROT_WRITE), 0) << "make a read-only map writable";
  ::munmap(ro, 4096);
  EXPECT_NE(::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096), 0);
  EXPECT_NE(::fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE), 0) << "sealed against more seals";
  // Reopening through /proc gives the same sealed inode.
  const int again = ::open(("/proc/self/fd/" + std::to_string(fd)).c_str(), O_RDWR);
  ASSERT_GE(again, 0);
  EXPECT_LT(::pwrite(again, &evil, sizeof(evil), 320 + 24), 0);
  ::close(again);
  EXPECT_EQ(shm->published(), sample(7));
}

TEST(TenantShm, SharedMemoryCannotBeResized) {
  auto shm = TenantShm::create("tenant-a", 1).value();
  const int fd = shm->sharedFd();
  EXPECT_NE(::ftruncate(fd, 0), 0);
  EXPECT_NE(::ftruncate(fd, 1 << 20), 0);
  EXPECT_NE(::fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE), 0);
  const uint64_t v = 5;
  EXPECT_EQ(::pwrite(fd, &v, sizeof(v), 0), static_cast<ssize_t>(sizeof(v))) << "writable";
}

TEST(TenantShm, ViewRefusesUnsealedOrShortMemory) {
  Fd plain(::memfd_create("plain", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  ASSERT_EQ(::ftruncate(plain.get(), sizeof(shm::SharedPage)), 0);
  auto shm = TenantShm::create("tenant-a", 1).value();
  auto r = TenantShmView::map(Fd(::dup(plain.get())), Fd(::dup(shm->sharedFd())), 0);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not sealed"), std::string::npos) << r.status().toString();
  auto r2 = TenantShmView::map(Fd(::dup(shm->paramsFd())), Fd(::dup(plain.get())), 0);
  EXPECT_FALSE(r2.ok());
}

TEST(TenantShm, SlotsAreZeroedCountedAndDrainedOnRelease) {
  auto shm = TenantShm::create("tenant-a", 1).value();
  shm->publish(sample(3));  // buckets 0 (tx), 1 (rx), 2 (rx, eth3)
  const PeerIdentity me{::getpid(), 0, 0};
  auto slot = shm->acquireSlot(me);
  ASSERT_TRUE(slot.has_value());
  auto v = viewOf(*shm, *slot);
  ASSERT_NE(v->slot(), nullptr);
  ASSERT_NE(v->counters(0), nullptr);
  const int64_t t0 = 1'000'000'000'000;
  EXPECT_EQ(shm->collect(t0, 1'000'000).processes, 1u);
  v->counters(0)->bytes.fetch_add(5000);
  v->counters(0)->backlog_bytes.store(700);
  v->counters(1)->bytes.fetch_add(300);
  v->counters(2)->bytes.fetch_add(40);
  v->counters(2)->backlog_bytes.store(9);  // rx backlog: receives waiting, not in the tx sum
  TenantUsage u = shm->collect(t0 + 10'000'000, 1'000'000);
  EXPECT_EQ(u.tx_bytes, 5000u);
  EXPECT_EQ(u.rx_bytes, 340u);
  EXPECT_EQ(u.backlog_bytes, 700u);
  ASSERT_EQ(u.buckets.size(), 3u);
  EXPECT_EQ(u.buckets[1].bytes, 300u);
  EXPECT_EQ(u.buckets[2].bytes, 40u);
  EXPECT_EQ(u.buckets[2].backlog_bytes, 9u);
  ASSERT_EQ(u.slots.size(), 1u);
  EXPECT_EQ(u.slots[0].pid, ::getpid());
  EXPECT_EQ(shm->attachments().size(), 1u);
  v->counters(0)->bytes.fetch_add(100);
  shm->releaseSlot(slot, me.pid);  // the socket closed: its last counters still count
  EXPECT_FALSE(shm->idle());
  u = shm->collect(t0 + 20'000'000, 1'000'000);
  EXPECT_EQ(u.tx_bytes, 5100u);
  EXPECT_EQ(u.processes, 0u);
  EXPECT_TRUE(shm->idle());
  // The next process gets zeroed counters in every bucket; totals stay monotonic.
  auto again = shm->acquireSlot(me);
  ASSERT_TRUE(again.has_value());
  auto v2 = viewOf(*shm, *again);
  EXPECT_EQ(v2->counters(2)->bytes.load(), 0u);
  EXPECT_EQ(shm->collect(t0 + 30'000'000, 1'000'000).tx_bytes, 5100u);
}

// A bucket that moves to another index (the tenant's devices changed) does not make the agent
// count what the processes wrote for the old one as new bytes, nor call it garbage.
TEST(TenantShm, ABucketReplacedAtAnIndexStartsFromWhatIsThere) {
  auto shm = TenantShm::create("tenant-a", 1).value();
  TenantParams p = sample(1);
  shm->publish(p);
  auto slot = shm->acquireSlot({::getpid(), 0, 0});
  auto v = viewOf(*shm, *slot);
  const int64_t t0 = 1'000'000'000'000;
  shm->collect(t0, 1'000'000);
  v->counters(2)->bytes.fetch_add(1'000'000);
  EXPECT_EQ(shm->collect(t0 + 10'000'000, 1'000'000).buckets[2].bytes, 1'000'000u);
  p.buckets[2].name = "eth9";
  p.buckets[2].index = 2;  // another key at index 2
  shm->publish(p);
  v->counters(2)->bytes.fetch_add(5);
  TenantUsage u = shm->collect(t0 + 20'000'000, 1'000'000);
  EXPECT_EQ(u.buckets[2].bytes, 1'000'000u) << "the new bucket starts from the values read";
  EXPECT_EQ(u.rejected_readings, 0u);
  v->counters(2)->bytes.fetch_add(7);
  EXPECT_EQ(shm->collect(t0 + 30'000'000, 1'000'000).buckets[2].bytes, 1'000'007u);
}

TEST(TenantShm, AllSlotsTakenAttachesWithoutASlot) {
  auto shm = TenantShm::create("tenant-a", 1).value();
  for (uint32_t i = 0; i < shm::kMaxSlots; ++i) {
    ASSERT_TRUE(shm->acquireSlot({static_cast<pid_t>(100 + i), 0, 0}).has_value());
  }
  EXPECT_FALSE(shm->acquireSlot({999, 0, 0}).has_value());
  EXPECT_EQ(shm->attachments().size(), shm::kMaxSlots + 1);
  shm->releaseSlot(std::nullopt, 999);
  EXPECT_EQ(shm->attachments().size(), shm::kMaxSlots);
}

// Whatever a tenant writes into its counters, the agent counts only plausible increments, logs
// once, and recovers when honest increments resume.
TEST(CheckCounters, RefusesImplausibleValuesAndResynchronises) {
  CounterBaseline base;
  const int64_t now = 1'000'000'000'000;
  CounterSample s;
  s.bytes = 1000;
  CounterCheck c = checkCounters(&base, s, now, 10'000'000, 125'000'000);
  EXPECT_EQ(c.bytes, 1000u);
  EXPECT_EQ(c.problems, "");
  s.bytes = UINT64_MAX - 5;  // a jump no link carries
  c = checkCounters(&base, s, now, 10'000'000, 125'000'000);
  EXPECT_EQ(c.bytes, 0u);
  EXPECT_NE(c.problems.find("bytes jumped"), std::string::npos) << c.problems;
  s.bytes = 10;  // backwards
  c = checkCounters(&base, s, now, 10'000'000, 125'000'000);
  EXPECT_NE(c.problems.find("went backwards"), std::string::npos);
  s.bytes = 2010;  // honest again, from the new baseline
  c = checkCounters(&base, s, now, 10'000'000, 125'000'000);
  EXPECT_EQ(c.bytes, 2000u);
  EXPECT_EQ(c.problems, "");
  s.throttled_since_ns = now + 3'600'000'000'000;  // in the future
  s.backlog_bytes = 1ull << 50;
  s.peer_wait_ns = 1ull << 62;  // far more waiting than time passed
  c = checkCounters(&base, s, now, 10'000'000, 125'000'000);
  EXPECT_NE(c.problems.find("throttled_since"), std::string::npos);
  EXPECT_NE(c.problems.find("backlog_bytes"), std::string::npos);
  EXPECT_NE(c.problems.find("peer_wait"), std::string::npos);
  EXPECT_EQ(c.backlog_bytes, 0u);
  EXPECT_EQ(c.peer_wait_ns, 0u);
  EXPECT_FALSE(c.throttled_now);
  s.throttled_since_ns = now - 5'000'000;
  s.backlog_bytes = 4096;
  s.peer_wait_ns += 3'000'000;
  c = checkCounters(&base, s, now, 10'000'000, 125'000'000);
  EXPECT_TRUE(c.throttled_now);
  EXPECT_EQ(c.throttled_ns, 5'000'000u);
  EXPECT_EQ(c.backlog_bytes, 4096u);
  EXPECT_EQ(c.peer_wait_ns, 3'000'000u);
}

TEST(CheckCounters, GarbageInTheWholePageIsCountedAsNothing) {
  auto shm = TenantShm::create("tenant-a", 1).value();
  shm->publish(sample(2));
  auto slot = shm->acquireSlot({::getpid(), 0, 0});
  ASSERT_TRUE(slot.has_value());
  const int64_t t0 = 1'000'000'000'000;
  shm->collect(t0, 125'000'000);
  std::vector<uint8_t> junk(sizeof(shm::SharedPage), 0xff);
  ASSERT_EQ(::pwrite(shm->sharedFd(), junk.data(), junk.size(), 0),
            static_cast<ssize_t>(junk.size()));
  TenantUsage u = shm->collect(t0 + 10'000'000, 125'000'000);
  EXPECT_EQ(u.tx_bytes, 0u);
  EXPECT_EQ(u.rx_bytes, 0u);
  EXPECT_EQ(u.backlog_bytes, 0u);
  EXPECT_EQ(u.rejected_readings, 3u) << "one per bucket";
}

TEST(ReadParams, GivesUpOnASeqlockThatNeverSettles) {
  auto page = std::make_unique<shm::ParamsPage>();
  shm::Params& p = page->params;
  p.seq.store(3);  // odd forever (what a writer stuck mid-update would leave)
  EXPECT_FALSE(readParams(*page).has_value());
  p.seq.store(4);
  p.num_traffic_classes.store(1000);  // out of range: clamped to the array
  p.num_buckets.store(1000);
  page->buckets[0].key.store(shm::bucketKey(shm::kScopeDevice, 200, shm::kRx));  // index >= 8
  page->buckets[1].key.store(0xff);                                              // no scope
  page->buckets[2].key.store(shm::bucketKey(shm::kScopeFabricLink, 3, shm::kTx));
  auto v = readParams(*page);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->traffic_classes.size(), shm::kMaxTrafficClasses);
  ASSERT_EQ(v->buckets.size(), shm::kMaxBuckets);
  EXPECT_EQ(v->buckets[0].scope, shm::kScopeNone);
  EXPECT_EQ(v->buckets[1].scope, shm::kScopeNone);
  EXPECT_EQ(v->buckets[2].scope, shm::kScopeFabricLink);
  EXPECT_EQ(v->buckets[2].index, 3u);
}

TEST(ReadParams, NeverTornUnderConcurrentPublishes) {
  auto shm = TenantShm::create("tenant-a", 1).value();
  shm->publish(sample(1));
  auto v = viewOf(*shm, shm::kMaxSlots);
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (uint64_t k = 2; !stop.load(); ++k) shm->publish(sample(k));
  });
  int read = 0;
  for (int i = 0; i < 200000; ++i) {
    auto p = v->readParams();
    if (!p) continue;  // gave up (bounded): the caller keeps what it had
    ++read;
    ASSERT_EQ(*p, asRead(sample(p->policy_version)));
  }
  stop.store(true);
  writer.join();
  EXPECT_GT(read, 0);
}

TEST(AttachProtocol, RoundTripsAndRefusesGarbage) {
  const std::string req = attach::encodeRequest({"tenant-a"});
  auto r = attach::parseRequest(reinterpret_cast<const uint8_t*>(req.data()), req.size());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->wanted_tenant, "tenant-a");
  EXPECT_FALSE(attach::parseRequest(reinterpret_cast<const uint8_t*>(req.data()), 79).ok());
  std::string bad = req;
  std::memset(bad.data() + 16, 'A', 64);  // no NUL
  EXPECT_FALSE(attach::parseRequest(reinterpret_cast<const uint8_t*>(bad.data()), 80).ok());
  bad = req;
  bad[0] ^= 1;
  EXPECT_FALSE(attach::parseRequest(reinterpret_cast<const uint8_t*>(bad.data()), 80).ok());

  attach::Reply rep;
  rep.slot = 7;
  rep.tenant = "tenant-b";
  const std::string enc = attach::encodeReply(rep);
  auto p = attach::parseReply(reinterpret_cast<const uint8_t*>(enc.data()), enc.size());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->slot, 7u);
  EXPECT_EQ(p->tenant, "tenant-b");
  rep.tenant = "../../etc";
  const std::string evil = attach::encodeReply(rep);
  EXPECT_FALSE(attach::parseReply(reinterpret_cast<const uint8_t*>(evil.data()), evil.size()).ok());
}

TEST(AttachProtocol, TrafficClassesFile) {
  const std::string text = attach::encodeTrafficClasses({{5, "team-a"}, {7, "team-b"}});
  EXPECT_EQ(attach::lookupTrafficClass(text, 7), "team-b");
  EXPECT_EQ(attach::lookupTrafficClass(text, 6), std::nullopt);
  EXPECT_EQ(attach::lookupTrafficClass("garbage\n5 team-a\n", 5), std::nullopt);
  EXPECT_EQ(attach::lookupTrafficClass("tenantqos-traffic-classes 1\n5 ../x\n5", 5), std::nullopt);
}

}  // namespace
}  // namespace tq
