#include "policy/store.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <fstream>

#include "common/file_util.h"
#include "policy/file_store.h"
#include "tests/unit/policy/store_conformance.h"

namespace tq::policy {
namespace {

using conformance::testRecord;

std::atomic<bool> g_fail_before_rename{false};
Status failingHook(const std::string&, const std::string&) {
  if (g_fail_before_rename) return internalError("injected crash between write and rename");
  return okStatus();
}

class FileStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tqpol-store-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    g_fail_before_rename = false;
  }
  void TearDown() override { ASSERT_EQ(system(("rm -rf " + dir_).c_str()), 0); }

  std::unique_ptr<PolicyStore> open() {
    FileStoreOptions o;
    o.before_rename = &failingHook;
    auto s = openFileStore(dir_, o);
    EXPECT_TRUE(s.ok()) << s.status().toString();
    return s.ok() ? std::move(*s) : nullptr;
  }
  std::string path(uint64_t v) { return dir_ + "/versions/" + recordFileName(v); }
  std::vector<std::string> files() {
    std::vector<std::string> out;
    DIR* d = opendir((dir_ + "/versions").c_str());
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') out.push_back(e->d_name);
    }
    closedir(d);
    std::sort(out.begin(), out.end());
    return out;
  }

  std::string dir_;
};

TEST(RecordCodec, RoundTripAndChecksum) {
  PolicyRecord r = testRecord(7);
  r.rollback_of = 3;
  std::string bytes = encodeRecord(r);
  auto back = decodeRecord(bytes);
  ASSERT_TRUE(back.ok()) << back.status().toString();
  EXPECT_NE(back->checksum, 0u);
  EXPECT_EQ(back->checksum, crc32c(std::string_view(bytes).substr(0, bytes.size() - 4)));
  PolicyRecord expect = r;
  expect.checksum = back->checksum;
  EXPECT_EQ(*back, expect);
}

TEST(RecordCodec, EveryKindOfDamageIsDetected) {
  const std::string good = encodeRecord(testRecord(7));
  // Any single flipped byte: magic, format, version, length, payload, or the CRC itself.
  for (size_t i = 0; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] ^= 0x01;
    auto r = decodeRecord(bad);
    ASSERT_FALSE(r.ok()) << "byte " << i;
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  }
  for (size_t n : {size_t{0}, size_t{10}, good.size() - 1}) {
    auto r = decodeRecord(good.substr(0, n));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  }
  EXPECT_FALSE(decodeRecord(good + "x").ok());
}

TEST_F(FileStoreTest, InjectedFailureBetweenWriteAndRenameKeepsThePreviousVersion) {
  auto s = open();
  ASSERT_TRUE(s->append(testRecord(1)).ok());
  ASSERT_TRUE(s->append(testRecord(2)).ok());
  g_fail_before_rename = true;
  auto failed = s->append(testRecord(3));
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("injected crash"), std::string::npos);
  EXPECT_NE(failed.status().message().find("store policy version 3"), std::string::npos);
  // In memory: unchanged.
  EXPECT_EQ(s->latest()->version, 2u);
  EXPECT_EQ(s->nextVersion(), 3u);
  EXPECT_EQ(s->list().size(), 2u);
  // On disk: unchanged, and no temporary left behind.
  EXPECT_EQ(files(), (std::vector<std::string>{recordFileName(1), recordFileName(2)}));
  auto reopened = open();
  EXPECT_EQ(reopened->latest()->version, 2u);
  // The version number was never handed out, so the next append takes it.
  g_fail_before_rename = false;
  auto r = s->append(testRecord(3));
  ASSERT_TRUE(r.ok()) << r.status().toString();
  EXPECT_EQ(s->latest()->version, 3u);
}

TEST_F(FileStoreTest, TruncatedAndForeignFiles) {
  {
    auto s = open();
    for (uint64_t v = 1; v <= 2; ++v) ASSERT_TRUE(s->append(testRecord(v)).ok());
  }
  ASSERT_EQ(truncate(path(2).c_str(), 20), 0);
  // A leftover temporary from a crash mid-write, and an unrelated file.
  std::ofstream(path(3) + ".tmp.12345") << "partial";
  std::ofstream(dir_ + "/versions/README") << "hello";
  auto s = open();
  EXPECT_EQ(s->corruptRecords(), 1u);
  EXPECT_EQ(s->latest()->version, 1u);
  auto f = files();
  EXPECT_EQ(std::count(f.begin(), f.end(), recordFileName(3) + ".tmp.12345"), 0);  // removed
  EXPECT_EQ(std::count(f.begin(), f.end(), "README"), 1);                          // left alone
  // A record renamed to another version's name is caught too.
  ASSERT_EQ(rename(path(1).c_str(), path(7).c_str()), 0);
  auto s2 = open();
  EXPECT_FALSE(s2->latest().has_value());
  EXPECT_EQ(s2->corruptRecords(), 2u);
  EXPECT_EQ(s2->nextVersion(), 8u);
}

TEST_F(FileStoreTest, BadDataDirectories) {
  std::string file = dir_ + "/plain-file";
  std::ofstream(file) << "x";
  auto r = openFileStore(file);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("is not a directory"), std::string::npos)
      << r.status().message();
  auto r2 = openFileStore("/proc/self/tqpol-data");
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.status().message().find("/proc/self/tqpol-data"), std::string::npos)
      << r2.status().message();
  EXPECT_FALSE(openFileStore("").ok());
}

TEST_F(FileStoreTest, EpochFile) {
  std::string epoch = open()->epoch();
  EXPECT_EQ(*readFile(dir_ + "/" + kStoreEpochFileName), epoch + "\n");
  // Damaged: refused with the file named, never silently replaced (agents would adopt).
  std::ofstream(dir_ + "/" + kStoreEpochFileName, std::ios::trunc) << "not-an-epoch\n";
  auto r = openFileStore(dir_);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(kStoreEpochFileName), std::string::npos)
      << r.status().message();
  // Absent (a store from before epochs): a new one is made.
  ASSERT_EQ(unlink((dir_ + "/" + kStoreEpochFileName).c_str()), 0);
  auto s = open();
  EXPECT_TRUE(isValidStoreEpoch(s->epoch()));
  EXPECT_NE(s->epoch(), epoch);
}

TEST_F(FileStoreTest, RetentionRemovesFiles) {
  FileStoreOptions o;
  o.retain_versions = 2;
  auto s = openFileStore(dir_, o);
  ASSERT_TRUE(s.ok());
  for (uint64_t v = 1; v <= 4; ++v) ASSERT_TRUE((*s)->append(testRecord(v)).ok());
  EXPECT_EQ(files(), (std::vector<std::string>{recordFileName(3), recordFileName(4)}));
}

// --- the conformance suite over the memory and file stores ---

class MemoryBackend final : public conformance::StoreBackend {
 public:
  std::unique_ptr<PolicyStore> open(uint64_t retain) override { return makeMemoryStore(retain); }
  bool durable() const override { return false; }
  bool corrupt(uint64_t) override { return false; }
  bool sharedByReplicas() const override { return false; }
};

class FileBackend final : public conformance::StoreBackend {
 public:
  FileBackend() {
    char tmpl[] = "/tmp/tqpol-conf-XXXXXX";
    if (mkdtemp(tmpl) != nullptr) dir_ = tmpl;
  }
  ~FileBackend() override {
    if (!dir_.empty()) {
      EXPECT_EQ(system(("rm -rf " + dir_).c_str()), 0);
    }
  }
  std::unique_ptr<PolicyStore> open(uint64_t retain) override {
    FileStoreOptions o;
    o.retain_versions = retain;
    auto s = openFileStore(dir_, o);
    EXPECT_TRUE(s.ok()) << s.status().toString();
    return s.ok() ? std::move(*s) : nullptr;
  }
  bool durable() const override { return true; }
  bool corrupt(uint64_t version) override {
    const std::string path = dir_ + "/versions/" + recordFileName(version);
    auto bytes = readFile(path);
    if (!bytes.ok()) return false;
    (*bytes)[bytes->size() - 10] ^= 0x5a;  // inside the payload
    std::ofstream(path, std::ios::binary | std::ios::trunc) << *bytes;
    return true;
  }
  bool sharedByReplicas() const override { return false; }

 private:
  std::string dir_;
};

using conformance::StoreConformance;
INSTANTIATE_TEST_SUITE_P(
    Backends, StoreConformance,
    ::testing::Values(
        conformance::BackendFactory{"memory", [] { return std::make_unique<MemoryBackend>(); }},
        conformance::BackendFactory{"file", [] { return std::make_unique<FileBackend>(); }}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace tq::policy
