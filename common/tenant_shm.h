// Both sides of the per-tenant shared-memory contract (layout: common/shm_layout.h).
//
//   TenantShmWriter — the agent: creates/opens <run_dir>/tenants/<tenant>, publishes parameters
//                     under the seqlock, reads usage, reclaims slots of dead processes, removes
//                     the file of a deleted tenant once no live process holds a slot.
//   TenantShmReader — a plugin process: attaches read-write (for the bucket and its slot),
//                     reads parameters, claims one slot for its lifetime.
//
// Thread-safety: a Writer is used by one thread (the agent's reconcile thread). A Reader may be
// shared by all threads of a process: readParams/bucket access are lock-free; claimSlot is
// internally synchronised.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/shm_layout.h"
#include "common/status.h"
#include "common/token_bucket.h"

namespace tq {

// The agent-written parameters of one tenant, as plain values.
struct TenantParams {
  uint64_t policy_version = 0;
  uint64_t rate_bytes_per_second = 0;  // allocated (bucket refill) rate
  uint64_t burst_bytes = 256 * 1024;
  uint64_t guarantee_bytes_per_second = 0;
  uint64_t limit_bytes_per_second = 0;
  uint32_t weight = 1;
  uint32_t service_level = 0;
  uint32_t dscp = 0;
  bool paced = true;
  bool deleted = false;
  std::vector<int32_t> traffic_classes;  // at most shm::kMaxTrafficClasses

  BucketConfig bucket() const { return {rate_bytes_per_second, burst_bytes}; }
  friend bool operator==(const TenantParams&, const TenantParams&) = default;
};

// Counters of one claimed slot (a live or not-yet-reclaimed process).
struct SlotUsage {
  uint32_t index = 0;
  uint64_t owner = 0;
  uint64_t tx_bytes = 0;
  uint64_t rx_bytes = 0;
  uint64_t throttled_ns = 0;  // including the currently open throttled interval
  bool throttled_now = false;
  uint64_t backlog_bytes = 0;
  uint64_t heartbeat_ns = 0;
  uint64_t throttle_events = 0;
  uint64_t busy_ns = 0;  // sends in flight, including the currently open interval
};

// A tenant's totals on this node: live slots plus retired (reclaimed) ones. Monotonic.
struct TenantUsage {
  uint64_t tx_bytes = 0;
  uint64_t rx_bytes = 0;
  uint64_t throttled_ns = 0;
  uint64_t busy_ns = 0;        // live slots only (a demand signal, not an accounting total)
  uint64_t backlog_bytes = 0;  // sum over live slots (current demand signal)
  uint32_t processes = 0;      // claimed slots
  uint32_t throttled_processes = 0;
  std::vector<SlotUsage> slots;
};

// DNS-1123 label: 1-63 of [a-z0-9-], starting and ending alphanumeric. Also keeps tenant names
// safe as file names.
bool isDns1123Label(std::string_view name);

std::string tenantShmPath(const std::string& run_dir, const std::string& tenant);

class TenantShmWriter {
 public:
  // Opens the tenant's file if it exists with this layout version (keeping bucket and slots, so
  // an agent restart does not disturb running jobs), else creates it atomically (a reader never
  // sees a half-initialised file). `mode` applies to a newly created file.
  static Result<std::unique_ptr<TenantShmWriter>> openOrCreate(const std::string& run_dir,
                                                               const std::string& tenant,
                                                               uint32_t mode = 0660);
  ~TenantShmWriter();
  TenantShmWriter(const TenantShmWriter&) = delete;
  TenantShmWriter& operator=(const TenantShmWriter&) = delete;

  // Seqlock write; readers never observe a mix of old and new fields.
  void publish(const TenantParams& params);
  TenantParams published() const;

  void heartbeat(int64_t now_ns);
  TenantUsage usage(int64_t now_ns) const;

  // Reclaims slots whose owning process is gone (its OFD lock is free). Returns how many.
  int reclaimDeadSlots();
  // Number of slots held by live processes.
  int liveProcesses() const;

  const std::string& path() const { return path_; }
  const std::string& tenant() const { return tenant_; }
  shm::TenantFile* file() { return file_; }

  // Removes the tenant's file if no live process holds a slot; returns true if removed.
  // Marks it deleted first so attached plugins stop using stale parameters.
  Result<bool> removeIfUnused();

 private:
  TenantShmWriter(std::string path, std::string tenant, int fd, shm::TenantFile* file)
      : path_(std::move(path)), tenant_(std::move(tenant)), fd_(fd), file_(file) {}
  std::string path_;
  std::string tenant_;
  int fd_ = -1;
  shm::TenantFile* file_ = nullptr;
};

class TenantShmReader {
 public:
  // kNotFound when the file does not exist (the plugin then runs with env values);
  // kFailedPrecondition for a bad magic, version or size.
  static Result<std::unique_ptr<TenantShmReader>> attach(const std::string& run_dir,
                                                         const std::string& tenant);
  ~TenantShmReader();  // releases the slot (and its lock)
  TenantShmReader(const TenantShmReader&) = delete;
  TenantShmReader& operator=(const TenantShmReader&) = delete;

  // Consistent snapshot of the parameters. Cheap when unchanged: callers may keep the returned
  // sequence number and call paramsChanged(seq) on the hot path.
  TenantParams readParams(uint64_t* seq_out = nullptr) const;
  bool paramsChanged(uint64_t seq) const {
    return file_->params.seq.load(std::memory_order_acquire) != seq;
  }

  // Claims a slot for this process (idempotent). nullptr when all slots are taken.
  shm::Slot* claimSlot();
  shm::Slot* slot() const { return slot_.load(std::memory_order_acquire); }

  std::atomic<int64_t>& bucketState() { return file_->bucket.empty_at_ns; }
  const std::string& path() const { return path_; }
  const std::string& tenant() const { return tenant_; }

 private:
  TenantShmReader(std::string path, std::string tenant, int fd, shm::TenantFile* file)
      : path_(std::move(path)), tenant_(std::move(tenant)), fd_(fd), file_(file) {}
  std::string path_;
  std::string tenant_;
  int fd_ = -1;
  shm::TenantFile* file_ = nullptr;
  std::atomic<shm::Slot*> slot_{nullptr};
  std::mutex claim_mu_;
};

// Tenants that have a file in run_dir (sorted). Empty if the directory does not exist.
std::vector<std::string> listTenantFiles(const std::string& run_dir);
// The tenant whose published traffic classes contain `traffic_class`, if any.
std::optional<std::string> tenantForTrafficClass(const std::string& run_dir, int traffic_class);

}  // namespace tq
