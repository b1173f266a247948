#include "policy/audit_log.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/file_util.h"
#include "tests/support/temp_dir.h"

namespace tq::policy {
namespace {

TEST(AuditLogTest, AppendsOneEscapedJsonLinePerRecordAndKeepsOldLines) {
  tq::testing::TempDir dir("tqaudit");
  ASSERT_TRUE(dir.ok()) << dir.error();
  const std::string path = dir / "audit.jsonl";
  PolicyRecord r;
  r.version = 3;
  r.applied_at_unix_ms = 1'700'000'000'123;
  r.applied_by = "alice";
  r.applied_by_groups = {"tenantqos:admins"};
  r.source_name = "evil\n{\"version\":9}.yaml";
  r.diff_summary = "tenants ~a";
  r.checksum = 77;
  {
    auto log = AuditLog::open(path);
    ASSERT_TRUE(log.ok()) << log.status().toString();
    ASSERT_TRUE((*log)->append(r).ok());
  }
  r.version = 4;
  r.rollback_of = 1;
  {
    auto log = AuditLog::open(path);  // reopened: appends, never truncates
    ASSERT_TRUE(log.ok());
    ASSERT_TRUE((*log)->append(r).ok());
  }
  auto text = readFile(path);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text,
            "{\"time\":\"2023-11-14T22:13:20Z\",\"unixMs\":1700000000123,\"action\":\"apply\","
            "\"version\":3,\"identity\":\"alice\",\"groups\":[\"tenantqos:admins\"],"
            "\"source\":\"evil\\n{\\\"version\\\":9}.yaml\",\"diff\":\"tenants ~a\","
            "\"rollbackOf\":0,\"checksum\":77}\n"
            "{\"time\":\"2023-11-14T22:13:20Z\",\"unixMs\":1700000000123,\"action\":\"rollback\","
            "\"version\":4,\"identity\":\"alice\",\"groups\":[\"tenantqos:admins\"],"
            "\"source\":\"evil\\n{\\\"version\\\":9}.yaml\",\"diff\":\"tenants ~a\","
            "\"rollbackOf\":1,\"checksum\":77}\n");
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
  // A missing directory is made (the etcd store needs no data dir of its own); a path that
  // cannot be a directory fails, naming the audit log.
  EXPECT_TRUE(AuditLog::open(dir / "new/dir/a.jsonl").ok());
  ASSERT_EQ(stat((dir / "new/dir").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  auto under_file = AuditLog::open(path + "/a.jsonl");
  ASSERT_FALSE(under_file.ok());
  EXPECT_NE(under_file.status().message().find("audit log " + path + "/a.jsonl"), std::string::npos)
      << under_file.status().toString();
}

}  // namespace
}  // namespace tq::policy
