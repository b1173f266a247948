// etcd v3 transactions that more than one user of etcd in policyd builds (the policy store's
// epoch key, the allocator election's key). Pure message construction: no I/O.
#pragma once

#include <cstdint>
#include <string>

#include "etcd/rpc.pb.h"

namespace tq::policy {

// Adds the compare "`key` was never created" (its create revision is 0) to `txn`.
void compareKeyAbsent(etcdserverpb::TxnRequest* txn, const std::string& key);

// Creates `key` = `value` (attached to `lease` when it is not 0) only if the key does not exist
// (its create revision is 0); otherwise changes nothing and reads it. On success the put's
// revision is the response header's; on failure responses(0).response_range().kvs() holds the
// key as it is (empty if it vanished in between).
etcdserverpb::TxnRequest createOrReadTxn(const std::string& key, const std::string& value,
                                         int64_t lease = 0);

}  // namespace tq::policy
