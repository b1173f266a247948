// The PolicyStore contract (policy/store.h) as one parameterised gtest suite that every backend
// passes, so the backends cannot drift: the memory and file stores (store_test.cc) and the etcd
// store against a real 3-member etcd (tests/functional/etcd_store_test.cc, label `etcd`).
//
// A backend supplies a StoreBackend: open() the store it holds (again: a reopen of a durable
// store), and optionally damage a stored record or open a second writer on the same store.
// Include this header from exactly one file per test binary, then
// INSTANTIATE_TEST_SUITE_P(Name, StoreConformance, ::testing::Values(factory...), name).
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <thread>

#include "common/file_util.h"
#include "policy/store.h"

namespace tq::policy::conformance {

class StoreBackend {
 public:
  virtual ~StoreBackend() = default;
  // Opens the backend's store, keeping `retain` versions. Each call on a durable backend opens
  // the same store again (what a restarted policyd sees).
  virtual std::unique_ptr<PolicyStore> open(uint64_t retain = kDefaultRetainVersions) = 0;
  // False for the memory store: every open() is a new store.
  virtual bool durable() const = 0;
  // Damages the stored record of `version` (the store must be reopened to see it, like a disk
  // that rotted while policyd was down). False if the backend cannot.
  virtual bool corrupt(uint64_t version) = 0;
  // Whether two open() stores may be written at once (several policyd replicas).
  virtual bool sharedByReplicas() const = 0;
  // Non-empty: why this backend cannot run here (the suite skips with it).
  virtual std::string unavailable() const { return ""; }
};

struct BackendFactory {
  std::string name;
  std::function<std::unique_ptr<StoreBackend>()> make;
};
// ctest test names show the backend, not the bytes of the struct.
inline void PrintTo(const BackendFactory& f, std::ostream* os) { *os << f.name; }

inline PolicyRecord testRecord(uint64_t version, uint64_t guarantee = 5'000'000'000) {
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

// What a store must give back for `record`: the same fields, and the codec's checksum.
inline PolicyRecord asStored(PolicyRecord record) {
  record.checksum = 0;
  record.checksum = decodeRecord(encodeRecord(record))->checksum;
  return record;
}

class StoreConformance : public ::testing::TestWithParam<BackendFactory> {
 protected:
  void SetUp() override {
    backend_ = GetParam().make();
    if (!backend_->unavailable().empty()) GTEST_SKIP() << backend_->unavailable();
  }
  void TearDown() override { backend_.reset(); }
  std::unique_ptr<StoreBackend> backend_;
};

TEST_P(StoreConformance, EmptyStore) {
  auto s = backend_->open();
  EXPECT_FALSE(s->latest().has_value());
  EXPECT_EQ(s->nextVersion(), 1u);
  EXPECT_TRUE(s->list().empty());
  EXPECT_EQ(s->get(1).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(isValidStoreEpoch(s->epoch())) << s->epoch();
  EXPECT_EQ(s->corruptRecords(), 0u);
  EXPECT_FALSE(s->describe().empty());
}

TEST_P(StoreConformance, CompareAndAppendOrderAndExactContent) {
  auto s = backend_->open();
  for (uint64_t v = 1; v <= 5; ++v) {
    auto r = s->append(testRecord(v, v * 1'000'000'000));
    ASSERT_TRUE(r.ok()) << r.status().toString();
    EXPECT_EQ(*r, asStored(testRecord(v, v * 1'000'000'000)));
  }
  // Only nextVersion() is accepted, and a refused append changes nothing.
  EXPECT_EQ(s->append(testRecord(5)).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s->append(testRecord(9)).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s->latest()->version, 5u);
  EXPECT_EQ(s->nextVersion(), 6u);
  auto list = s->list();
  ASSERT_EQ(list.size(), 5u);
  for (size_t i = 0; i < list.size(); ++i) {
    EXPECT_EQ(list[i].version, 5 - i);  // newest first
    EXPECT_TRUE(list[i].intact);
    EXPECT_EQ(list[i].tenants, 1u);
    EXPECT_EQ(list[i].applied_by, "alice@host");
    EXPECT_EQ(list[i].checksum, asStored(testRecord(5 - i, (5 - i) * 1'000'000'000)).checksum);
  }
  for (uint64_t v = 1; v <= 5; ++v) {
    auto r = s->get(v);
    ASSERT_TRUE(r.ok()) << r.status().toString();
    EXPECT_EQ(*r, asStored(testRecord(v, v * 1'000'000'000)));
  }
  EXPECT_EQ(s->get(6).status().code(), StatusCode::kNotFound);
}

TEST_P(StoreConformance, ReopenKeepsEverythingAndTheEpoch) {
  if (!backend_->durable()) GTEST_SKIP() << "not durable";
  std::string epoch;
  {
    auto s = backend_->open();
    epoch = s->epoch();
    for (uint64_t v = 1; v <= 3; ++v) ASSERT_TRUE(s->append(testRecord(v)).ok());
  }
  auto s = backend_->open();
  EXPECT_EQ(s->epoch(), epoch);
  ASSERT_TRUE(s->latest().has_value());
  EXPECT_EQ(*s->latest(), asStored(testRecord(3)));
  EXPECT_EQ(s->nextVersion(), 4u);
  EXPECT_EQ(s->list().size(), 3u);
}

// More versions than one read returns (the etcd store pages its Range by 8 records): a reopen
// reads every page once, in order (a page that started over looped for ever).
TEST_P(StoreConformance, ReopenReadsMoreVersionsThanOnePage) {
  if (!backend_->durable()) GTEST_SKIP() << "not durable";
  constexpr uint64_t kVersions = 21;
  {
    auto s = backend_->open();
    for (uint64_t v = 1; v <= kVersions; ++v) ASSERT_TRUE(s->append(testRecord(v)).ok());
  }
  auto s = backend_->open();
  ASSERT_TRUE(s->latest().has_value());
  EXPECT_EQ(*s->latest(), asStored(testRecord(kVersions)));
  EXPECT_EQ(s->nextVersion(), kVersions + 1);
  EXPECT_EQ(s->list().size(), kVersions);
}

TEST_P(StoreConformance, EveryStoreHasItsOwnEpoch) {
  auto a = backend_->open();
  auto other = GetParam().make();
  auto b = other->open();
  EXPECT_NE(a->epoch(), b->epoch());
}

TEST_P(StoreConformance, RetentionKeepsTheNewestVersions) {
  {
    auto s = backend_->open(/*retain=*/3);
    for (uint64_t v = 1; v <= 6; ++v) ASSERT_TRUE(s->append(testRecord(v)).ok());
    auto list = s->list();
    ASSERT_EQ(list.size(), 3u);
    EXPECT_EQ(list.front().version, 6u);
    EXPECT_EQ(list.back().version, 4u);
    EXPECT_EQ(s->get(3).status().code(), StatusCode::kNotFound);
    EXPECT_TRUE(s->get(4).ok());
    EXPECT_EQ(s->nextVersion(), 7u);  // removed numbers are never handed out again
  }
  if (!backend_->durable()) return;
  // Lowering the retention applies when the store opens; numbers still only grow.
  auto s = backend_->open(/*retain=*/2);
  EXPECT_EQ(s->list().size(), 3u);  // until the next append
  ASSERT_TRUE(s->append(testRecord(7)).ok());
  auto list = s->list();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list.back().version, 6u);
}

TEST_P(StoreConformance, CorruptNewestIsListedAndNeverServed) {
  if (!backend_->durable()) GTEST_SKIP() << "nothing to damage";
  {
    auto s = backend_->open();
    for (uint64_t v = 1; v <= 3; ++v) ASSERT_TRUE(s->append(testRecord(v)).ok());
  }
  ASSERT_TRUE(backend_->corrupt(3));
  auto s = backend_->open();
  EXPECT_EQ(s->corruptRecords(), 1u);
  ASSERT_TRUE(s->latest().has_value());
  EXPECT_EQ(s->latest()->version, 2u);  // the newest intact one; policyd decides if it serves it
  auto list = s->list();
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list[0].version, 3u);
  EXPECT_FALSE(list[0].intact);
  EXPECT_FALSE(list[0].problem.empty());
  EXPECT_TRUE(list[1].intact);
  EXPECT_EQ(s->get(3).status().code(), StatusCode::kDataLoss);
  // Never reused: version 3 may have reached agents before it rotted.
  EXPECT_EQ(s->nextVersion(), 4u);
  ASSERT_TRUE(s->append(testRecord(4)).ok());
  EXPECT_EQ(s->latest()->version, 4u);
}

TEST_P(StoreConformance, LargeRecord) {
  auto s = backend_->open();
  PolicyRecord r = testRecord(1);
  r.source_yaml = std::string(4u << 20, 'y');  // the largest policy file policyd accepts
  auto stored = s->append(r);
  ASSERT_TRUE(stored.ok()) << stored.status().toString();
  EXPECT_EQ(s->get(1)->source_yaml.size(), 4u << 20);
  if (!backend_->durable()) return;
  auto s2 = backend_->open();
  EXPECT_EQ(s2->latest()->source_yaml.size(), 4u << 20);
}

TEST_P(StoreConformance, ReplicasShareOneHistoryAndOneWinnerPerVersion) {
  if (!backend_->sharedByReplicas()) GTEST_SKIP() << "one writer only";
  auto a = backend_->open();
  auto b = backend_->open();
  EXPECT_EQ(a->epoch(), b->epoch());
  std::atomic<int> external{0};
  b->setOnExternalAppend([&] { external++; });
  ASSERT_TRUE(a->append(testRecord(1)).ok());
  // b has not synced: its append of 1 loses the compare and changes nothing.
  auto lost = b->append(testRecord(1, 1));
  if (lost.ok()) {
    ADD_FAILURE() << "two writers both committed version 1";
  } else {
    EXPECT_EQ(lost.status().code(), StatusCode::kFailedPrecondition) << lost.status().toString();
  }
  ASSERT_TRUE(b->sync().ok());
  EXPECT_EQ(b->nextVersion(), 2u);
  EXPECT_EQ(*b->latest(), asStored(testRecord(1)));
  // Concurrent appends of the same version: exactly one wins, every time.
  for (uint64_t v = 2; v <= 6; ++v) {
    ASSERT_TRUE(a->sync().ok());
    ASSERT_TRUE(b->sync().ok());
    Result<PolicyRecord> ra = internalError("unset"), rb = internalError("unset");
    std::thread ta([&] { ra = a->append(testRecord(v, 1)); });
    std::thread tb([&] { rb = b->append(testRecord(v, 2)); });
    ta.join();
    tb.join();
    ASSERT_NE(ra.ok(), rb.ok()) << "version " << v << ": a " << ra.status().toString() << ", b "
                                << rb.status().toString();
    const PolicyRecord& winner = ra.ok() ? *ra : *rb;
    ASSERT_TRUE(a->sync().ok());
    ASSERT_TRUE(b->sync().ok());
    EXPECT_EQ(*a->get(v), winner);
    EXPECT_EQ(*b->get(v), winner);
  }
  // b hears about an append of a without syncing (its watch), and says so.
  const int before = external.load();
  ASSERT_TRUE(a->append(testRecord(7)).ok());
  for (int i = 0; i < 500 && external.load() == before; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_GT(external.load(), before);
  EXPECT_EQ(b->nextVersion(), 8u);
}

}  // namespace tq::policy::conformance
