#include "common/fd.h"

#include <fcntl.h>
#include <unistd.h>

#include <utility>

#include <gtest/gtest.h>

namespace tq {
namespace {

bool isOpen(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

int makePipe(int* other) {
  int p[2];
  EXPECT_EQ(::pipe2(p, O_CLOEXEC), 0);
  *other = p[1];
  return p[0];
}

TEST(FdTest, ClosesOnDestruction) {
  int w;
  const int r = makePipe(&w);
  {
    Fd fd(r);
    EXPECT_TRUE(fd.valid());
    EXPECT_EQ(fd.get(), r);
  }
  EXPECT_FALSE(isOpen(r));
  ::close(w);
}

TEST(FdTest, MoveTransfersOwnership) {
  int w;
  const int r = makePipe(&w);
  Fd a(r);
  Fd b(std::move(a));
  EXPECT_FALSE(a.valid());  // NOLINT(bugprone-use-after-move): the moved-from state is the test
  EXPECT_EQ(b.get(), r);
  Fd c(w);
  c = std::move(b);  // closes w, takes r
  EXPECT_FALSE(isOpen(w));
  EXPECT_TRUE(isOpen(r));
  c = Fd();
  EXPECT_FALSE(isOpen(r));
}

TEST(FdTest, ReleaseGivesUpOwnership) {
  int w;
  const int r = makePipe(&w);
  int released;
  {
    Fd fd(r);
    released = fd.release();
    EXPECT_FALSE(fd.valid());
  }
  EXPECT_EQ(released, r);
  EXPECT_TRUE(isOpen(r));
  ::close(r);
  ::close(w);
}

TEST(FdTest, CloseReportsErrorsWithTheName) {
  EXPECT_TRUE(Fd().close("nothing").ok());
  int w;
  const int r = makePipe(&w);
  Fd fd(r);
  EXPECT_TRUE(fd.close("pipe").ok());
  EXPECT_FALSE(fd.valid());
  EXPECT_FALSE(isOpen(r));
  ::close(w);
  Fd stale(w);  // already closed: close(2) says EBADF
  const Status st = stale.close("the stale fd");
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("close the stale fd"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace tq
