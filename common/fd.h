// tq::Fd: the one owning file descriptor of the tree (sockets, files, namespaces, memfds).
//
// Move-only; the destructor closes. close(2) errors are ignored there (nothing useful can be
// done about them on an error path); where a close error means lost data (a file just written),
// call close(what) and check its Status. Not thread-safe: one owner at a time, like the fd.
#pragma once

#include <string_view>

#include "common/status.h"

namespace tq {

class Fd {
 public:
  Fd() = default;
  // Takes ownership of `fd` (-1: none).
  explicit Fd(int fd) noexcept : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Gives up ownership without closing; the caller now closes the returned fd.
  [[nodiscard]] int release() noexcept {
    const int f = fd_;
    fd_ = -1;
    return f;
  }
  // Closes the owned fd (if any) and takes ownership of `fd`.
  void reset(int fd = -1) noexcept;
  // Closes now and reports close(2)'s failure as "close <what>: <errno text>". Ok if none owned.
  Status close(std::string_view what);

 private:
  int fd_ = -1;
};

}  // namespace tq
