// tq::MappedFile: the one owning memory mapping of the tree (mmap/munmap), move-only.
//
// It owns the mapping only, not the fd it was made from: the caller keeps (or closes) that in
// a tq::Fd; a mapping stays valid after its fd is closed. A mapping of a file that another
// party can truncate faults on access beyond the new end (SIGBUS): whoever maps a file written
// by someone else must seal it or bound its reads.
// Not thread-safe: one owner at a time; the mapped bytes themselves follow the caller's rules.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string_view>

#include "common/status.h"

namespace tq {

class MappedFile {
 public:
  MappedFile() = default;
  // mmap(nullptr, size, prot, flags, fd, offset). Errors read "mmap <what>: <errno text>".
  static Result<MappedFile> map(int fd, size_t size, int prot, int flags, std::string_view what,
                                off_t offset = 0);
  ~MappedFile() { reset(); }
  MappedFile(MappedFile&& o) noexcept : addr_(o.addr_), size_(o.size_) {
    o.addr_ = nullptr;
    o.size_ = 0;
  }
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  void* data() const { return addr_; }
  // The mapping as a T (the caller checked that size() covers one).
  template <typename T>
  T* as() const {
    return static_cast<T*>(addr_);
  }
  size_t size() const { return size_; }
  bool valid() const { return addr_ != nullptr; }
  // Unmaps now (if mapped).
  void reset() noexcept;

 private:
  MappedFile(void* addr, size_t size) : addr_(addr), size_(size) {}
  void* addr_ = nullptr;
  size_t size_ = 0;
};

}  // namespace tq
