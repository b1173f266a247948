// The audit log: one JSON line per stored policy version, appended to a file and on stable
// storage (fdatasync) before the apply returns, like the store's records. Append-only: the file
// is opened O_APPEND and never rewritten; rotate it with copy-and-truncate tools or leave it
// (a line is about 300 bytes).
//
// A line: {"time":"2026-01-02T03:04:05Z","unixMs":...,"action":"apply"|"rollback",
//   "version":N,"identity":"CN","groups":["O",...],"source":"FILE","diff":"tenants +a ~b",
//   "rollbackOf":N,"checksum":N}
// and one per refused report of the cluster allocator (policy/allocator_service.h):
//   {"time":...,"unixMs":...,"action":"refused","method":"Allocate","identity":"CN",
//    "groups":[...],"node":"NODE","reason":"...","suppressed":N}
// (suppressed: refusals of the same identity not written since its previous line).
// Every string is JSON-escaped, so nothing an author chose can break a line.
// Thread-safety: append() is internally serialised.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/fd.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "policy/store.h"

namespace tq::policy {

class AuditLog {
 public:
  // Opens (creating, mode 0640) `path` for appending; its directory must exist.
  static Result<std::unique_ptr<AuditLog>> open(const std::string& path);

  // Appends the line for a stored record and syncs it.
  Status append(const PolicyRecord& record);
  const std::string& path() const { return path_; }

  // The line for `record` (no trailing newline).
  static std::string line(const PolicyRecord& record);

  struct Refusal {
    int64_t unix_ms = 0;
    std::string method;
    std::string identity;
    std::vector<std::string> groups;
    std::string node;  // what the request named
    std::string reason;
    uint64_t suppressed = 0;
  };
  // Appends the line of a refused call and syncs it.
  Status appendRefusal(const Refusal& refusal);
  static std::string line(const Refusal& refusal);

 private:
  AuditLog(std::string path, Fd fd) : path_(std::move(path)), fd_(std::move(fd)) {}
  Status appendLine(const std::string& line) TQ_EXCLUDES(mu_);
  const std::string path_;
  Mutex mu_;
  Fd fd_ TQ_GUARDED_BY(mu_);
};

}  // namespace tq::policy
