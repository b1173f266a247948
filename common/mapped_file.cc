#include "common/mapped_file.h"

#include <sys/mman.h>

#include <string>

namespace tq {

Result<MappedFile> MappedFile::map(int fd, size_t size, int prot, int flags, std::string_view what,
                                   off_t offset) {
  if (size == 0) return invalidArgument("mmap " + std::string(what) + ": zero length");
  void* p = ::mmap(nullptr, size, prot, flags, fd, offset);
  if (p == MAP_FAILED) return errnoStatus("mmap " + std::string(what));
  return MappedFile(p, size);
}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    reset();
    addr_ = o.addr_;
    size_ = o.size_;
    o.addr_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

void MappedFile::reset() noexcept {
  if (addr_ != nullptr) ::munmap(addr_, size_);
  addr_ = nullptr;
  size_ = 0;
}

}  // namespace tq
