// A peer process for the ib transport's tests in the rxe VM: it plays the receiving rank so that
// a test can kill it in the middle of a transfer (SIGKILL: no close, no goodbye).
//
//   tq_ib_peer recv <dev> <bytes>
//     Creates the plugin from the environment (TENANTQOS_*), listens on device <dev>, prints
//     "handle <256 hex digits>", accepts one connection, posts one receive of <bytes>, prints
//     "posted", then tests that receive until it completes ("done <size>"), fails
//     ("error <message>") or 60 s pass. Exit 0 when done.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/clock.h"
#include "nccl-plugin/plugin.h"

using namespace tq;
using namespace tq::plugin;

namespace {

int fail(const std::string& what, const Status& s) {
  std::printf("error %s: %s\n", what.c_str(), s.message().c_str());
  std::fflush(stdout);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4 || std::strcmp(argv[1], "recv") != 0) {
    std::fprintf(stderr, "usage: %s recv <dev> <bytes>\n", argv[0]);
    return 2;
  }
  const int dev = std::atoi(argv[2]);
  const size_t bytes = std::strtoull(argv[3], nullptr, 10);
  auto params = loadParams(processEnv());
  if (!params.ok()) return fail("params", params.status());
  auto plugin = Plugin::create(*params, realClock());
  if (!plugin.ok()) return fail("init", plugin.status());
  Plugin& p = **plugin;
  auto ctx = p.newContext(1, -1);
  if (!ctx.ok()) return fail("context", ctx.status());
  uint8_t handle[kHandleBytes] = {};
  void* listen = nullptr;
  if (Status s = p.listen(*ctx, dev, handle, &listen); !s.ok()) return fail("listen", s);
  std::string hex;
  for (uint8_t b : handle) {
    char h[3];
    std::snprintf(h, sizeof h, "%02x", b);
    hex += h;
  }
  std::printf("handle %s\n", hex.c_str());
  std::fflush(stdout);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  void* recv = nullptr;
  while (recv == nullptr) {
    if (Status s = p.accept(listen, &recv); !s.ok()) return fail("accept", s);
    if (std::chrono::steady_clock::now() > until) return fail("accept", deadlineExceeded("60 s"));
  }
  std::vector<char> buf(bytes);
  void* mr = nullptr;
  if (Status s = p.regMr(recv, buf.data(), bytes, NCCL_PTR_HOST, &mr); !s.ok()) {
    return fail("regMr", s);
  }
  void* data[1] = {buf.data()};
  size_t sizes[1] = {bytes};
  int tags[1] = {0};
  void* mrs[1] = {mr};
  void* req = nullptr;
  while (req == nullptr) {
    if (Status s = p.irecv(recv, 1, data, sizes, tags, mrs, &req); !s.ok()) return fail("irecv", s);
  }
  std::printf("posted\n");
  std::fflush(stdout);
  int done = 0, got = 0;
  while (!done) {
    if (Status s = p.test(req, &done, &got); !s.ok()) return fail("test", s);
    if (std::chrono::steady_clock::now() > until) return fail("test", deadlineExceeded("60 s"));
    ::usleep(100);
  }
  std::printf("done %d\n", got);
  return 0;
}
