// Fencing a tenant that used more than its buckets allowed (issue 23 item 9). Its bucket words
// are writable by each of its processes, and a process may not use the plugin at all; what the
// agent can see of the bytes is what the tenant's processes count (each its own slot's, checked
// and bounded: common/tenant_shm.h) and, in htb mode, the kernel's count of the tenant's class on
// the device (tx). Per tx bucket, every window of 1 s, the bytes either measure is compared
// with what the bucket allowed: its published rate over the window, plus a depth per process and
// a tolerance (5 % for the counters; 12 % for the kernel's count, which has every frame's headers
// and the ACKs of the tenant's receives). Receive buckets are not fenced: a send is counted as it
// is admitted (chunk by chunk), a receive only when it completes (a whole message at once), so a
// receiver's count in a window says nothing. A tenant over that owes the excess: its bucket's rate
// is lowered (to at least a quarter of the allocation) until it is paid back over the next
// window, so over a few windows the tenant gets no more than it was allocated, counted both
// ways. The debt is capped at 10 s of the allocation; it is forgiven when the tenant's last
// process leaves.
//
// What this cannot see: a process that lies low in its counters and sends outside the plugin on
// a path the kernel does not count (RDMA: docs/agent.md, "What a hostile tenant can and cannot
// do").
//
// Pure logic: no clock (the caller passes times), no I/O. Thread-safety: a value, owned by the
// reconcile thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace tq::agent {

class Fence {
 public:
  static constexpr int64_t kWindowNs = 1'000'000'000;
  static constexpr int64_t kMaxDebtNs = 10'000'000'000;  // of the allocation

  // One allocation period of a bucket, after the allocator: the period that ended allowed the
  // rate this returned last time, and its processes counted `counted` bytes in it. `allocated`:
  // the bucket rate for the next period; `depth`: the bucket's depth; `processes`: attached now.
  // Returns the rate to publish: `allocated`, or lower while a debt is repaid.
  uint64_t step(int64_t now_ns, int64_t period_ns, uint64_t allocated, uint64_t counted,
                uint64_t depth, uint32_t processes);
  // A new reading of the kernel's running count for the tenant's class on the device (tx, htb
  // mode; every stats refresh): compared with what the bucket allowed since the last reading.
  void kernelReading(uint64_t total, uint64_t depth, uint32_t processes);

  bool fenced() const { return debt_ > 0; }
  uint64_t debtBytes() const { return debt_; }
  uint64_t overrunBytesTotal() const { return overrun_total_; }
  // What the last window that ended in an overrun found (for the log), once.
  std::optional<std::string> takeReport();

 private:
  void owe(double over, uint64_t allocated, const std::string& what);

  int64_t window_start_ns_ = 0;
  double allowed_ = 0;  // bytes the bucket allowed since the window started
  uint64_t counted_ = 0;
  std::optional<uint64_t> kernel_last_;  // the kernel's count at its last reading
  double kernel_allowed_ = 0;            // bytes the bucket allowed since then
  uint64_t allocated_ = 0;
  uint64_t last_rate_ = 0;  // what step() returned last: what the period that ends allowed
  uint64_t debt_ = 0;
  uint64_t repay_rate_ = 0;  // bytes/s taken off the rate while the debt lasts
  uint64_t overrun_total_ = 0;
  std::optional<std::string> report_;
};

}  // namespace tq::agent
