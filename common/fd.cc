#include "common/fd.h"

#include <unistd.h>

#include <string>

namespace tq {

void Fd::reset(int fd) noexcept {
  // No retry on EINTR: Linux releases the descriptor even when close(2) is interrupted.
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

Status Fd::close(std::string_view what) {
  if (fd_ < 0) return okStatus();
  const int rc = ::close(release());
  if (rc != 0) return errnoStatus("close " + std::string(what));
  return okStatus();
}

}  // namespace tq
