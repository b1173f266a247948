#include "policy/etcd_txn.h"

namespace tq::policy {

namespace pb = etcdserverpb;

void compareKeyAbsent(pb::TxnRequest* txn, const std::string& key) {
  pb::Compare* c = txn->add_compare();
  c->set_key(key);
  c->set_target(pb::Compare::CREATE);
  c->set_result(pb::Compare::EQUAL);
  c->set_create_revision(0);
}

pb::TxnRequest createOrReadTxn(const std::string& key, const std::string& value, int64_t lease) {
  pb::TxnRequest txn;
  compareKeyAbsent(&txn, key);
  pb::PutRequest* put = txn.add_success()->mutable_request_put();
  put->set_key(key);
  put->set_value(value);
  if (lease != 0) put->set_lease(lease);
  txn.add_failure()->mutable_request_range()->set_key(key);
  return txn;
}

}  // namespace tq::policy
