// The shared etcd transactions, as messages (the real etcd runs them in the etcd-labelled
// functional tests: the store's epoch, the allocator election).
#include "policy/etcd_txn.h"

#include <gtest/gtest.h>

namespace tq::policy {
namespace {

namespace pb = etcdserverpb;

TEST(EtcdTxnTest, CreateOrReadComparesTheCreateRevisionPutsElseReads) {
  const pb::TxnRequest t = createOrReadTxn("/tq/allocator", "replica-1", 42);
  ASSERT_EQ(t.compare_size(), 1);
  EXPECT_EQ(t.compare(0).key(), "/tq/allocator");
  EXPECT_EQ(t.compare(0).target(), pb::Compare::CREATE);
  EXPECT_EQ(t.compare(0).result(), pb::Compare::EQUAL);
  EXPECT_EQ(t.compare(0).create_revision(), 0);
  ASSERT_EQ(t.success_size(), 1);
  const pb::PutRequest& put = t.success(0).request_put();
  EXPECT_EQ(put.key(), "/tq/allocator");
  EXPECT_EQ(put.value(), "replica-1");
  EXPECT_EQ(put.lease(), 42);
  ASSERT_EQ(t.failure_size(), 1);
  EXPECT_EQ(t.failure(0).request_range().key(), "/tq/allocator");
  EXPECT_EQ(t.failure(0).request_range().range_end(), "") << "the one key, not a range";

  EXPECT_EQ(createOrReadTxn("/tq/store-epoch", "e").success(0).request_put().lease(), 0)
      << "no lease: the key outlives the session";
}

}  // namespace
}  // namespace tq::policy
