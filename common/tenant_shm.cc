#include "common/tenant_shm.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/log.h"

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010  // Linux 5.1
#endif

namespace tq {
namespace {

using shm::ParamsPage;
using shm::SharedPage;

constexpr int kParamsSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL;
constexpr int kSharedSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

constexpr uint64_t kMaxBacklogBytes = 1ull << 40;           // 1 TiB
constexpr uint64_t kSlackBytes = 4ull << 30;                // 4 GiB: one huge message
constexpr int64_t kSlackNs = 1'000'000'000;                 // clock skew between readings
constexpr int64_t kMaxOpenIntervalNs = 86'400'000'000'000;  // one day
constexpr int64_t kFirstReadingNs = 60'000'000'000;         // see collect()

Result<Fd> makeMemfd(const std::string& name, size_t size) {
  Fd fd(::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) return errnoStatus("memfd_create " + name);
  if (::ftruncate(fd.get(), static_cast<off_t>(size)) != 0) {
    return errnoStatus("size memfd " + name);
  }
  return fd;
}

// The open interval that started at `since` as seen at `now`: 0 when none, nullopt when the
// value is implausible.
std::optional<uint64_t> openInterval(int64_t since, int64_t now_ns) {
  if (since == 0) return 0;
  // CLOCK_MONOTONIC readings are positive; `now_ns - since` cannot overflow past this check.
  if (since < 0 || since > now_ns + kSlackNs || now_ns - since > kMaxOpenIntervalNs) {
    return std::nullopt;
  }
  return since < now_ns ? static_cast<uint64_t>(now_ns - since) : 0;
}

void addProblem(std::string* problems, const std::string& p) {
  if (!problems->empty()) *problems += "; ";
  *problems += p;
}

// Accepts cur - *base when it is in [0, bound]; otherwise records why and resynchronises.
uint64_t counterDelta(uint64_t* base, uint64_t cur, uint64_t bound, const char* name,
                      std::string* problems) {
  const uint64_t prev = *base;
  *base = cur;
  if (cur < prev) {
    addProblem(problems, std::string(name) + " went backwards (" + std::to_string(prev) + " -> " +
                             std::to_string(cur) + ")");
    return 0;
  }
  if (cur - prev > bound) {
    addProblem(problems, std::string(name) + " jumped by " + std::to_string(cur - prev) +
                             " (at most " + std::to_string(bound) + " possible)");
    return 0;
  }
  return cur - prev;
}

// Saturating a x b for the bounds above.
uint64_t satMulAdd(uint64_t a, uint64_t b, uint64_t add) {
  const unsigned __int128 v = static_cast<unsigned __int128>(a) * b + add;
  return v > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(v);
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

}  // namespace

bool isDns1123Label(std::string_view name) {
  if (name.empty() || name.size() > 63) return false;
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(name.front()) || !alnum(name.back())) return false;
  return std::all_of(name.begin(), name.end(), [&](char c) { return alnum(c) || c == '-'; });
}

// ---------------------------------------------------------------------------------------------
// Readers

SlotSample slotFromBytes(const uint8_t* page, size_t size, uint32_t index) {
  shm::Slot raw;
  std::memset(static_cast<void*>(&raw), 0, sizeof(raw));
  const size_t off = offsetof(SharedPage, slots) + static_cast<size_t>(index) * sizeof(shm::Slot);
  if (index < shm::kMaxSlots && off < size) {
    std::memcpy(static_cast<void*>(&raw), page + off, std::min(sizeof(raw), size - off));
  }
  SlotSample s;
  s.pid = raw.pid.load(std::memory_order_relaxed);
  s.tx_bytes = raw.tx_bytes.load(std::memory_order_relaxed);
  s.rx_bytes = raw.rx_bytes.load(std::memory_order_relaxed);
  s.throttled_ns = raw.throttled_ns.load(std::memory_order_relaxed);
  s.throttled_since_ns = raw.throttled_since_ns.load(std::memory_order_relaxed);
  s.backlog_bytes = raw.backlog_bytes.load(std::memory_order_relaxed);
  s.heartbeat_ns = raw.heartbeat_ns.load(std::memory_order_relaxed);
  s.throttle_events = raw.throttle_events.load(std::memory_order_relaxed);
  s.busy_ns = raw.busy_ns.load(std::memory_order_relaxed);
  s.busy_since_ns = raw.busy_since_ns.load(std::memory_order_relaxed);
  return s;
}

SlotCheck checkSlot(SlotBaseline* base, const SlotSample& cur, int64_t now_ns, int64_t elapsed_ns,
                    uint64_t max_rate) {
  SlotCheck c;
  const uint64_t elapsed = elapsed_ns > 0 ? static_cast<uint64_t>(elapsed_ns) : 0;
  // bytes: 2 x max_rate x elapsed + slack, computed without overflow
  const uint64_t byte_bound =
      satMulAdd(max_rate / 500'000'000 + 1, elapsed, kSlackBytes);  // ~2 x rate x s
  const uint64_t time_bound = elapsed + static_cast<uint64_t>(kSlackNs);
  c.tx_bytes = counterDelta(&base->tx_bytes, cur.tx_bytes, byte_bound, "tx_bytes", &c.problems);
  c.rx_bytes = counterDelta(&base->rx_bytes, cur.rx_bytes, byte_bound, "rx_bytes", &c.problems);

  // Times: the closed total plus the open interval. The sum may dip when an interval closes
  // between the plugin's two stores; a dip within the time bound is not a problem, just 0.
  auto timeDelta = [&](uint64_t* b, uint64_t closed, int64_t since, const char* name) {
    const std::optional<uint64_t> open = openInterval(since, now_ns);
    if (!open) {
      addProblem(&c.problems, std::string(name) + "_since " + std::to_string(since) +
                                  " is not a time in the past day");
    }
    const unsigned __int128 sum = static_cast<unsigned __int128>(closed) + open.value_or(0);
    const uint64_t total = sum > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(sum);
    const uint64_t prev = *b;
    *b = total;
    if (total >= prev && total - prev <= time_bound) return total - prev;
    if (total < prev && prev - total <= time_bound) return uint64_t{0};
    addProblem(&c.problems, std::string(name) + " moved from " + std::to_string(prev) + " to " +
                                std::to_string(total) + " ns in " + std::to_string(elapsed) +
                                " ns");
    return uint64_t{0};
  };
  c.throttled_ns =
      timeDelta(&base->throttled_ns, cur.throttled_ns, cur.throttled_since_ns, "throttled");
  c.busy_ns = timeDelta(&base->busy_ns, cur.busy_ns, cur.busy_since_ns, "busy");
  c.throttled_now = cur.throttled_since_ns != 0 && openInterval(cur.throttled_since_ns, now_ns);
  if (cur.backlog_bytes > kMaxBacklogBytes) {
    addProblem(&c.problems, "backlog_bytes " + std::to_string(cur.backlog_bytes) + " > 1 TiB");
  } else {
    c.backlog_bytes = cur.backlog_bytes;
  }
  return c;
}

std::optional<TenantParams> readParams(const shm::Params& p, uint64_t* seq_out) {
  TenantParams v;
  for (int attempt = 0; attempt < kSeqlockRetries; ++attempt) {
    const uint64_t s1 = p.seq.load(std::memory_order_acquire);
    if (s1 & 1) {
      // The agent is mid-update (a handful of stores); hint the CPU and retry.
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
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// Agent side

Result<std::shared_ptr<TenantShm>> TenantShm::create(const std::string& tenant,
                                                     int64_t now_wall_ns) {
  if (!isDns1123Label(tenant)) {
    return invalidArgument("tenant name \"" + tenant + "\" is not a DNS-1123 label");
  }
  TQ_ASSIGN_OR_RETURN(Fd params_fd, makeMemfd("tenantqos-params-" + tenant, sizeof(ParamsPage)));
  TQ_ASSIGN_OR_RETURN(Fd shared_fd, makeMemfd("tenantqos-shared-" + tenant, sizeof(SharedPage)));
  // The agent's writable mapping must exist before F_SEAL_FUTURE_WRITE: it is the only one.
  void* m =
      ::mmap(nullptr, sizeof(ParamsPage), PROT_READ | PROT_WRITE, MAP_SHARED, params_fd.get(), 0);
  if (m == MAP_FAILED) return errnoStatus("map the parameters of tenant " + tenant);
  auto* page = static_cast<ParamsPage*>(m);
  page->header.layout_version = shm::kLayoutVersion;
  page->header.params_size = sizeof(ParamsPage);
  page->header.shared_size = sizeof(SharedPage);
  page->header.max_slots = shm::kMaxSlots;
  std::strncpy(page->header.tenant, tenant.c_str(), shm::kTenantNameBytes - 1);
  page->header.create_wall_ns = static_cast<uint64_t>(now_wall_ns);
  page->header.agent_pid.store(static_cast<uint64_t>(::getpid()), std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  page->header.magic = shm::kMagic;
  if (::fcntl(params_fd.get(), F_ADD_SEALS, kParamsSeals) != 0) {
    Status s = errnoStatus("seal the parameters of tenant " + tenant);
    ::munmap(m, sizeof(ParamsPage));
    return s;
  }
  if (::fcntl(shared_fd.get(), F_ADD_SEALS, kSharedSeals) != 0) {
    Status s = errnoStatus("seal the shared memory of tenant " + tenant);
    ::munmap(m, sizeof(ParamsPage));
    return s;
  }
  return std::shared_ptr<TenantShm>(
      new TenantShm(tenant, std::move(params_fd), std::move(shared_fd), page));
}

TenantShm::~TenantShm() { ::munmap(page_, sizeof(ParamsPage)); }

void TenantShm::publish(const TenantParams& params) { writeParams(page_->params, params); }

TenantParams TenantShm::published() const {
  // Only this process writes the page, and only from the thread calling published(): a read
  // never races a write, so it never fails.
  return tq::readParams(page_->params).value_or(TenantParams{});
}

void TenantShm::heartbeat(int64_t now_ns) {
  page_->header.agent_heartbeat_ns.store(static_cast<uint64_t>(now_ns), std::memory_order_relaxed);
}

std::optional<uint32_t> TenantShm::acquireSlot(const PeerIdentity& peer) {
  std::lock_guard<std::mutex> lock(mu_);
  for (uint32_t i = 0; i < shm::kMaxSlots; ++i) {
    SlotEntry& e = slots_[i];
    if (e.state != SlotState::kFree) continue;
    // Zero the slot the process will count from. A write through the fd, not a mapping: the
    // agent never maps tenant-writable memory.
    static const shm::Slot kZero{};
    const off_t off = static_cast<off_t>(offsetof(SharedPage, slots) + i * sizeof(shm::Slot));
    if (::pwrite(shared_fd_.get(), &kZero, sizeof(kZero), off) !=
        static_cast<ssize_t>(sizeof(kZero))) {
      TQ_LOG(kWarn, "tenant %s: zero slot %u for pid %d: %s", tenant_.c_str(), i,
             static_cast<int>(peer.pid), std::strerror(errno));
      continue;
    }
    e = SlotEntry{SlotState::kAttached, peer, SlotBaseline{}, false};
    return i;
  }
  slotless_.push_back(peer);
  return std::nullopt;
}

void TenantShm::releaseSlot(std::optional<uint32_t> slot, pid_t pid) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!slot) {
    auto it = std::find_if(slotless_.begin(), slotless_.end(),
                           [&](const PeerIdentity& p) { return p.pid == pid; });
    if (it != slotless_.end()) slotless_.erase(it);
    return;
  }
  if (*slot < shm::kMaxSlots && slots_[*slot].state == SlotState::kAttached) {
    slots_[*slot].state = SlotState::kDraining;
  }
}

std::vector<Attachment> TenantShm::attachments() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Attachment> out;
  for (uint32_t i = 0; i < shm::kMaxSlots; ++i) {
    if (slots_[i].state == SlotState::kAttached) out.push_back({tenant_, i, slots_[i].peer});
  }
  for (const PeerIdentity& p : slotless_) out.push_back({tenant_, shm::kMaxSlots, p});
  return out;
}

bool TenantShm::idle() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!slotless_.empty()) return false;
  return std::all_of(std::begin(slots_), std::end(slots_),
                     [](const SlotEntry& e) { return e.state == SlotState::kFree; });
}

TenantUsage TenantShm::collect(int64_t now_ns, uint64_t max_rate) {
  // One copy of the whole page: the tenant may rewrite it meanwhile, so every value is checked,
  // and a pread cannot fault (the size is sealed; a hole reads as zeros).
  static_assert(sizeof(SharedPage) <= 16384);
  uint8_t buf[sizeof(SharedPage)];
  const ssize_t n = ::pread(shared_fd_.get(), buf, sizeof(buf), 0);
  const size_t got = n > 0 ? static_cast<size_t>(n) : 0;

  std::lock_guard<std::mutex> lock(mu_);
  // The first reading of a tenant's memory has no previous one: bound it as a minute's worth
  // (the agent reads within a period of creating the memory, so a tenant gains nothing there).
  const int64_t elapsed = last_collect_ns_ != 0 ? now_ns - last_collect_ns_ : kFirstReadingNs;
  last_collect_ns_ = now_ns;
  TenantUsage u;
  for (uint32_t i = 0; i < shm::kMaxSlots; ++i) {
    SlotEntry& e = slots_[i];
    if (e.state == SlotState::kFree) continue;
    const SlotCheck c = checkSlot(&e.base, slotFromBytes(buf, got, i), now_ns, elapsed, max_rate);
    if (!c.problems.empty()) {
      totals_.rejected_readings++;
      if (!e.logged) {
        e.logged = true;
        TQ_LOG(kWarn,
               "tenant %s: pid %d (uid %u) slot %u: %s; not counted (logged once per "
               "process)",
               tenant_.c_str(), static_cast<int>(e.peer.pid), static_cast<unsigned>(e.peer.uid), i,
               c.problems.c_str());
      }
    }
    totals_.tx_bytes += c.tx_bytes;
    totals_.rx_bytes += c.rx_bytes;
    totals_.throttled_ns += c.throttled_ns;
    totals_.busy_ns += c.busy_ns;
    if (e.state == SlotState::kDraining) {
      e = SlotEntry{};  // its last counters are in: free for the next process
      continue;
    }
    u.backlog_bytes += c.backlog_bytes;
    u.processes++;
    u.throttled_processes += c.throttled_now ? 1 : 0;
    u.slots.push_back({i, e.peer.pid, c.backlog_bytes, c.throttled_now});
  }
  u.processes += static_cast<uint32_t>(slotless_.size());
  u.tx_bytes = totals_.tx_bytes;
  u.rx_bytes = totals_.rx_bytes;
  u.throttled_ns = totals_.throttled_ns;
  u.busy_ns = totals_.busy_ns;
  u.rejected_readings = totals_.rejected_readings;
  return u;
}

// ---------------------------------------------------------------------------------------------
// Plugin side

Result<std::unique_ptr<TenantShmView>> TenantShmView::map(Fd params_fd, Fd shared_fd,
                                                          uint32_t slot) {
  auto check = [](int fd, size_t size, int seals, const char* what) -> Status {
    struct stat st {};
    if (::fstat(fd, &st) != 0) return errnoStatus(std::string("fstat the agent's ") + what);
    if (static_cast<uint64_t>(st.st_size) < size) {
      return failedPrecondition(std::string("the agent's ") + what + " has " +
                                std::to_string(st.st_size) + " bytes, layout v" +
                                std::to_string(shm::kLayoutVersion) + " needs " +
                                std::to_string(size));
    }
    const int have = ::fcntl(fd, F_GET_SEALS);
    if (have < 0 || (have & seals) != seals) {
      return failedPrecondition(std::string("the agent's ") + what +
                                " is not sealed against resizing and writes (seals " +
                                std::to_string(have) + ")");
    }
    return okStatus();
  };
  TQ_RETURN_IF_ERROR(check(params_fd.get(), sizeof(ParamsPage),
                           F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE, "parameters"));
  TQ_RETURN_IF_ERROR(
      check(shared_fd.get(), sizeof(SharedPage), F_SEAL_SHRINK | F_SEAL_GROW, "shared memory"));
  void* p = ::mmap(nullptr, sizeof(ParamsPage), PROT_READ, MAP_SHARED, params_fd.get(), 0);
  if (p == MAP_FAILED) return errnoStatus("map the agent's parameters");
  auto* params = static_cast<const ParamsPage*>(p);
  const shm::Header& h = params->header;
  if (h.magic != shm::kMagic || h.layout_version != shm::kLayoutVersion ||
      h.params_size != sizeof(ParamsPage) || h.shared_size != sizeof(SharedPage)) {
    ::munmap(p, sizeof(ParamsPage));
    return failedPrecondition("the agent's parameters are not layout v" +
                              std::to_string(shm::kLayoutVersion) + " (version " +
                              std::to_string(h.layout_version) + ")");
  }
  const std::string tenant(h.tenant, strnlen(h.tenant, shm::kTenantNameBytes));
  void* s =
      ::mmap(nullptr, sizeof(SharedPage), PROT_READ | PROT_WRITE, MAP_SHARED, shared_fd.get(), 0);
  if (s == MAP_FAILED) {
    Status st = errnoStatus("map the shared memory of tenant " + tenant);
    ::munmap(p, sizeof(ParamsPage));
    return st;
  }
  auto* shared = static_cast<SharedPage*>(s);
  shm::Slot* sl = slot < shm::kMaxSlots ? &shared->slots[slot] : nullptr;
  if (sl != nullptr) sl->pid.store(static_cast<uint64_t>(::getpid()), std::memory_order_relaxed);
  // The mappings keep the memory alive; the fds are not needed any more.
  return std::unique_ptr<TenantShmView>(new TenantShmView(params, shared, sl, tenant));
}

TenantShmView::~TenantShmView() {
  ::munmap(const_cast<shm::ParamsPage*>(params_), sizeof(ParamsPage));
  ::munmap(shared_, sizeof(SharedPage));
}

}  // namespace tq
