// The attach server (agent/attach_server.h): attaching and refusing over real Unix sockets, a
// silent peer closed at the deadline of the server's injected clock (a FakeClock the test moves;
// what the test waits for is the server's reply and time-out counters, never a sleep), and a
// hostile node: run directories it did not make (issue 23 item 7) and attached processes that
// exec another program (item 8). The ownership cases need root (chown to another uid) and are
// skipped without it.
#include "agent/attach_server.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include <sys/socket.h>
#include <sys/un.h>

#include "common/attach_protocol.h"
#include "common/clock.h"
#include "common/fd.h"
#include "common/tenant_shm.h"
#include "tests/support/temp_dir.h"

namespace tq::agent {
namespace {

constexpr uid_t kOtherUid = 65534;  // nobody: a tenant's uid

class AttachServerTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(temp_.ok()) << temp_.error(); }

  Result<std::unique_ptr<AttachServer>> startAt(const std::string& run_dir) {
    AttachServer::Options o;
    o.run_dir = run_dir;
    return AttachServer::start(o);
  }
  std::string mkdir(const std::string& name, mode_t mode, uid_t owner = 0) {
    const std::string p = tmp_ + "/" + name;
    EXPECT_EQ(::mkdir(p.c_str(), 0700), 0) << p;
    EXPECT_EQ(::chown(p.c_str(), owner, 0), 0) << p;
    EXPECT_EQ(::chmod(p.c_str(), mode), 0) << p;
    return p;
  }

  // The built-in default tenant (no memory of its own) with a node-wide rate.
  static std::shared_ptr<DefaultTenant> defaultTenant(Clock& clock) {
    DefaultTenant::Options o;
    o.tenant = "default";
    auto d = std::make_shared<DefaultTenant>(o, nullptr, clock);
    TenantParams p;
    p.buckets = nodeBuckets(12'500'000, 4096, 12'500'000);
    d->setParams(p);
    return d;
  }
  // A connected client of `path` that has sent nothing.
  static Fd connectTo(const std::string& path) {
    Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
    EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << path;
    return fd;
  }
  // Polls `pred` (another thread's doing) until it holds or `ms` pass.
  template <typename Pred>
  static bool eventually(Pred pred, int ms = 5000) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (!pred()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
  }

  tq::testing::TempDir temp_{"tq-attach-test"};
  const std::string& tmp_ = temp_.path();
};

TEST_F(AttachServerTest, AttachesAndRefusesGarbageSayingWhy) {
  auto server = startAt(tmp_ + "/run");
  ASSERT_TRUE(server.ok()) << server.status().toString();
  const std::string path = attach::nodeSocketPath(tmp_ + "/run");
  // Before serveDefault() there is no policy: refused with the reason.
  auto early = attach::attachWithin(path, "", 2000, realClock());
  ASSERT_FALSE(early.ok());
  EXPECT_NE(early.status().message().find("refused"), std::string::npos)
      << early.status().message();
  (*server)->serveDefault(defaultTenant(realClock()));
  auto a = attach::attachWithin(path, "anyone", 2000, realClock());
  ASSERT_TRUE(a.ok()) << a.status().toString();
  EXPECT_EQ(a->tenant, "default");
  EXPECT_TRUE(a->params_fd.valid() && a->shared_fd.valid());
  // Garbage of the request's size: refused with a reply, never a crash.
  Fd raw = connectTo(path);
  const std::string junk(attach::kRequestBytes, 'x');
  ASSERT_EQ(::write(raw.get(), junk.data(), junk.size()), static_cast<ssize_t>(junk.size()));
  uint8_t buf[attach::kReplyBytes];
  std::vector<Fd> fds;
  size_t got = 0;
  ASSERT_TRUE(eventually([&] {
    auto n = attach::recvWithFds(raw.get(), buf + got, sizeof buf - got, &fds);
    if (n.ok()) got += *n;
    return got == sizeof buf;
  }));
  auto reply = attach::parseReply(buf, got);
  ASSERT_TRUE(reply.ok()) << reply.status().toString();
  EXPECT_NE(reply->status, attach::ReplyStatus::kAttached);
  EXPECT_FALSE(reply->reason.empty());
  EXPECT_TRUE(fds.empty()) << "no memory for a peer that sent garbage";
  EXPECT_TRUE(eventually([&] { return (*server)->repliesSent() == 3; }));
}

TEST_F(AttachServerTest, ASilentPeerIsClosedAtTheDeadlineOfTheServersClock) {
  FakeClock clock;
  AttachServer::Options o;
  o.run_dir = tmp_ + "/run";
  o.request_timeout_ns = 1'000'000'000;
  auto server = AttachServer::start(o, clock);
  ASSERT_TRUE(server.ok()) << server.status().toString();
  (*server)->serveDefault(defaultTenant(clock));
  const std::string path = attach::nodeSocketPath(o.run_dir);
  Fd silent = connectTo(path);
  // A peer attaching after it: once its reply is out, the silent one (ahead of it in the
  // listener's queue) was accepted, its deadline one second of the fake clock away.
  auto first = attach::attachWithin(path, "", 2000, realClock());
  ASSERT_TRUE(first.ok()) << first.status().toString();
  // (The server counts a reply just after sending it.)
  ASSERT_TRUE(eventually([&] { return (*server)->repliesSent() == 1; }));
  // Half the timeout: another attach is answered after the clock moved, and the silent peer
  // is still there (nothing happened: the counter says so, no sleep needed).
  clock.advanceNs(500'000'000);
  auto second = attach::attachWithin(path, "", 2000, realClock());
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE(eventually([&] { return (*server)->repliesSent() == 2; }));
  EXPECT_EQ((*server)->timedOut(), 0u);
  // Past the deadline: the clock's move wakes the server, which closes the silent peer.
  clock.advanceNs(500'000'001);
  ASSERT_TRUE(eventually([&] { return (*server)->timedOut() == 1; }))
      << "a silent peer outlived its deadline on the server's clock";
  char c;
  EXPECT_EQ(::read(silent.get(), &c, 1), 0) << "closed: the peer reads end of file";
  EXPECT_EQ((*server)->repliesSent(), 2u) << "the silent peer got no reply";
}

// Before issue 23 the agent adopted every one of these (a tenant that made the run directory,
// or can write above it, could later swap tenants/ and answer on tenant-a's socket).
TEST_F(AttachServerTest, RefusesARunDirectoryThatIsNotItsAlone) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give directories to another uid";
  struct Case {
    std::string run_dir;
    std::string why;
  };
  const std::string made_by_tenant = mkdir("tenant-made", 0755, kOtherUid);
  const std::string tenant_parent = mkdir("tenant-parent", 0755, kOtherUid);
  const std::string open_parent = mkdir("open-parent", 0777);
  const std::string open_run = mkdir("open-run", 0777);
  const std::string group_run = mkdir("group-run", 0775);
  ASSERT_EQ(::symlink(tenant_parent.c_str(), (tmp_ + "/link").c_str()), 0);
  const Case cases[] = {
      {made_by_tenant, "is owned by uid 65534"},
      {tenant_parent + "/run", "tenant-parent is owned by uid 65534"},
      {open_parent + "/run", "(mode 0777) is writable by every user"},
      {open_run, "(mode 0777) is writable by every user"},
      {group_run, "(mode 0775) is writable by its group"},
      {tmp_ + "/link/run", "tenant-parent is owned by uid 65534"},
  };
  for (const Case& c : cases) {
    auto s = startAt(c.run_dir);
    ASSERT_FALSE(s.ok()) << c.run_dir << ": the agent adopted it";
    EXPECT_EQ(s.status().code(), StatusCode::kFailedPrecondition) << s.status().toString();
    EXPECT_NE(s.status().message().find(c.why), std::string::npos) << s.status().message();
  }
  // What the agent makes itself under a sticky, root-owned /tmp (0700 from mkdtemp, 0755) is
  // its alone.
  ASSERT_EQ(::chmod(tmp_.c_str(), 0755), 0);
  auto ok = startAt(tmp_ + "/fresh/run");
  EXPECT_TRUE(ok.ok()) << ok.status().toString();
}

// Issue 23 item 8. Before: a process that attached and then exec'd another program (keeping
// the connection open) stayed listed as attached, so the ungoverned-QP view counted the new
// program as governed.
TEST_F(AttachServerTest, AnAttachmentEndsWhenTheProcessExecsAnotherProgram) {
  // The child is forked before the server's thread exists; it attaches when told to.
  int go[2], attached[2], exec_now[2];
  ASSERT_EQ(::pipe(go), 0);
  ASSERT_EQ(::pipe(attached), 0);
  ASSERT_EQ(::pipe(exec_now), 0);
  const std::string run_dir = tmp_ + "/run";
  const pid_t child = ::fork();
  if (child == 0) {
    char c;
    if (::read(go[0], &c, 1) != 1) ::_exit(1);
    auto a = attach::attachWithin(attach::nodeSocketPath(run_dir), "", 2000, realClock());
    if (!a.ok()) ::_exit(2);
    // Keep the connection across exec: the hostile case (the plugin's socket is CLOEXEC).
    if (::fcntl(a->conn.get(), F_SETFD, 0) != 0) ::_exit(3);
    (void)::write(attached[1], "a", 1);
    if (::read(exec_now[0], &c, 1) != 1) ::_exit(4);
    ::execl("/bin/sleep", "sleep", "30", static_cast<char*>(nullptr));
    ::_exit(5);
  }
  ASSERT_GT(child, 0);
  auto server = startAt(run_dir);
  ASSERT_TRUE(server.ok()) << server.status().toString();
  auto d = defaultTenant(realClock());
  (*server)->serveDefault(d);
  auto listed = [&] {
    for (const Attachment& a : (*server)->attachments()) {
      if (a.peer.pid == child) return true;
    }
    return false;
  };
  ASSERT_EQ(::write(go[1], "g", 1), 1);
  char c;
  ASSERT_EQ(::read(attached[0], &c, 1), 1);
  EXPECT_TRUE(eventually(listed, 2000)) << "the attached child is listed";
  const std::string before =
      std::filesystem::read_symlink("/proc/" + std::to_string(child) + "/exe");
  ASSERT_EQ(::write(exec_now[1], "e", 1), 1);
  ASSERT_TRUE(eventually(
      [&] {
        std::error_code ec;
        return std::filesystem::read_symlink("/proc/" + std::to_string(child) + "/exe", ec) !=
               before;
      },
      2000));
  EXPECT_TRUE(eventually([&] { return !listed(); }, 2000))
      << "still counted as attached (governed) after exec of /bin/sleep";
  // And the agent let go of it: the slot is free again.
  EXPECT_TRUE(eventually(
      [&] {
        auto mine = d->shardOf(::getuid());  // the child's uid: this one's
        return mine && mine->attachments().empty();
      },
      2000));
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  for (int* p : {go, attached, exec_now}) {
    ::close(p[0]);
    ::close(p[1]);
  }
}

}  // namespace
}  // namespace tq::agent
