#include "common/file_util.h"

#include <dirent.h>
#include <stdlib.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "tests/support/temp_dir.h"

namespace tq {
namespace {

class FileUtilTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(temp_.ok()) << temp_.error(); }
  int entries() {
    int n = 0;
    DIR* d = opendir(dir_.c_str());
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
    return n;
  }
  tq::testing::TempDir temp_{"tq-file-util"};
  const std::string& dir_ = temp_.path();
};

TEST_F(FileUtilTest, AtomicWriteReplacesContent) {
  std::string p = dir_ + "/state";
  ASSERT_TRUE(writeFileAtomic(p, "v1").ok());
  ASSERT_TRUE(writeFileAtomic(p, "version two").ok());
  EXPECT_EQ(*readFile(p), "version two");
  EXPECT_EQ(entries(), 1);  // no temporary left behind
}

TEST_F(FileUtilTest, FailureBeforeRenameKeepsOldContent) {
  std::string p = dir_ + "/state";
  ASSERT_TRUE(writeFileAtomic(p, "old").ok());
  Status s = writeFileAtomic(p, "new", 0644, [](const std::string&, const std::string&) {
    return internalError("injected crash before rename");
  });
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(*readFile(p), "old");
  EXPECT_EQ(entries(), 1);
}

TEST_F(FileUtilTest, ErrorsNameTheFile) {
  auto r = readFile(dir_ + "/missing");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find(dir_ + "/missing"), std::string::npos);
  Status w = writeFileAtomic(dir_ + "/no/such/dir/f", "x");
  EXPECT_FALSE(w.ok());
  EXPECT_NE(w.message().find("no/such/dir"), std::string::npos);
}

TEST_F(FileUtilTest, ReadLimit) {
  std::string p = dir_ + "/big";
  ASSERT_TRUE(writeFileAtomic(p, std::string(1000, 'x')).ok());
  EXPECT_TRUE(readFile(p, 1000).ok());
  auto r = readFile(p, 999);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
}

TEST_F(FileUtilTest, MakeDirsAndWritableCheck) {
  std::string d = dir_ + "/a/b/c";
  ASSERT_TRUE(makeDirs(d).ok());
  EXPECT_TRUE(checkWritableDir(d).ok());
  ASSERT_TRUE(writeFileAtomic(dir_ + "/file", "x").ok());
  EXPECT_FALSE(makeDirs(dir_ + "/file").ok());
}

TEST(Crc32c, KnownVector) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c(""), 0u);
}

}  // namespace
}  // namespace tq
