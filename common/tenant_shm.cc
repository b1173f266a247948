#include "common/tenant_shm.h"

#include <fcntl.h>
#include <sys/mman.h>  // PROT_*, MAP_SHARED
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "common/thread_annotations.h"

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

void storeName(std::atomic<uint64_t> (&words)[shm::kBucketNameBytes / 8], const std::string& n) {
  char buf[shm::kBucketNameBytes] = {};
  std::memcpy(buf, n.data(), std::min(n.size(), sizeof(buf) - 1));
  for (size_t i = 0; i < shm::kBucketNameBytes / 8; ++i) {
    uint64_t w = 0;
    std::memcpy(&w, buf + 8 * i, 8);
    words[i].store(w, std::memory_order_relaxed);
  }
}

std::string loadName(const std::atomic<uint64_t> (&words)[shm::kBucketNameBytes / 8]) {
  char buf[shm::kBucketNameBytes + 1] = {};
  for (size_t i = 0; i < shm::kBucketNameBytes / 8; ++i) {
    const uint64_t w = words[i].load(std::memory_order_relaxed);
    std::memcpy(buf + 8 * i, &w, 8);
  }
  return std::string(buf, strnlen(buf, shm::kBucketNameBytes - 1));
}

void writeParams(shm::ParamsPage& page, const TenantParams& v) {
  shm::Params& p = page.params;
  const uint64_t seq = p.seq.load(std::memory_order_relaxed);
  p.seq.store(seq + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  p.policy_version.store(v.policy_version, std::memory_order_relaxed);
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
  const size_t nb = std::min<size_t>(v.buckets.size(), shm::kMaxBuckets);
  p.num_buckets.store(static_cast<uint32_t>(nb), std::memory_order_relaxed);
  for (size_t i = 0; i < shm::kMaxBuckets; ++i) {
    shm::BucketParams& bp = page.buckets[i];
    const BucketSpec none{shm::kScopeNone};
    const BucketSpec& b = i < nb ? v.buckets[i] : none;
    bp.key.store(b.scope == shm::kScopeNone ? 0 : b.key(), std::memory_order_relaxed);
    storeName(bp.name, b.name);
    bp.rate_bytes_per_second.store(b.rate_bytes_per_second, std::memory_order_relaxed);
    bp.depth_bytes.store(b.depth_bytes, std::memory_order_relaxed);
    bp.guarantee_bytes_per_second.store(b.guarantee_bytes_per_second, std::memory_order_relaxed);
    bp.limit_bytes_per_second.store(b.limit_bytes_per_second, std::memory_order_relaxed);
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

std::vector<BucketSpec> nodeBuckets(uint64_t rate, uint64_t depth, uint64_t limit) {
  std::vector<BucketSpec> v;
  for (shm::Direction d : {shm::kTx, shm::kRx}) {
    BucketSpec b;
    b.scope = shm::kScopeDevice;
    b.direction = d;
    b.rate_bytes_per_second = rate;
    b.depth_bytes = depth;
    b.limit_bytes_per_second = limit;
    v.push_back(b);
  }
  return v;
}

CounterSample countersFromBytes(const uint8_t* block, size_t size) {
  shm::Counters raw;
  std::memset(static_cast<void*>(&raw), 0, sizeof(raw));
  if (block != nullptr) std::memcpy(static_cast<void*>(&raw), block, std::min(sizeof(raw), size));
  CounterSample s;
  s.bytes = raw.bytes.load(std::memory_order_relaxed);
  s.backlog_bytes = raw.backlog_bytes.load(std::memory_order_relaxed);
  s.throttled_ns = raw.throttled_ns.load(std::memory_order_relaxed);
  s.throttled_since_ns = raw.throttled_since_ns.load(std::memory_order_relaxed);
  s.busy_ns = raw.busy_ns.load(std::memory_order_relaxed);
  s.busy_since_ns = raw.busy_since_ns.load(std::memory_order_relaxed);
  s.peer_wait_ns = raw.peer_wait_ns.load(std::memory_order_relaxed);
  s.throttle_events = raw.throttle_events.load(std::memory_order_relaxed);
  return s;
}

CounterSample countersFromPage(const uint8_t* page, size_t size, uint32_t bucket, uint32_t slot) {
  if (bucket >= shm::kMaxBuckets || slot >= shm::kMaxSlots) return {};
  const size_t off = offsetof(SharedPage, counters) +
                     (static_cast<size_t>(bucket) * shm::kMaxSlots + slot) * sizeof(shm::Counters);
  if (off >= size) return {};
  return countersFromBytes(page + off, size - off);
}

CounterCheck checkCounters(CounterBaseline* base, const CounterSample& cur, int64_t now_ns,
                           int64_t elapsed_ns, uint64_t max_rate) {
  CounterCheck c;
  const uint64_t elapsed = elapsed_ns > 0 ? static_cast<uint64_t>(elapsed_ns) : 0;
  // bytes: 2 x max_rate x elapsed + slack, computed without overflow
  const uint64_t byte_bound =
      satMulAdd(max_rate / 500'000'000 + 1, elapsed, kSlackBytes);  // ~2 x rate x s
  const uint64_t time_bound = elapsed + static_cast<uint64_t>(kSlackNs);
  c.bytes = counterDelta(&base->bytes, cur.bytes, byte_bound, "bytes", &c.problems);

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
  c.peer_wait_ns = timeDelta(&base->peer_wait_ns, cur.peer_wait_ns, 0, "peer_wait");
  c.throttled_now = cur.throttled_since_ns != 0 && openInterval(cur.throttled_since_ns, now_ns);
  if (cur.backlog_bytes > kMaxBacklogBytes) {
    addProblem(&c.problems, "backlog_bytes " + std::to_string(cur.backlog_bytes) + " > 1 TiB");
  } else {
    c.backlog_bytes = cur.backlog_bytes;
  }
  return c;
}

std::optional<TenantParams> readParams(const shm::ParamsPage& page, uint64_t* seq_out,
                                       std::optional<uint32_t> slot) {
  const shm::ProcessRates* row = nullptr;
  if (slot) row = *slot < shm::kMaxSlots ? &page.processes[*slot] : &page.slotless;
  const shm::Params& p = page.params;
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
    const uint32_t nb = std::min(p.num_buckets.load(std::memory_order_relaxed), shm::kMaxBuckets);
    v.buckets.resize(nb);
    for (uint32_t i = 0; i < nb; ++i) {
      const shm::BucketParams& bp = page.buckets[i];
      BucketSpec& b = v.buckets[i];
      const uint32_t key = bp.key.load(std::memory_order_relaxed);
      const shm::BucketScope scope = shm::keyScope(key);
      const bool valid =
          (scope == shm::kScopeDevice && shm::keyIndex(key) < shm::kMaxDeviceBuckets) ||
          (scope == shm::kScopeFabricLink && shm::keyIndex(key) < shm::kMaxLinkBuckets);
      b = BucketSpec{};
      b.scope = valid ? scope : shm::kScopeNone;
      b.index = valid ? shm::keyIndex(key) : 0;
      b.direction = valid ? shm::keyDirection(key) : shm::kTx;
      if (!valid) continue;
      b.name = loadName(bp.name);
      b.rate_bytes_per_second = bp.rate_bytes_per_second.load(std::memory_order_relaxed);
      b.depth_bytes = bp.depth_bytes.load(std::memory_order_relaxed);
      b.guarantee_bytes_per_second = bp.guarantee_bytes_per_second.load(std::memory_order_relaxed);
      b.limit_bytes_per_second = bp.limit_bytes_per_second.load(std::memory_order_relaxed);
    }
    v.process_rates.clear();
    if (row != nullptr) {
      v.process_rates.resize(nb);
      for (uint32_t i = 0; i < nb; ++i) {
        v.process_rates[i] = row->rate_bytes_per_second[i].load(std::memory_order_relaxed);
      }
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
  TQ_ASSIGN_OR_RETURN(MappedFile mapping,
                      MappedFile::map(params_fd.get(), sizeof(ParamsPage), PROT_READ | PROT_WRITE,
                                      MAP_SHARED, "the parameters of tenant " + tenant));
  auto* page = mapping.as<ParamsPage>();
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
    return errnoStatus("seal the parameters of tenant " + tenant);
  }
  if (::fcntl(shared_fd.get(), F_ADD_SEALS, kSharedSeals) != 0) {
    return errnoStatus("seal the shared memory of tenant " + tenant);
  }
  return std::shared_ptr<TenantShm>(
      new TenantShm(tenant, std::move(params_fd), std::move(shared_fd), std::move(mapping)));
}

TenantShm::~TenantShm() = default;

void TenantShm::publish(const TenantParams& params) {
  {
    MutexLock w(write_mu_);
    writeParams(*page_, params);
    published_ = params;
    published_.process_rates.clear();
  }
  MutexLock lock(mu_);
  num_buckets_ = static_cast<uint32_t>(std::min<size_t>(params.buckets.size(), shm::kMaxBuckets));
  for (uint32_t i = 0; i < shm::kMaxBuckets; ++i) {
    const uint32_t key = i < num_buckets_ && params.buckets[i].scope != shm::kScopeNone
                             ? params.buckets[i].key()
                             : 0;
    if (key != keys_[i]) {
      // Another bucket at this index now (the tenant's devices changed): its counters carry on
      // from what the processes wrote for the old one, so take them as the new baseline.
      if (keys_[i] != 0 && key != 0) resync_[i] = true;
      keys_[i] = key;
    }
  }
  if (totals_.buckets.size() < num_buckets_) totals_.buckets.resize(num_buckets_);
}

TenantParams TenantShm::published() const {
  MutexLock w(write_mu_);
  return published_;
}

void TenantShm::writeProcessRatesLocked() {
  shm::Params& p = page_->params;
  const uint64_t seq = p.seq.load(std::memory_order_relaxed);
  p.seq.store(seq + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  for (size_t r = 0; r <= shm::kMaxSlots; ++r) {
    shm::ProcessRates& row = r < shm::kMaxSlots ? page_->processes[r] : page_->slotless;
    for (size_t b = 0; b < shm::kMaxBuckets; ++b) {
      row.rate_bytes_per_second[b].store(rates_[r][b], std::memory_order_relaxed);
    }
  }
  p.seq.store(seq + 2, std::memory_order_release);
}

void TenantShm::publishProcessRates(const ProcessRateTable& rates) {
  MutexLock w(write_mu_);
  if (rates == rates_) return;
  rates_ = rates;
  writeProcessRatesLocked();
}

ProcessRateTable TenantShm::processRates() const {
  MutexLock w(write_mu_);
  return rates_;
}

void TenantShm::heartbeat(int64_t now_ns) {
  page_->header.agent_heartbeat_ns.store(static_cast<uint64_t>(now_ns), std::memory_order_relaxed);
}

bool TenantShm::zeroSlot(uint32_t i) {
  static const shm::Counters kZeroCounters{};
  static const shm::SlotHeader kZeroHeader{};
  auto zero = [&](const void* what, size_t len, size_t off) {
    return ::pwrite(shared_fd_.get(), what, len, static_cast<off_t>(off)) ==
           static_cast<ssize_t>(len);
  };
  if (!zero(&kZeroHeader, sizeof(kZeroHeader),
            offsetof(SharedPage, slots) + i * sizeof(shm::SlotHeader))) {
    return false;
  }
  for (uint32_t b = 0; b < shm::kMaxBuckets; ++b) {
    const size_t off = offsetof(SharedPage, counters) +
                       (static_cast<size_t>(b) * shm::kMaxSlots + i) * sizeof(shm::Counters);
    if (!zero(&kZeroCounters, sizeof(kZeroCounters), off)) return false;
  }
  return true;
}

std::optional<uint32_t> TenantShm::acquireSlot(const PeerIdentity& peer) {
  MutexLock lock(mu_);
  for (uint32_t i = 0; i < shm::kMaxSlots; ++i) {
    SlotEntry& e = slots_[i];
    if (e.state != SlotState::kFree) continue;
    // Zero the slot the process will count from. A write through the fd, not a mapping: the
    // agent never maps tenant-writable memory.
    // Zero the header and the counter blocks the process will count from. Writes through the
    // fd, not a mapping: the agent never maps tenant-writable memory.
    if (!zeroSlot(i)) {
      TQ_LOG(kWarn, "tenant %s: zero slot %u for pid %d: %s", tenant_.c_str(), i,
             static_cast<int>(peer.pid), std::strerror(errno));
      continue;
    }
    e = SlotEntry{};
    e.state = SlotState::kAttached;
    e.peer = peer;
    return i;
  }
  slotless_.push_back(peer);
  return std::nullopt;
}

void TenantShm::releaseSlot(std::optional<uint32_t> slot, pid_t pid) {
  MutexLock lock(mu_);
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
  MutexLock lock(mu_);
  std::vector<Attachment> out;
  for (uint32_t i = 0; i < shm::kMaxSlots; ++i) {
    if (slots_[i].state == SlotState::kAttached) out.push_back({tenant_, i, slots_[i].peer});
  }
  for (const PeerIdentity& p : slotless_) out.push_back({tenant_, shm::kMaxSlots, p});
  return out;
}

bool TenantShm::idle() const {
  MutexLock lock(mu_);
  if (!slotless_.empty()) return false;
  return std::all_of(std::begin(slots_), std::end(slots_),
                     [](const SlotEntry& e) { return e.state == SlotState::kFree; });
}

TenantUsage TenantShm::collect(int64_t now_ns, uint64_t max_rate) {
  MutexLock lock(mu_);
  // The first reading of a tenant's memory has no previous one: bound it as a minute's worth
  // (the agent reads within a period of creating the memory, so a tenant gains nothing there).
  const int64_t elapsed = last_collect_ns_ != 0 ? now_ns - last_collect_ns_ : kFirstReadingNs;
  last_collect_ns_ = now_ns;
  uint32_t slots_used = 0;
  for (uint32_t i = 0; i < shm::kMaxSlots; ++i) {
    if (slots_[i].state != SlotState::kFree) slots_used = i + 1;
  }
  if (totals_.buckets.size() < num_buckets_) totals_.buckets.resize(num_buckets_);
  TenantUsage u;
  u.buckets.resize(num_buckets_);
  bool throttled[shm::kMaxSlots] = {};
  std::vector<std::vector<CounterCheck>> readings(slots_used,
                                                  std::vector<CounterCheck>(num_buckets_));
  for (uint32_t b = 0; b < num_buckets_ && slots_used > 0; ++b) {
    if (keys_[b] == 0) continue;
    // One copy of this bucket's counter blocks: the tenant may rewrite them meanwhile, so every
    // value is checked, and a pread cannot fault (the size is sealed; a hole reads as zeros).
    uint8_t buf[shm::kMaxSlots * sizeof(shm::Counters)];
    const size_t off = offsetof(SharedPage, counters) +
                       static_cast<size_t>(b) * shm::kMaxSlots * sizeof(shm::Counters);
    const ssize_t n =
        ::pread(shared_fd_.get(), buf, slots_used * sizeof(shm::Counters), static_cast<off_t>(off));
    const size_t got = n > 0 ? static_cast<size_t>(n) : 0;
    const bool resync = resync_[b];
    resync_[b] = false;
    const bool tx = shm::keyDirection(keys_[b]) == shm::kTx;
    // The tenant's totals are its devices' (a byte that crosses a shared link is charged to the
    // link's bucket too, and would count twice).
    const bool device = shm::keyScope(keys_[b]) == shm::kScopeDevice;
    BucketUsage& total = totals_.buckets[b];
    for (uint32_t i = 0; i < slots_used; ++i) {
      SlotEntry& e = slots_[i];
      if (e.state == SlotState::kFree) continue;
      const size_t at = static_cast<size_t>(i) * sizeof(shm::Counters);
      const CounterSample sample = countersFromBytes(buf + at, got > at ? got - at : 0);
      CounterCheck c = checkCounters(&e.base[b], sample, now_ns, elapsed, max_rate);
      if (resync) {
        c = CounterCheck{};  // baselines moved to the values read; nothing counted
      } else if (!c.problems.empty()) {
        totals_.rejected_readings++;
        if (!e.logged) {
          e.logged = true;
          TQ_LOG(kWarn,
                 "tenant %s: pid %d (uid %u) slot %u, %s bucket %u: %s; not counted (logged once "
                 "per process)",
                 tenant_.c_str(), static_cast<int>(e.peer.pid), static_cast<unsigned>(e.peer.uid),
                 i, tx ? "tx" : "rx", b, c.problems.c_str());
        }
      }
      total.bytes += c.bytes;
      total.throttled_ns += c.throttled_ns;
      total.busy_ns += c.busy_ns;
      total.peer_wait_ns += c.peer_wait_ns;
      if (device) {
        (tx ? totals_.tx_bytes : totals_.rx_bytes) += c.bytes;
        if (tx) totals_.throttled_ns += c.throttled_ns;
      }
      if (e.state == SlotState::kDraining) continue;
      readings[i][b] = c;
      u.buckets[b].backlog_bytes += c.backlog_bytes;
      u.buckets[b].throttled_processes += c.throttled_now ? 1 : 0;
      if (tx && device && c.throttled_now) throttled[i] = true;
    }
  }
  for (uint32_t i = 0; i < slots_used; ++i) {
    SlotEntry& e = slots_[i];
    if (e.state == SlotState::kFree) continue;
    if (e.state == SlotState::kDraining) {
      e = SlotEntry{};  // its last counters are in: free for the next process
      continue;
    }
    u.processes++;
    u.throttled_processes += throttled[i] ? 1 : 0;
    u.slots.push_back({i, e.peer.pid, std::move(readings[i])});
  }
  u.slotless = static_cast<uint32_t>(slotless_.size());
  u.processes += u.slotless;
  for (uint32_t b = 0; b < num_buckets_; ++b) {
    BucketUsage& out = u.buckets[b];
    const BucketUsage& total = totals_.buckets[b];
    out.bytes = total.bytes;
    out.throttled_ns = total.throttled_ns;
    out.busy_ns = total.busy_ns;
    out.peer_wait_ns = total.peer_wait_ns;
    if (keys_[b] != 0 && shm::keyDirection(keys_[b]) == shm::kTx &&
        shm::keyScope(keys_[b]) == shm::kScopeDevice) {
      u.backlog_bytes += out.backlog_bytes;
    }
  }
  // The sums are counted as read, so they stay monotonic when the table changes.
  u.tx_bytes = totals_.tx_bytes;
  u.rx_bytes = totals_.rx_bytes;
  u.throttled_ns = totals_.throttled_ns;
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
  TQ_ASSIGN_OR_RETURN(MappedFile params_map,
                      MappedFile::map(params_fd.get(), sizeof(ParamsPage), PROT_READ, MAP_SHARED,
                                      "the agent's parameters"));
  const shm::Header& h = params_map.as<const ParamsPage>()->header;
  if (h.magic != shm::kMagic || h.layout_version != shm::kLayoutVersion ||
      h.params_size != sizeof(ParamsPage) || h.shared_size != sizeof(SharedPage)) {
    return failedPrecondition("the agent's parameters are not layout v" +
                              std::to_string(shm::kLayoutVersion) + " (version " +
                              std::to_string(h.layout_version) + ")");
  }
  const std::string tenant(h.tenant, strnlen(h.tenant, shm::kTenantNameBytes));
  TQ_ASSIGN_OR_RETURN(MappedFile shared_map,
                      MappedFile::map(shared_fd.get(), sizeof(SharedPage), PROT_READ | PROT_WRITE,
                                      MAP_SHARED, "the shared memory of tenant " + tenant));
  auto* shared = shared_map.as<SharedPage>();
  if (slot < shm::kMaxSlots) {
    shared->slots[slot].pid.store(static_cast<uint64_t>(::getpid()), std::memory_order_relaxed);
  } else {
    slot = shm::kMaxSlots;
  }
  // The mappings keep the memory alive; the fds are not needed any more.
  return std::unique_ptr<TenantShmView>(
      new TenantShmView(std::move(params_map), std::move(shared_map), slot, tenant));
}

TenantShmView::~TenantShmView() = default;

}  // namespace tq
