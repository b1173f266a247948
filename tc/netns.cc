#include "tc/netns.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <utility>

#include "common/log.h"

namespace tq::tc {

std::string netnsPath(std::string_view name) {
  if (name.find('/') != std::string_view::npos) return std::string(name);
  return "/run/netns/" + std::string(name);
}

Result<ScopedNetns> ScopedNetns::enter(std::string_view name) {
  const std::string path = netnsPath(name);
  Fd saved(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
  if (!saved.valid()) return errnoStatus("open /proc/thread-self/ns/net");
  const Fd target(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!target.valid()) return errnoStatus("open network namespace " + path);
  if (::setns(target.get(), CLONE_NEWNET) != 0) {
    return errnoStatus("enter network namespace " + path);
  }
  return ScopedNetns(std::move(saved));
}

ScopedNetns::~ScopedNetns() {
  if (!saved_.valid()) return;
  if (::setns(saved_.get(), CLONE_NEWNET) != 0) {
    TQ_LOG(kError, "cannot return to the original network namespace: errno %d; aborting", errno);
    std::abort();
  }
}

}  // namespace tq::tc
