#include "policy/store.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <fstream>

#include "common/file_util.h"
#include "policy/file_store.h"

namespace tq::policy {
namespace {

PolicyRecord record(uint64_t version, uint64_t guarantee = 5'000'000'000) {
  PolicyRecord r;
  r.version = version;
  r.policy.links.push_back({"fabric", 12'500'000'000, 5});
  TenantSpec t;
  t.name = "tenant-a";
  t.link = "fabric";
  t.guarantee_bytes_per_second = guarantee;
  t.limit_bytes_per_second = 7'500'000'000;
  t.weight = 2;
  t.service_level = 1;
  t.dscp = 26;
  t.traffic_classes = {1};
  r.policy.tenants.push_back(t);
  r.source_yaml = "# version " + std::to_string(version) + "\n";
  r.applied_at_unix_ms = 1'700'000'000'000 + static_cast<int64_t>(version);
  r.applied_by = "alice@host";
  return r;
}

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
  void flipByte(uint64_t version, long offset_from_end) {
    std::string bytes = *readFile(path(version));
    bytes[bytes.size() - static_cast<size_t>(offset_from_end)] ^= 0x5a;
    std::ofstream(path(version), std::ios::binary | std::ios::trunc) << bytes;
  }

  std::string dir_;
};

TEST(RecordCodec, RoundTripAndChecksum) {
  PolicyRecord r = record(7);
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
  const std::string good = encodeRecord(record(7));
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

TEST_F(FileStoreTest, EmptyStore) {
  auto s = open();
  EXPECT_FALSE(s->latest().has_value());
  EXPECT_EQ(s->nextVersion(), 1u);
  EXPECT_TRUE(s->list().empty());
  EXPECT_EQ(s->get(1).status().code(), StatusCode::kNotFound);
}

TEST_F(FileStoreTest, VersionsAreOrderedAndSurviveReopen) {
  {
    auto s = open();
    for (uint64_t v = 1; v <= 5; ++v) {
      auto r = s->append(record(v, v * 1'000'000'000));
      ASSERT_TRUE(r.ok()) << r.status().toString();
      EXPECT_NE(r->checksum, 0u);
    }
    // Compare-and-append: only nextVersion() is accepted.
    EXPECT_EQ(s->append(record(5)).status().code(), StatusCode::kFailedPrecondition);
    EXPECT_EQ(s->append(record(9)).status().code(), StatusCode::kFailedPrecondition);
  }
  auto s = open();
  ASSERT_TRUE(s->latest().has_value());
  EXPECT_EQ(s->latest()->version, 5u);
  EXPECT_EQ(s->nextVersion(), 6u);
  auto list = s->list();
  ASSERT_EQ(list.size(), 5u);
  for (size_t i = 0; i < list.size(); ++i) {
    EXPECT_EQ(list[i].version, 5 - i);  // newest first
    EXPECT_TRUE(list[i].intact);
    EXPECT_EQ(list[i].tenants, 1u);
    EXPECT_EQ(list[i].applied_by, "alice@host");
  }
  for (uint64_t v = 1; v <= 5; ++v) {
    auto r = s->get(v);
    ASSERT_TRUE(r.ok());
    PolicyRecord expect = record(v, v * 1'000'000'000);
    expect.checksum = r->checksum;
    EXPECT_EQ(*r, expect);
  }
  EXPECT_EQ(files().size(), 5u);
  EXPECT_EQ(s->corruptRecords(), 0u);
}

TEST_F(FileStoreTest, InjectedFailureBetweenWriteAndRenameKeepsThePreviousVersion) {
  auto s = open();
  ASSERT_TRUE(s->append(record(1)).ok());
  ASSERT_TRUE(s->append(record(2)).ok());
  g_fail_before_rename = true;
  auto failed = s->append(record(3));
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
  auto r = s->append(record(3));
  ASSERT_TRUE(r.ok()) << r.status().toString();
  EXPECT_EQ(s->latest()->version, 3u);
}

TEST_F(FileStoreTest, CorruptLatestIsReportedAndTheNewestIntactIsServed) {
  {
    auto s = open();
    for (uint64_t v = 1; v <= 3; ++v) ASSERT_TRUE(s->append(record(v)).ok());
  }
  flipByte(3, 10);  // inside the payload
  auto s = open();
  EXPECT_EQ(s->corruptRecords(), 1u);
  ASSERT_TRUE(s->latest().has_value());
  EXPECT_EQ(s->latest()->version, 2u);
  auto list = s->list();
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list[0].version, 3u);
  EXPECT_FALSE(list[0].intact);
  EXPECT_NE(list[0].problem.find("checksum mismatch"), std::string::npos) << list[0].problem;
  EXPECT_TRUE(list[1].intact);
  auto get3 = s->get(3);
  EXPECT_EQ(get3.status().code(), StatusCode::kDataLoss);
  // Version numbers are never reused: the corrupt 3 may have reached agents already.
  EXPECT_EQ(s->nextVersion(), 4u);
  ASSERT_TRUE(s->append(record(4)).ok());
  EXPECT_EQ(s->latest()->version, 4u);
}

TEST_F(FileStoreTest, TruncatedAndForeignFiles) {
  {
    auto s = open();
    for (uint64_t v = 1; v <= 2; ++v) ASSERT_TRUE(s->append(record(v)).ok());
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

TEST_F(FileStoreTest, LargeRecord) {
  auto s = open();
  PolicyRecord r = record(1);
  r.source_yaml = std::string(4u << 20, 'y');
  ASSERT_TRUE(s->append(r).ok());
  auto s2 = open();
  EXPECT_EQ(s2->latest()->source_yaml.size(), 4u << 20);
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

TEST(MemoryStore, SameSemantics) {
  auto s = makeMemoryStore();
  EXPECT_FALSE(s->latest().has_value());
  auto r = s->append(record(1));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->checksum, decodeRecord(encodeRecord(record(1)))->checksum);
  EXPECT_EQ(s->append(record(3)).status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(s->append(record(2)).ok());
  EXPECT_EQ(s->latest()->version, 2u);
  EXPECT_EQ(s->list().front().version, 2u);
  EXPECT_EQ(s->get(5).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace tq::policy
