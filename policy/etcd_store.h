// The replicated PolicyStore: the policy history in etcd (v3 API over gRPC, proto/etcd/rpc.proto),
// shared by every tenantqos-policyd replica pointed at the same endpoints and prefix.
//
// Keys under the prefix (default "/tenantqos/"):
//   <prefix>epoch                         the store epoch (created once, by a transaction)
//   <prefix>latest                        the newest version number, decimal
//   <prefix>versions/00000000000000000007 the encoded record (store.h), as in the file store
// append(N) is ONE transaction: compare the mod_revision of <prefix>latest with the one this
// replica last saw, and that versions/N was never created; then put versions/N, put latest = N
// and delete the versions retention retires. etcd answers only after the transaction is
// committed by a quorum, so an acknowledged version is durable on a majority, and two replicas
// can never both commit version N (the loser gets kFailedPrecondition, its view refreshed).
// A transaction whose answer was lost (member killed) is retried on the next endpoint; its
// compare then fails, and the stored bytes of versions/N tell whether it was ours.
// Reads and transactions go to the raft leader's endpoint (looked up with Maintenance.Status at
// open and, in the background, after an election or a move to another endpoint): a follower
// would forward each write to the leader and answer only once it applied it too, two more hops
// on every acknowledged apply. An apply is exactly one etcd round trip (the Txn); nothing waits
// for the replica's own watch event.
//
// Every replica watches the prefix from the revision it loaded: versions other replicas commit
// (and records retention removed) reach latest()/list() and the external-append callback within
// a watch round trip. A broken watch resumes from the next revision on the next endpoint; a
// compacted one reloads everything.
//
// Errors: an unreachable etcd, or one without quorum (no answer within request_timeout), is
// kUnavailable naming the endpoints; nothing was acknowledged. Records larger than etcd's
// --max-request-bytes (1.5 MiB by default) fail with etcd's message: run etcd with
// --max-request-bytes 8388608 for policies up to the 4 MiB policyd accepts (docs/deploy.md).
// Thread-safety: internally synchronised; append() and sync() block on etcd.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "policy/store.h"
#include "rpc/tls.h"

namespace grpc {
class Channel;
class ChannelCredentials;
}  // namespace grpc

namespace tq::policy {

struct EtcdStoreOptions {
  std::vector<std::string> endpoints;  // HOST:PORT each
  std::string prefix = "/tenantqos/";
  // TLS to etcd's client port (rpc/tls.h, the files re-read for rotation): no file = plaintext;
  // ca alone = server-authenticated TLS; ca + cert + key = mutual TLS (etcd --client-cert-auth).
  // Its flag names are --etcd-ca, --etcd-cert, --etcd-key.
  rpc::TlsConfig tls = etcdTls();
  // etcdTls(): an empty TlsConfig named for etcd's flags.
  static rpc::TlsConfig etcdTls() {
    rpc::TlsConfig t;
    t.flags = {"--etcd-ca", "--etcd-cert", "--etcd-key", "(no --etcd-ca)"};
    t.peer = "etcd";
    return t;
  }
  uint64_t retain_versions = kDefaultRetainVersions;
  std::chrono::milliseconds request_timeout{5000};
  uint64_t max_record_bytes = 64u << 20;  // bigger values are reported corrupt, not decoded
};

// Connects, creates the epoch if the prefix holds no store yet, loads every record, and starts
// the watch. kUnavailable if etcd cannot be reached within request_timeout.
Result<std::unique_ptr<PolicyStore>> openEtcdStore(const EtcdStoreOptions& options);

// The credentials and the channel of every etcd client in policyd (this store, the allocator's
// election: policy/allocator_election.h), from the same options.
Result<std::shared_ptr<grpc::ChannelCredentials>> etcdCredentials(const EtcdStoreOptions& options);
std::shared_ptr<grpc::Channel> makeEtcdChannel(
    const std::string& target, const std::shared_ptr<grpc::ChannelCredentials>& credentials);

// etcd key of a version's record: <prefix>versions/<20 digits>.
std::string etcdRecordKey(const std::string& prefix, uint64_t version);

}  // namespace tq::policy
