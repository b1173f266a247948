#include "common/mapped_file.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include <gtest/gtest.h>

#include "common/fd.h"

namespace tq {
namespace {

// True while [p, p + len) is mapped (mincore fails with ENOMEM on unmapped pages).
bool isMapped(void* p, size_t len) {
  unsigned char vec[4];
  return ::mincore(p, len, vec) == 0;
}

Fd memfdOfSize(size_t size) {
  Fd fd(::memfd_create("tq-mapped-file-test", MFD_CLOEXEC));
  EXPECT_TRUE(fd.valid());
  EXPECT_EQ(::ftruncate(fd.get(), static_cast<off_t>(size)), 0);
  return fd;
}

TEST(MappedFileTest, MapsSharedBytesAndUnmapsOnDestruction) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  Fd fd = memfdOfSize(page);
  void* addr = nullptr;
  {
    auto m = MappedFile::map(fd.get(), page, PROT_READ | PROT_WRITE, MAP_SHARED, "test memfd");
    ASSERT_TRUE(m.ok()) << m.status().message();
    EXPECT_TRUE(m->valid());
    EXPECT_EQ(m->size(), page);
    addr = m->data();
    std::memcpy(m->as<char>(), "hello", 5);
    char back[5];
    ASSERT_EQ(::pread(fd.get(), back, 5, 0), 5);
    EXPECT_EQ(std::memcmp(back, "hello", 5), 0);
    EXPECT_TRUE(isMapped(addr, page));
  }
  EXPECT_FALSE(isMapped(addr, page));
}

TEST(MappedFileTest, MoveTransfersTheMapping) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  Fd fd = memfdOfSize(page);
  auto m = MappedFile::map(fd.get(), page, PROT_READ, MAP_SHARED, "test memfd");
  ASSERT_TRUE(m.ok());
  void* addr = m->data();
  MappedFile a = std::move(*m);
  EXPECT_FALSE(m->valid());  // NOLINT(bugprone-use-after-move): the moved-from state is the test
  MappedFile b;
  b = std::move(a);
  EXPECT_EQ(b.data(), addr);
  EXPECT_EQ(b.size(), page);
  fd.reset();  // the mapping outlives its fd
  EXPECT_TRUE(isMapped(addr, page));
  b.reset();
  EXPECT_FALSE(b.valid());
  EXPECT_FALSE(isMapped(addr, page));
}

TEST(MappedFileTest, ErrorsNameTheObject) {
  auto bad = MappedFile::map(-1, 4096, PROT_READ, MAP_SHARED, "the tenant file /x");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("mmap the tenant file /x"), std::string::npos)
      << bad.status().message();
  auto empty = MappedFile::map(-1, 0, PROT_READ, MAP_SHARED, "empty");
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tq
