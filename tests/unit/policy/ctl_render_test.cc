// `tenantqosctl render`: its flags, a policy from a file or from the server.
#include "policy/ctl_render.h"

#include <gtest/gtest.h>

#include "ctl_test_util.h"

namespace tq::policy::ctl {
namespace {

using testing::CtlRun;
using testing::examplePolicy;
using testing::LocalPolicyd;
using testing::runCtlWith;

TEST(CtlRenderTest, FlagsBelongToOneRendererEach) {
  const std::string f = examplePolicy();
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"render", "ets", "--link", "fabric"}, "render wants dcb or opensm, got \"ets\""},
      {{"render", "dcb", "--device", "eth2", "-f", f}, "render dcb needs --link LINK"},
      {{"render", "dcb", "--link", "fabric", "-f", f}, "render dcb needs --device DEV"},
      {{"render", "dcb", "--link", "fabric", "--device", "eth2; reboot", "-f", f},
       "is not a network device name"},
      {{"render", "dcb", "--link", "fabric", "--device", "eth2", "--mtu", "4096", "-f", f},
       "--mtu is for render opensm"},
      {{"render", "opensm", "--link", "fabric", "--device", "eth2", "-f", f},
       "--device is for render dcb"},
      {{"render", "opensm", "--link", "fabric", "--max-vls", "16", "-f", f},
       "--max-vls needs 1..15"},
      {{"render", "opensm", "--link", "fabric", "--mtu", "1500", "-f", f},
       "--mtu needs 256, 512, 1024, 2048 or 4096"},
      {{"render", "opensm", "--link", "fabric", "--part", "all", "-f", f},
       "--part wants both, options or qos-policy, got \"all\""},
      {{"render", "opensm", "--link", "fabric", "-f", f, "--version", "1"},
       "-f and --version exclude each other"},
  };
  for (const auto& [args, want] : cases) {
    CtlRun r = runCtlWith(args);
    EXPECT_EQ(r.rc, kExitUsage) << ::testing::PrintToString(args);
    EXPECT_NE(r.err.find(want), std::string::npos) << r.err;
  }
}

TEST(CtlRenderTest, FromAFileOffline) {
  CtlRun r = runCtlWith({"--server", "127.0.0.1:1", "render", "dcb", "--link", "fabric", "--device",
                         "eth2", "-f", examplePolicy()});
  ASSERT_EQ(r.rc, kExitOk) << r.err;
  EXPECT_NE(r.out.find("file " + examplePolicy()), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("dev eth2"), std::string::npos) << r.out;

  r = runCtlWith(
      {"render", "opensm", "--link", "fabric", "--part", "options", "-f", examplePolicy()});
  ASSERT_EQ(r.rc, kExitOk) << r.err;
  EXPECT_NE(r.out.find("# For opensm.conf"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("qos-policy.conf, the file"), std::string::npos) << "options only\n"
                                                                        << r.out;

  r = runCtlWith({"render", "opensm", "--link", "nosuchlink", "-f", examplePolicy()});
  EXPECT_EQ(r.rc, kExitRejected);
  EXPECT_NE(r.err.find("tenantqosctl: render opensm: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("nosuchlink"), std::string::npos) << r.err;
}

TEST(CtlRenderTest, FromTheServersVersion) {
  LocalPolicyd policyd;
  ASSERT_TRUE(policyd.ok());
  CtlRun r = policyd.ctl({"render", "dcb", "--link", "fabric", "--device", "eth2"});
  EXPECT_EQ(r.rc, kExitRejected) << "no policy yet\n" << r.out;
  EXPECT_NE(r.err.find("render dcb: get policy failed"), std::string::npos) << r.err;
  ASSERT_EQ(policyd.ctl({"apply", "-f", examplePolicy()}).rc, kExitOk);
  r = policyd.ctl({"render", "dcb", "--link", "fabric", "--device", "eth2", "--version", "1"});
  ASSERT_EQ(r.rc, kExitOk) << r.err;
  EXPECT_NE(r.out.find("tenantqos-policyd at " + policyd.address() + ", version 1"),
            std::string::npos)
      << r.out;
}

}  // namespace
}  // namespace tq::policy::ctl
