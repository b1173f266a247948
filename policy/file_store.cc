#include "policy/file_store.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>

#include "common/log.h"
#include "common/thread_annotations.h"

namespace tq::policy {
namespace {

constexpr std::string_view kSuffix = ".tqrec";
constexpr size_t kDigits = 20;

// "00000000000000000007.tqrec" -> 7; nullopt for anything else.
std::optional<uint64_t> versionOfName(std::string_view name) {
  if (name.size() != kDigits + kSuffix.size() || name.substr(kDigits) != kSuffix)
    return std::nullopt;
  uint64_t v = 0;
  for (size_t i = 0; i < kDigits; ++i) {
    char c = name[i];
    if (c < '0' || c > '9') return std::nullopt;
    if (v > (UINT64_MAX - 9) / 10) return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  return v;
}

class FileStore final : public IndexedPolicyStore {
 public:
  FileStore(std::string dir, std::string epoch, FileStoreOptions options)
      : dir_(std::move(dir)), epoch_(std::move(epoch)), options_(options) {}

  Status load() {
    MutexLock lock(mu_);  // before any other thread; the analysis wants it and it is free
    DIR* d = ::opendir(dir_.c_str());
    if (d == nullptr) return errnoStatus("open policy store directory " + dir_);
    std::vector<std::pair<uint64_t, std::string>> files;
    while (dirent* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      if (auto v = versionOfName(name)) {
        files.emplace_back(*v, name);
      } else if (name.find(std::string(kSuffix) + ".tmp.") != std::string::npos) {
        // A write interrupted before its rename: never acknowledged, so never a version.
        std::string p = dir_ + "/" + name;
        if (::unlink(p.c_str()) == 0) {
          TQ_LOG(kInfo, "policy store: removed leftover temporary %s", p.c_str());
        }
      } else {
        TQ_LOG(kWarn, "policy store: ignoring unexpected file %s/%s", dir_.c_str(), name.c_str());
      }
    }
    ::closedir(d);
    std::sort(files.begin(), files.end());
    for (const auto& [version, name] : files) {
      Result<PolicyRecord> rec = readRecord(dir_ + "/" + name, version);
      if (!rec.ok()) {
        index_.addCorrupt(version, rec.status().message());
        TQ_LOG(kError, "policy store: version %" PRIu64 " is corrupt and will not be served: %s",
               version, rec.status().message().c_str());
        continue;
      }
      index_.addIntact(std::move(*rec));
    }
    if (const uint64_t newest = index_.newest(); newest != 0) {
      if (!index_.latest()) {
        TQ_LOG(kError, "policy store %s: no intact version (newest file: version %" PRIu64 ")",
               dir_.c_str(), newest);
      } else if (index_.latest()->version != newest) {
        TQ_LOG(kError,
               "policy store %s: the newest version %" PRIu64
               " is corrupt; serving version %" PRIu64 ", the newest intact one",
               dir_.c_str(), newest, index_.latest()->version);
      }
    }
    return okStatus();
  }

  Result<PolicyRecord> append(PolicyRecord record) override {
    MutexLock lock(mu_);
    if (record.version != index_.next()) {
      return failedPrecondition("append version " + std::to_string(record.version) +
                                ": the store expects version " + std::to_string(index_.next()));
    }
    record.checksum = 0;
    std::string bytes = encodeRecord(record);
    const std::string path = dir_ + "/" + recordFileName(record.version);
    TQ_RETURN_IF_ERROR_CTX(writeFileAtomic(path, bytes, 0644, options_.before_rename),
                           "store policy version " + std::to_string(record.version));
    // Only now, with the record durable, does the in-memory view move.
    record.checksum = encodedChecksum(bytes);
    index_.addIntact(record);
    pruneLocked(record.version);
    return record;
  }

  Result<PolicyRecord> get(uint64_t version) const override {
    MutexLock lock(mu_);
    if (auto answer = index_.answerWithoutReading(version)) return std::move(*answer);
    return readRecord(dir_ + "/" + recordFileName(version), version);
  }

  std::string epoch() const override { return epoch_; }
  std::string describe() const override { return dir_; }

 private:
  // Retention: removes the records of versions <= newestRetiredVersion(newest). A file that
  // cannot be removed stays listed and is retried after the next append.
  void pruneLocked(uint64_t newest) TQ_REQUIRES(mu_) {
    const uint64_t retired = newestRetiredVersion(newest, options_.retain_versions);
    for (uint64_t version : index_.versions()) {
      if (version > retired) break;
      const std::string path = dir_ + "/" + recordFileName(version);
      if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
        TQ_LOG(kWarn, "policy store: cannot remove retired version %s: %s", path.c_str(),
               std::strerror(errno));
        continue;
      }
      index_.erase(version);
    }
  }

  Result<PolicyRecord> readRecord(const std::string& path, uint64_t version) const {
    auto bytes = readFile(path, options_.max_record_bytes);
    if (!bytes.ok()) return dataLoss(bytes.status().message());
    auto rec = decodeRecord(*bytes);
    if (!rec.ok()) return rec.status().withContext(path);
    if (rec->version != version) {
      return dataLoss(path + ": holds version " + std::to_string(rec->version));
    }
    return rec;
  }

  const std::string dir_;
  const std::string epoch_;
  const FileStoreOptions options_;
};

// Reads <data_dir>/store-epoch, creating it when absent (a new store, or one from before epochs).
Result<std::string> loadOrCreateEpoch(const std::string& data_dir) {
  const std::string path = data_dir + "/" + kStoreEpochFileName;
  auto bytes = readFile(path, 64);
  if (bytes.ok()) {
    std::string e = *bytes;
    while (!e.empty() && (e.back() == '\n' || e.back() == ' ')) e.pop_back();
    if (!isValidStoreEpoch(e)) {
      return dataLoss(path +
                      ": not a store epoch (32 hex digits); restore it from a backup, or "
                      "remove it to give this store a new identity (agents then adopt its "
                      "latest version whatever they hold)");
    }
    return e;
  }
  if (bytes.status().code() != StatusCode::kNotFound) return bytes.status();
  TQ_ASSIGN_OR_RETURN(std::string e, newStoreEpoch());
  TQ_RETURN_IF_ERROR_CTX(writeFileAtomic(path, e + "\n", 0644), "create the store epoch");
  TQ_LOG(kInfo, "policy store %s: new store epoch %s", data_dir.c_str(), e.c_str());
  return e;
}

}  // namespace

std::string recordFileName(uint64_t version) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%020" PRIu64 "%s", version, kSuffix.data());
  return buf;
}

Result<std::unique_ptr<PolicyStore>> openFileStore(const std::string& data_dir,
                                                   FileStoreOptions options) {
  if (data_dir.empty()) return invalidArgument("policy store: empty data directory");
  struct stat st {};
  if (::stat(data_dir.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
    return failedPrecondition("data directory " + data_dir + " exists and is not a directory");
  }
  if (options.retain_versions == 0) return invalidArgument("policy store: retain_versions is 0");
  const std::string dir = data_dir + "/versions";
  TQ_RETURN_IF_ERROR_CTX(checkWritableDir(dir), "data directory " + data_dir);
  TQ_ASSIGN_OR_RETURN(std::string epoch, loadOrCreateEpoch(data_dir));
  auto store = std::make_unique<FileStore>(dir, std::move(epoch), options);
  TQ_RETURN_IF_ERROR_CTX(store->load(), "open policy store " + dir);
  return std::unique_ptr<PolicyStore>(std::move(store));
}

}  // namespace tq::policy
