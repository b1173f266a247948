#include "policy/audit_log.h"

#include <fcntl.h>
#include <unistd.h>

#include "common/file_util.h"
#include "common/text.h"
#include "common/thread_annotations.h"

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

namespace {

std::string jsonList(const std::vector<std::string>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + jsonQuote(v[i]);
  return out + "]";
}

}  // namespace

std::string AuditLog::line(const PolicyRecord& r) {
  const std::string groups = jsonList(r.applied_by_groups);
  return "{\"time\":" + jsonQuote(utcTimestamp(r.applied_at_unix_ms)) +
         ",\"unixMs\":" + std::to_string(r.applied_at_unix_ms) +
         ",\"action\":" + jsonQuote(r.rollback_of ? "rollback" : "apply") +
         ",\"version\":" + std::to_string(r.version) + ",\"identity\":" + jsonQuote(r.applied_by) +
         ",\"groups\":" + groups + ",\"source\":" + jsonQuote(r.source_name) +
         ",\"diff\":" + jsonQuote(r.diff_summary) +
         ",\"rollbackOf\":" + std::to_string(r.rollback_of) +
         ",\"checksum\":" + std::to_string(r.checksum) + "}";
}

std::string AuditLog::line(const Refusal& r) {
  return "{\"time\":" + jsonQuote(utcTimestamp(r.unix_ms)) +
         ",\"unixMs\":" + std::to_string(r.unix_ms) +
         ",\"action\":\"refused\",\"method\":" + jsonQuote(r.method) +
         ",\"identity\":" + jsonQuote(r.identity) + ",\"groups\":" + jsonList(r.groups) +
         ",\"node\":" + jsonQuote(r.node) + ",\"reason\":" + jsonQuote(r.reason) +
         ",\"suppressed\":" + std::to_string(r.suppressed) + "}";
}

Status AuditLog::appendRefusal(const Refusal& refusal) { return appendLine(line(refusal)); }

Status AuditLog::append(const PolicyRecord& record) { return appendLine(line(record)); }

Status AuditLog::appendLine(const std::string& line) {
  const std::string text = line + "\n";
  MutexLock lock(mu_);
  TQ_RETURN_IF_ERROR(writeAll(fd_.get(), text, "audit log " + path_));
  if (::fdatasync(fd_.get()) != 0) return errnoStatus("fdatasync audit log " + path_);
  return okStatus();
}

}  // namespace tq::policy
