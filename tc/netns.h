// Entering a named network namespace for the current thread, and leaving it again.
//
// The agent normally runs in the namespace it manages (or is started with `ip netns exec`);
// tests and the benchmark create namespaces and use this to open netlink sockets inside them
// (openTcNetlink does it for you with NetlinkOptions::netns).
//
// setns(CLONE_NEWNET) changes the namespace of the calling THREAD only. Sockets keep the
// namespace they were created in, so a netlink socket opened inside stays valid afterwards.
// Thread-safety: the object belongs to the thread that created it; move it, do not share it.
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include "common/fd.h"
#include "common/status.h"

namespace tq::tc {

// "/run/netns/<name>" for a plain name (as `ip netns add` makes); a name containing '/' is taken
// as a path (e.g. "/proc/1234/ns/net").
std::string netnsPath(std::string_view name);

class ScopedNetns {
 public:
  // Enters the namespace; kNotFound if it does not exist.
  static Result<ScopedNetns> enter(std::string_view name);

  ScopedNetns(ScopedNetns&& other) noexcept = default;
  ScopedNetns& operator=(ScopedNetns&&) = delete;
  ScopedNetns(const ScopedNetns&) = delete;
  // Returns to the original namespace. Failing to return is a broken invariant (the thread would
  // silently act on the wrong namespace), so it aborts the process with a log line.
  ~ScopedNetns();

 private:
  explicit ScopedNetns(Fd saved) : saved_(std::move(saved)) {}
  Fd saved_;  // the namespace to return to; invalid once moved from
};

}  // namespace tq::tc
