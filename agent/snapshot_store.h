// The agent's persisted policy: the last snapshot received from policyd, kept in the state
// directory so a restarted agent enforces at once, before it reaches policyd (fail-static).
//
// File <state_dir>/policy.snapshot, replaced atomically (writeFileAtomic: tmp + fsync + rename +
// fsync dir). Format v1:
//   line 1  "tenantqos-agent-snapshot 1\n"
//   line 2  "crc32c=<8 lowercase hex> length=<decimal>\n"
//   body    <length> bytes: a serialized tenantqos.v1.PolicySnapshot (version, policy, store epoch)
// The checksum covers the body. Any mismatch (header, length, checksum, protobuf parse) makes
// load() fail with kDataLoss: the caller ignores the file and waits for policyd.
// Thread-compatible: one writer (the watch thread) after startup.
#pragma once

#include <optional>
#include <string>

#include "common/file_util.h"
#include "common/policy.h"
#include "common/status.h"

namespace tq::agent {

inline constexpr char kSnapshotFileName[] = "policy.snapshot";

class SnapshotStore {
 public:
  explicit SnapshotStore(std::string state_dir);

  // Creates the state directory if needed and replaces the file atomically. `hook` is the
  // fault-injection seam of writeFileAtomic (tests only).
  Status save(const VersionedPolicy& snapshot, BeforeRenameHook hook = nullptr);
  // nullopt if there is no file; kDataLoss if it is corrupt; other codes for I/O errors.
  Result<std::optional<VersionedPolicy>> load() const;
  // Removes the file (absent is fine).
  Status remove();

  const std::string& path() const { return path_; }

  // The encoding, exposed for tests.
  static std::string encode(const VersionedPolicy& snapshot);
  static Result<VersionedPolicy> decode(const std::string& data, const std::string& what);

 private:
  std::string dir_;
  std::string path_;
};

}  // namespace tq::agent
