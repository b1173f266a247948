// tq-hostile-tenant RUN_DIR VICTIM OWN SECONDS: what a hostile process of tenant OWN tries on a
// node (run it as that tenant's uid/gid, e.g. with setpriv). Against VICTIM: open, write,
// truncate, map or connect to anything of it under RUN_DIR, and the agent's fds through /proc;
// each must fail. Against its own tenant: attach, then try to write, resize or map writable the
// parameters (must fail), write garbage into everything it can write (bucket, slots), send the
// agent garbage requests, fds, silence and too many connections, for SECONDS.
// Prints "refused: ..." for each attempt the kernel or the agent refused and "ALLOWED: ..." for
// each that worked and must not have; exits 1 if any did.
//
// tq-hostile-tenant --node-wide RUN_DIR SECONDS CONNECTIONS: what an unmapped user (a uid of no
// tenant) tries on the node-wide socket: attaches CONNECTIONS times and keeps them open (every
// default-tenant slot and connection it can get), and writes 9 s of debt into every bucket word
// of the memory it was given, every 1 ms, for SECONDS. Prints one line of what it got.
//
// tq-hostile-tenant --reset-words RUN_DIR OWN SECONDS: a process of tenant OWN that attaches and
// then, for SECONDS, writes 0 (an empty bucket long ago: a full one now) into every bucket word
// of its tenant every 100 us, so that its co-tenants' takes find tokens they never earned.
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "common/attach_protocol.h"
#include "common/shm_layout.h"

namespace {

int allowed = 0;

void expectFail(bool failed, const std::string& what) {
  if (failed) {
    std::printf("refused: %s (%s)\n", what.c_str(), std::strerror(errno));
  } else {
    std::printf("ALLOWED: %s\n", what.c_str());
    ++allowed;
  }
}

int connectTo(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int e = errno;
    ::close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

double now() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

}  // namespace

// --node-wide: see the file comment.
int nodeWide(const std::string& run, double seconds, int connections) {
  namespace at = tq::attach;
  std::vector<at::Attached> held;
  int with_slot = 0, refused = 0, not_held = 0;
  std::string why;
  for (int i = 0; i < connections; ++i) {
    auto a = at::attachWithin(at::nodeSocketPath(run), "", 2000, tq::realClock());
    if (!a.ok()) {
      ++refused;
      why = a.status().message();
      continue;
    }
    if (a->slot < tq::shm::kMaxSlots) ++with_slot;
    if (!a->held) ++not_held;  // the agent answered and closed it at once
    held.push_back(std::move(*a));
  }
  std::printf("node-wide: %zu attached (%d with a slot, %d not held), %d refused%s%s\n",
              held.size(), with_slot, not_held, refused, why.empty() ? "" : ": ", why.c_str());
  if (held.empty()) return 1;
  auto* shared = static_cast<tq::shm::SharedPage*>(::mmap(nullptr, sizeof(tq::shm::SharedPage),
                                                          PROT_READ | PROT_WRITE, MAP_SHARED,
                                                          held.front().shared_fd.get(), 0));
  if (shared == MAP_FAILED) return 1;
  const double end = now() + seconds;
  uint64_t writes = 0;
  while (now() < end) {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    const int64_t debt = ts.tv_sec * 1'000'000'000LL + ts.tv_nsec + 9'000'000'000LL;
    for (auto& b : shared->buckets) b.empty_at_ns.store(debt);
    ++writes;
    ::usleep(1000);
  }
  std::printf("node-wide: %llu writes of 9 s of debt into every bucket word\n",
              static_cast<unsigned long long>(writes));
  return 0;
}

// --reset-words: see the file comment.
int resetWords(const std::string& run, const std::string& own, double seconds) {
  namespace at = tq::attach;
  auto a = at::attachWithin(at::tenantSocketPath(run, own), own, 2000, tq::realClock());
  if (!a.ok() || a->tenant != own) {
    std::printf("ERROR: cannot attach to own tenant %s: %s\n", own.c_str(),
                a.ok() ? a->tenant.c_str() : a.status().message().c_str());
    return 1;
  }
  auto* shared = static_cast<tq::shm::SharedPage*>(::mmap(nullptr, sizeof(tq::shm::SharedPage),
                                                          PROT_READ | PROT_WRITE, MAP_SHARED,
                                                          a->shared_fd.get(), 0));
  if (shared == MAP_FAILED) return 1;
  std::printf("reset-words: attached to %s, slot %u\n", own.c_str(), a->slot);
  const double end = now() + seconds;
  uint64_t writes = 0;
  while (now() < end) {
    for (auto& b : shared->buckets) b.empty_at_ns.store(0);
    ++writes;
    ::usleep(100);
  }
  std::printf("reset-words: %llu resets of every bucket word\n",
              static_cast<unsigned long long>(writes));
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "--reset-words") {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    return resetWords(argv[2], argv[3], std::atof(argv[4]));
  }
  if (argc == 5 && std::string(argv[1]) == "--node-wide") {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    return nodeWide(argv[2], std::atof(argv[3]), std::atoi(argv[4]));
  }
  if (argc != 5) {
    std::fprintf(stderr,
                 "usage: tq-hostile-tenant RUN_DIR VICTIM OWN SECONDS\n"
                 "       tq-hostile-tenant --node-wide RUN_DIR SECONDS CONNECTIONS\n"
                 "       tq-hostile-tenant --reset-words RUN_DIR OWN SECONDS\n");
    return 2;
  }
  const std::string run = argv[1], victim = argv[2], own = argv[3];
  const double seconds = std::atof(argv[4]);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  namespace at = tq::attach;

  // ---- the victim's things ----
  const std::string vdir = at::tenantDir(run, victim), vsock = at::tenantSocketPath(run, victim);
  expectFail(::open(vdir.c_str(), O_RDONLY | O_DIRECTORY) < 0, "open " + vdir);
  expectFail(::open(vsock.c_str(), O_RDWR) < 0, "open " + vsock);
  expectFail(::truncate(vsock.c_str(), 0) != 0, "truncate " + vsock);
  expectFail(connectTo(vsock) < 0, "connect to " + vsock);
  expectFail(::open((vdir + "/x").c_str(), O_CREAT | O_WRONLY, 0666) < 0, "create in " + vdir);
  expectFail(::unlink(vsock.c_str()) != 0, "unlink " + vsock);
  expectFail(::rename(vdir.c_str(), (run + "/tenants/moved").c_str()) != 0, "rename " + vdir);
  expectFail(::open(at::trafficClassesPath(run).c_str(), O_WRONLY) < 0, "write traffic-classes");
  expectFail(::unlink(at::nodeSocketPath(run).c_str()) != 0, "unlink the node-wide socket");
  expectFail(::open((run + "/tenants/" + victim + "-fake").c_str(), O_CREAT | O_WRONLY, 0666) < 0,
             "create a file in " + run + "/tenants");

  // ---- its own tenant ----
  auto a = at::attachWithin(at::tenantSocketPath(run, own), own, 2000, tq::realClock());
  if (!a.ok()) {
    std::printf("ERROR: cannot attach to own tenant %s: %s\n", own.c_str(),
                a.status().message().c_str());
    return 1;
  }
  if (a->tenant != own) {
    std::printf("ERROR: attached to %s, not %s\n", a->tenant.c_str(), own.c_str());
    return 1;
  }
  const int pfd = a->params_fd.get(), sfd = a->shared_fd.get();
  const uint64_t huge = ~0ull;
  expectFail(::pwrite(pfd, &huge, sizeof(huge), 128 + 16) < 0, "write own parameters (rate)");
  expectFail(::ftruncate(pfd, 0) != 0, "truncate own parameters");
  expectFail(::ftruncate(sfd, 0) != 0, "truncate own shared memory");
  expectFail(::ftruncate(sfd, 1 << 30) != 0, "grow own shared memory");
  expectFail(::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, pfd, 0) == MAP_FAILED,
             "map own parameters writable");
  void* ro = ::mmap(nullptr, 4096, PROT_READ, MAP_SHARED, pfd, 0);
  const auto* page = static_cast<const tq::shm::ParamsPage*>(ro);
  expectFail(::mprotect(ro, 4096, PROT_READ | PROT_WRITE) != 0, "mprotect own parameters");
  expectFail(::fcntl(pfd, F_ADD_SEALS, F_SEAL_WRITE) != 0, "add a seal to own parameters");
  // The agent's fds (the victim's memory among them), through /proc.
  const std::string agent_fds = "/proc/" + std::to_string(page->header.agent_pid.load()) + "/fd";
  int opened = 0;
  if (DIR* d = ::opendir(agent_fds.c_str())) {
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] == '.') continue;
      if (::open((agent_fds + "/" + e->d_name).c_str(), O_RDONLY) >= 0) ++opened;
    }
    ::closedir(d);
    expectFail(opened == 0, "open the agent's fds through " + agent_fds);
  } else {
    expectFail(true, "list " + agent_fds);
  }

  // Garbage into everything of its own, and at the agent, for `seconds`.
  auto* shared = static_cast<uint8_t*>(
      ::mmap(nullptr, sizeof(tq::shm::SharedPage), PROT_READ | PROT_WRITE, MAP_SHARED, sfd, 0));
  std::mt19937_64 rng(42);
  std::vector<int> held;
  for (int i = 0; i < 200; ++i) {  // more than the agent's cap per socket: the rest refused
    const int c = connectTo(at::tenantSocketPath(run, own));
    if (c >= 0) held.push_back(c);
  }
  const int64_t specials[] = {0, INT64_MIN, INT64_MAX, -1, 1};
  const double end = now() + seconds;
  for (int round = 0; now() < end; ++round) {
    for (size_t i = 0; i < sizeof(tq::shm::SharedPage); i += 8) {
      const uint64_t v = rng();
      std::memcpy(shared + i, &v, 8);
    }
    reinterpret_cast<std::atomic<int64_t>*>(shared)->store(specials[round % 5]);
    // Garbage requests, fds and bytes after attaching, at the agent.
    const int c = connectTo(at::tenantSocketPath(run, own));
    if (c >= 0) {
      char junk[80];
      for (char& ch : junk) ch = static_cast<char>(rng());
      [[maybe_unused]] ssize_t n = ::send(c, junk, sizeof(junk), MSG_NOSIGNAL);
      ::close(c);
    }
    [[maybe_unused]] ssize_t n = ::send(a->conn.get(), "garbage", 7, MSG_NOSIGNAL | MSG_DONTWAIT);
    at::sendWithFds(a->conn.get(), "x", {sfd}).ignore();
    ::usleep(2000);
  }
  for (int c : held) ::close(c);
  std::printf("tampering done: %d attempt(s) that should have been refused were allowed\n",
              allowed);
  return allowed == 0 ? 0 : 1;
}
