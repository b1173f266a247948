// The default tenant as the node-wide socket serves it (issue 23 item 6): a memory of its own per
// uid, the tenant's rate split among them (FakeClock, counters written as a plugin writes them),
// and the node-wide socket's bounds on a uid's connections, tried by processes of other uids
// (forked before the server starts, then setresuid: needs root; skipped without).
#include "agent/default_tenant.h"

#include <grp.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <sstream>

#include "agent/attach_server.h"
#include "common/attach_protocol.h"
#include "common/clock.h"
#include "test_util.h"

namespace tq::agent {
namespace {

constexpr uint64_t kRate = 50'000'000 / 8;  // the tenant's rate per bucket, bytes/s
constexpr int64_t kPeriod = 10'000'000;

TenantParams tenantParams(uint64_t rate = kRate) {
  TenantParams p;
  p.policy_version = 1;
  p.dscp = 10;
  p.limit_bytes_per_second = rate;
  p.buckets = nodeBuckets(rate, bucketDepthBytes(rate, 1'000'000, 4096), rate);
  return p;
}

std::unique_ptr<TenantShmView> viewOf(const TenantShm& shm, uint32_t slot) {
  auto v = TenantShmView::map(Fd(::dup(shm.paramsFd())), Fd(::dup(shm.sharedFd())), slot);
  EXPECT_TRUE(v.ok()) << v.status().toString();
  return v.ok() ? std::move(v).value() : nullptr;
}

ino_t inodeOf(int fd) {
  struct stat st {};
  return ::fstat(fd, &st) == 0 ? st.st_ino : 0;
}

uint64_t txRate(const TenantShm& shm) {
  return shm.published().buckets.at(0).rate_bytes_per_second;
}

class DefaultTenantTest : public ::testing::Test {
 protected:
  DefaultTenant::Options options() {
    DefaultTenant::Options o;
    o.tenant = "default";
    return o;
  }
  // One process of `shm` attached (slot) that is throttled for the whole of each period on the
  // tx bucket (it wants more than it has), or idle.
  struct Process {
    std::unique_ptr<TenantShmView> view;
    uint32_t slot = 0;
    bool backlogged = false;
    void period() {
      if (backlogged) view->counters(0)->throttled_ns.fetch_add(kPeriod);
    }
  };
  Process attach(TenantShm& shm, pid_t pid, bool backlogged) {
    auto slot = shm.acquireSlot({pid, 1000, 1000});
    EXPECT_TRUE(slot.has_value());
    return Process{viewOf(shm, *slot), *slot, backlogged};
  }
  // `n` allocation periods of the processes above.
  void run(DefaultTenant& d, std::vector<Process*> procs, int n) {
    for (int i = 0; i < n; ++i) {
      for (Process* p : procs) p->period();
      clock_.advanceNs(kPeriod);
      d.collect(clock_.nowNs(), kRate);
      d.split(clock_.nowNs());
    }
  }

  FakeClock clock_;
};

TEST_F(DefaultTenantTest, EachUidHasBucketsAndSlotsOfItsOwn) {
  DefaultTenant d(options(), nullptr, clock_);
  ASSERT_FALSE(d.shardFor(1001).ok()) << "no memory before the tenant has parameters";
  d.setParams(tenantParams());
  auto a = d.shardFor(1001), b = d.shardFor(1002);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);
  EXPECT_NE(inodeOf((*a)->sharedFd()), inodeOf((*b)->sharedFd())) << "two uids, one memory";
  EXPECT_EQ((*a)->tenant(), "default");
  EXPECT_EQ((*b)->tenant(), "default");
  EXPECT_EQ((*b)->published().dscp, 10u) << "the tenant's marking for every uid";
  EXPECT_EQ(d.shardFor(1001).value(), *a) << "a uid keeps its memory";
  EXPECT_EQ(d.shards(), 2u);
  // What uid 1001 writes into its bucket word is not uid 1002's.
  auto va = viewOf(**a, shm::kMaxSlots), vb = viewOf(**b, shm::kMaxSlots);
  va->bucketWord(0).store(INT64_MAX);
  EXPECT_EQ(vb->bucketWord(0).load(), 0);
  // Holding every slot of its own leaves the other uid's.
  for (uint32_t i = 0; i < shm::kMaxSlots; ++i) ASSERT_TRUE((*a)->acquireSlot({100, 1001, 1}));
  EXPECT_FALSE((*a)->acquireSlot({100, 1001, 1}).has_value());
  EXPECT_EQ((*b)->acquireSlot({200, 1002, 1}), 0u);
}

TEST_F(DefaultTenantTest, ANewUidTakesItsShareFromTheUidsInUseNeverMoreThanTheRate) {
  DefaultTenant d(options(), nullptr, clock_);
  d.setParams(tenantParams());
  auto a = d.shardFor(1001).value();
  EXPECT_EQ(txRate(*a), kRate) << "alone: the whole rate";
  auto pa = attach(*a, 11, true);
  auto b = d.shardFor(1002).value();
  EXPECT_EQ(txRate(*a), kRate / 2);
  EXPECT_EQ(txRate(*b), kRate / 2);
  auto pb = attach(*b, 12, true);
  auto c = d.shardFor(1003).value();
  EXPECT_LE(txRate(*a) + txRate(*b) + txRate(*c), kRate);
  EXPECT_GE(txRate(*c), kRate / 3 - 1);
  // A uid with nobody attached keeps what it had; only those in use make room.
  const uint64_t c_rate = txRate(*c);
  auto e = d.shardFor(1004).value();
  EXPECT_EQ(txRate(*c), c_rate) << "unused: unchanged";
  EXPECT_LE(txRate(*a) + txRate(*b) + txRate(*e), kRate);
}

TEST_F(DefaultTenantTest, TheRateFollowsDemandAndEachUidKeepsAnEqualShare) {
  DefaultTenant d(options(), nullptr, clock_);
  d.setParams(tenantParams());
  auto a = d.shardFor(1001).value();
  auto b = d.shardFor(1002).value();
  Process pa = attach(*a, 11, true), pb = attach(*b, 12, false);
  // 1001 wants more, 1002 is idle: 1001 gets the whole rate, 1002's bucket keeps half.
  run(d, {&pa, &pb}, 3);
  EXPECT_EQ(txRate(*a), kRate);
  EXPECT_EQ(txRate(*b), kRate / 2);
  // Both want more: halves, whatever 1002 writes into its own counters.
  pb.backlogged = true;
  run(d, {&pa, &pb}, 3);
  EXPECT_EQ(txRate(*a), kRate / 2);
  EXPECT_EQ(txRate(*b), kRate / 2);
  for (int i = 0; i < 5; ++i) {
    pb.view->counters(0)->backlog_bytes.store(1ull << 40);
    pb.view->counters(0)->bytes.store(pb.view->counters(0)->bytes.load() + 1'000'000'000);
    run(d, {&pa, &pb}, 1);
    EXPECT_GE(txRate(*a), kRate / 2) << "a uid's counters moved another uid below its share";
  }
  // The tenant's rate changes (the allocator): the shares follow at once.
  d.setParams(tenantParams(2 * kRate));
  EXPECT_EQ(txRate(*a) + txRate(*b), 2 * kRate);
  // The tenant's use is the sum of its uids'.
  pa.view->counters(0)->bytes.fetch_add(1000);
  clock_.advanceNs(kPeriod);
  const TenantUsage before = d.collect(clock_.nowNs(), kRate);
  EXPECT_EQ(before.processes, 2u);
}

TEST_F(DefaultTenantTest, UidsBeyondTheBoundShareOneMemory) {
  DefaultTenant::Options o = options();
  o.max_uids = 2;
  DefaultTenant d(o, nullptr, clock_);
  d.setParams(tenantParams());
  auto a = d.shardFor(1).value(), b = d.shardFor(2).value();
  auto c = d.shardFor(3).value(), e = d.shardFor(4).value();
  EXPECT_NE(a, b);
  EXPECT_NE(c, a);
  EXPECT_NE(c, b);
  EXPECT_EQ(c, e) << "past the bound, uids share one memory";
  EXPECT_EQ(d.shards(), 3u);
}

TEST_F(DefaultTenantTest, AnIdleShardIsDroppedAfterTheGraceItsBytesStayCounted) {
  DefaultTenant::Options o = options();
  o.idle_grace_ns = 1'000'000'000;
  DefaultTenant d(o, nullptr, clock_);
  d.setParams(tenantParams());
  auto a = d.shardFor(1001).value();
  Process pa = attach(*a, 11, false);
  pa.view->counters(0)->bytes.store(123'456);
  run(d, {&pa}, 1);
  a->releaseSlot(pa.slot, 11);
  run(d, {}, 1);  // drains the slot
  EXPECT_EQ(d.shards(), 1u) << "within the grace";
  clock_.advanceNs(o.idle_grace_ns);
  run(d, {}, 1);
  EXPECT_EQ(d.shards(), 0u);
  EXPECT_EQ(d.collect(clock_.nowNs(), kRate).tx_bytes, 123'456u) << "the tenant's total kept";
  // Asked again: a new one.
  EXPECT_NE(d.shardFor(1001).value(), a);
}

TEST_F(DefaultTenantTest, TheGroupMemoryIsOneMoreParticipantAndRetireMarksTheShardsDeleted) {
  auto group = TenantShm::create("shared", 0).value();
  DefaultTenant::Options o = options();
  o.tenant = "shared";
  DefaultTenant d(o, group, clock_);
  d.setParams(tenantParams());
  EXPECT_EQ(txRate(*group), kRate) << "alone";
  Process pg = attach(*group, 10, true);
  auto a = d.shardFor(1001).value();
  EXPECT_EQ(txRate(*group), kRate / 2);
  EXPECT_EQ(txRate(*a), kRate / 2);
  Process pa = attach(*a, 11, false);
  run(d, {&pg, &pa}, 2);
  EXPECT_EQ(txRate(*group), kRate);
  auto held = d.retire();
  ASSERT_EQ(held.size(), 1u);
  EXPECT_EQ(held[0], a);
  EXPECT_TRUE(a->published().deleted);
  EXPECT_FALSE(group->published().deleted) << "the group's memory is its tenant's";
}

// ---- the node-wide socket's bounds, with processes of other uids -----------------------------

// A process of another uid, forked while this one has no other thread (before the attach
// server starts), that attaches through the node-wide socket when told and keeps what it got.
class UidPeer {
 public:
  UidPeer(uid_t uid, const std::string& socket) {
    int cmd[2], res[2];
    if (::pipe(cmd) != 0 || ::pipe(res) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(cmd[1]);
      ::close(res[0]);
      if (::setgroups(0, nullptr) != 0 || ::setresgid(uid, uid, uid) != 0 ||
          ::setresuid(uid, uid, uid) != 0) {
        ::_exit(3);
      }
      serve(cmd[0], res[1], socket);
      ::_exit(0);
    }
    ::close(cmd[0]);
    ::close(res[1]);
    cmd_ = cmd[1];
    res_ = res[0];
  }
  ~UidPeer() {
    if (pid_ <= 0) return;
    command('q');
    int status = 0;
    ::waitpid(pid_, &status, 0);
    ::close(cmd_);
    ::close(res_);
  }
  // "held <slot> <inode>", "not-held <inode> <reason>" or "error <message>".
  std::string attach() { return command('a'); }
  // How many of the connections it holds the agent has closed.
  int closed() { return std::atoi(command('c').c_str()); }

 private:
  static void serve(int in, int out, const std::string& socket) {
    std::vector<attach::Attached> held;
    char c = 0;
    while (::read(in, &c, 1) == 1 && c != 'q') {
      std::string line;
      if (c == 'a') {
        auto a = attach::attachWithin(socket, "", 2000, realClock());
        if (!a.ok()) {
          line = "error " + a.status().message();
        } else {
          const ino_t ino = inodeOf(a->shared_fd.get());
          line = a->held ? "held " + std::to_string(a->slot) + " " + std::to_string(ino)
                         : "not-held " + std::to_string(ino) + " " + a->reason;
          held.push_back(std::move(*a));
        }
      } else if (c == 'c') {
        int closed = 0;
        for (const attach::Attached& a : held) {
          pollfd p{a.conn.get(), POLLIN, 0};
          if (a.held && ::poll(&p, 1, 0) > 0) ++closed;
        }
        line = std::to_string(closed);
      }
      line += "\n";
      if (::write(out, line.data(), line.size()) < 0) return;
    }
  }
  std::string command(char c) {
    if (::write(cmd_, &c, 1) != 1) return "error: the peer is gone";
    std::string line;
    char ch = 0;
    while (::read(res_, &ch, 1) == 1 && ch != '\n') line += ch;
    return line;
  }

  pid_t pid_ = -1;
  int cmd_ = -1, res_ = -1;
};

std::string field(const std::string& line, int i) {
  std::istringstream in(line);
  std::string w;
  for (int k = 0; k <= i && in >> w; ++k) {
  }
  return w;
}

TEST_F(DefaultTenantTest, TheNodeWideSocketHoldsWhatAUidMayAndTheRefusalFallsOnTheHolder) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run processes as other uids";
  testing::TempDir dir;
  ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);
  const std::string socket = attach::nodeSocketPath(dir.path());
  UidPeer a(41011, socket), b(41012, socket), c(41013, socket);
  AttachServer::Options o;
  o.run_dir = dir.path();
  o.max_connections_per_uid = 3;
  o.max_connections_per_socket = 5;
  auto server = AttachServer::start(o).value();
  auto d = std::make_shared<DefaultTenant>(options(), nullptr, clock_);
  d->setParams(tenantParams());
  server->serveDefault(d);

  // Uid A: three held, each with a slot of its own memory; the fourth answered, not held.
  std::string ino_a;
  for (int i = 0; i < 3; ++i) {
    const std::string r = a.attach();
    ASSERT_EQ(field(r, 0), "held") << r;
    EXPECT_EQ(field(r, 1), std::to_string(i));
    ino_a = field(r, 2);
  }
  std::string r = a.attach();
  ASSERT_EQ(field(r, 0), "not-held") << r;
  EXPECT_EQ(field(r, 1), ino_a) << "its own uid's memory, no slot";
  EXPECT_NE(r.find("the most one uid may"), std::string::npos) << r;
  // Uid B: its own memory; the socket is full after two.
  const std::string b1 = b.attach();
  ASSERT_EQ(field(b1, 0), "held") << b1;
  EXPECT_EQ(field(b1, 1), "0") << "a slot of its own: A's do not count";
  EXPECT_NE(field(b1, 2), ino_a);
  ASSERT_EQ(field(b.attach(), 0), "held");
  // Uid C on the full socket: A holds the most (3 >= 0 + 2) and gives one up.
  r = c.attach();
  ASSERT_EQ(field(r, 0), "held") << r;
  bool evicted = false;
  for (int i = 0; i < 200 && !evicted; ++i) {
    evicted = a.closed() == 1;
    if (!evicted) ::usleep(5000);
  }
  EXPECT_TRUE(evicted) << "A's last connection was not closed";
  // Again: A 2, B 2, C 1: nobody holds two more than C, so C's is the one not held.
  r = c.attach();
  ASSERT_EQ(field(r, 0), "not-held") << r;
  EXPECT_NE(r.find("its bound"), std::string::npos) << r;
  EXPECT_EQ(d->shards(), 3u);
}

}  // namespace
}  // namespace tq::agent
