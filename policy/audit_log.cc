#include "policy/audit_log.h"

#include <fcntl.h>
#include <unistd.h>

#include "common/file_util.h"
#include "common/text.h"

namespace tq::policy {

Result<std::unique_ptr<AuditLog>> AuditLog::open(const std::string& path) {
  // Its directory is the data dir by default, which the etcd store does not otherwise need.
  TQ_RETURN_IF_ERROR_CTX(makeDirs(parentDir(path), 0700), "audit log " + path);
  const bool existed = ::access(path.c_str(), F_OK) == 0;
  Fd fd(::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640));
  if (!fd.valid()) return errnoStatus("open audit log " + path);
  std::unique_ptr<AuditLog> log(new AuditLog(path, std::move(fd)));
  // The new name must survive a crash like the records it will describe.
  if (!existed) TQ_RETURN_IF_ERROR(fsyncDir(parentDir(path)));
  return log;
}

std::string AuditLog::line(const PolicyRecord& r) {
  std::string groups = "[";
  for (size_t i = 0; i < r.applied_by_groups.size(); ++i)
    groups += (i ? "," : "") + jsonQuote(r.applied_by_groups[i]);
  groups += "]";
  return "{\"time\":" + jsonQuote(utcTimestamp(r.applied_at_unix_ms)) +
         ",\"unixMs\":" + std::to_string(r.applied_at_unix_ms) +
         ",\"action\":" + jsonQuote(r.rollback_of ? "rollback" : "apply") +
         ",\"version\":" + std::to_string(r.version) + ",\"identity\":" + jsonQuote(r.applied_by) +
         ",\"groups\":" + groups + ",\"source\":" + jsonQuote(r.source_name) +
         ",\"diff\":" + jsonQuote(r.diff_summary) +
         ",\"rollbackOf\":" + std::to_string(r.rollback_of) +
         ",\"checksum\":" + std::to_string(r.checksum) + "}";
}

Status AuditLog::append(const PolicyRecord& record) {
  const std::string text = line(record) + "\n";
  std::lock_guard<std::mutex> lock(mu_);
  TQ_RETURN_IF_ERROR(writeAll(fd_.get(), text, "audit log " + path_));
  if (::fdatasync(fd_.get()) != 0) return errnoStatus("fdatasync audit log " + path_);
  return okStatus();
}

}  // namespace tq::policy
