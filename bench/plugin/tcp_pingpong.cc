// tq-tcp-pingpong: the baseline of the plugin's latency benchmark — a plain TCP ping-pong
// between two processes on loopback (TCP_NODELAY), polled the same way tenantqos-perf
// pingpong polls the plugin (non-blocking recv in a spin loop), or blocking.
//
//   tq-tcp-pingpong [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] [--poll spin|block]
//                   [--bufs BYTES]   (SO_SNDBUF/SO_RCVBUF, as the plugin's control stream)
//                   [--connections 1|2]  (2: one connection per direction, like NCCL's comms)
// Prints one JSON object per size:
// {"size":..,"iters":..,"rtt_us":..,"p50_rtt_us":..,"p99_rtt_us":..}
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

bool g_spin = true;
int g_bufs = 0;  // SO_SNDBUF/SO_RCVBUF when > 0
// One connection per direction, as NCCL's net API has (a send comm and a receive comm per
// peer): ping and pong then travel on different TCP connections and ACKs do not piggyback.
bool g_two_connections = false;

double nowUs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

void die(const char* what) {
  std::perror(what);
  std::exit(1);
}

void sendAll(int fd, const char* p, size_t n) {
  size_t off = 0;
  while (off < n) {
    const ssize_t w = ::send(fd, p + off, n - off, MSG_NOSIGNAL | (g_spin ? MSG_DONTWAIT : 0));
    if (w > 0)
      off += static_cast<size_t>(w);
    else if (w < 0 && errno != EAGAIN && errno != EINTR)
      die("send");
  }
}

void recvAll(int fd, char* p, size_t n) {
  size_t off = 0;
  while (off < n) {
    const ssize_t r = ::recv(fd, p + off, n - off, g_spin ? MSG_DONTWAIT : 0);
    if (r > 0)
      off += static_cast<size_t>(r);
    else if (r == 0)
      die("peer closed");
    else if (errno != EAGAIN && errno != EINTR)
      die("recv");
  }
}

void nodelay(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (g_bufs > 0) {
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &g_bufs, sizeof g_bufs);
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &g_bufs, sizeof g_bufs);
  }
}

}  // namespace

int main(int argc, char** argv) {
  size_t min = 8, max = 64 * 1024, factor = 2;
  int iters = 1000, warmup = 100;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const char* v = argv[i + 1];
    if (a == "-b")
      min = std::strtoull(v, nullptr, 10);
    else if (a == "-e")
      max = std::strtoull(v, nullptr, 10);
    else if (a == "-f")
      factor = std::strtoull(v, nullptr, 10);
    else if (a == "-n")
      iters = std::atoi(v);
    else if (a == "-w")
      warmup = std::atoi(v);
    else if (a == "--poll")
      g_spin = std::strcmp(v, "spin") == 0;
    else if (a == "--bufs")
      g_bufs = std::atoi(v);
    else if (a == "--connections")
      g_two_connections = std::atoi(v) == 2;
    else {
      std::fprintf(stderr, "unknown option %s\n", argv[i]);
      return 2;
    }
  }
  const int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(lfd, 2) != 0)
    die("listen");
  ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len);
  std::vector<char> buf(max);
  const pid_t child = ::fork();
  if (child == 0) {  // the echoing side
    const int fd = ::accept(lfd, nullptr, nullptr);
    nodelay(fd);
    int back = fd;
    if (g_two_connections) {
      back = ::accept(lfd, nullptr, nullptr);
      nodelay(back);
    }
    for (size_t size = min; size <= max; size *= factor) {
      for (int i = 0; i < warmup + iters; ++i) {
        recvAll(fd, buf.data(), size);
        sendAll(back, buf.data(), size);
      }
      if (factor < 2) break;
    }
    ::_exit(0);
  }
  ::close(lfd);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) die("connect");
  nodelay(fd);
  int back = fd;
  if (g_two_connections) {
    back = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(back, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) die("connect");
    nodelay(back);
  }
  for (size_t size = min; size <= max; size *= factor) {
    std::vector<double> rtts;
    for (int i = 0; i < warmup + iters; ++i) {
      const double t0 = nowUs();
      sendAll(fd, buf.data(), size);
      recvAll(back, buf.data(), size);
      if (i >= warmup) rtts.push_back(nowUs() - t0);
    }
    std::sort(rtts.begin(), rtts.end());
    double avg = 0;
    for (double r : rtts) avg += r;
    avg /= static_cast<double>(rtts.size());
    std::printf(
        "{\"type\":\"result\",\"mode\":\"tcp-pingpong\",\"connections\":%d,\"size\":%zu,\"iters\":%"
        "d,\"rtt_us\":%.3f,"
        "\"p50_rtt_us\":%.3f,\"p99_rtt_us\":%.3f}\n",
        g_two_connections ? 2 : 1, size, iters, avg, rtts[rtts.size() / 2],
        rtts[rtts.size() * 99 / 100]);
    std::fflush(stdout);
    if (factor < 2) break;
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
