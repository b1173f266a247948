#include "policy/store.h"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "common/file_util.h"
#include "common/thread_annotations.h"
#include "policy/wire.h"

namespace tq::policy {
namespace {

constexpr char kMagic[8] = {'T', 'Q', 'P', 'O', 'L', 'R', 'E', 'C'};
constexpr uint32_t kFormat = 1;
constexpr size_t kHeaderBytes = 28;
constexpr size_t kTrailerBytes = 4;

template <typename T>
void putLe(std::string& out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

template <typename T>
T getLe(std::string_view in, size_t off) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) {
    v |= static_cast<T>(static_cast<unsigned char>(in[off + i])) << (8 * i);
  }
  return v;
}

// The memory store is for tests: a kernel without random bytes ends them with the reason.
std::string epochOrAbort() {
  Result<std::string> e = newStoreEpoch();
  if (!e.ok()) {
    std::fprintf(stderr, "memory store: %s\n", e.status().message().c_str());
    std::abort();
  }
  return *e;
}

class MemoryStore final : public PolicyStore {
 public:
  explicit MemoryStore(uint64_t retain) : retain_(retain) {}

  Result<PolicyRecord> append(PolicyRecord record) override {
    MutexLock lock(mu_);
    if (record.version != next_) {
      return failedPrecondition("append version " + std::to_string(record.version) +
                                ": the store expects version " + std::to_string(next_));
    }
    // Same checksum as a durable backend would report.
    record.checksum = encodedChecksum(encodeRecord(record));
    records_[record.version] = record;
    ++next_;
    records_.erase(records_.begin(),
                   records_.upper_bound(newestRetiredVersion(record.version, retain_)));
    return record;
  }
  std::optional<PolicyRecord> latest() const override {
    MutexLock lock(mu_);
    if (records_.empty()) return std::nullopt;
    return records_.rbegin()->second;
  }
  Result<PolicyRecord> get(uint64_t version) const override {
    MutexLock lock(mu_);
    auto it = records_.find(version);
    if (it == records_.end())
      return notFound("policy version " + std::to_string(version) + " does not exist");
    return it->second;
  }
  std::vector<VersionSummary> list() const override {
    MutexLock lock(mu_);
    std::vector<VersionSummary> out;
    for (auto it = records_.rbegin(); it != records_.rend(); ++it) {
      out.push_back(summarize(it->second));
    }
    return out;
  }
  uint64_t nextVersion() const override {
    MutexLock lock(mu_);
    return next_;
  }
  uint64_t corruptRecords() const override { return 0; }
  std::string epoch() const override { return epoch_; }
  std::string describe() const override { return "memory"; }

 private:
  const uint64_t retain_;
  const std::string epoch_ = epochOrAbort();
  mutable Mutex mu_;
  std::map<uint64_t, PolicyRecord> records_ TQ_GUARDED_BY(mu_);
  uint64_t next_ TQ_GUARDED_BY(mu_) = 1;
};

}  // namespace

std::string encodeRecord(const PolicyRecord& record) {
  tenantqos::v1::PolicySnapshot snap = toSnapshot(record);
  snap.clear_checksum();
  std::string payload;
  snap.SerializeToString(&payload);
  std::string out;
  out.reserve(kHeaderBytes + payload.size() + kTrailerBytes);
  out.append(kMagic, sizeof kMagic);
  putLe<uint32_t>(out, kFormat);
  putLe<uint64_t>(out, record.version);
  putLe<uint64_t>(out, payload.size());
  out += payload;
  putLe<uint32_t>(out, crc32c(out));
  return out;
}

uint32_t encodedChecksum(std::string_view bytes) {
  return bytes.size() < kTrailerBytes ? 0 : getLe<uint32_t>(bytes, bytes.size() - kTrailerBytes);
}

Result<PolicyRecord> decodeRecord(std::string_view bytes) {
  if (bytes.size() < kHeaderBytes + kTrailerBytes) {
    return dataLoss("record is truncated (" + std::to_string(bytes.size()) + " bytes)");
  }
  if (std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) return dataLoss("bad magic");
  uint32_t format = getLe<uint32_t>(bytes, 8);
  if (format != kFormat) return dataLoss("unknown record format " + std::to_string(format));
  uint64_t version = getLe<uint64_t>(bytes, 12);
  uint64_t length = getLe<uint64_t>(bytes, 20);
  if (length != bytes.size() - kHeaderBytes - kTrailerBytes) {
    return dataLoss("payload length " + std::to_string(length) +
                    " does not match the record size " + std::to_string(bytes.size()));
  }
  uint32_t stored = getLe<uint32_t>(bytes, bytes.size() - kTrailerBytes);
  uint32_t actual = crc32c(bytes.substr(0, bytes.size() - kTrailerBytes));
  if (stored != actual) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "checksum mismatch (stored %08x, computed %08x)", stored,
                  actual);
    return dataLoss(buf);
  }
  tenantqos::v1::PolicySnapshot snap;
  if (!snap.ParseFromArray(bytes.data() + kHeaderBytes, static_cast<int>(length))) {
    return dataLoss("payload is not a valid tenantqos.v1.PolicySnapshot");
  }
  if (snap.version() != version) {
    return dataLoss("payload version " + std::to_string(snap.version()) +
                    " differs from the header's " + std::to_string(version));
  }
  PolicyRecord r = fromSnapshot(snap);
  r.checksum = stored;
  return r;
}

VersionSummary summarize(const PolicyRecord& r) {
  VersionSummary v;
  v.version = r.version;
  v.applied_at_unix_ms = r.applied_at_unix_ms;
  v.applied_by = r.applied_by;
  v.tenants = static_cast<uint32_t>(r.policy.tenants.size());
  v.rollback_of = r.rollback_of;
  v.checksum = r.checksum;
  v.applied_by_groups = r.applied_by_groups;
  v.source_name = r.source_name;
  v.diff_summary = r.diff_summary;
  return v;
}

void VersionIndex::addIntact(PolicyRecord record) {
  const uint64_t v = record.version;
  sawVersion(v);
  summaries_[v] = summarize(record);
  if (!latest_ || v >= latest_->version) latest_ = std::move(record);
}

void VersionIndex::addCorrupt(uint64_t version, std::string problem) {
  sawVersion(version);
  VersionSummary& s = summaries_[version];
  s = VersionSummary{};
  s.version = version;
  s.intact = false;
  s.problem = std::move(problem);
}

bool VersionIndex::erase(uint64_t version) { return summaries_.erase(version) > 0; }

void VersionIndex::eraseThrough(uint64_t version) {
  summaries_.erase(summaries_.begin(), summaries_.upper_bound(version));
}

void VersionIndex::clear() {
  summaries_.clear();
  latest_.reset();
}

std::vector<uint64_t> VersionIndex::versions() const {
  std::vector<uint64_t> out;
  out.reserve(summaries_.size());
  for (const auto& [v, s] : summaries_) out.push_back(v);
  return out;
}

std::vector<VersionSummary> VersionIndex::list() const {
  std::vector<VersionSummary> out;
  out.reserve(summaries_.size());
  for (auto it = summaries_.rbegin(); it != summaries_.rend(); ++it) out.push_back(it->second);
  return out;
}

uint64_t VersionIndex::corrupt() const {
  return static_cast<uint64_t>(std::count_if(summaries_.begin(), summaries_.end(),
                                             [](const auto& e) { return !e.second.intact; }));
}

std::optional<Result<PolicyRecord>> VersionIndex::answerWithoutReading(uint64_t version) const {
  if (latest_ && latest_->version == version) return Result<PolicyRecord>(*latest_);
  auto it = summaries_.find(version);
  if (it == summaries_.end()) {
    return Result<PolicyRecord>(
        notFound("policy version " + std::to_string(version) + " does not exist"));
  }
  if (!it->second.intact) {
    return Result<PolicyRecord>(dataLoss("policy version " + std::to_string(version) +
                                         " is corrupt: " + it->second.problem));
  }
  return std::nullopt;
}

std::optional<PolicyRecord> IndexedPolicyStore::latest() const {
  MutexLock lock(mu_);
  return index_.latest();
}

std::vector<VersionSummary> IndexedPolicyStore::list() const {
  MutexLock lock(mu_);
  return index_.list();
}

uint64_t IndexedPolicyStore::nextVersion() const {
  MutexLock lock(mu_);
  return index_.next();
}

uint64_t IndexedPolicyStore::corruptRecords() const {
  MutexLock lock(mu_);
  return index_.corrupt();
}

Result<std::string> newStoreEpoch() {
  unsigned char raw[16];
  size_t got = 0;
  while (got < sizeof raw) {
    const ssize_t n = ::getrandom(raw + got, sizeof raw - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (n < 0 && errno != EINTR) {
      // ENOSYS (a kernel before 3.17), EPERM (a seccomp profile), EFAULT: no retry helps.
      return internalError(std::string("new policy store epoch: getrandom: ") +
                           std::strerror(errno) + " (no random bytes from the kernel)");
    }
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char b : raw) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

bool isValidStoreEpoch(std::string_view s) {
  if (s.size() != 32) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::unique_ptr<PolicyStore> makeMemoryStore(uint64_t retain_versions) {
  return std::make_unique<MemoryStore>(retain_versions);
}

}  // namespace tq::policy
