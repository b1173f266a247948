#include "agent/snapshot_store.h"

#include <gtest/gtest.h>

#include "common/file_util.h"
#include "test_util.h"

namespace tq::agent {
namespace {

using testing::samplePolicy;
using testing::TempDir;

TEST(SnapshotStoreTest, AbsentIsNullopt) {
  TempDir dir;
  SnapshotStore store(dir / "state");
  auto r = store.load();
  ASSERT_TRUE(r.ok()) << r.status().toString();
  EXPECT_FALSE(r->has_value());
}

TEST(SnapshotStoreTest, SaveLoadRoundTrip) {
  TempDir dir;
  SnapshotStore store(dir / "state");  // created on save
  VersionedPolicy p = samplePolicy(7);
  ASSERT_TRUE(store.save(p).ok());
  auto r = store.load();
  ASSERT_TRUE(r.ok()) << r.status().toString();
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ(**r, p);
  // Replace: the newer snapshot wins, no temporary left behind.
  VersionedPolicy q = samplePolicy(8);
  q.policy.tenants.pop_back();
  ASSERT_TRUE(store.save(q).ok());
  EXPECT_EQ(**store.load(), q);
  auto files = readFile(dir / "state/policy.snapshot");
  ASSERT_TRUE(files.ok());
  EXPECT_EQ(files->rfind("tenantqos-agent-snapshot 1\ncrc32c=", 0), 0u);
  EXPECT_EQ(system(("test $(ls " + dir.path() + "/state | wc -l) -eq 1").c_str()), 0);
}

TEST(SnapshotStoreTest, CorruptionIsDataLoss) {
  TempDir dir;
  SnapshotStore store(dir.path());
  ASSERT_TRUE(store.save(samplePolicy(3)).ok());
  const std::string good = *readFile(store.path());

  struct Case {
    const char* what;
    std::string data;
  };
  std::string flipped = good;
  flipped[flipped.size() - 3] ^= 0x40;
  const Case cases[] = {
      {"flipped body byte", flipped},
      {"truncated body", good.substr(0, good.size() - 5)},
      {"trailing garbage", good + "x"},
      {"empty file", ""},
      {"bad magic", "something else\n" + good.substr(good.find('\n') + 1)},
      {"header only", good.substr(0, good.find('\n') + 1)},
      {"malformed header", "tenantqos-agent-snapshot 1\ncrc32c=zz length=1\nx"},
  };
  for (const Case& c : cases) {
    ASSERT_TRUE(writeFileAtomic(store.path(), c.data).ok());
    auto r = store.load();
    ASSERT_FALSE(r.ok()) << c.what;
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << c.what << ": " << r.status().toString();
    EXPECT_NE(r.status().message().find(store.path()), std::string::npos) << c.what;
  }
}

TEST(SnapshotStoreTest, CrashBeforeRenameKeepsOldFile) {
  TempDir dir;
  SnapshotStore store(dir.path());
  ASSERT_TRUE(store.save(samplePolicy(1)).ok());
  // The write dies after the new content is on disk under the temporary name, before rename.
  Status s = store.save(samplePolicy(2), [](const std::string&, const std::string&) {
    return internalError("injected crash");
  });
  EXPECT_FALSE(s.ok());
  auto r = store.load();
  ASSERT_TRUE(r.ok()) << r.status().toString();
  EXPECT_EQ((*r)->version, 1u);
  EXPECT_EQ(system(("test $(ls -A " + dir.path() + " | wc -l) -eq 1").c_str()), 0)
      << "temporary file left behind";
}

TEST(SnapshotStoreTest, RemoveIsIdempotent) {
  TempDir dir;
  SnapshotStore store(dir.path());
  ASSERT_TRUE(store.save(samplePolicy(1)).ok());
  EXPECT_TRUE(store.remove().ok());
  EXPECT_TRUE(store.remove().ok());
  EXPECT_FALSE(store.load()->has_value());
}

}  // namespace
}  // namespace tq::agent
