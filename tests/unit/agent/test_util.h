// Helpers shared by the agent's tests: a tiny HTTP client, a fake TcApplier, sample policies
// (and tests/support's TempDir under the name they use). Test-only.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <set>
#include <string>

#include "agent/tc_applier.h"
#include "common/policy.h"
#include "tests/support/temp_dir.h"

namespace tq::agent::testing {

using ::tq::testing::TempDir;

struct HttpResult {
  int status = 0;  // 0: no response
  std::string headers;
  std::string body;
};

// GET http://127.0.0.1:port/path with a 5 s bound; HTTP/1.0 so the server closes after the reply.
// `timeout_s`: for each send and receive (a kubelet probe's timeoutSeconds).
inline HttpResult httpGet(int port, const std::string& path, int timeout_s = 5) {
  HttpResult out;
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return out;
  timeval tv{timeout_s, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    ::close(fd);
    return out;
  }
  const std::string req = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
    ::close(fd);
    return out;
  }
  std::string resp;
  char buf[16384];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    resp.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  const size_t sep = resp.find("\r\n\r\n");
  if (resp.rfind("HTTP/1.", 0) != 0 || sep == std::string::npos) return out;
  out.status = std::atoi(resp.c_str() + resp.find(' ') + 1);
  out.headers = resp.substr(0, sep);
  out.body = resp.substr(sep + 4);
  return out;
}

// The kernel, simulated: one desired tree per device. Counts calls and writes.
class FakeTc : public TcApplier {
 public:
  Result<int> apply(const DesiredDevice& d) override {
    applies++;
    if (fail_devices.count(d.device) != 0) {
      return invalidArgument("add class 1:10 on dev " + d.device +
                             ": RTNETLINK answers: Invalid argument");
    }
    auto it = trees.find(d.device);
    if (it != trees.end() && it->second == d) return 0;
    int w = d.tenant_classes ? 1 + static_cast<int>(d.tenants.size()) : 1;
    writes += w;
    trees[d.device] = d;
    return w;
  }
  Status remove(const std::string& device) override {
    removes++;
    if (trees.erase(device) != 0) writes++;
    return okStatus();
  }
  Result<std::vector<ClassStat>> stats(const std::string& device) override {
    std::vector<ClassStat> out;
    auto it = trees.find(device);
    if (it == trees.end()) return out;
    out.push_back({device, "1:1", "", 100, 10, 0, 0});
    if (!it->second.tenant_classes) return out;
    uint32_t minor = 0x10;
    for (const TenantSpec& t : it->second.tenants) {
      char id[16];
      snprintf(id, sizeof id, "1:%x", minor++);
      const auto bytes = class_bytes.find(t.name);
      out.push_back(
          {device, id, t.name, bytes != class_bytes.end() ? bytes->second : 1000, 7, 1, 2});
    }
    return out;
  }

  std::map<std::string, DesiredDevice> trees;
  std::set<std::string> fail_devices;
  std::map<std::string, uint64_t> class_bytes;  // a tenant's class's byte count (default 1000)
  int applies = 0;
  int removes = 0;
  int writes = 0;
};

inline TenantSpec tenant(const std::string& name, const std::string& link, uint64_t g, uint64_t l,
                         uint32_t dscp, uint32_t weight = 1) {
  TenantSpec t;
  t.name = name;
  t.link = link;
  t.guarantee_bytes_per_second = g;
  t.limit_bytes_per_second = l;
  t.weight = weight;
  t.dscp = dscp;
  t.service_level = dscp % 16;
  t.traffic_classes = {static_cast<int32_t>(dscp)};
  return t;
}

// fabric 1.25 GB/s (10 Gbit/s) with tenant-a and tenant-b; storage with tenant-s.
inline VersionedPolicy samplePolicy(uint64_t version) {
  VersionedPolicy p;
  p.version = version;
  p.policy.links = {{"fabric", 1'250'000'000, 5}, {"storage", 125'000'000, 0}};
  p.policy.tenants = {tenant("tenant-a", "fabric", 500'000'000, 750'000'000, 26, 2),
                      tenant("tenant-b", "fabric", 250'000'000, 500'000'000, 10, 1),
                      tenant("tenant-s", "storage", 50'000'000, 100'000'000, 12, 1)};
  return p;
}

}  // namespace tq::agent::testing
