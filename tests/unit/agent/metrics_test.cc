// The exposition (names, labels, units, histogram shape, no duplicate series) and the HTTP
// server (/metrics, /healthz, /readyz on port 0, real sockets).
#include "agent/metrics.h"

#include <gtest/gtest.h>

#include <poll.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "agent/http_server.h"
#include "common/allocation.h"
#include "common/fd.h"
#include "test_util.h"

namespace tq::agent {
namespace {

using testing::httpGet;

AgentState sampleState() {
  AgentState s;
  s.node = "node1";
  s.ready = true;
  s.policy_version = 7;
  s.latest_seen_version = 8;
  for (int i = 0; i < 3; ++i) {
    TenantStatus t;
    t.name = "tenant-" + std::string(1, static_cast<char>('a' + i));
    t.link = "fabric";
    t.transmit_bytes = 1000u * (i + 1);
    t.receive_bytes = 10;
    t.throttled_ns = 1'500'000'000;
    t.allocated_bytes_per_second = 125'000'000;
    t.guarantee_bytes_per_second = 50'000'000;
    t.limit_bytes_per_second = 100'000'000;
    t.processes = 2;
    for (const char* dev : {"eth0", "eth1"}) {
      for (bool rx : {false, true}) {
        BucketStatus b;
        b.device = dev;
        b.receive = rx;
        b.bytes = rx ? 300 : 700;
        b.throttled_ns = 250'000'000;
        b.backlog_bytes = 42;
        b.allocated_bytes_per_second = rx ? 60'000'000 : 62'500'000;
        b.depth_bytes = 62'500;
        b.demand_bytes_per_second = rx ? kUnboundedDemand : 1'000'000;
        t.buckets.push_back(b);
      }
    }
    s.tenants.push_back(t);
  }
  s.classes = {{"eth0", "1:1", "", 1, 2, 3, 4},
               {"eth0", "1:2", "", 900, 9, 0, 0},
               {"eth0", "1:10", "tenant-a", 5, 6, 7, 8}};
  RdmaPortStat ib;
  ib.device = "mlx5_0";
  ib.port = 1;
  ib.link_layer = "InfiniBand";
  ib.up = true;
  ib.transmit_bytes = 4000;
  ib.receive_bytes = 1000;
  ib.transmit_packets = 40;
  ib.receive_packets = 10;
  RdmaPortStat rxe;  // no PMA counters: packets only
  rxe.device = "rxe0";
  rxe.port = 1;
  rxe.netdev = "rxeveth0";
  rxe.link_layer = "Ethernet";
  rxe.up = false;
  rxe.transmit_packets = 12345;
  rxe.receive_packets = 678;
  s.rdma_ports = {ib, rxe};
  RdmaQpCounts qps;
  qps.device = "rxe0";
  qps.governed = 4;
  qps.ungoverned = 7;
  qps.kernel = 1;
  qps.ungoverned_owners = 3;
  qps.top = {{4242, "ib_write_bw", 4}, {77, "a\"b", 2}};
  qps.other_ungoverned = 1;
  s.rdma_qps = std::vector<RdmaQpCounts>{qps, RdmaQpCounts{"mlx5_0"}};
  s.errors = {"apply policy v8: boom"};
  s.reconcile_errors_total = 3;
  s.stats_reads_total = 11;
  s.qp_scans_total = 12;
  s.reconcile_duration.observe(0.002);
  s.reconcile_duration.observe(0.2);
  s.allocation_duration.observe(0.00002);
  return s;
}

// name{labels} -> value, and the TYPE of every family. Fails the test on a duplicate series.
struct Parsed {
  std::map<std::string, double> series;
  std::map<std::string, std::string> types;
};
Parsed parse(const std::string& text) {
  Parsed p;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream l(line.substr(7));
      std::string name, type;
      l >> name >> type;
      EXPECT_EQ(p.types.count(name), 0u) << "second TYPE for " << name;
      p.types[name] = type;
      continue;
    }
    if (line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    const std::string key = line.substr(0, sp);
    EXPECT_EQ(p.series.count(key), 0u) << "duplicate series " << key;
    p.series[key] = std::stod(line.substr(sp + 1));
  }
  return p;
}

TEST(MetricsTest, NamesLabelsAndValues) {
  WatchStatus watch{true};
  watch.reconnect_waits = 13;
  Parsed p = parse(renderMetrics(sampleState(), watch));
  EXPECT_EQ(p.series.at(R"(tenantqos_tenant_transmit_bytes_total{node="node1",tenant="tenant-b"})"),
            2000);
  EXPECT_EQ(
      p.series.at(R"(tenantqos_tenant_throttled_seconds_total{node="node1",tenant="tenant-a"})"),
      1.5);
  EXPECT_EQ(
      p.series.at(
          R"(tenantqos_tenant_allocated_rate_bytes_per_second{node="node1",tenant="tenant-c"})"),
      125e6);
  EXPECT_EQ(
      p.series.at(R"(tenantqos_tenant_guarantee_bytes_per_second{node="node1",tenant="tenant-a"})"),
      50e6);
  EXPECT_EQ(
      p.series.at(R"(tenantqos_tenant_limit_bytes_per_second{node="node1",tenant="tenant-a"})"),
      100e6);
  EXPECT_EQ(p.series.at(R"(tenantqos_tenant_processes{node="node1",tenant="tenant-a"})"), 2);
  EXPECT_EQ(p.series.at(R"(tenantqos_tenant_receive_bytes_total{node="node1",tenant="tenant-a"})"),
            10);
  EXPECT_EQ(p.series.at(
                R"(tenantqos_tc_class_bytes_total{class="1:10",device="eth0",tenant="tenant-a"})"),
            5);
  EXPECT_EQ(
      p.series.at(
          R"(tenantqos_tc_class_packets_total{class="1:10",device="eth0",tenant="tenant-a"})"),
      6);
  EXPECT_EQ(p.series.at(
                R"(tenantqos_tc_class_drops_total{class="1:10",device="eth0",tenant="tenant-a"})"),
            7);
  EXPECT_EQ(
      p.series.at(
          R"(tenantqos_tc_class_overlimits_total{class="1:10",device="eth0",tenant="tenant-a"})"),
      8);
  EXPECT_EQ(p.series.at("tenantqos_policy_version"), 7);
  EXPECT_EQ(p.series.at("tenantqos_policyd_connected"), 1);
  EXPECT_EQ(p.series.at("tenantqos_agent_ready"), 1);
  EXPECT_EQ(p.series.at("tenantqos_reconcile_errors_total"), 3);
  // The counters functional tests wait on to show that nothing happens meanwhile.
  EXPECT_EQ(p.series.at("tenantqos_stats_reads_total"), 11);
  EXPECT_EQ(p.series.at("tenantqos_qp_scans_total"), 12);
  EXPECT_EQ(p.series.at("tenantqos_policyd_reconnect_waits_total"), 13);
  EXPECT_EQ(p.series.at("tenantqos_reconcile_unresolved_errors"), 1);
  EXPECT_EQ(p.series.at("tenantqos_reconcile_duration_seconds_count"), 2);
  EXPECT_NEAR(p.series.at("tenantqos_reconcile_duration_seconds_sum"), 0.202, 1e-9);
  EXPECT_EQ(p.series.at(R"(tenantqos_reconcile_duration_seconds_bucket{le="0.0025"})"), 1);
  EXPECT_EQ(p.series.at(R"(tenantqos_reconcile_duration_seconds_bucket{le="+Inf"})"), 2);
  EXPECT_EQ(p.series.at("tenantqos_allocation_duration_seconds_count"), 1);
  // Per bucket: device and direction labels.
  EXPECT_EQ(
      p.series.at(
          R"(tenantqos_bucket_bytes_total{device="eth1",direction="rx",node="node1",tenant="tenant-a"})"),
      300);
  EXPECT_EQ(
      p.series.at(
          R"(tenantqos_bucket_allocated_rate_bytes_per_second{device="eth0",direction="tx",node="node1",tenant="tenant-b"})"),
      62.5e6);
  EXPECT_EQ(
      p.series.at(
          R"(tenantqos_bucket_throttled_seconds_total{device="eth0",direction="rx",node="node1",tenant="tenant-c"})"),
      0.25);
  EXPECT_EQ(
      p.series.at(
          R"(tenantqos_bucket_backlog_bytes{device="eth0",direction="tx",node="node1",tenant="tenant-c"})"),
      42);
  EXPECT_EQ(
      p.series.at(
          R"(tenantqos_bucket_depth_bytes{device="eth0",direction="tx",node="node1",tenant="tenant-c"})"),
      62500);
  EXPECT_EQ(
      p.series.at(
          R"(tenantqos_bucket_demand_bytes_per_second{device="eth0",direction="tx",node="node1",tenant="tenant-c"})"),
      1e6);
  EXPECT_TRUE(std::isinf(p.series.at(
      R"(tenantqos_bucket_demand_bytes_per_second{device="eth0",direction="rx",node="node1",tenant="tenant-c"})")));
  EXPECT_EQ(p.types.at("tenantqos_bucket_bytes_total"), "counter");
  EXPECT_EQ(p.types.at("tenantqos_bucket_backlog_bytes"), "gauge");
  EXPECT_EQ(p.types.at("tenantqos_tenant_transmit_bytes_total"), "counter");
  EXPECT_EQ(p.types.at("tenantqos_tenant_allocated_rate_bytes_per_second"), "gauge");
  EXPECT_EQ(p.types.at("tenantqos_reconcile_duration_seconds"), "histogram");

  Parsed q = parse(renderMetrics(AgentState{}, WatchStatus{false}));
  EXPECT_EQ(q.series.at("tenantqos_policyd_connected"), 0);
  EXPECT_EQ(q.series.at("tenantqos_agent_ready"), 0);
}

TEST(MetricsTest, RdmaPortSeriesOnlyForCountersTheDeviceHas) {
  Parsed p = parse(renderMetrics(sampleState(), WatchStatus{true}));
  const std::string ib = R"({device="mlx5_0",link_layer="InfiniBand",netdev="",port="1"})";
  const std::string rxe = R"({device="rxe0",link_layer="Ethernet",netdev="rxeveth0",port="1"})";
  EXPECT_EQ(p.series.at("tenantqos_rdma_port_transmit_bytes_total" + ib), 4000);
  EXPECT_EQ(p.series.at("tenantqos_rdma_port_receive_bytes_total" + ib), 1000);
  EXPECT_EQ(p.series.at("tenantqos_rdma_port_transmit_packets_total" + ib), 40);
  EXPECT_EQ(p.series.at("tenantqos_rdma_port_receive_packets_total" + ib), 10);
  EXPECT_EQ(p.series.at("tenantqos_rdma_port_up" + ib), 1);
  EXPECT_EQ(p.series.count("tenantqos_rdma_port_transmit_bytes_total" + rxe), 0u);
  EXPECT_EQ(p.series.count("tenantqos_rdma_port_receive_bytes_total" + rxe), 0u);
  EXPECT_EQ(p.series.at("tenantqos_rdma_port_transmit_packets_total" + rxe), 12345);
  EXPECT_EQ(p.series.at("tenantqos_rdma_port_receive_packets_total" + rxe), 678);
  EXPECT_EQ(p.series.at("tenantqos_rdma_port_up" + rxe), 0);
  EXPECT_EQ(p.types.at("tenantqos_rdma_port_transmit_bytes_total"), "counter");
  EXPECT_EQ(p.types.at("tenantqos_rdma_port_up"), "gauge");

  // No RDMA ports: not even a HELP/TYPE line.
  AgentState none = sampleState();
  none.rdma_ports.clear();
  EXPECT_EQ(renderMetrics(none, WatchStatus{true}).find("tenantqos_rdma_port"), std::string::npos);
  // Only rxe: the byte families are absent altogether.
  AgentState only_rxe = sampleState();
  only_rxe.rdma_ports.erase(only_rxe.rdma_ports.begin());
  const std::string text = renderMetrics(only_rxe, WatchStatus{true});
  EXPECT_EQ(text.find("tenantqos_rdma_port_transmit_bytes_total"), std::string::npos);
  EXPECT_NE(text.find("tenantqos_rdma_port_transmit_packets_total"), std::string::npos);
}

TEST(MetricsTest, UngovernedTrafficSeries) {
  Parsed p = parse(renderMetrics(sampleState(), WatchStatus{true}));
  EXPECT_EQ(p.series.at(R"(tenantqos_ungoverned_bytes_total{device="eth0",path="tcp"})"), 900);
  EXPECT_EQ(p.types.at("tenantqos_ungoverned_bytes_total"), "counter");
  for (const auto& [owner, n] : std::map<std::string, double>{
           {"governed", 4}, {"ungoverned", 7}, {"kernel", 1}, {"unknown", 0}}) {
    EXPECT_EQ(p.series.at("tenantqos_rdma_qps{device=\"rxe0\",owner=\"" + owner + "\"}"), n);
    EXPECT_EQ(p.series.at("tenantqos_rdma_qps{device=\"mlx5_0\",owner=\"" + owner + "\"}"), 0);
  }
  EXPECT_EQ(p.series.at(R"(tenantqos_ungoverned_qp_owners{device="rxe0"})"), 3);
  EXPECT_EQ(p.series.at(R"(tenantqos_ungoverned_qps{comm="ib_write_bw",device="rxe0",pid="4242"})"),
            4);
  EXPECT_EQ(p.series.at(R"(tenantqos_ungoverned_qps{comm="a\"b",device="rxe0",pid="77"})"), 2);
  EXPECT_EQ(p.series.at(R"(tenantqos_ungoverned_qps{comm="other",device="rxe0",pid="other"})"), 1);
  EXPECT_EQ(p.series.count(R"(tenantqos_ungoverned_qps{comm="other",device="mlx5_0",pid="other"})"),
            0u);
  EXPECT_EQ(p.types.at("tenantqos_ungoverned_qps"), "gauge");

  // No listing (no RDMA netlink) and no HTB tree: no such series at all.
  AgentState none = sampleState();
  none.rdma_qps.reset();
  none.classes.clear();
  const std::string text = renderMetrics(none, WatchStatus{true});
  EXPECT_EQ(text.find("_qps"), std::string::npos);
  EXPECT_EQ(text.find("tenantqos_ungoverned"), std::string::npos);
}

TEST(MetricsTest, HistogramBucketsAreCumulativeAndMonotonic) {
  AgentState s;
  for (double v : {1e-6, 3e-5, 2e-4, 0.004, 0.004, 0.03, 1.0, 10.0})
    s.reconcile_duration.observe(v);
  Parsed p = parse(renderMetrics(s, WatchStatus{false}));
  std::vector<std::pair<double, double>> buckets;  // le -> count
  const std::regex re(R"re(tenantqos_reconcile_duration_seconds_bucket\{le="([^"]+)"\})re");
  for (const auto& [k, v] : p.series) {
    std::smatch m;
    if (std::regex_match(k, m, re)) {
      const double le = m[1] == "+Inf" ? 1e300 : std::stod(m[1]);
      buckets.emplace_back(le, v);
    }
  }
  std::sort(buckets.begin(), buckets.end());
  ASSERT_EQ(buckets.size(), DurationHistogram::kBounds.size() + 1);
  for (size_t i = 1; i < buckets.size(); ++i) EXPECT_GE(buckets[i].second, buckets[i - 1].second);
  EXPECT_EQ(buckets.back().second, 8);
  EXPECT_EQ(buckets.front().second, 1);
}

TEST(MetricsTest, EveryFamilyNameCarriesAUnitOrIsDimensionless) {
  Parsed p = parse(renderMetrics(sampleState(), WatchStatus{true}));
  const std::regex ok(
      "tenantqos_[a-z_]+(_bytes_total|_packets_total|_drops_total|_overlimits_total|"
      "_seconds_total|_bytes_per_second|_seconds|_errors_total|_bytes|_processes|_version|"
      "_connected|_ready|_errors|_up|_fenced|_qps|_qp_owners|_changes_total|_offers_total|_mode|_"
      "term|"
      "_refusals_total|_waits_total|_scans_total|_reads_total)");
  AgentState s = sampleState();
  s.fabric.mode = FabricMode::kHeld;  // the fabric's families too
  p = parse(renderMetrics(s, WatchStatus{true}));
  for (const auto& [name, type] : p.types) EXPECT_TRUE(std::regex_match(name, ok)) << name;
}

// A shared fabric link's buckets are series of their own, labelled by link; the caps' mode
// (allocator, held, static) is one gauge per mode, 1 for the current one.
TEST(MetricsTest, FabricLinkSeriesAndTheModeOfTheCaps) {
  AgentState s = sampleState();
  BucketStatus b;
  b.device = "leaf-uplink";
  b.fabric_link = true;
  b.bytes = 555;
  b.allocated_bytes_per_second = 75'000'000;
  b.demand_bytes_per_second = kUnboundedDemand;
  s.tenants[0].buckets.push_back(b);
  s.fabric.mode = FabricMode::kStatic;
  s.fabric.term = 12;
  s.fabric.last_caps_age_ns = 4'500'000'000;
  Parsed p = parse(renderMetrics(s, WatchStatus{true}));
  const std::string labels =
      "{direction=\"tx\",link=\"leaf-uplink\",node=\"node1\",tenant=\"tenant-a\"}";
  EXPECT_EQ(p.series["tenantqos_fabric_link_bytes_total" + labels], 555);
  EXPECT_EQ(p.series["tenantqos_fabric_link_cap_bytes_per_second" + labels], 75'000'000);
  EXPECT_TRUE(std::isinf(p.series["tenantqos_fabric_link_demand_bytes_per_second" + labels]));
  EXPECT_EQ(p.types["tenantqos_fabric_link_bytes_total"], "counter");
  // Not a device: not among the device buckets.
  for (const auto& [key, v] : p.series)
    EXPECT_EQ(key.find("device=\"leaf-uplink\""), std::string::npos) << key;
  EXPECT_EQ(p.series["tenantqos_fabric_mode{mode=\"static\"}"], 1);
  EXPECT_EQ(p.series["tenantqos_fabric_mode{mode=\"allocator\"}"], 0);
  EXPECT_EQ(p.series["tenantqos_fabric_caps_age_seconds"], 4.5);
  EXPECT_EQ(p.series["tenantqos_fabric_allocator_term"], 12);
  // A node behind no shared link has none of them.
  p = parse(renderMetrics(sampleState(), WatchStatus{true}));
  EXPECT_EQ(p.types.count("tenantqos_fabric_mode"), 0u);
}

class HttpServerTest : public ::testing::Test {};

TEST_F(HttpServerTest, ServesRoutesOnPortZero) {
  int calls = 0;
  std::map<std::string, HttpServer::Handler> routes;
  routes["/metrics"] = [] { return HttpResponse{200, kMetricsContentType, "x 1\n"}; };
  routes["/readyz"] = [&calls] {
    ++calls;
    return HttpResponse{503, "text/plain; charset=utf-8", "not ready: no policy yet\n"};
  };
  auto server = HttpServer::start("127.0.0.1:0", routes);
  ASSERT_TRUE(server.ok()) << server.status().toString();
  const int port = (*server)->port();
  ASSERT_GT(port, 0);
  auto m = httpGet(port, "/metrics");
  EXPECT_EQ(m.status, 200);
  EXPECT_EQ(m.body, "x 1\n");
  EXPECT_NE(m.headers.find("Content-Type: text/plain; version=0.0.4; charset=utf-8"),
            std::string::npos);
  auto r = httpGet(port, "/readyz");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.body, "not ready: no policy yet\n");
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(httpGet(port, "/nothing").status, 404);
  EXPECT_EQ(httpGet(port, "/metrics/extra").status, 404);
  // A second server cannot take the same port.
  auto clash = HttpServer::start("127.0.0.1:" + std::to_string(port), routes);
  EXPECT_FALSE(clash.ok());
  server->reset();
  EXPECT_EQ(httpGet(port, "/metrics").status, 0) << "still listening after destruction";
}

// The agent exits on SIGTERM in tens of milliseconds: the destructor wakes the server's poll.
TEST_F(HttpServerTest, StopsPromptly) {
  for (int i = 0; i < 3; ++i) {
    auto server = HttpServer::start("127.0.0.1:0", {});
    ASSERT_TRUE(server.ok()) << server.status().toString();
    const auto t0 = std::chrono::steady_clock::now();
    server->reset();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(500));
  }
}

// A connected TCP socket to 127.0.0.1:port that has sent `prefix` (a request not yet complete).
Fd slowClient(int port, const std::string& prefix) {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (!fd.valid() || ::connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    return Fd();
  }
  if (!prefix.empty()) (void)::send(fd.get(), prefix.data(), prefix.size(), MSG_NOSIGNAL);
  return fd;
}

// True once the server closed `fd` (EOF or reset), polling up to `ms`.
bool closedWithin(const Fd& fd, int ms) {
  pollfd p{fd.get(), POLLIN, 0};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < deadline) {
    if (::poll(&p, 1, 20) == 1) {
      char c;
      const ssize_t n = ::recv(fd.get(), &c, 1, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN)) return true;
    }
  }
  return false;
}

// Issue 23 item 11: slow clients (one unprivileged uid can open them on the node) held every
// civetweb worker for the 10 s request timeout, so kubelet probes (3 s timeout) failed and a
// healthy agent would be restarted in a loop. Before: 0 of 18 probes answered with 32 slow
// clients. After: every probe is answered.
TEST_F(HttpServerTest, HealthAnswersWhileSlowClientsHoldConnections) {
  std::map<std::string, HttpServer::Handler> routes;
  routes["/healthz"] = [] { return HttpResponse{200, "text/plain; charset=utf-8", "ok\n"}; };
  auto server = HttpServer::start("127.0.0.1:0", routes);
  ASSERT_TRUE(server.ok()) << server.status().toString();
  const int port = (*server)->port();
  std::vector<Fd> slow;
  for (int i = 0; i < 32; ++i) {
    slow.push_back(slowClient(port, i % 2 ? "GET /healthz HTTP/1.1\r\nHost: x\r\n" : ""));
    ASSERT_TRUE(slow.back().valid());
  }
  std::atomic<int> answered{0};
  std::vector<std::thread> probes;
  for (int i = 0; i < 18; ++i) {
    probes.emplace_back([&] {
      if (httpGet(port, "/healthz", /*timeout_s=*/3).status == 200) ++answered;
    });
  }
  for (auto& t : probes) t.join();
  EXPECT_EQ(answered.load(), 18) << "kubelet-like probes answered under 32 slow clients";
}

TEST_F(HttpServerTest, SlowRequestsAreCutAndConnectionsPerPeerBounded) {
  HttpServer::Options o;
  o.request_timeout_ms = 300;
  o.max_connections_per_peer = 8;
  auto server = HttpServer::start("127.0.0.1:0", {}, o);
  ASSERT_TRUE(server.ok()) << server.status().toString();
  const int port = (*server)->port();
  std::vector<Fd> held;
  for (int i = 0; i < 20; ++i) held.push_back(slowClient(port, "GET / HTTP/1.1\r\n"));
  // Beyond 8 from one peer, the oldest unfinished ones make room at once.
  for (int i = 0; i < 12; ++i) EXPECT_TRUE(closedWithin(held[i], 1000)) << i;
  // The others are cut at the request timeout, not kept for ever.
  for (int i = 12; i < 20; ++i) EXPECT_TRUE(closedWithin(held[i], 3000)) << i;
  // An oversized request head is refused, not buffered.
  Fd big = slowClient(port, "GET /" + std::string(64 * 1024, 'a'));
  EXPECT_TRUE(closedWithin(big, 1000));
}

}  // namespace
}  // namespace tq::agent
