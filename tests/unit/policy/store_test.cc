#include "policy/store.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>

#include <atomic>
#include <fstream>

#include "common/file_util.h"
#include "common/thread_annotations.h"
#include "policy/file_store.h"
#include "tests/support/temp_dir.h"
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
    ASSERT_TRUE(tmp_.ok()) << tmp_.error();
    g_fail_before_rename = false;
  }

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

  tq::testing::TempDir tmp_{"tqpol-store"};
  const std::string& dir_ = tmp_.path();
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

// The in-memory view both durable stores keep (file and etcd).
TEST(VersionIndexTest, IntactCorruptLatestAndNext) {
  VersionIndex index;
  EXPECT_EQ(index.next(), 1u);
  EXPECT_EQ(index.newest(), 0u);
  EXPECT_FALSE(index.latest());
  index.addIntact(testRecord(1, 1));
  index.addIntact(testRecord(2, 2));
  index.addCorrupt(3, "checksum mismatch");
  EXPECT_EQ(index.next(), 4u);
  EXPECT_EQ(index.newest(), 3u);
  ASSERT_TRUE(index.latest());
  EXPECT_EQ(index.latest()->version, 2u);  // the newest intact one
  EXPECT_EQ(index.corrupt(), 1u);
  const std::vector<VersionSummary> list = index.list();
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list[0].version, 3u);  // newest first
  EXPECT_FALSE(list[0].intact);
  EXPECT_EQ(list[0].problem, "checksum mismatch");
  EXPECT_EQ(list[2].version, 1u);
  EXPECT_EQ(index.versions(), (std::vector<uint64_t>{1, 2, 3}));

  // get() answers: the latest from memory, a corrupt or absent version without reading, the
  // others are read by the store.
  auto latest = index.answerWithoutReading(2);
  ASSERT_TRUE(latest && latest->ok());
  EXPECT_EQ((*latest)->version, 2u);
  auto corrupt = index.answerWithoutReading(3);
  ASSERT_TRUE(corrupt);
  EXPECT_EQ(corrupt->status().code(), StatusCode::kDataLoss);
  EXPECT_NE(corrupt->status().message().find("checksum mismatch"), std::string::npos);
  auto absent = index.answerWithoutReading(9);
  ASSERT_TRUE(absent);
  EXPECT_EQ(absent->status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(index.answerWithoutReading(1));  // held, intact, not the latest: read it
}

TEST(VersionIndexTest, RetentionAndOtherWriters) {
  VersionIndex index;
  for (uint64_t v = 1; v <= 5; ++v) index.addIntact(testRecord(v, 1));
  index.eraseThrough(3);
  EXPECT_EQ(index.versions(), (std::vector<uint64_t>{4, 5}));
  EXPECT_EQ(index.answerWithoutReading(2)->status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(index.erase(4));
  EXPECT_FALSE(index.erase(4));
  index.sawVersion(9);  // another replica committed up to 9
  EXPECT_EQ(index.next(), 10u);
  index.sawVersion(2);  // never backwards
  EXPECT_EQ(index.next(), 10u);
  index.clear();  // a reload: the numbers already used stay used
  EXPECT_EQ(index.newest(), 0u);
  EXPECT_FALSE(index.latest());
  EXPECT_EQ(index.next(), 10u);
}

// The answers every durable store gives from its index alone (IndexedPolicyStore).
class IndexOnlyStore final : public IndexedPolicyStore {
 public:
  void add(PolicyRecord r) {
    MutexLock lock(mu_);
    index_.addIntact(std::move(r));
  }
  void addCorrupt(uint64_t version) {
    MutexLock lock(mu_);
    index_.addCorrupt(version, "bad");
  }
  Result<PolicyRecord> append(PolicyRecord) override { return internalError("not here"); }
  Result<PolicyRecord> get(uint64_t) const override { return internalError("not here"); }
  std::string epoch() const override { return "e"; }
  std::string describe() const override { return "index only"; }
};

TEST(IndexedPolicyStoreTest, LatestListNextAndCorruptComeFromTheIndex) {
  IndexOnlyStore s;
  EXPECT_FALSE(s.latest());
  EXPECT_EQ(s.nextVersion(), 1u);
  s.add(testRecord(1, 1));
  s.add(testRecord(2, 2));
  s.addCorrupt(3);
  ASSERT_TRUE(s.latest());
  EXPECT_EQ(s.latest()->version, 2u);
  EXPECT_EQ(s.nextVersion(), 4u);
  EXPECT_EQ(s.corruptRecords(), 1u);
  ASSERT_EQ(s.list().size(), 3u);
  EXPECT_EQ(s.list().front().version, 3u);
}

TEST(StoreEpochTest, RandomHexAndLoudWhenTheKernelGivesNoRandomBytes) {
  Result<std::string> a = newStoreEpoch();
  Result<std::string> b = newStoreEpoch();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(isValidStoreEpoch(*a)) << *a;
  EXPECT_NE(*a, *b);
  // A child whose getrandom is refused (a seccomp filter, as a hardened container profile
  // would) gets an error naming it, at once, instead of a spin.
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_getrandom, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    sock_fprog prog{static_cast<unsigned short>(sizeof filter / sizeof filter[0]), filter};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
      _exit(3);
    }
    Result<std::string> e = newStoreEpoch();
    const bool loud = !e.ok() && e.status().code() == StatusCode::kInternal &&
                      e.status().message().find("getrandom") != std::string::npos;
    _exit(loud ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the child was killed: " << status;
  ASSERT_NE(WEXITSTATUS(status), 3) << "cannot install a seccomp filter here";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "newStoreEpoch did not fail with kInternal naming getrandom";
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
    if (!dir_.ok()) ADD_FAILURE() << dir_.error();
  }
  std::unique_ptr<PolicyStore> open(uint64_t retain) override {
    FileStoreOptions o;
    o.retain_versions = retain;
    auto s = openFileStore(dir_.path(), o);
    EXPECT_TRUE(s.ok()) << s.status().toString();
    return s.ok() ? std::move(*s) : nullptr;
  }
  bool durable() const override { return true; }
  bool corrupt(uint64_t version) override {
    const std::string path = dir_.path() + "/versions/" + recordFileName(version);
    auto bytes = readFile(path);
    if (!bytes.ok()) return false;
    (*bytes)[bytes->size() - 10] ^= 0x5a;  // inside the payload
    std::ofstream(path, std::ios::binary | std::ios::trunc) << *bytes;
    return true;
  }
  bool sharedByReplicas() const override { return false; }

 private:
  tq::testing::TempDir dir_{"tqpol-conf"};
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
