// Which tenantqos-policyd replica runs the cluster allocator (policy/allocator_service.h):
// exactly one at a time, elected through etcd.
//
// With the file store there is one policyd and it is the allocator (makeSoleElection: always
// active, its term the wall-clock millisecond it started). With etcd the replicas campaign for
// one key, <prefix>allocator, held through an etcd lease:
//
//   campaign  grant a lease (the TTL asked for; etcd may raise it to its minimum), then ONE
//             transaction: if the key was never created (create revision 0), put it = this
//             replica's identity, attached to the lease; else read it. The winner's term is the
//             key's create revision: every new holder's term is larger than every older one's.
//   hold      a keepalive every TTL/3. The replica counts itself active only until
//               deadline = (when the last acknowledged keepalive, or the grant, was SENT)
//                          + the TTL granted - margin.
//             etcd expires the lease no earlier than one TTL after it RECEIVED that keepalive
//             (later than it was sent), and an etcd leader change extends leases, never
//             shortens them. So the key outlives every moment at which this replica counts
//             itself active, and no other replica can create the key before this one's deadline
//             has passed, whether it is cut off from etcd, paused, or its keepalives are lost:
//             it stops counting itself active on its own clock. (The margin absorbs the rate
//             difference of two CLOCK_MONOTONIC clocks over one TTL.)
//   lose      a keepalive answered with TTL <= 0 (the lease is gone), or the deadline passing
//             without an acknowledged keepalive: standby; the lease is revoked (best effort) and
//             the replica campaigns again.
//   wait      a standby watches the key and campaigns as soon as it is deleted (the holder's
//             lease expired or was revoked), and at least every few seconds anyway.
//   resign    stop() ends activity first, then revokes the lease: the key goes at once and a
//             standby takes over within a watch round trip.
//
// activeAt() compares the Clock with the deadline at every call: it is not a flag the election
// thread sets, so a replica whose election thread is stuck still stops counting itself active
// in time. Every transition is logged with its CLOCK_MONOTONIC bounds ("active ... from NS",
// "standby ... active until NS"), which tests/functional/etcd_ha_test.cc checks never overlap.
//
// Thread-safety: activeAt(), term(), holder() from any thread; start()/stop() from the owner;
// the change callback runs on the election thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/clock.h"
#include "common/status.h"
#include "policy/etcd_store.h"

namespace tq::policy {

// The deadline arithmetic of a lease holder, pure (unit-tested with a FakeClock's values).
class LeaseDeadline {
 public:
  explicit LeaseDeadline(int64_t margin_ns) : margin_ns_(margin_ns) {}
  // A grant or keepalive sent at `sent_ns` was acknowledged with `ttl_s` seconds: the lease
  // lives at least until sent_ns + ttl. The deadline only moves forward; ttl_s <= 0 ends it.
  void acknowledged(int64_t sent_ns, int64_t ttl_s);
  // Ends activity now (resign, lost lease): the deadline becomes min(deadline, now_ns).
  void end(int64_t now_ns);
  // A new lease: not active until acknowledged.
  void reset() { deadline_ns_ = INT64_MIN; }
  bool activeAt(int64_t now_ns) const { return now_ns < deadline_ns_; }
  int64_t deadlineNs() const { return deadline_ns_; }

 private:
  const int64_t margin_ns_;
  int64_t deadline_ns_ = INT64_MIN;
};

class AllocatorElection {
 public:
  // (active, term): became active with this term, or stepped down from it.
  using OnChange = std::function<void(bool active, uint64_t term)>;

  virtual ~AllocatorElection() = default;
  // Whether this replica is the active allocator at `now_ns` (the Clock the election was made
  // with). Once false for a term it never becomes true again for that term.
  virtual bool activeAt(int64_t now_ns) const = 0;
  // The term held while active (or the last one held); 0 before the first.
  virtual uint64_t term() const = 0;
  // The identity of the replica last seen holding the key ("" unknown), for messages.
  virtual std::string holder() const = 0;
  // "sole" or "etcd ... key K".
  virtual std::string describe() const = 0;
  // The callback must be set before start().
  virtual void start(OnChange on_change) = 0;
  // Steps down (resigns) and returns once the election thread has exited. Idempotent.
  virtual void stop() = 0;
};

// The file store's single policyd: active from start() until stop().
std::unique_ptr<AllocatorElection> makeSoleElection(Clock& clock, std::string identity);

struct EtcdElectionOptions {
  EtcdStoreOptions etcd;  // endpoints, TLS and prefix (the key is <prefix>allocator)
  std::string identity;   // the key's value: who holds it (logs, `holder()`)
  int64_t ttl_s = 2;      // the lease TTL asked for, seconds
  std::chrono::milliseconds margin{250};  // subtracted from every deadline
  // A standby campaigns at least this often even without a watch event.
  std::chrono::milliseconds recheck{5000};
};

Result<std::unique_ptr<AllocatorElection>> makeEtcdElection(EtcdElectionOptions options,
                                                            Clock& clock);

// The election key: <prefix>allocator.
std::string allocatorElectionKey(const std::string& prefix);

}  // namespace tq::policy
