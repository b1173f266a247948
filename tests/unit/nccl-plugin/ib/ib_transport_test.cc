// Choosing the transport on a host without RDMA, and the ib transport's refusals before any
// device is opened (fake sysfs trees, a library that is not libibverbs). What needs RDMA devices
// runs in the Soft-RoCE VM (tests/rxe/plugin_ib_rxe_test.cc).
#include "nccl-plugin/ib/ib_transport.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include "common/file_util.h"
#include "nccl-plugin/plugin.h"
#include "tests/support/temp_dir.h"

namespace tq::plugin::ib {
namespace {

class IbTransportCreateTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(temp_.ok()) << temp_.error(); }
  void put(const std::string& rel, const std::string& content) {
    const std::string path = root_ + "/" + rel;
    ASSERT_TRUE(makeDirs(path.substr(0, path.rfind('/'))).ok());
    ASSERT_TRUE(writeFileAtomic(path, content).ok());
  }
  // rxe0 as Linux 6.1 shows it in the rig: RoCE v2, GID 1 IPv4-mapped.
  void rxe(const std::string& dev, const std::string& state) {
    const std::string d = "class/infiniband/" + dev + "/";
    put(d + "node_type", "1: CA\n");
    put(d + "node_guid", "d478:75ff:fed2:9ccf\n");
    put(d + "ports/1/state", state + "\n");
    put(d + "ports/1/phys_state", "5: LinkUp\n");
    put(d + "ports/1/link_layer", "Ethernet\n");
    put(d + "ports/1/rate", "10 Gb/sec (1X FDR10)\n");
    put(d + "ports/1/lid", "0x0\n");
    put(d + "ports/1/gids/0", "fe80:0000:0000:0000:d478:75ff:fed2:9ccf\n");
    put(d + "ports/1/gid_attrs/types/0", "RoCE v2\n");
    put(d + "ports/1/gids/1", "0000:0000:0000:0000:0000:ffff:0a4d:0001\n");
    put(d + "ports/1/gid_attrs/types/1", "RoCE v2\n");
  }
  IbTransportConfig config() {
    IbTransportConfig c;
    c.sysfs_root = root_;
    c.oob_ifname = "lo";
    return c;
  }
  tq::testing::TempDir temp_{"tqplg-ibsys"};
  const std::string& root_ = temp_.path();
};

TEST_F(IbTransportCreateTest, NoDevicesIsNotFound) {
  auto t = IbTransport::create(config(), realClock());
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound);
  EXPECT_NE(t.status().message().find("no RDMA devices"), std::string::npos);
}

TEST_F(IbTransportCreateTest, InactivePortsAreNamedInTheReason) {
  rxe("rxe0", "1: DOWN");
  auto t = IbTransport::create(config(), realClock());
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound);
  EXPECT_NE(t.status().message().find("no active RDMA port"), std::string::npos);
  EXPECT_NE(t.status().message().find("rxe0"), std::string::npos) << t.status().message();
}

TEST_F(IbTransportCreateTest, FilterThatMatchesNothingIsNamed) {
  rxe("rxe0", "4: ACTIVE");
  IbTransportConfig c = config();
  c.hca = "=mlx5_0";
  auto t = IbTransport::create(c, realClock());
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound);
  EXPECT_NE(t.status().message().find("TENANTQOS_IB_HCA==mlx5_0"), std::string::npos);
  c.hca = "rxe0:0";
  t = IbTransport::create(c, realClock());
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("TENANTQOS_IB_HCA"), std::string::npos);
}

TEST_F(IbTransportCreateTest, ActivePortButNoVerbsLibraryIsUnavailable) {
  rxe("rxe0", "4: ACTIVE");
  IbTransportConfig c = config();
  c.verbs_library = "/nonexistent/libibverbs-tqplg.so.1";
  auto t = IbTransport::create(c, realClock());
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(t.status().message().find("/nonexistent/libibverbs-tqplg.so.1"), std::string::npos);
}

PluginParams hostParams(const std::string& transport) {
  PluginParams p;
  p.default_tenant = "default";
  p.run_dir = "/nonexistent/tqplg-ibt";
  p.transport = transport;
  p.socket_ifname = "lo";
  p.nsocks = 1;
  p.socket_nthreads = 1;
  p.socket_min_chunk = 65536;
  p.handshake_timeout_ms = 1000;
  p.shm_recheck_ms = 1000;
  p.ibverbs_lib = "libibverbs.so.1";
  p.ib_qps_per_conn = 1;
  p.ib_timeout = 20;
  p.ib_retry_cnt = 7;
  p.pace_chunk_us = 1000;
  p.log_level = "info";
  return p;
}

// This host has no RDMA devices (the CI machines neither): auto must pick socket and say why;
// ib must fail init with the reason rather than fall back silently.
TEST(TransportSelection, AutoFallsBackToSocketAndSaysWhy) {
  std::string why;
  auto p = Plugin::create(hostParams("auto"), realClock(), &why);
  ASSERT_TRUE(p.ok()) << p.status().toString();
  EXPECT_STREQ((*p)->transport().name(), "socket");
  EXPECT_NE(why.find("auto: no RDMA devices"), std::string::npos) << why;

  auto ib = Plugin::create(hostParams("ib"), realClock(), &why);
  ASSERT_FALSE(ib.ok());
  EXPECT_EQ(toNcclResult(ib.status()), ncclSystemError);
  EXPECT_NE(ib.status().message().find("TENANTQOS_TRANSPORT=ib"), std::string::npos);
  EXPECT_NE(ib.status().message().find("no RDMA devices"), std::string::npos);

  auto bad = Plugin::create(hostParams("verbs"), realClock(), &why);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("expected auto, ib or socket"), std::string::npos);

  auto sock = Plugin::create(hostParams("socket"), realClock(), &why);
  ASSERT_TRUE(sock.ok());
  EXPECT_EQ(why, "TENANTQOS_TRANSPORT=socket");
}

}  // namespace
}  // namespace tq::plugin::ib
