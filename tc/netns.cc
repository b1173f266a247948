#include "tc/netns.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "common/log.h"

namespace tq::tc {

std::string netnsPath(std::string_view name) {
  if (name.find('/') != std::string_view::npos) return std::string(name);
  return "/run/netns/" + std::string(name);
}

Result<ScopedNetns> ScopedNetns::enter(std::string_view name) {
  const std::string path = netnsPath(name);
  int saved = ::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  if (saved < 0) return errnoStatus("open /proc/thread-self/ns/net");
  int target = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (target < 0) {
    Status st = errnoStatus("open network namespace " + path);
    ::close(saved);
    return st;
  }
  if (::setns(target, CLONE_NEWNET) != 0) {
    Status st = errnoStatus("enter network namespace " + path);
    ::close(target);
    ::close(saved);
    return st;
  }
  ::close(target);
  return ScopedNetns(saved);
}

ScopedNetns::~ScopedNetns() {
  if (saved_fd_ < 0) return;
  if (::setns(saved_fd_, CLONE_NEWNET) != 0) {
    TQ_LOG(kError, "cannot return to the original network namespace: errno %d; aborting", errno);
    std::abort();
  }
  ::close(saved_fd_);
}

}  // namespace tq::tc
