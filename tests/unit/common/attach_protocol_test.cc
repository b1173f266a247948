// The attaching process's side of common/attach_protocol.h against a socket the agent did not
// make (issue 23 item 7): another uid listening where the agent's socket should be. Needs root
// (a child drops to another uid to listen); skipped without it.
#include "common/attach_protocol.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>

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
  char tmpl[] = "/tmp/tq-attach-peer-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
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
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tq::attach
