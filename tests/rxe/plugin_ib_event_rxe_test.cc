// Fatal async events become errors on the comms they affect: taking rxeveth0 down makes rxe0 and
// (through the veth's carrier) rxe1 raise IBV_EVENT_PORT_ERR; the plugin's event thread fails
// the comms on those ports, whose next call reports the event. Then the link comes back and a
// new connection works. Runs last in the rxe VM's suite (tests/rxe/CMakeLists.txt) because it
// takes the rig's link down; it restores the link, the static neighbours and waits for both
// ports and their IPv4-mapped GIDs, also when it fails.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>

#include "ib/verbs.h"
#include "nccl-plugin/plugin.h"
#include "tests/functional/plugin_proc_util.h"

namespace tq::plugin::testing {
namespace {

std::string readFileOr(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

bool portsReady() {
  const std::string p0 = "/sys/class/infiniband/rxe0/ports/1/",
                    p1 = "/sys/class/infiniband/rxe1/ports/1/";
  return readFileOr(p0 + "state").find("ACTIVE") != std::string::npos &&
         readFileOr(p1 + "state").find("ACTIVE") != std::string::npos &&
         readFileOr(p0 + "gids/1").find("0a4d:0001") != std::string::npos &&
         readFileOr(p1 + "gids/1").find("0a4d:0002") != std::string::npos;
}

// Takes rxeveth0 down for the test; the destructor brings the rig back to how rxe-vm made it.
struct LinkDown {
  LinkDown() { ok = system("ip link set rxeveth0 down") == 0; }
  ~LinkDown() {
    (void)!system("ip link set rxeveth0 up && ip link set rxeveth1 up");
    const std::string mac0 = readFileOr("/sys/class/net/rxeveth0/address");
    const std::string mac1 = readFileOr("/sys/class/net/rxeveth1/address");
    (void)!system(("ip neigh replace 10.77.0.2 lladdr " + mac1 +
                   " dev rxeveth0 nud permanent && ip neigh replace 10.77.0.1 lladdr " + mac0 +
                   " dev rxeveth1 nud permanent")
                      .c_str());
    const double t0 = monotonicSeconds();
    while (!portsReady() && monotonicSeconds() - t0 < 30) ::usleep(50'000);
    restored = portsReady();
  }
  bool ok = false;
  bool restored = false;
};

EnvLookup envOf(std::map<std::string, std::string> m) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(m));
  return [shared](const char* name) -> const char* {
    auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

TEST(PluginIbEventTest, PortErrorFailsTheCommsOnThatPortAndTheLinkRecovers) {
  ASSERT_TRUE(portsReady()) << "needs the rxe VM (tests/rxe/rxe-vm)";
  TempDir dir;
  auto params = loadParams(envOf({{"TENANTQOS_TRANSPORT", "ib"},
                                  {"TENANTQOS_SOCKET_IFNAME", "lo"},
                                  {"TENANTQOS_RUN_DIR", dir.path() + "/run"}}));
  ASSERT_TRUE(params.ok()) << params.status().toString();
  auto made = Plugin::create(*params, realClock());
  ASSERT_TRUE(made.ok()) << made.status().toString();
  Plugin& p = **made;
  auto ctx = p.newContext(1, -1);
  ASSERT_TRUE(ctx.ok());

  auto connect = [&](void** send, void** recv, void** listen) {
    uint8_t handle[kHandleBytes];
    ASSERT_TRUE(p.listen(*ctx, 1, handle, listen).ok());
    *send = *recv = nullptr;
    const double t0 = monotonicSeconds();
    while ((*send == nullptr || *recv == nullptr) && monotonicSeconds() - t0 < 30) {
      if (*send == nullptr) {
        ASSERT_TRUE(p.connect(*ctx, -1, 0, handle, send).ok());
      }
      if (*recv == nullptr) {
        ASSERT_TRUE(p.accept(*listen, recv).ok());
      }
    }
    ASSERT_TRUE(*send && *recv);
  };
  auto transfer = [&](void* send, void* recv) {
    std::vector<char> out(65536, 'e'), in(65536, 0);
    void* data[1] = {in.data()};
    size_t sizes[1] = {in.size()};
    int tags[1] = {0};
    void *rreq = nullptr, *sreq = nullptr;
    ASSERT_TRUE(p.irecv(recv, 1, data, sizes, tags, nullptr, &rreq).ok());
    const double t0 = monotonicSeconds();
    while (sreq == nullptr && monotonicSeconds() - t0 < 30) {
      ASSERT_TRUE(p.isend(send, out.data(), out.size(), 0, nullptr, &sreq).ok());
    }
    int sd = 0, rd = 0;
    while ((!sd || !rd) && monotonicSeconds() - t0 < 30) {
      if (!sd) {
        ASSERT_TRUE(p.test(sreq, &sd, nullptr).ok());
      }
      if (!rd) {
        ASSERT_TRUE(p.test(rreq, &rd, nullptr).ok());
      }
    }
    ASSERT_TRUE(sd && rd);
    ASSERT_EQ(in, out);
  };

  void *send, *recv, *listen;
  connect(&send, &recv, &listen);
  transfer(send, recv);
  // A receive waits on rxe1; the sender waits for its clear-to-send.
  std::vector<char> buf(4096);
  void* data[1] = {buf.data()};
  size_t sizes[1] = {buf.size()};
  int tags[1] = {0};
  void* rreq = nullptr;
  ASSERT_TRUE(p.irecv(recv, 1, data, sizes, tags, nullptr, &rreq).ok());
  {
    LinkDown down;
    ASSERT_TRUE(down.ok) << "ip link set rxeveth0 down";
    Status ss, rs;
    const double t0 = monotonicSeconds();
    char b = 0;
    int done = 0;
    while ((ss.ok() || rs.ok()) && monotonicSeconds() - t0 < 10) {
      if (ss.ok()) {
        void* sreq = nullptr;
        ss = p.isend(send, &b, 0, 1, nullptr, &sreq);  // tag 1: matches no clear-to-send slot
      }
      if (rs.ok()) rs = p.test(rreq, &done, nullptr);
      ::usleep(1000);
    }
    const double took = monotonicSeconds() - t0;
    std::printf("link down: send comm: %s\nreceive: %s\n(%.3f s)\n", ss.message().c_str(),
                rs.message().c_str(), took);
    EXPECT_FALSE(ss.ok()) << "the comm on rxe0 did not notice its port going down";
    EXPECT_FALSE(rs.ok()) << "the comm on rxe1 did not notice its port going down";
    EXPECT_NE(ss.message().find("rxe0"), std::string::npos);
    EXPECT_NE(ss.message().find("port"), std::string::npos);
    EXPECT_NE(rs.message().find("rxe1"), std::string::npos);
    EXPECT_LT(took, 5.0);
  }
  ASSERT_TRUE(portsReady()) << "the rig did not come back (ports/GIDs)";
  EXPECT_TRUE(p.closeSend(send).ok());
  EXPECT_TRUE(p.closeRecv(recv).ok());
  EXPECT_TRUE(p.closeListen(listen).ok());
  // A new connection on the recovered link works.
  connect(&send, &recv, &listen);
  transfer(send, recv);
  EXPECT_TRUE(p.closeSend(send).ok());
  EXPECT_TRUE(p.closeRecv(recv).ok());
  EXPECT_TRUE(p.closeListen(listen).ok());
  EXPECT_TRUE(p.finalize(*ctx).ok());
}

}  // namespace
}  // namespace tq::plugin::testing
