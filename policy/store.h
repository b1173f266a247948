// The policy store: an append-only sequence of versioned policy records.
//
// PolicyStore is the seam for backends. The file store (file_store.h) is the embedded, durable
// default; the etcd store (etcd_store.h: a transaction comparing the latest version key's
// revision, then putting the record) implements the same interface so several policyd replicas
// share one history. tests/unit/policy/store_conformance.h is the contract every backend passes.
// Versions start at 1, only grow, and are never reused, not even for a record that was found
// corrupt or removed by retention.
//
// Identity: every store has an epoch, a random id made when the store is created and kept with
// it (every replica of one etcd store reports the same epoch). Agents hold (epoch, version): a
// new epoch means a new store (a lost data dir re-applied from v1), not an older policy.
//
// Retention: a store keeps the newest `retain_versions` version numbers (corrupt ones count);
// older records are removed when a newer one is appended (a lowered limit applies from the
// next append). get() of a removed one is kNotFound.
//
// Record encoding (shared by all backends, so a record can move between them):
//   offset 0   8 bytes  magic "TQPOLREC"
//          8   u32 LE   record format (1)
//         12   u64 LE   policy version
//         20   u64 LE   payload length N
//         28   N bytes  payload: tenantqos.v1.PolicySnapshot (checksum, store_epoch unset)
//       28+N   u32 LE   CRC-32C of bytes [0, 28+N)
// The CRC is the record's checksum shown by ListVersions / GetPolicy.
//
// Thread-safety: implementations are internally synchronised.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/policy.h"
#include "common/status.h"
#include "common/thread_annotations.h"

namespace tq::policy {

struct PolicyRecord {
  uint64_t version = 0;
  PolicySpec policy;
  std::string source_yaml;  // the file as applied ("" for rollbacks of structured content)
  int64_t applied_at_unix_ms = 0;
  std::string applied_by;    // the author's verified identity (server-written)
  uint64_t rollback_of = 0;  // non-zero: this version restored that one's content
  uint32_t checksum = 0;     // set by the store (CRC-32C of the encoded record)
  std::vector<std::string> applied_by_groups;
  std::string source_name;   // the file name the client gave
  std::string diff_summary;  // one line: what changed against the previous version
  friend bool operator==(const PolicyRecord&, const PolicyRecord&) = default;
};

struct VersionSummary {
  uint64_t version = 0;
  int64_t applied_at_unix_ms = 0;
  std::string applied_by;
  uint32_t tenants = 0;
  uint64_t rollback_of = 0;
  uint32_t checksum = 0;
  bool intact = true;   // false: the stored record failed verification (see `problem`)
  std::string problem;  // why it is not intact
  std::vector<std::string> applied_by_groups;
  std::string source_name;
  std::string diff_summary;
};

class PolicyStore {
 public:
  virtual ~PolicyStore() = default;

  // Durably stores `record` (its version must equal nextVersion(), else kFailedPrecondition:
  // compare-and-append) and returns it with its checksum set. The record is on stable storage
  // when this returns ok; on error nothing changed (latest() and list() are as before).
  virtual Result<PolicyRecord> append(PolicyRecord record) = 0;

  // The newest intact record, or nullopt when there is none.
  virtual std::optional<PolicyRecord> latest() const = 0;

  // A stored version: kNotFound if it never existed, kDataLoss if its record is corrupt.
  virtual Result<PolicyRecord> get(uint64_t version) const = 0;

  // Every known version, newest first, corrupt ones included (intact = false).
  virtual std::vector<VersionSummary> list() const = 0;

  // The version the next append must carry: one more than the highest version ever seen.
  virtual uint64_t nextVersion() const = 0;

  // Records that failed verification (checksum, framing, or payload) among those held.
  virtual uint64_t corruptRecords() const = 0;

  // The store's epoch (32 lowercase hex digits), fixed for the store's life.
  virtual std::string epoch() const = 0;

  // Where the store lives, for messages ("/var/lib/tenantqos/policyd/versions", "etcd
  // 10.0.0.1:2379,... prefix /tenantqos/").
  virtual std::string describe() const = 0;

  // Brings latest()/nextVersion() up to date with what other writers (other replicas) committed:
  // a quorum read for etcd; a no-op for a store with one writer.
  virtual Status sync() { return okStatus(); }

  // `fn` is called, on a thread of the store, after versions appended by another writer became
  // visible (not for this store's own appends). Stores with one writer never call it.
  virtual void setOnExternalAppend(std::function<void()> fn) { (void)fn; }
};

// The default for retain_versions: about 15 MB of a 1000-tenant policy's records.
inline constexpr uint64_t kDefaultRetainVersions = 100;

// The version numbers retention removes when `newest` is appended: [1, newest - retain].
inline uint64_t newestRetiredVersion(uint64_t newest, uint64_t retain) {
  return newest > retain ? newest - retain : 0;
}

// The summary of an intact record.
VersionSummary summarize(const PolicyRecord& record);

// What a durable store knows of its versions in memory, the same for every backend (file,
// etcd): a summary per version it holds (corrupt ones included), the newest intact record, and
// the version the next append must carry. The backends fill it as they read records (load,
// etcd watch) and append; the accessors are the PolicyStore answers that need no I/O.
// Not thread-safe: the store's mutex guards it.
class VersionIndex {
 public:
  // A record read back intact (a load, a watch event, or an append just written).
  void addIntact(PolicyRecord record);
  // A stored version whose record failed verification: listed, never served.
  void addCorrupt(uint64_t version, std::string problem);
  // A version number exists (or existed) elsewhere: the next append is above it.
  void sawVersion(uint64_t version) { next_ = std::max(next_, version + 1); }
  // Forgets `version` (retired by retention, or deleted by another replica); true if held.
  bool erase(uint64_t version);
  // Forgets every version <= `version`.
  void eraseThrough(uint64_t version);
  void clear();

  bool holds(uint64_t version) const { return summaries_.count(version) != 0; }
  // The versions held, oldest first.
  std::vector<uint64_t> versions() const;
  // The highest version held (0: none).
  uint64_t newest() const { return summaries_.empty() ? 0 : summaries_.rbegin()->first; }
  const std::optional<PolicyRecord>& latest() const { return latest_; }
  uint64_t next() const { return next_; }
  // list(): every version held, newest first.
  std::vector<VersionSummary> list() const;
  // corruptRecords().
  uint64_t corrupt() const;
  // What get(version) answers before reading the record: the latest record itself when that is
  // the one asked for; kNotFound for a version never had or retired; kDataLoss with the problem
  // for a corrupt one; nullopt when the record is there to be read.
  std::optional<Result<PolicyRecord>> answerWithoutReading(uint64_t version) const;

 private:
  std::map<uint64_t, VersionSummary> summaries_;
  std::optional<PolicyRecord> latest_;
  uint64_t next_ = 1;
};

// A durable store's PolicyStore answers that need no I/O (latest, list, nextVersion,
// corruptRecords), from its VersionIndex behind its mutex: the file and etcd stores derive from
// it, filling index_ under mu_ as they load, append and watch.
class IndexedPolicyStore : public PolicyStore {
 public:
  std::optional<PolicyRecord> latest() const override;
  std::vector<VersionSummary> list() const override;
  uint64_t nextVersion() const override;
  uint64_t corruptRecords() const override;

 protected:
  mutable Mutex mu_;  // guards index_ and whatever state the backend adds
  VersionIndex index_ TQ_GUARDED_BY(mu_);
};

// A new random epoch (getrandom): 32 lowercase hex digits. kInternal naming the errno when the
// kernel cannot give random bytes (no getrandom, a seccomp filter refusing it): a store must
// not be created with an epoch that is not random.
Result<std::string> newStoreEpoch();
// True if `s` looks like an epoch (what a store reads back from disk or etcd is checked).
bool isValidStoreEpoch(std::string_view s);

// Record codec (see the layout above).
std::string encodeRecord(const PolicyRecord& record);
// The checksum a store reports for a record: the CRC trailer of its encoding `bytes`
// (encodeRecord's output). A store that just wrote `record` as `bytes` serves `record` with this
// checksum rather than decoding its own bytes back (a 1000-tenant record took up to 70 ms to
// decode on a busy policyd, on every apply; that the round trip gives the record back is the
// tests' job: store_conformance.h compares what append returns with what a reopened store reads).
uint32_t encodedChecksum(std::string_view bytes);
// kDataLoss with the reason when the bytes are not an intact record.
Result<PolicyRecord> decodeRecord(std::string_view bytes);

// An in-memory store for tests of the layers above: same semantics, no durability.
std::unique_ptr<PolicyStore> makeMemoryStore(uint64_t retain_versions = kDefaultRetainVersions);

}  // namespace tq::policy
