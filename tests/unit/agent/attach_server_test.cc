// The attach server against a hostile node: run directories it did not make (issue 23 item 7)
// and attached processes that exec another program (item 8). Real sockets and processes; the
// ownership cases need root (chown to another uid) and are skipped without it.
#include "agent/attach_server.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace tq::agent {
namespace {

constexpr uid_t kOtherUid = 65534;  // nobody: a tenant's uid

class AttachServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tq-attach-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    tmp_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(tmp_); }

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

  std::string tmp_;
};

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

}  // namespace
}  // namespace tq::agent
