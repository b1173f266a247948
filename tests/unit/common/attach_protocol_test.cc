// The attaching process's side of common/attach_protocol.h: the fixed-size messages and the
// traffic-classes file; attachWithin's deadline on an injected clock against a listener that
// never answers (it passes when the test moves a FakeClock, not after a real wait); a socket
// the agent did not make (issue 23 item 7): another uid listening where the agent's socket
// should be, which needs root (a child drops to another uid to listen; skipped without it).
// The agent's side is tests/unit/agent/attach_server_test.cc; the parsers are also fuzzed.
#include "common/attach_protocol.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <future>
#include <string>

#include "tests/support/temp_dir.h"

namespace tq::attach {
namespace {

constexpr uid_t kTenantUid = 65534;

// A child process that listens on `path` as `uid` until killed; returns its pid once listening.
pid_t listenAs(const std::string& path, uid_t uid) {
  int ready[2];
  if (::pipe(ready) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(ready[0]);
    if (::setresgid(uid, uid, uid) != 0 || ::setresuid(uid, uid, uid) != 0) ::_exit(1);
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(fd, 8) != 0) {
      ::_exit(2);
    }
    (void)::write(ready[1], "x", 1);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  char c;
  const bool ok = ::read(ready[0], &c, 1) == 1;
  ::close(ready[0]);
  if (!ok && pid > 0) {
    ::waitpid(pid, nullptr, 0);
    return -1;
  }
  return pid;
}

TEST(AttachProtocol, ASocketAnsweredByAnotherUidIsNotTrusted) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to listen as another uid";
  tq::testing::TempDir temp("tq-attach-peer");
  ASSERT_TRUE(temp.ok()) << temp.error();
  const std::string& dir = temp.path();
  ASSERT_EQ(::chown(dir.c_str(), kTenantUid, kTenantUid), 0);
  const std::string path = dir + "/agent.sock";
  const pid_t tenant = listenAs(path, kTenantUid);
  ASSERT_GT(tenant, 0);
  // Before issue 23: connected and sent the request, then took whatever memfds came back.
  auto a = Attempt::start(path, "tenant-a");
  EXPECT_FALSE(a.ok()) << "a tenant's socket was trusted as the agent's";
  EXPECT_EQ(a.status().code(), StatusCode::kPermissionDenied) << a.status().toString();
  EXPECT_NE(a.status().message().find("as uid 65534, not the agent"), std::string::npos)
      << a.status().message();
  // The agent's own uid, when it is not root, is configured (TENANTQOS_AGENT_UID).
  EXPECT_TRUE(Attempt::start(path, "tenant-a", kTenantUid).ok());
  ::kill(tenant, SIGKILL);
  ::waitpid(tenant, nullptr, 0);
}

TEST(AttachProtocolTest, MessagesRoundTripAtTheirFixedSizes) {
  const std::string req = encodeRequest({"tenant-a"});
  ASSERT_EQ(req.size(), kRequestBytes);
  auto r = parseRequest(reinterpret_cast<const uint8_t*>(req.data()), req.size());
  ASSERT_TRUE(r.ok()) << r.status().toString();
  EXPECT_EQ(r->wanted_tenant, "tenant-a");
  Reply reply;
  reply.status = ReplyStatus::kDenied;
  reply.reason = "not in tenant-a's group";
  const std::string rep = encodeReply(reply);
  ASSERT_EQ(rep.size(), kReplyBytes);
  auto back = parseReply(reinterpret_cast<const uint8_t*>(rep.data()), rep.size());
  ASSERT_TRUE(back.ok()) << back.status().toString();
  EXPECT_EQ(back->status, ReplyStatus::kDenied);
  EXPECT_EQ(back->reason, reply.reason);
}

TEST(AttachProtocolTest, HostileBytesAreRefused) {
  std::string req = encodeRequest({"tenant-a"});
  EXPECT_FALSE(parseRequest(reinterpret_cast<const uint8_t*>(req.data()), req.size() - 1).ok());
  req[0] ^= 1;  // magic
  EXPECT_FALSE(parseRequest(reinterpret_cast<const uint8_t*>(req.data()), req.size()).ok());
  Reply ok;
  ok.tenant = "Not_A_Label";  // an attached reply must name a DNS-1123 tenant
  const std::string rep = encodeReply(ok);
  EXPECT_FALSE(parseReply(reinterpret_cast<const uint8_t*>(rep.data()), rep.size()).ok());
}

TEST(AttachProtocolTest, TrafficClasses) {
  const std::string text = encodeTrafficClasses({{5, "tenant-a"}, {7, "tenant-b"}});
  EXPECT_EQ(lookupTrafficClass(text, 7), "tenant-b");
  EXPECT_EQ(lookupTrafficClass(text, 6), std::nullopt);
  EXPECT_EQ(lookupTrafficClass("not the header\n5 tenant-a\n", 5), std::nullopt);
}

TEST(AttachProtocolTest, AttachWithinEndsAtTheDeadlineOfItsClock) {
  tq::testing::TempDir temp("tq-attach-proto");
  ASSERT_TRUE(temp.ok()) << temp.error();
  const std::string& dir = temp.path();
  const std::string path = dir + "/agent.sock";
  // A listener that accepts (the kernel does) and never answers.
  Fd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "%s", path.c_str());
  ASSERT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(listener.get(), 4), 0);

  FakeClock clock;
  std::atomic<bool> returned{false};
  auto result = std::async(std::launch::async, [&] {
    auto r = attachWithin(path, "tenant-a", 2000, clock);
    returned = true;
    return r;
  });
  // Its connection in the listener's queue: the deadline (taken before connecting) is set.
  pollfd pending{listener.get(), POLLIN, 0};
  ASSERT_EQ(::poll(&pending, 1, 5000), 1) << "attachWithin never connected";
  // Not before its deadline on the clock: half of it passes, and it is still waiting...
  clock.advanceNs(1'000'000'000);
  EXPECT_EQ(result.wait_for(std::chrono::milliseconds(3 * kAttachWaitSliceMs)),
            std::future_status::timeout);
  // ...then the deadline passes on the clock, and the next slice ends the wait.
  clock.advanceNs(1'000'000'001);
  ASSERT_EQ(result.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  auto r = result.get();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(r.status().message(), path + ": no reply in 2000 ms");
}

}  // namespace
}  // namespace tq::attach
