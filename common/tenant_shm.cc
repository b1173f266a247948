#include "common/tenant_shm.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <ctime>

#include "common/file_util.h"
#include "common/log.h"

namespace tq {
namespace {

using shm::TenantFile;

int64_t monoNow() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}
uint64_t wallNow() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000 + static_cast<uint64_t>(ts.tv_nsec);
}

std::string tenantsDir(const std::string& run_dir) { return run_dir + "/tenants"; }

// Non-blocking OFD write lock on one byte; true if taken. OFD locks belong to the open file
// description, not the process, so two Readers in one process (or a Reader and a Writer) do
// conflict, which is what slot exclusivity needs.
bool tryLockByte(int fd, uint64_t offset) {
  struct flock fl{};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = static_cast<off_t>(offset);
  fl.l_len = 1;
  return ::fcntl(fd, F_OFD_SETLK, &fl) == 0;
}
void unlockByte(int fd, uint64_t offset) {
  struct flock fl{};
  fl.l_type = F_UNLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = static_cast<off_t>(offset);
  fl.l_len = 1;
  ::fcntl(fd, F_OFD_SETLK, &fl);
}
// True if some open file description holds a lock on the byte (a live claimant).
bool byteLocked(int fd, uint64_t offset) {
  struct flock fl{};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = static_cast<off_t>(offset);
  fl.l_len = 1;
  if (::fcntl(fd, F_OFD_GETLK, &fl) != 0) return true;  // unknown: assume alive
  return fl.l_type != F_UNLCK;
}

Status checkHeader(const TenantFile* f, const std::string& path, size_t size) {
  if (size != sizeof(TenantFile)) {
    return failedPrecondition(path + ": size " + std::to_string(size) + " bytes, layout v" +
                              std::to_string(shm::kLayoutVersion) + " needs " +
                              std::to_string(sizeof(TenantFile)));
  }
  if (f->header.magic != shm::kMagic) return failedPrecondition(path + ": bad magic");
  if (f->header.layout_version != shm::kLayoutVersion) {
    return failedPrecondition(path + ": layout version " +
                              std::to_string(f->header.layout_version) + ", this build reads v" +
                              std::to_string(shm::kLayoutVersion));
  }
  if (f->header.file_size != sizeof(TenantFile) || f->header.max_slots != shm::kMaxSlots) {
    return failedPrecondition(path + ": inconsistent header sizes");
  }
  return okStatus();
}

Result<TenantFile*> mapFile(int fd, const std::string& path) {
  void* p = ::mmap(nullptr, sizeof(TenantFile), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return errnoStatus("mmap " + path);
  return static_cast<TenantFile*>(p);
}

// Opens and validates an existing file. kNotFound if absent.
Result<std::pair<int, TenantFile*>> openExisting(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return errnoStatus("open " + path);
  struct stat st{};
  if (::fstat(fd, &st) != 0) {
    Status s = errnoStatus("stat " + path);
    ::close(fd);
    return s;
  }
  if (static_cast<size_t>(st.st_size) < sizeof(shm::Header)) {
    ::close(fd);
    return failedPrecondition(path + ": truncated (" + std::to_string(st.st_size) + " bytes)");
  }
  if (static_cast<size_t>(st.st_size) != sizeof(TenantFile)) {
    ::close(fd);
    return failedPrecondition(path + ": size " + std::to_string(st.st_size) +
                              " bytes, layout v" + std::to_string(shm::kLayoutVersion) +
                              " needs " + std::to_string(sizeof(TenantFile)) +
                              " (written by another version?)");
  }
  auto mapped = mapFile(fd, path);
  if (!mapped.ok()) {
    ::close(fd);
    return std::move(mapped).status();
  }
  Status s = checkHeader(*mapped, path, static_cast<size_t>(st.st_size));
  if (!s.ok()) {
    ::munmap(*mapped, sizeof(TenantFile));
    ::close(fd);
    return s;
  }
  return std::make_pair(fd, *mapped);
}

void writeParams(shm::Params& p, const TenantParams& v) {
  const uint64_t seq = p.seq.load(std::memory_order_relaxed);
  p.seq.store(seq + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  p.policy_version.store(v.policy_version, std::memory_order_relaxed);
  p.rate_bytes_per_second.store(v.rate_bytes_per_second, std::memory_order_relaxed);
  p.burst_bytes.store(v.burst_bytes, std::memory_order_relaxed);
  p.guarantee_bytes_per_second.store(v.guarantee_bytes_per_second, std::memory_order_relaxed);
  p.limit_bytes_per_second.store(v.limit_bytes_per_second, std::memory_order_relaxed);
  p.weight.store(v.weight, std::memory_order_relaxed);
  p.service_level.store(v.service_level, std::memory_order_relaxed);
  p.dscp.store(v.dscp, std::memory_order_relaxed);
  p.flags.store((v.paced ? shm::kFlagPaced : 0) | (v.deleted ? shm::kFlagDeleted : 0),
                std::memory_order_relaxed);
  const size_t n = std::min<size_t>(v.traffic_classes.size(), shm::kMaxTrafficClasses);
  p.num_traffic_classes.store(static_cast<uint32_t>(n), std::memory_order_relaxed);
  for (size_t i = 0; i < shm::kMaxTrafficClasses; ++i) {
    p.traffic_classes[i].store(i < n ? v.traffic_classes[i] : 0, std::memory_order_relaxed);
  }
  p.seq.store(seq + 2, std::memory_order_release);
}

TenantParams readParamsFrom(const shm::Params& p, uint64_t* seq_out) {
  TenantParams v;
  for (;;) {
    const uint64_t s1 = p.seq.load(std::memory_order_acquire);
    if (s1 & 1) {
      // The writer is mid-update (a handful of stores); yield the CPU hint and retry.
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
      continue;
    }
    v.policy_version = p.policy_version.load(std::memory_order_relaxed);
    v.rate_bytes_per_second = p.rate_bytes_per_second.load(std::memory_order_relaxed);
    v.burst_bytes = p.burst_bytes.load(std::memory_order_relaxed);
    v.guarantee_bytes_per_second = p.guarantee_bytes_per_second.load(std::memory_order_relaxed);
    v.limit_bytes_per_second = p.limit_bytes_per_second.load(std::memory_order_relaxed);
    v.weight = p.weight.load(std::memory_order_relaxed);
    v.service_level = p.service_level.load(std::memory_order_relaxed);
    v.dscp = p.dscp.load(std::memory_order_relaxed);
    const uint32_t flags = p.flags.load(std::memory_order_relaxed);
    v.paced = (flags & shm::kFlagPaced) != 0;
    v.deleted = (flags & shm::kFlagDeleted) != 0;
    const uint32_t n =
        std::min(p.num_traffic_classes.load(std::memory_order_relaxed), shm::kMaxTrafficClasses);
    v.traffic_classes.resize(n);
    for (uint32_t i = 0; i < n; ++i) {
      v.traffic_classes[i] = p.traffic_classes[i].load(std::memory_order_relaxed);
    }
    std::atomic_thread_fence(std::memory_order_acquire);
    if (p.seq.load(std::memory_order_relaxed) == s1) {
      if (seq_out != nullptr) *seq_out = s1;
      return v;
    }
  }
}

SlotUsage readSlot(const shm::Slot& s, uint32_t index, int64_t now_ns) {
  SlotUsage u;
  u.index = index;
  u.owner = s.owner.load(std::memory_order_acquire);
  u.tx_bytes = s.tx_bytes.load(std::memory_order_relaxed);
  u.rx_bytes = s.rx_bytes.load(std::memory_order_relaxed);
  u.throttled_ns = s.throttled_ns.load(std::memory_order_relaxed);
  const int64_t since = s.throttled_since_ns.load(std::memory_order_relaxed);
  if (since != 0 && now_ns > since) {
    u.throttled_now = true;
    u.throttled_ns += static_cast<uint64_t>(now_ns - since);
  }
  u.backlog_bytes = s.backlog_bytes.load(std::memory_order_relaxed);
  u.heartbeat_ns = s.heartbeat_ns.load(std::memory_order_relaxed);
  u.throttle_events = s.throttle_events.load(std::memory_order_relaxed);
  u.busy_ns = s.busy_ns.load(std::memory_order_relaxed);
  const int64_t busy_since = s.busy_since_ns.load(std::memory_order_relaxed);
  if (busy_since != 0 && now_ns > busy_since) u.busy_ns += static_cast<uint64_t>(now_ns - busy_since);
  return u;
}

}  // namespace

bool isDns1123Label(std::string_view name) {
  if (name.empty() || name.size() > 63) return false;
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(name.front()) || !alnum(name.back())) return false;
  return std::all_of(name.begin(), name.end(), [&](char c) { return alnum(c) || c == '-'; });
}

std::string tenantShmPath(const std::string& run_dir, const std::string& tenant) {
  return tenantsDir(run_dir) + "/" + tenant;
}

// ---------------------------------------------------------------------------------------------
// Writer

Result<std::unique_ptr<TenantShmWriter>> TenantShmWriter::openOrCreate(const std::string& run_dir,
                                                                       const std::string& tenant,
                                                                       uint32_t mode) {
  if (!isDns1123Label(tenant)) {
    return invalidArgument("tenant name \"" + tenant + "\" is not a DNS-1123 label");
  }
  const std::string dir = tenantsDir(run_dir);
  TQ_RETURN_IF_ERROR_CTX(makeDirs(dir, 0755), "create run directory");
  const std::string path = tenantShmPath(run_dir, tenant);

  auto existing = openExisting(path);
  if (existing.ok()) {
    auto [fd, file] = *existing;
    if (std::strncmp(file->header.tenant, tenant.c_str(), shm::kTenantNameBytes) == 0) {
      return std::unique_ptr<TenantShmWriter>(new TenantShmWriter(path, tenant, fd, file));
    }
    ::munmap(file, sizeof(TenantFile));
    ::close(fd);
    TQ_LOG(kWarn, "%s: names another tenant; recreating it", path.c_str());
  } else if (existing.status().code() != StatusCode::kNotFound) {
    TQ_LOG(kWarn, "%s: %s; recreating it (attached processes keep the old copy until restart)",
           path.c_str(), existing.status().message().c_str());
  }

  // Build the new file under a temporary name, publish it with rename().
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return errnoStatus("create " + tmp);
  if (::fchmod(fd, mode) != 0 || ::ftruncate(fd, sizeof(TenantFile)) != 0) {
    Status s = errnoStatus("size " + tmp);
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  }
  auto mapped = mapFile(fd, tmp);
  if (!mapped.ok()) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return std::move(mapped).status();
  }
  TenantFile* f = *mapped;  // zero-filled by ftruncate
  f->header.layout_version = shm::kLayoutVersion;
  f->header.file_size = sizeof(TenantFile);
  f->header.max_slots = shm::kMaxSlots;
  std::strncpy(f->header.tenant, tenant.c_str(), shm::kTenantNameBytes - 1);
  f->header.create_wall_ns.store(wallNow(), std::memory_order_relaxed);
  f->header.agent_pid.store(static_cast<uint64_t>(::getpid()), std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  f->header.magic = shm::kMagic;
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    Status s = errnoStatus("rename " + tmp + " to " + path);
    ::munmap(f, sizeof(TenantFile));
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  }
  return std::unique_ptr<TenantShmWriter>(new TenantShmWriter(path, tenant, fd, f));
}

TenantShmWriter::~TenantShmWriter() {
  if (file_ != nullptr) ::munmap(file_, sizeof(TenantFile));
  if (fd_ >= 0) ::close(fd_);
}

void TenantShmWriter::publish(const TenantParams& params) { writeParams(file_->params, params); }

TenantParams TenantShmWriter::published() const { return readParamsFrom(file_->params, nullptr); }

void TenantShmWriter::heartbeat(int64_t now_ns) {
  file_->header.agent_heartbeat_ns.store(static_cast<uint64_t>(now_ns), std::memory_order_relaxed);
  file_->header.agent_pid.store(static_cast<uint64_t>(::getpid()), std::memory_order_relaxed);
}

TenantUsage TenantShmWriter::usage(int64_t now_ns) const {
  TenantUsage u;
  u.tx_bytes = file_->header.retired_tx_bytes.load(std::memory_order_relaxed);
  u.rx_bytes = file_->header.retired_rx_bytes.load(std::memory_order_relaxed);
  u.throttled_ns = file_->header.retired_throttled_ns.load(std::memory_order_relaxed);
  for (uint32_t i = 0; i < shm::kMaxSlots; ++i) {
    const shm::Slot& s = file_->slots[i];
    if (s.owner.load(std::memory_order_acquire) == 0) continue;
    SlotUsage su = readSlot(s, i, now_ns);
    u.tx_bytes += su.tx_bytes;
    u.rx_bytes += su.rx_bytes;
    u.throttled_ns += su.throttled_ns;
    u.backlog_bytes += su.backlog_bytes;
    u.busy_ns += su.busy_ns;
    u.processes++;
    u.throttled_processes += su.throttled_now ? 1 : 0;
    u.slots.push_back(su);
  }
  return u;
}

int TenantShmWriter::reclaimDeadSlots() {
  int reclaimed = 0;
  const int64_t now = monoNow();
  for (uint32_t i = 0; i < shm::kMaxSlots; ++i) {
    shm::Slot& s = file_->slots[i];
    if (s.owner.load(std::memory_order_acquire) == 0) continue;
    // A live owner holds the lock for its whole life; getting it means the owner is gone.
    if (!tryLockByte(fd_, shm::kSlotLockBase + i)) continue;
    if (s.owner.load(std::memory_order_acquire) != 0) {
      SlotUsage su = readSlot(s, i, now);
      auto& h = file_->header;
      h.retired_tx_bytes.fetch_add(su.tx_bytes, std::memory_order_relaxed);
      h.retired_rx_bytes.fetch_add(su.rx_bytes, std::memory_order_relaxed);
      h.retired_throttled_ns.fetch_add(su.throttled_ns, std::memory_order_relaxed);
      s.tx_bytes.store(0, std::memory_order_relaxed);
      s.rx_bytes.store(0, std::memory_order_relaxed);
      s.throttled_ns.store(0, std::memory_order_relaxed);
      s.throttled_since_ns.store(0, std::memory_order_relaxed);
      s.backlog_bytes.store(0, std::memory_order_relaxed);
      s.heartbeat_ns.store(0, std::memory_order_relaxed);
      s.throttle_events.store(0, std::memory_order_relaxed);
      s.claim_wall_ns.store(0, std::memory_order_relaxed);
      s.busy_ns.store(0, std::memory_order_relaxed);
      s.busy_since_ns.store(0, std::memory_order_relaxed);
      s.owner.store(0, std::memory_order_release);
      ++reclaimed;
    }
    unlockByte(fd_, shm::kSlotLockBase + i);
  }
  return reclaimed;
}

int TenantShmWriter::liveProcesses() const {
  int n = 0;
  for (uint32_t i = 0; i < shm::kMaxSlots; ++i) {
    if (file_->slots[i].owner.load(std::memory_order_acquire) != 0 &&
        byteLocked(fd_, shm::kSlotLockBase + i)) {
      ++n;
    }
  }
  return n;
}

Result<bool> TenantShmWriter::removeIfUnused() {
  TenantParams p = published();
  if (!p.deleted) {
    p.deleted = true;
    publish(p);
  }
  if (liveProcesses() > 0) return false;
  if (::unlink(path_.c_str()) != 0 && errno != ENOENT) return errnoStatus("unlink " + path_);
  return true;
}

// ---------------------------------------------------------------------------------------------
// Reader

Result<std::unique_ptr<TenantShmReader>> TenantShmReader::attach(const std::string& run_dir,
                                                                 const std::string& tenant) {
  if (!isDns1123Label(tenant)) {
    return invalidArgument("tenant name \"" + tenant + "\" is not a DNS-1123 label");
  }
  const std::string path = tenantShmPath(run_dir, tenant);
  TQ_ASSIGN_OR_RETURN(auto opened, openExisting(path));
  return std::unique_ptr<TenantShmReader>(
      new TenantShmReader(path, tenant, opened.first, opened.second));
}

TenantShmReader::~TenantShmReader() {
  shm::Slot* s = slot_.load(std::memory_order_acquire);
  if (s != nullptr) {
    // Keep counters: the agent folds them into the retired totals when it reclaims the slot
    // (it needs our lock released, which close() below does).
    s->throttled_since_ns.store(0, std::memory_order_relaxed);
    s->backlog_bytes.store(0, std::memory_order_relaxed);
    s->busy_since_ns.store(0, std::memory_order_relaxed);
  }
  if (file_ != nullptr) ::munmap(file_, sizeof(TenantFile));
  if (fd_ >= 0) ::close(fd_);
}

TenantParams TenantShmReader::readParams(uint64_t* seq_out) const {
  return readParamsFrom(file_->params, seq_out);
}

shm::Slot* TenantShmReader::claimSlot() {
  if (shm::Slot* s = slot_.load(std::memory_order_acquire)) return s;
  std::lock_guard<std::mutex> lock(claim_mu_);
  if (shm::Slot* s = slot_.load(std::memory_order_acquire)) return s;
  const uint64_t me = static_cast<uint64_t>(::getpid());
  for (uint32_t i = 0; i < shm::kMaxSlots; ++i) {
    shm::Slot& s = file_->slots[i];
    if (s.owner.load(std::memory_order_acquire) != 0) continue;
    if (!tryLockByte(fd_, shm::kSlotLockBase + i)) continue;
    uint64_t expected = 0;
    // Holding the lock makes us the only claimant; a non-zero owner here is a dead process the
    // agent has not reclaimed yet: leave it for the agent (it owns the retired totals).
    if (s.owner.compare_exchange_strong(expected, me, std::memory_order_acq_rel)) {
      s.claim_wall_ns.store(wallNow(), std::memory_order_relaxed);
      s.heartbeat_ns.store(static_cast<uint64_t>(monoNow()), std::memory_order_relaxed);
      slot_.store(&s, std::memory_order_release);
      return &s;
    }
    unlockByte(fd_, shm::kSlotLockBase + i);
  }
  return nullptr;
}

// ---------------------------------------------------------------------------------------------

std::vector<std::string> listTenantFiles(const std::string& run_dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(tenantsDir(run_dir).c_str());
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (isDns1123Label(name)) out.push_back(name);  // skips ".", "..", "*.tmp.*"
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<std::string> tenantForTrafficClass(const std::string& run_dir, int traffic_class) {
  for (const std::string& t : listTenantFiles(run_dir)) {
    auto opened = openExisting(tenantShmPath(run_dir, t));
    if (!opened.ok()) continue;
    auto [fd, file] = *opened;
    TenantParams p = readParamsFrom(file->params, nullptr);
    ::munmap(file, sizeof(TenantFile));
    ::close(fd);
    if (p.deleted) continue;
    if (std::find(p.traffic_classes.begin(), p.traffic_classes.end(), traffic_class) !=
        p.traffic_classes.end()) {
      return t;
    }
  }
  return std::nullopt;
}

}  // namespace tq
