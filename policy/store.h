// The policy store: an append-only sequence of versioned policy records.
//
// PolicyStore is the seam for backends. FilePolicyStore (file_store.h) is the embedded, durable
// default; a replicated backend (etcd: a transaction comparing the latest version key, then
// putting the record) implements the same interface so several policyd replicas can share one
// history. Versions start at 1, only grow, and are never reused, not even for a record that was
// found corrupt.
//
// Record encoding (shared by all backends, so a record can move between them):
//   offset 0   8 bytes  magic "TQPOLREC"
//          8   u32 LE   record format (1)
//         12   u64 LE   policy version
//         20   u64 LE   payload length N
//         28   N bytes  payload: tenantqos.v1.PolicySnapshot (checksum field unset)
//       28+N   u32 LE   CRC-32C of bytes [0, 28+N)
// The CRC is the record's checksum shown by ListVersions / GetPolicy.
//
// Thread-safety: implementations are internally synchronised.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/policy.h"
#include "common/status.h"

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

// The summary of an intact record.
VersionSummary summarizeRecord(const PolicyRecord& record);

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

  // Records that failed verification (checksum, framing, or payload), as of opening the store.
  virtual uint64_t corruptRecords() const = 0;
};

// Record codec (see the layout above).
std::string encodeRecord(const PolicyRecord& record);
// kDataLoss with the reason when the bytes are not an intact record.
Result<PolicyRecord> decodeRecord(std::string_view bytes);

// An in-memory store for tests of the layers above: same semantics, no durability.
std::unique_ptr<PolicyStore> makeMemoryStore();

}  // namespace tq::policy
