// Loading libibverbs at run time. These run on the host, which has libibverbs but no RDMA: the
// loader must succeed there and report "no devices" as a normal, empty answer.
#include "ib/verbs.h"

#include <gtest/gtest.h>

namespace tq::ib {
namespace {

TEST(VerbsLoaderTest, LoadsDefaultLibrary) {
  auto v = Verbs::load();
  ASSERT_TRUE(v.ok()) << v.status().toString();
  EXPECT_EQ((*v)->library(), kDefaultVerbsLibrary);
  EXPECT_NE((*v)->fn().get_device_list, nullptr);
  EXPECT_NE((*v)->fn().modify_qp, nullptr);
  EXPECT_NE((*v)->fn().post_send, nullptr);  // the data path: verbs.h inlines
  EXPECT_NE((*v)->fn().poll_cq, nullptr);
  EXPECT_TRUE((*v)->hasDmabufMr());  // Debian 12 ships rdma-core 44
  auto names = (*v)->deviceNames();
  ASSERT_TRUE(names.ok()) << names.status().toString();
  // On the host: empty. In the rxe VM the same binary sees rxe0 and rxe1.
  for (const auto& n : *names) EXPECT_FALSE(n.empty());
}

TEST(VerbsLoaderTest, OpenUnknownDeviceNamesWhatExists) {
  auto v = Verbs::load();
  ASSERT_TRUE(v.ok());
  auto ctx = (*v)->openDevice("tqrxe-no-such-device");
  ASSERT_FALSE(ctx.ok());
  EXPECT_EQ(ctx.status().code(), StatusCode::kNotFound);
  EXPECT_NE(ctx.status().message().find("tqrxe-no-such-device"), std::string::npos);
  EXPECT_NE(ctx.status().message().find("devices:"), std::string::npos);
}

TEST(VerbsLoaderTest, MissingLibraryIsUnavailableWithDlerror) {
  auto v = Verbs::load("/nonexistent/libibverbs-tqrxe.so");
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(v.status().message().find("/nonexistent/libibverbs-tqrxe.so"), std::string::npos);
  EXPECT_NE(v.status().message().find("No such file"), std::string::npos);
}

TEST(VerbsLoaderTest, LibraryWithoutVerbsNamesTheMissingSymbol) {
  auto v = Verbs::load("libc.so.6");
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(v.status().message().find("missing symbol ibv_get_device_list"), std::string::npos);
}

TEST(VerbsLoaderTest, SharedInstanceIsLoadedOnce) {
  auto a = sharedVerbs();
  ASSERT_TRUE(a.ok()) << a.status().toString();
  auto b = sharedVerbs(kDefaultVerbsLibrary);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*a, *b);
  auto c = sharedVerbs("/some/other/libibverbs.so.1");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kFailedPrecondition);
}

TEST(VerbsLoaderTest, TableWithoutARequiredEntryIsRefusedByName) {
  auto loaded = Verbs::load();
  ASSERT_TRUE(loaded.ok()) << loaded.status().toString();
  VerbsFunctions fn = (*loaded)->fn();
  auto copy = Verbs::fromFunctions(fn, "copy");
  ASSERT_TRUE(copy.ok()) << copy.status().toString();
  EXPECT_EQ((*copy)->library(), "copy");
  fn.poll_cq = nullptr;
  auto v = Verbs::fromFunctions(fn, "fake");
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(v.status().message().find("poll_cq"), std::string::npos) << v.status().message();
}

TEST(VerbsLoaderTest, FatalAsyncEvents) {
  EXPECT_TRUE(isFatalAsyncEvent(IBV_EVENT_QP_FATAL));
  EXPECT_TRUE(isFatalAsyncEvent(IBV_EVENT_DEVICE_FATAL));
  EXPECT_TRUE(isFatalAsyncEvent(IBV_EVENT_PORT_ERR));
  EXPECT_FALSE(isFatalAsyncEvent(IBV_EVENT_PORT_ACTIVE));
  EXPECT_FALSE(isFatalAsyncEvent(IBV_EVENT_COMM_EST));
}

}  // namespace
}  // namespace tq::ib
