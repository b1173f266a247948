// tenantqos-perf: drives an NCCL net plugin the way NCCL does, without NCCL or GPUs.
//
//   tenantqos-perf sendrecv  [options]   bandwidth over message sizes (nccl-tests sendrecv_perf:
//                                        rank r sends to r+1 and receives from r-1), or a
//                                        fixed-size stream for --duration seconds
//   tenantqos-perf allreduce [options]   ring reduce-scatter + all-gather over the plugin on
//                                        host float buffers, result verified; nccl-tests' algbw
//                                        and busbw = algbw * 2(n-1)/n
//   tenantqos-perf pingpong  [options]   round-trip latency between 2 ranks over message sizes
//
// Ranks are processes: --rank R --nranks N --rendezvous HOST:PORT (rank 0 listens there), or
// --local N to fork N ranks on this host. `tenantqos-perf --help` lists every option; docs/
// plugin.md documents the output formats (text, and --json: one JSON object per line).
//
// Robustness: every wait is bounded. A rank with no progress for --timeout seconds fails; a
// rank that dies closes its rendezvous and plugin connections, which makes the others fail
// with a message within a fraction of a second.
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/fd.h"
#include "common/status.h"
#include "common/units.h"
#include "nccl-plugin/perf/net_plugin.h"
#include "nccl-plugin/perf/rendezvous.h"

namespace tq::perf {
namespace {

enum class PollMode { kSpin, kYield, kSleep };

struct Options {
  std::string mode;
  std::string plugin;
  int rank = -1;
  int nranks = -1;
  std::string rendezvous;
  int local = 0;
  int dev = 0;
  int abi = 0;
  uint64_t min_bytes = 8;
  uint64_t max_bytes = 64ull << 20;
  uint64_t step_factor = 2;
  bool sizes_set = false;
  int iters = -1;
  int warmup = -1;
  double duration_s = 0;
  uint64_t size = 4ull << 20;
  int64_t report_ms = 0;
  int window = 8;
  uint64_t chunk = 512ull << 10;  // allreduce --duration: pipeline chunk
  int64_t on_ms = 0;              // allreduce --duration: on/off cycle (0 = always on)
  int64_t off_ms = 0;
  // -1: the cycle starts at the rank's start; else at wall-clock times (CLOCK_REALTIME ms) that
  // are PHASE_MS past a multiple of the cycle, so several jobs run on one schedule.
  int64_t phase_ms = -1;
  int64_t compute_ms = 0;  // allreduce --duration: idle this long after each complete iteration
  bool unidirectional = false;
  int traffic_class = -1;
  bool check = true;
  bool check_all = false;
  double timeout_s = 30;
  bool json = false;
  PollMode poll = PollMode::kYield;
  bool poll_set = false;
  std::vector<std::string> env;
  std::vector<std::pair<int, std::string>> rank_env;
};

// ---- output ---------------------------------------------------------------------------------

// One line per write(2) so lines of several ranks sharing stdout never interleave.
void emitLine(const std::string& line) {
  std::string l = line + "\n";
  size_t off = 0;
  while (off < l.size()) {
    const ssize_t n = ::write(1, l.data() + off, l.size() - off);
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

std::string jsonString(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      o += format("\\u%04x", c);
    } else {
      o += c;
    }
  }
  return o + "\"";
}

double cpuSeconds(bool user) {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  const timeval& t = user ? ru.ru_utime : ru.ru_stime;
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6;
}

int64_t nowNs() { return realClock().nowNs(); }

// ---- data patterns --------------------------------------------------------------------------

inline uint8_t patternByte(uint64_t i, int rank) {
  return static_cast<uint8_t>((i * 131u + static_cast<uint64_t>(rank) * 17u + 7u) ^ (i >> 11));
}
void fillPattern(uint8_t* p, uint64_t n, int rank) {
  for (uint64_t i = 0; i < n; ++i) p[i] = patternByte(i, rank);
}
uint64_t countWrongBytes(const uint8_t* p, uint64_t n, int rank) {
  uint64_t wrong = 0;
  for (uint64_t i = 0; i < n; ++i) wrong += p[i] != patternByte(i, rank) ? 1 : 0;
  return wrong;
}
// Allreduce inputs: small integers, so float sums are exact in any order.
inline float arValue(int rank, uint64_t i) {
  return static_cast<float>((rank + 1) * static_cast<int>((i % 13) + 1));
}

void* allocBuffer(uint64_t bytes) {
  void* p = nullptr;
  if (::posix_memalign(&p, 4096, std::max<uint64_t>(bytes, 64)) != 0) return nullptr;
  std::memset(p, 0, std::max<uint64_t>(bytes, 64));
  return p;
}

// Per-interval throughput lines of the streaming modes (text or JSON), shared by sendrecv and
// allreduce so both print the same format (docs/plugin.md).
class IntervalReporter {
 public:
  IntervalReporter(const char* mode, int rank, bool json, int64_t start_ns)
      : mode_(mode), rank_(rank), json_(json), start_(start_ns), last_(start_ns) {}
  int64_t last() const { return last_; }
  void report(int64_t now, uint64_t tx, uint64_t rx) {
    const double dt = static_cast<double>(now - last_) / 1e9;
    const double t = static_cast<double>(now - start_) / 1e9;
    const uint64_t dtx = tx - tx_rep_, drx = rx - rx_rep_;
    const double tx_gbps = dt > 0 ? dtx * 8 / dt / 1e9 : 0, rx_gbps = dt > 0 ? drx * 8 / dt / 1e9 : 0;
    if (json_) {
      emitLine(format("{\"type\":\"interval\",\"mode\":\"%s\",\"rank\":%d,\"t_s\":%.6f,"
                      "\"interval_s\":%.6f,\"wall_ns\":%" PRId64 ",\"tx_bytes\":%" PRIu64
                      ",\"rx_bytes\":%" PRIu64 ",\"tx_gbps\":%.4f,\"rx_gbps\":%.4f}",
                      mode_, rank_, t, dt, realClock().wallNs(), dtx, drx, tx_gbps, rx_gbps));
    } else {
      emitLine(format("interval %d %.3f %.3f %" PRIu64 " %" PRIu64 " %.3f %.3f", rank_, t, dt, dtx,
                      drx, tx_gbps, rx_gbps));
    }
    tx_rep_ = tx;
    rx_rep_ = rx;
    last_ = now;
  }

 private:
  const char* mode_;
  int rank_;
  bool json_;
  int64_t start_, last_;
  uint64_t tx_rep_ = 0, rx_rep_ = 0;
};

// ---- the per-rank run -------------------------------------------------------------------------

class Rank {
 public:
  Rank(Options o, int rank, int nranks) : o_(std::move(o)), rank_(rank), n_(nranks) {}
  ~Rank() {
    for (auto& [comm, mh] : mrs_) (void)net_->deregMr(comm, mh);
    if (net_ != nullptr) {
      if (send_ != nullptr) (void)net_->closeSend(send_);
      if (recv_ != nullptr) (void)net_->closeRecv(recv_);
      if (listen_ != nullptr) (void)net_->closeListen(listen_);
      (void)net_->finalize();
    }
    for (void* b : buffers_) std::free(b);
  }

  // `listen`: rank 0's already-listening rendezvous socket (--local), or invalid.
  Status run(Fd listen);

 private:
  Status setup(Fd listen);
  Status connectPeers();
  // Poll strategy, the no-progress deadline and the liveness of the other ranks. `paced`: an
  // isend was refused (NULL request); retry soon rather than after a long nap.
  Status idle(bool progressed, bool paced = false);
  void* buffer(uint64_t bytes);
  Result<void*> reg(void* comm, void* data, uint64_t bytes);
  Status waitAll(std::vector<void*>& reqs);

  Status runSendRecvSweep();
  Status runSendRecvDuration();
  Status runPingPong();
  Status runAllReduce();
  Status runAllReduceStream();
  Status sendRecvIterations(uint64_t size, int count, uint8_t* sbuf, void* smr,
                            const std::vector<uint8_t*>& rbufs, const std::vector<void*>& rmrs,
                            uint64_t* wrong, bool verify);
  Result<double> maxOverRanks(double v);

  // The zero-byte end marker of a streaming sender (its receiver stops at it): posted once
  // `ready` (all data sent), then tested to completion. Never blocks; sets *paced when the
  // plugin refused it, *progress when it moved.
  struct EndMarker {
    void* req = nullptr;
    bool sent = false;
    bool done = false;
  };
  Status stepEndMarker(bool ready, void* buf, void* mh, EndMarker* m, bool* progress, bool* paced);

  void header(const std::string& extra);

  Options o_;
  const int rank_;
  const int n_;
  std::unique_ptr<NetPlugin> net_;
  std::unique_ptr<Rendezvous> rv_;
  std::string dev_name_;
  int send_to_ = -1;
  int recv_from_ = -1;
  void* send_ = nullptr;
  void* recv_ = nullptr;
  void* listen_ = nullptr;
  std::vector<void*> buffers_;
  std::vector<std::pair<void*, void*>> mrs_;
  int64_t last_progress_ = 0;
  int64_t next_alive_check_ = 0;
  uint64_t idle_spins_ = 0;
  static constexpr int64_t kMinNapUs = 50;
  static constexpr int64_t kMaxNapUs = 1000;
  int64_t nap_us_ = kMinNapUs;
};

Status Rank::idle(bool progressed, bool paced) {
  const int64_t now = nowNs();
  if (progressed) {
    last_progress_ = now;
    idle_spins_ = 0;
    nap_us_ = std::max<int64_t>(nap_us_ / 2, kMinNapUs);  // keep most of the learned pace
    return okStatus();
  }
  if (now - last_progress_ > static_cast<int64_t>(o_.timeout_s * 1e9)) {
    return deadlineExceeded(format("no progress for %.1f s (peer stuck or gone; --timeout)",
                                   o_.timeout_s));
  }
  if (now >= next_alive_check_ && rv_ != nullptr) {
    next_alive_check_ = now + 100'000'000;
    TQ_RETURN_IF_ERROR(rv_->checkAlive());
  }
  ++idle_spins_;
  switch (o_.poll) {
    case PollMode::kSpin: break;
    case PollMode::kYield: ::sched_yield(); break;
    case PollMode::kSleep:
      // Back off while nothing completes: a few spins, then naps that double from 50 us up to
      // 1 ms and halve on progress, so a steady stream settles near its completion interval.
      // With --window messages queued in the plugin a nap never starves the transfer, and
      // fewer wake-ups leave the cores to the plugin's helper threads.
      if (idle_spins_ >= 16) {
        ::usleep(static_cast<useconds_t>(paced ? kMinNapUs : nap_us_));
        if (!paced) nap_us_ = std::min<int64_t>(nap_us_ * 2, kMaxNapUs);
      }
      break;
  }
  return okStatus();
}

void* Rank::buffer(uint64_t bytes) {
  void* b = allocBuffer(bytes);
  if (b != nullptr) buffers_.push_back(b);
  return b;
}

Result<void*> Rank::reg(void* comm, void* data, uint64_t bytes) {
  void* mh = nullptr;
  TQ_RETURN_IF_ERROR(net_->regMr(comm, data, std::max<uint64_t>(bytes, 64), &mh));
  mrs_.emplace_back(comm, mh);
  return mh;
}

Result<double> Rank::maxOverRanks(double v) {
  std::string mine(sizeof v, '\0');
  std::memcpy(mine.data(), &v, sizeof v);
  TQ_ASSIGN_OR_RETURN(auto all, rv_->allGather(mine));
  double m = v;
  for (const std::string& s : all) {
    double x = 0;
    if (s.size() == sizeof x) std::memcpy(&x, s.data(), sizeof x);
    m = std::max(m, x);
  }
  return m;
}

Status Rank::setup(Fd listen) {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  if (!listen.valid()) TQ_RETURN_IF_ERROR(parseHostPort(o_.rendezvous, &host, &port));
  const int64_t timeout_ns = static_cast<int64_t>(o_.timeout_s * 1e9);
  TQ_ASSIGN_OR_RETURN(rv_,
                      Rendezvous::create(rank_, n_, host, port, std::move(listen), timeout_ns));

  char self[4096];
  std::vector<std::string> dirs;
  const ssize_t len = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (len > 0) {
    self[len] = '\0';
    std::string dir(self);
    dir = dir.substr(0, dir.rfind('/'));
    dirs = {dir + "/../lib", dir};
  }
  TQ_ASSIGN_OR_RETURN(net_, NetPlugin::load(o_.plugin, dirs, o_.abi));
  // commId: the same on every rank of this run (like NCCL's commHash).
  TQ_RETURN_IF_ERROR(net_->init(0x7471706572660000ull + static_cast<uint64_t>(n_), o_.traffic_class));
  TQ_ASSIGN_OR_RETURN(int ndev, net_->devices());
  if (o_.dev < 0 || o_.dev >= ndev) {
    return invalidArgument(format("--dev %d: the plugin has %d device(s)", o_.dev, ndev));
  }
  TQ_ASSIGN_OR_RETURN(dev_name_, net_->deviceName(o_.dev));

  if (o_.mode == "pingpong") {
    send_to_ = recv_from_ = 1 - rank_;
  } else if (o_.mode == "sendrecv" && o_.unidirectional) {
    if (rank_ % 2 == 0) send_to_ = rank_ + 1;
    else recv_from_ = rank_ - 1;
  } else if (n_ > 1) {
    send_to_ = (rank_ + 1) % n_;
    recv_from_ = (rank_ - 1 + n_) % n_;
  }
  return connectPeers();
}

Status Rank::connectPeers() {
  NetHandle mine{};
  if (recv_from_ >= 0) TQ_RETURN_IF_ERROR(net_->listen(o_.dev, &mine, &listen_));
  const std::string blob = recv_from_ >= 0 ? std::string(mine.bytes, sizeof mine.bytes) : "";
  TQ_ASSIGN_OR_RETURN(auto all, rv_->allGather(blob));
  NetHandle peer{};
  if (send_to_ >= 0) {
    if (all[send_to_].size() != sizeof peer.bytes) {
      return internalError(format("rank %d published no listen handle", send_to_));
    }
    std::memcpy(peer.bytes, all[send_to_].data(), sizeof peer.bytes);
  }
  last_progress_ = nowNs();
  // Connect and accept polled alternately: blocking in either would deadlock the ring.
  while ((send_to_ >= 0 && send_ == nullptr) || (recv_from_ >= 0 && recv_ == nullptr)) {
    bool progress = false;
    if (send_to_ >= 0 && send_ == nullptr) {
      TQ_RETURN_IF_ERROR_CTX(net_->connect(o_.dev, &peer, &send_),
                             format("connect to rank %d", send_to_));
      progress |= send_ != nullptr;
    }
    if (recv_from_ >= 0 && recv_ == nullptr) {
      TQ_RETURN_IF_ERROR_CTX(net_->accept(listen_, &recv_), format("accept from rank %d", recv_from_));
      progress |= recv_ != nullptr;
    }
    TQ_RETURN_IF_ERROR_CTX(idle(progress), "connecting");
  }
  return rv_->barrier();
}

void Rank::header(const std::string& extra) {
  if (rank_ != 0) return;
  if (o_.json) {
    emitLine(format("{\"type\":\"config\",\"mode\":%s,\"plugin\":%s,\"plugin_name\":%s,\"abi\":%d,"
                    "\"nranks\":%d,\"dev\":%d,\"dev_name\":%s,\"window\":%d,\"traffic_class\":%d}",
                    jsonString(o_.mode).c_str(), jsonString(net_->path()).c_str(),
                    jsonString(net_->name()).c_str(), net_->abi(), n_, o_.dev,
                    jsonString(dev_name_).c_str(), o_.window, o_.traffic_class));
    return;
  }
  emitLine(format("# tenantqos-perf %s | plugin %s (%s, ABI v%d) | nranks %d | device %d (%s) | "
                  "window %d | trafficClass %d%s",
                  o_.mode.c_str(), net_->path().c_str(), net_->name(), net_->abi(), n_, o_.dev,
                  dev_name_.c_str(), o_.window, o_.traffic_class, extra.c_str()));
}

Status Rank::waitAll(std::vector<void*>& reqs) {
  for (;;) {
    bool progress = false, all = true;
    for (void*& r : reqs) {
      if (r == nullptr) continue;
      bool done = false;
      TQ_RETURN_IF_ERROR(net_->test(r, &done, nullptr));
      if (done) {
        r = nullptr;
        progress = true;
      } else {
        all = false;
      }
    }
    if (all) return okStatus();
    TQ_RETURN_IF_ERROR(idle(progress));
  }
}

// `count` messages of `size` from this rank to send_to_ and from recv_from_, at most
// o_.window in flight each way, completions tested oldest first.
Status Rank::sendRecvIterations(uint64_t size, int count, uint8_t* sbuf, void* smr,
                                const std::vector<uint8_t*>& rbufs,
                                const std::vector<void*>& rmrs, uint64_t* wrong, bool verify) {
  const int w = static_cast<int>(rbufs.size());
  std::vector<void*> sreq(static_cast<size_t>(w), nullptr), rreq(static_cast<size_t>(w), nullptr);
  int sposted = 0, sdone = 0, rposted = 0, rdone = 0;
  const bool sender = send_ != nullptr, receiver = recv_ != nullptr;
  while ((sender && sdone < count) || (receiver && rdone < count)) {
    bool progress = false, paced = false;
    while (receiver && rposted < count && rposted - rdone < w) {
      void*& r = rreq[static_cast<size_t>(rposted % w)];
      TQ_RETURN_IF_ERROR_CTX(net_->irecv(recv_, rbufs[static_cast<size_t>(rposted % w)], size, 0,
                                         rmrs[static_cast<size_t>(rposted % w)], &r),
                             format("receive from rank %d", recv_from_));
      if (r == nullptr) break;
      ++rposted;
      progress = true;
    }
    while (sender && sposted < count && sposted - sdone < w) {
      void*& r = sreq[static_cast<size_t>(sposted % w)];
      TQ_RETURN_IF_ERROR_CTX(net_->isend(send_, sbuf, size, rank_, smr, &r),
                             format("send to rank %d", send_to_));
      if (r == nullptr) {  // the plugin asks us to retry (paced)
        paced = true;
        break;
      }
      ++sposted;
      progress = true;
    }
    while (sender && sdone < sposted) {
      bool done = false;
      TQ_RETURN_IF_ERROR_CTX(net_->test(sreq[static_cast<size_t>(sdone % w)], &done, nullptr),
                             format("send to rank %d", send_to_));
      if (!done) break;
      ++sdone;
      progress = true;
    }
    while (receiver && rdone < rposted) {
      bool done = false;
      int got = -1;
      TQ_RETURN_IF_ERROR_CTX(net_->test(rreq[static_cast<size_t>(rdone % w)], &done, &got),
                             format("receive from rank %d", recv_from_));
      if (!done) break;
      if (static_cast<uint64_t>(got) != size) {
        return dataLoss(format("rank %d: received %d bytes from rank %d, expected %" PRIu64, rank_,
                               got, recv_from_, size));
      }
      if (verify && (o_.check_all || rdone == count - 1)) {
        *wrong += countWrongBytes(rbufs[static_cast<size_t>(rdone % w)], size, recv_from_);
      }
      ++rdone;
      progress = true;
    }
    TQ_RETURN_IF_ERROR(idle(progress, paced));
  }
  return okStatus();
}

Status Rank::runSendRecvSweep() {
  const int iters = o_.iters >= 0 ? o_.iters : 20;
  const int warmup = o_.warmup >= 0 ? o_.warmup : 5;
  const int w = static_cast<int>(std::max<uint64_t>(
      1, std::min<uint64_t>(static_cast<uint64_t>(o_.window), (1ull << 30) / std::max<uint64_t>(o_.max_bytes, 1))));
  auto* sbuf = static_cast<uint8_t*>(buffer(o_.max_bytes));
  std::vector<uint8_t*> rbufs;
  for (int i = 0; i < w; ++i) rbufs.push_back(static_cast<uint8_t*>(buffer(o_.max_bytes)));
  if (sbuf == nullptr || rbufs.back() == nullptr) return resourceExhausted("out of memory for buffers");
  fillPattern(sbuf, o_.max_bytes, rank_);
  void* smr = nullptr;
  std::vector<void*> rmrs(rbufs.size(), nullptr);
  if (send_ != nullptr) {
    TQ_ASSIGN_OR_RETURN(smr, reg(send_, sbuf, o_.max_bytes));
  }
  if (recv_ != nullptr) {
    // One registration per buffer; the plugin's mhandle argument is per-buffer in NCCL too.
    for (size_t i = 0; i < rbufs.size(); ++i) {
      TQ_ASSIGN_OR_RETURN(rmrs[i], reg(recv_, rbufs[i], o_.max_bytes));
    }
  }
  header(format(" | iters %d warmup %d", iters, warmup));
  if (rank_ == 0 && !o_.json) {
    emitLine("#");
    emitLine("#        size       count    time(us)  algbw(GB/s)  busbw(GB/s)   #wrong");
  }
  for (uint64_t size = o_.min_bytes; size <= o_.max_bytes;
       size = o_.step_factor > 1 ? size * o_.step_factor : size + 1) {
    uint64_t wrong = 0;
    TQ_RETURN_IF_ERROR(sendRecvIterations(size, warmup, sbuf, smr, rbufs, rmrs, &wrong, false));
    TQ_RETURN_IF_ERROR(rv_->barrier());
    const int64_t t0 = nowNs();
    TQ_RETURN_IF_ERROR(sendRecvIterations(size, iters, sbuf, smr, rbufs, rmrs, &wrong, o_.check));
    const double us = iters > 0 ? static_cast<double>(nowNs() - t0) / 1e3 / iters : 0;
    TQ_ASSIGN_OR_RETURN(double max_us, maxOverRanks(us));
    TQ_ASSIGN_OR_RETURN(double total_wrong, maxOverRanks(static_cast<double>(wrong)));
    const double algbw = max_us > 0 ? static_cast<double>(size) / (max_us * 1e3) : 0;  // GB/s
    if (rank_ == 0) {
      if (o_.json) {
        emitLine(format("{\"type\":\"result\",\"mode\":\"sendrecv\",\"nranks\":%d,\"size\":%" PRIu64
                        ",\"count\":%" PRIu64 ",\"dtype\":\"float\",\"iters\":%d,\"time_us\":%.3f,"
                        "\"algbw_GBps\":%.4f,\"busbw_GBps\":%.4f,\"wrong\":%.0f}",
                        n_, size, size / 4, iters, max_us, algbw, algbw, total_wrong));
      } else {
        emitLine(format("%13" PRIu64 " %11" PRIu64 " %11.2f %12.3f %12.3f %8.0f", size, size / 4,
                        max_us, algbw, algbw, total_wrong));
      }
    }
    if (total_wrong > 0) return dataLoss(format("%.0f corrupted bytes at size %" PRIu64, total_wrong, size));
    if (o_.step_factor <= 1 && size == o_.max_bytes) break;
  }
  return okStatus();
}

// Streams messages of o_.size for o_.duration_s, then a zero-byte end marker; prints
// per-interval throughput lines when o_.report_ms > 0.
Status Rank::runSendRecvDuration() {
  const uint64_t size = std::max<uint64_t>(o_.size, 1);
  const int w = std::max(1, o_.window);
  auto* sbuf = static_cast<uint8_t*>(buffer(size));
  std::vector<uint8_t*> rbufs;
  for (int i = 0; i < w; ++i) rbufs.push_back(static_cast<uint8_t*>(buffer(size)));
  if (sbuf == nullptr || rbufs.back() == nullptr) return resourceExhausted("out of memory for buffers");
  fillPattern(sbuf, size, rank_);
  void* smr = nullptr;
  std::vector<void*> rmrs(rbufs.size(), nullptr);
  if (send_ != nullptr) {
    TQ_ASSIGN_OR_RETURN(smr, reg(send_, sbuf, size));
  }
  if (recv_ != nullptr) {
    for (size_t i = 0; i < rbufs.size(); ++i) {
      TQ_ASSIGN_OR_RETURN(rmrs[i], reg(recv_, rbufs[i], size));
    }
  }
  header(format(" | duration %.2f s | size %" PRIu64 " | report %" PRId64 " ms", o_.duration_s,
                size, o_.report_ms));
  if (rank_ == 0 && !o_.json && o_.report_ms > 0) {
    emitLine("# interval rank  t(s)  dt(s)  tx_bytes  rx_bytes  tx(Gbit/s)  rx(Gbit/s)");
  }
  TQ_RETURN_IF_ERROR(rv_->barrier());
  const double cpu_u0 = cpuSeconds(true), cpu_s0 = cpuSeconds(false);
  const int64_t start = nowNs();
  const int64_t end = start + static_cast<int64_t>(o_.duration_s * 1e9);
  const int64_t report_ns = o_.report_ms * 1'000'000;
  IntervalReporter rep("sendrecv", rank_, o_.json, start);
  uint64_t tx = 0, rx = 0, wrong = 0;
  std::vector<void*> sreq(static_cast<size_t>(w), nullptr), rreq(static_cast<size_t>(w), nullptr);
  uint64_t sposted = 0, sdone = 0, rposted = 0, rdone = 0;
  EndMarker marker;
  marker.done = send_ == nullptr;
  bool got_marker = recv_ == nullptr;


  while (!marker.done || !got_marker) {
    bool progress = false, paced = false;
    const int64_t now = nowNs();
    if (report_ns > 0 && now - rep.last() >= report_ns) rep.report(now, tx, rx);
    // Receives: keep w posted until the end marker arrives.
    while (!got_marker && recv_ != nullptr && rposted - rdone < static_cast<uint64_t>(w)) {
      void*& r = rreq[rposted % static_cast<uint64_t>(w)];
      TQ_RETURN_IF_ERROR_CTX(net_->irecv(recv_, rbufs[rposted % static_cast<uint64_t>(w)], size, 0,
                                         rmrs[rposted % static_cast<uint64_t>(w)], &r),
                             format("receive from rank %d", recv_from_));
      if (r == nullptr) break;
      ++rposted;
      progress = true;
    }
    while (!got_marker && recv_ != nullptr && rdone < rposted) {
      bool done = false;
      int got = -1;
      TQ_RETURN_IF_ERROR_CTX(net_->test(rreq[rdone % static_cast<uint64_t>(w)], &done, &got),
                             format("receive from rank %d", recv_from_));
      if (!done) break;
      progress = true;
      if (got == 0) {
        got_marker = true;  // the remaining posted receives stay in flight until close
        break;
      }
      if (static_cast<uint64_t>(got) != size) {
        return dataLoss(format("received %d bytes, expected %" PRIu64, got, size));
      }
      if (o_.check && (o_.check_all || rdone == 0)) {
        wrong += countWrongBytes(rbufs[rdone % static_cast<uint64_t>(w)], size, recv_from_);
      }
      rx += size;
      ++rdone;
    }
    // Sends: keep w in flight until the duration ends, then drain and send the marker.
    if (send_ != nullptr) {
      while (now < end && sposted - sdone < static_cast<uint64_t>(w)) {
        void*& r = sreq[sposted % static_cast<uint64_t>(w)];
        TQ_RETURN_IF_ERROR_CTX(net_->isend(send_, sbuf, size, rank_, smr, &r),
                               format("send to rank %d", send_to_));
        if (r == nullptr) {  // paced: retry on the next pass
          paced = true;
          break;
        }
        ++sposted;
        progress = true;
      }
      while (sdone < sposted) {
        bool done = false;
        TQ_RETURN_IF_ERROR_CTX(net_->test(sreq[sdone % static_cast<uint64_t>(w)], &done, nullptr),
                               format("send to rank %d", send_to_));
        if (!done) break;
        tx += size;
        ++sdone;
        progress = true;
      }
      TQ_RETURN_IF_ERROR(
          stepEndMarker(now >= end && sdone == sposted, sbuf, smr, &marker, &progress, &paced));
    }
    TQ_RETURN_IF_ERROR(idle(progress, paced));
  }
  const int64_t stop = nowNs();
  if (report_ns > 0 && stop - rep.last() > 1'000'000) rep.report(stop, tx, rx);
  const double elapsed = static_cast<double>(stop - start) / 1e9;
  const double cpu_u = cpuSeconds(true) - cpu_u0, cpu_s = cpuSeconds(false) - cpu_s0;
  if (o_.json) {
    emitLine(format("{\"type\":\"summary\",\"mode\":\"sendrecv\",\"rank\":%d,\"nranks\":%d,"
                    "\"size\":%" PRIu64 ",\"elapsed_s\":%.6f,\"tx_bytes\":%" PRIu64
                    ",\"rx_bytes\":%" PRIu64 ",\"tx_gbps\":%.4f,\"rx_gbps\":%.4f,\"cpu_user_s\":%.4f,"
                    "\"cpu_sys_s\":%.4f,\"wrong\":%" PRIu64 "}",
                    rank_, n_, size, elapsed, tx, rx, tx * 8 / elapsed / 1e9, rx * 8 / elapsed / 1e9,
                    cpu_u, cpu_s, wrong));
  } else {
    emitLine(format("summary rank %d: %.3f s, tx %" PRIu64 " B (%.3f Gbit/s), rx %" PRIu64
                    " B (%.3f Gbit/s), cpu %.3f s user %.3f s sys, %" PRIu64 " wrong bytes",
                    rank_, elapsed, tx, tx * 8 / elapsed / 1e9, rx, rx * 8 / elapsed / 1e9, cpu_u,
                    cpu_s, wrong));
  }
  if (wrong > 0) return dataLoss(format("%" PRIu64 " corrupted bytes received", wrong));
  return rv_->barrier();
}

Status Rank::stepEndMarker(bool ready, void* buf, void* mh, EndMarker* m, bool* progress,
                           bool* paced) {
  if (ready && !m->sent) {
    TQ_RETURN_IF_ERROR(net_->isend(send_, buf, 0, rank_, mh, &m->req));
    if (m->req == nullptr) {
      *paced = true;
      return okStatus();
    }
    m->sent = true;
    *progress = true;
  }
  if (m->sent && !m->done) {
    bool done = false;
    TQ_RETURN_IF_ERROR(net_->test(m->req, &done, nullptr));
    if (done) {
      m->done = true;
      *progress = true;
    }
  }
  return okStatus();
}

// Streaming ring allreduce (--duration). Back-to-back allreduces of --size floats, NCCL-style:
// each of the 2(n-1) ring steps is cut into --chunk pieces, chunk j of step s+1 goes out as soon
// as chunk j of step s has arrived (and, in the reduce-scatter, been reduced), and up to
// --window sends and receives are in flight, so the link sees a steady stream rather than one
// message per step. Tasks are numbered globally (iteration, step, chunk); sends and receives
// are posted in that order on both sides, which is how they match.
//
// Ending without a deadlock: ranks decide to stop on their own clocks, so they may disagree by
// an iteration. A rank that stops posts no more data, lets its sends complete, then sends a
// zero-byte marker; it keeps receiving (discarding) until the marker of its predecessor
// arrives. A rank that receives a marker stops the same way. Only complete iterations count.
Status Rank::runAllReduceStream() {
  const uint64_t n = static_cast<uint64_t>(n_);
  const uint64_t count = std::max<uint64_t>(o_.size / sizeof(float) / n, 1) * n;
  const uint64_t bytes = count * sizeof(float);
  const uint64_t chunk_f = std::max<uint64_t>(o_.chunk / sizeof(float), 1);
  const uint64_t seg_f = count / n;  // equal segments
  const uint64_t cps = (seg_f + chunk_f - 1) / chunk_f;  // chunks per segment (= per step)
  const uint64_t steps = 2 * (n - 1);
  const uint64_t tpi = steps * cps;  // tasks per iteration
  const uint64_t w = static_cast<uint64_t>(std::max(1, o_.window));

  auto* sendbuf = static_cast<float*>(buffer(bytes));
  float* red[2] = {static_cast<float*>(buffer(bytes)), static_cast<float*>(buffer(bytes))};
  auto* tmp = static_cast<float*>(buffer(w * chunk_f * sizeof(float)));
  if (sendbuf == nullptr || red[0] == nullptr || red[1] == nullptr || tmp == nullptr) {
    return resourceExhausted("out of memory for buffers");
  }
  for (uint64_t i = 0; i < count; ++i) sendbuf[i] = arValue(rank_, i);
  void *m_send = nullptr, *m_red_s[2] = {nullptr, nullptr}, *m_red_r[2] = {nullptr, nullptr},
       *m_tmp = nullptr;
  if (n_ > 1) {
    TQ_ASSIGN_OR_RETURN(m_send, reg(send_, sendbuf, bytes));
    for (int b = 0; b < 2; ++b) {
      TQ_ASSIGN_OR_RETURN(m_red_s[b], reg(send_, red[b], bytes));
      TQ_ASSIGN_OR_RETURN(m_red_r[b], reg(recv_, red[b], bytes));
    }
    TQ_ASSIGN_OR_RETURN(m_tmp, reg(recv_, tmp, w * chunk_f * sizeof(float)));
  }
  header(format(" | allreduce stream %.2f s | size %" PRIu64 " | chunk %" PRIu64
                " | window %" PRIu64 " | report %" PRId64 " ms",
                o_.duration_s, bytes, chunk_f * sizeof(float), w, o_.report_ms));
  if (n_ == 1) return invalidArgument("allreduce --duration needs at least 2 ranks");

  struct Task {
    uint64_t iter, step, chunk;
  };
  auto task = [&](uint64_t t) { return Task{t / tpi, (t % tpi) / cps, t % cps}; };
  auto sendSeg = [&](uint64_t s) -> uint64_t {
    const uint64_t r = static_cast<uint64_t>(rank_);
    if (s < n - 1) return (r + n - s) % n;
    return (r + 1 + n - (s - (n - 1))) % n;
  };
  auto recvSeg = [&](uint64_t s) -> uint64_t {
    const uint64_t r = static_cast<uint64_t>(rank_);
    if (s < n - 1) return (r + 2 * n - s - 1) % n;
    return (r + n - (s - (n - 1))) % n;
  };
  // [first float, float count) of chunk c of segment g.
  auto span = [&](uint64_t g, uint64_t c) {
    const uint64_t lo = g * seg_f + c * chunk_f;
    return std::make_pair(lo, std::min(chunk_f, seg_f - c * chunk_f));
  };

  if (rank_ == 0 && !o_.json && o_.report_ms > 0) {
    emitLine("# interval rank  t(s)  dt(s)  tx_bytes  rx_bytes  tx(Gbit/s)  rx(Gbit/s)");
  }
  TQ_RETURN_IF_ERROR(rv_->barrier());
  const double cpu_u0 = cpuSeconds(true), cpu_s0 = cpuSeconds(false);
  const int64_t start = nowNs();
  const int64_t end = start + static_cast<int64_t>(o_.duration_s * 1e9);
  const int64_t report_ns = o_.report_ms * 1'000'000;
  const int64_t cycle_ns = (o_.on_ms + o_.off_ms) * 1'000'000;
  IntervalReporter rep("allreduce", rank_, o_.json, start);
  uint64_t tx = 0, rx = 0;

  std::vector<void*> sreq(w, nullptr), rreq(w, nullptr);
  uint64_t s_posted = 0, s_done = 0, r_posted = 0, r_done = 0;
  // Stopping: no send task at or beyond s_limit and no real receive at or beyond r_limit.
  uint64_t s_limit = UINT64_MAX, r_limit = UINT64_MAX;
  bool stopping = false, marker_rcvd = false;
  EndMarker marker;
  uint64_t complete_iters = 0, wrong = 0;
  int64_t last_complete_ns = start;

  // With a PHASE_MS the cycle runs on the wall clock (jobs on one schedule), else from start.
  const int64_t cycle_origin =
      o_.phase_ms < 0 ? start : start - (realClock().wallNs() - o_.phase_ms * 1'000'000);
  const int64_t compute_ns = o_.compute_ms * 1'000'000;
  // A new iteration may start only while running, (with --on-off) in the "on" phase and (with
  // --compute-ms) when the previous one is complete and its compute phase is over.
  auto mayStartIteration = [&](int64_t now, uint64_t iter) {
    if (now >= end) return false;
    if (o_.compute_ms > 0 && iter > 0 &&
        (complete_iters < iter || now < last_complete_ns + compute_ns)) {
      return false;
    }
    if (cycle_ns <= 0) return true;
    const int64_t in_cycle = ((now - cycle_origin) % cycle_ns + cycle_ns) % cycle_ns;
    return in_cycle < o_.on_ms * 1'000'000;
  };
  auto beginStop = [&]() {
    if (stopping) return;
    stopping = true;
    // Everything already posted completes; nothing new is posted, and later receives only
    // drain what the predecessor still sends (up to its marker).
    s_limit = s_posted;
    r_limit = r_posted;
  };

  while (!(marker.done && marker_rcvd)) {
    bool progress = false, paced = false;
    const int64_t now = nowNs();
    if (report_ns > 0 && now - rep.last() >= report_ns) rep.report(now, tx, rx);
    if (now >= end) beginStop();

    // Receives, in task order. Stopping: keep receiving (discarding) until the marker.
    while (!marker_rcvd && r_posted - r_done < w) {
      const uint64_t slot = r_posted % w;
      void*& r = rreq[slot];
      float* dst = tmp + slot * chunk_f;
      void* mh = m_tmp;
      if (r_posted < r_limit) {
        const Task t = task(r_posted);
        if (t.chunk == 0 && t.step == 0 && !mayStartIteration(now, t.iter)) break;
        // red[b] of iteration i is reused by iteration i+2: its sends must be complete.
        if (t.iter >= 2 && s_done < (t.iter - 1) * tpi) break;
        if (t.step >= n - 1) {  // all-gather: straight into the result
          const auto [lo, len] = span(recvSeg(t.step), t.chunk);
          (void)len;
          dst = red[t.iter % 2] + lo;
          mh = m_red_r[t.iter % 2];
        }
      }
      TQ_RETURN_IF_ERROR_CTX(net_->irecv(recv_, dst, chunk_f * sizeof(float), 0, mh, &r),
                             format("receive from rank %d", recv_from_));
      if (r == nullptr) break;
      ++r_posted;
      progress = true;
    }
    while (r_done < r_posted) {
      const uint64_t slot = r_done % w;
      bool done = false;
      int got = -1;
      TQ_RETURN_IF_ERROR_CTX(net_->test(rreq[slot], &done, &got),
                             format("receive from rank %d", recv_from_));
      if (!done) break;
      progress = true;
      if (got == 0) {  // the predecessor's end marker
        marker_rcvd = true;
        beginStop();
        ++r_done;
        break;
      }
      rx += static_cast<uint64_t>(got);
      if (r_done < r_limit) {
        const Task t = task(r_done);
        const auto [lo, len] = span(recvSeg(t.step), t.chunk);
        if (static_cast<uint64_t>(got) != len * sizeof(float)) {
          return dataLoss(format("received %d bytes for a %" PRIu64 "-byte chunk", got,
                                 len * sizeof(float)));
        }
        if (t.step < n - 1) {  // reduce-scatter: own contribution + partial sum
          float* out = red[t.iter % 2] + lo;
          const float* in = sendbuf + lo;
          const float* part = tmp + slot * chunk_f;
          for (uint64_t i = 0; i < len; ++i) out[i] = in[i] + part[i];
        }
      }
      ++r_done;
    }

    // Sends, in task order; chunk j of step s waits for chunk j of step s-1 to arrive.
    while (s_posted < s_limit && s_posted - s_done < w) {
      const Task t = task(s_posted);
      if (t.step == 0 && t.chunk == 0 && !mayStartIteration(now, t.iter)) break;
      if (t.step > 0 && r_done <= s_posted - cps) break;
      const auto [lo, len] = span(sendSeg(t.step), t.chunk);
      float* src = t.step == 0 ? sendbuf + lo : red[t.iter % 2] + lo;
      void* mh = t.step == 0 ? m_send : m_red_s[t.iter % 2];
      void*& r = sreq[s_posted % w];
      TQ_RETURN_IF_ERROR_CTX(net_->isend(send_, src, len * sizeof(float), rank_, mh, &r),
                             format("send to rank %d", send_to_));
      if (r == nullptr) {  // paced: retry on the next pass
        paced = true;
        break;
      }
      ++s_posted;
      progress = true;
    }
    while (s_done < s_posted) {
      bool done = false;
      int got = -1;
      TQ_RETURN_IF_ERROR_CTX(net_->test(sreq[s_done % w], &done, &got),
                             format("send to rank %d", send_to_));
      if (!done) break;
      tx += static_cast<uint64_t>(std::max(got, 0));
      ++s_done;
      progress = true;
    }
    // An iteration is complete when all its receives (the result) and sends are done.
    while ((complete_iters + 1) * tpi <= std::min(r_done, s_done) &&
           (complete_iters + 1) * tpi <= std::min(s_limit, r_limit)) {
      const uint64_t it = complete_iters;
      if (o_.check && it == 0) {
        const float ranks_sum = static_cast<float>(n_ * (n_ + 1) / 2);
        const float* res = red[it % 2];
        for (uint64_t i = 0; i < count; ++i) {
          wrong += res[i] != ranks_sum * static_cast<float>((i % 13) + 1) ? 1 : 0;
        }
      }
      ++complete_iters;
      last_complete_ns = nowNs();
      if (o_.compute_ms > 0 && o_.json) {
        emitLine(format("{\"type\":\"iteration\",\"rank\":%d,\"iter\":%" PRIu64
                        ",\"wall_ns\":%" PRId64 "}",
                        rank_, it, realClock().wallNs()));
      }
    }
    TQ_RETURN_IF_ERROR(
        stepEndMarker(stopping && s_done == s_posted, sendbuf, m_send, &marker, &progress, &paced));
    TQ_RETURN_IF_ERROR(idle(progress, paced));
  }
  const int64_t stop = nowNs();
  if (report_ns > 0 && stop - rep.last() > 1'000'000) rep.report(stop, tx, rx);
  // busbw over the complete iterations (nccl-tests' formula).
  const double elapsed = static_cast<double>(last_complete_ns - start) / 1e9;
  TQ_ASSIGN_OR_RETURN(double max_elapsed, maxOverRanks(elapsed));
  const double algbw = max_elapsed > 0 ? static_cast<double>(complete_iters * bytes) / max_elapsed / 1e9 : 0;
  const double busbw = algbw * 2.0 * (n_ - 1) / n_;
  const double cpu_u = cpuSeconds(true) - cpu_u0, cpu_s = cpuSeconds(false) - cpu_s0;
  const double run_s = static_cast<double>(stop - start) / 1e9;
  if (o_.json) {
    emitLine(format("{\"type\":\"summary\",\"mode\":\"allreduce\",\"rank\":%d,\"nranks\":%d,"
                    "\"size\":%" PRIu64 ",\"iterations\":%" PRIu64 ",\"elapsed_s\":%.6f,"
                    "\"algbw_GBps\":%.4f,\"busbw_GBps\":%.4f,\"tx_bytes\":%" PRIu64
                    ",\"rx_bytes\":%" PRIu64 ",\"tx_gbps\":%.4f,\"rx_gbps\":%.4f,\"cpu_user_s\":%.4f,"
                    "\"cpu_sys_s\":%.4f,\"wrong\":%" PRIu64 "}",
                    rank_, n_, bytes, complete_iters, max_elapsed, algbw, busbw, tx, rx,
                    run_s > 0 ? tx * 8 / run_s / 1e9 : 0, run_s > 0 ? rx * 8 / run_s / 1e9 : 0,
                    cpu_u, cpu_s, wrong));
  } else {
    emitLine(format("summary rank %d: %" PRIu64 " allreduces of %" PRIu64 " B in %.3f s: algbw %.4f "
                    "GB/s busbw %.4f GB/s; tx %" PRIu64 " B rx %" PRIu64 " B; cpu %.3f s user %.3f s "
                    "sys; %" PRIu64 " wrong",
                    rank_, complete_iters, bytes, max_elapsed, algbw, busbw, tx, rx, cpu_u, cpu_s,
                    wrong));
  }
  if (wrong > 0) return dataLoss(format("allreduce result wrong in %" PRIu64 " elements", wrong));
  return rv_->barrier();
}

Status Rank::runPingPong() {
  const int iters = o_.iters >= 0 ? o_.iters : 1000;
  const int warmup = o_.warmup >= 0 ? o_.warmup : 100;
  auto* sbuf = static_cast<uint8_t*>(buffer(o_.max_bytes));
  auto* rbuf = static_cast<uint8_t*>(buffer(o_.max_bytes));
  if (sbuf == nullptr || rbuf == nullptr) return resourceExhausted("out of memory for buffers");
  fillPattern(sbuf, o_.max_bytes, rank_);
  TQ_ASSIGN_OR_RETURN(void* smr, reg(send_, sbuf, o_.max_bytes));
  TQ_ASSIGN_OR_RETURN(void* rmr, reg(recv_, rbuf, o_.max_bytes));
  TQ_ASSIGN_OR_RETURN(void* echo_mr, reg(send_, rbuf, o_.max_bytes));
  header(format(" | iters %d warmup %d", iters, warmup));
  if (rank_ == 0 && !o_.json) {
    emitLine("#");
    emitLine("#        size   iters    rtt(us)    lat(us) p50rtt(us) p99rtt(us)   #wrong");
  }
  auto waitOne = [&](void* req, int* got) -> Status {
    bool done = false;
    while (!done) {
      TQ_RETURN_IF_ERROR(net_->test(req, &done, got));
      if (!done) TQ_RETURN_IF_ERROR(idle(false));
    }
    return idle(true);
  };
  // Rank 0 sends its pattern; rank 1 echoes the buffer it received (like a TCP ping-pong).
  auto sendOne = [&](uint64_t size) -> Status {
    void* r = nullptr;
    while (r == nullptr) {
      TQ_RETURN_IF_ERROR(net_->isend(send_, rank_ == 0 ? sbuf : rbuf, size, rank_, rank_ == 0 ? smr : echo_mr, &r));
      if (r == nullptr) TQ_RETURN_IF_ERROR(idle(false, true));
    }
    return waitOne(r, nullptr);
  };
  for (uint64_t size = o_.min_bytes; size <= o_.max_bytes;
       size = o_.step_factor > 1 ? size * o_.step_factor : size + 1) {
    std::vector<double> rtts;
    uint64_t wrong = 0;
    TQ_RETURN_IF_ERROR(rv_->barrier());
    void* rreq = nullptr;
    TQ_RETURN_IF_ERROR(net_->irecv(recv_, rbuf, size, 0, rmr, &rreq));
    for (int i = 0; i < warmup + iters; ++i) {
      int got = -1;
      if (rank_ == 0) {
        const int64_t t0 = nowNs();
        TQ_RETURN_IF_ERROR(sendOne(size));
        TQ_RETURN_IF_ERROR(waitOne(rreq, &got));
        const int64_t t1 = nowNs();
        if (i >= warmup) rtts.push_back(static_cast<double>(t1 - t0) / 1e3);
        if (i == warmup + iters - 1 && o_.check) wrong += countWrongBytes(rbuf, size, 0);  // echoed
        if (i + 1 < warmup + iters) TQ_RETURN_IF_ERROR(net_->irecv(recv_, rbuf, size, 0, rmr, &rreq));
      } else {
        TQ_RETURN_IF_ERROR(waitOne(rreq, &got));
        if (i == warmup + iters - 1 && o_.check) wrong += countWrongBytes(rbuf, size, 0);
        // Post the next receive before answering, so the next ping finds it.
        if (i + 1 < warmup + iters) TQ_RETURN_IF_ERROR(net_->irecv(recv_, rbuf, size, 0, rmr, &rreq));
        TQ_RETURN_IF_ERROR(sendOne(size));
      }
      if (static_cast<uint64_t>(got) != size) return dataLoss(format("ping-pong: got %d bytes, sent %" PRIu64, got, size));
    }
    TQ_ASSIGN_OR_RETURN(double total_wrong, maxOverRanks(static_cast<double>(wrong)));
    if (rank_ == 0) {
      std::sort(rtts.begin(), rtts.end());
      double avg = 0;
      for (double r : rtts) avg += r;
      avg = rtts.empty() ? 0 : avg / static_cast<double>(rtts.size());
      const double p50 = rtts.empty() ? 0 : rtts[rtts.size() / 2];
      const double p99 = rtts.empty() ? 0 : rtts[std::min(rtts.size() - 1, rtts.size() * 99 / 100)];
      if (o_.json) {
        emitLine(format("{\"type\":\"result\",\"mode\":\"pingpong\",\"size\":%" PRIu64
                        ",\"iters\":%d,\"rtt_us\":%.3f,\"latency_us\":%.3f,\"p50_rtt_us\":%.3f,"
                        "\"p99_rtt_us\":%.3f,\"wrong\":%.0f}",
                        size, iters, avg, avg / 2, p50, p99, total_wrong));
      } else {
        emitLine(format("%13" PRIu64 " %7d %10.2f %10.2f %10.2f %10.2f %8.0f", size, iters, avg,
                        avg / 2, p50, p99, total_wrong));
      }
    }
    if (total_wrong > 0) return dataLoss("ping-pong data corrupted");
    if (o_.step_factor <= 1 && size == o_.max_bytes) break;
  }
  return okStatus();
}

Status Rank::runAllReduce() {
  const int iters = o_.iters >= 0 ? o_.iters : 20;
  const int warmup = o_.warmup >= 0 ? o_.warmup : 5;
  const uint64_t max_count = o_.max_bytes / sizeof(float);
  auto* sendbuf = static_cast<float*>(buffer(max_count * sizeof(float)));
  auto* recvbuf = static_cast<float*>(buffer(max_count * sizeof(float)));
  auto* tmp = static_cast<float*>(buffer((max_count / static_cast<uint64_t>(n_) + 1) * sizeof(float)));
  if (sendbuf == nullptr || recvbuf == nullptr || tmp == nullptr) {
    return resourceExhausted("out of memory for buffers");
  }
  void *s_send = nullptr, *s_recv = nullptr, *r_recv = nullptr, *r_tmp = nullptr;
  if (n_ > 1) {
    TQ_ASSIGN_OR_RETURN(s_send, reg(send_, sendbuf, max_count * sizeof(float)));
    TQ_ASSIGN_OR_RETURN(s_recv, reg(send_, recvbuf, max_count * sizeof(float)));
    TQ_ASSIGN_OR_RETURN(r_recv, reg(recv_, recvbuf, max_count * sizeof(float)));
    TQ_ASSIGN_OR_RETURN(r_tmp, reg(recv_, tmp, (max_count / static_cast<uint64_t>(n_) + 1) * sizeof(float)));
  }
  header(format(" | iters %d warmup %d | ring reduce-scatter + all-gather, sum, float", iters, warmup));
  if (rank_ == 0 && !o_.json) {
    emitLine("#");
    emitLine("#        size       count    time(us)  algbw(GB/s)  busbw(GB/s)   #wrong");
  }
  for (uint64_t size = std::max<uint64_t>(o_.min_bytes, 4); size <= o_.max_bytes;
       size = o_.step_factor > 1 ? size * o_.step_factor : size + 4) {
    const uint64_t count = size / sizeof(float);
    for (uint64_t i = 0; i < count; ++i) sendbuf[i] = arValue(rank_, i);
    auto lo = [&](int k) { return count * static_cast<uint64_t>(k) / static_cast<uint64_t>(n_); };
    auto len = [&](int k) { return lo(k + 1) - lo(k); };
    auto step = [&](const float* src, void* smr, float* dst, void* dmr, int send_chunk,
                    int recv_chunk) -> Status {
      std::vector<void*> reqs(2, nullptr);
      TQ_RETURN_IF_ERROR_CTX(net_->irecv(recv_, dst, len(recv_chunk) * sizeof(float), 0, dmr, &reqs[0]),
                             format("receive from rank %d", recv_from_));
      while (reqs[1] == nullptr) {
        TQ_RETURN_IF_ERROR_CTX(net_->isend(send_, const_cast<float*>(src) + lo(send_chunk),
                                           len(send_chunk) * sizeof(float), rank_, smr, &reqs[1]),
                               format("send to rank %d", send_to_));
        if (reqs[1] == nullptr) TQ_RETURN_IF_ERROR(idle(false, true));
      }
      return waitAll(reqs);
    };
    auto allreduce = [&]() -> Status {
      if (n_ == 1) {
        std::memcpy(recvbuf, sendbuf, count * sizeof(float));
        return okStatus();
      }
      for (int s = 0; s < n_ - 1; ++s) {  // reduce-scatter
        const int sc = (rank_ - s + n_) % n_;
        const int rc = (rank_ - s - 1 + n_) % n_;
        TQ_RETURN_IF_ERROR(step(s == 0 ? sendbuf : recvbuf, s == 0 ? s_send : s_recv, tmp, r_tmp, sc, rc));
        float* out = recvbuf + lo(rc);
        const float* in = sendbuf + lo(rc);
        for (uint64_t i = 0; i < len(rc); ++i) out[i] = in[i] + tmp[i];
      }
      for (int s = 0; s < n_ - 1; ++s) {  // all-gather
        const int sc = (rank_ + 1 - s + n_) % n_;
        const int rc = (rank_ - s + n_) % n_;
        TQ_RETURN_IF_ERROR(step(recvbuf, s_recv, recvbuf + lo(rc), r_recv, sc, rc));
      }
      return okStatus();
    };
    for (int i = 0; i < warmup; ++i) TQ_RETURN_IF_ERROR(allreduce());
    TQ_RETURN_IF_ERROR(rv_->barrier());
    const int64_t t0 = nowNs();
    for (int i = 0; i < iters; ++i) TQ_RETURN_IF_ERROR(allreduce());
    const double us = iters > 0 ? static_cast<double>(nowNs() - t0) / 1e3 / iters : 0;
    uint64_t wrong = 0;
    if (o_.check && iters + warmup > 0) {
      const float ranks_sum = static_cast<float>(n_ * (n_ + 1) / 2);
      for (uint64_t i = 0; i < count; ++i) {
        wrong += recvbuf[i] != ranks_sum * static_cast<float>((i % 13) + 1) ? 1 : 0;
      }
    }
    TQ_ASSIGN_OR_RETURN(double max_us, maxOverRanks(us));
    TQ_ASSIGN_OR_RETURN(double total_wrong, maxOverRanks(static_cast<double>(wrong)));
    const double algbw = max_us > 0 ? static_cast<double>(count * sizeof(float)) / (max_us * 1e3) : 0;
    const double busbw = algbw * 2.0 * (n_ - 1) / n_;
    if (rank_ == 0) {
      if (o_.json) {
        emitLine(format("{\"type\":\"result\",\"mode\":\"allreduce\",\"nranks\":%d,\"size\":%" PRIu64
                        ",\"count\":%" PRIu64 ",\"dtype\":\"float\",\"redop\":\"sum\",\"iters\":%d,"
                        "\"time_us\":%.3f,\"algbw_GBps\":%.4f,\"busbw_GBps\":%.4f,\"wrong\":%.0f}",
                        n_, count * sizeof(float), count, iters, max_us, algbw, busbw, total_wrong));
      } else {
        emitLine(format("%13" PRIu64 " %11" PRIu64 " %11.2f %12.3f %12.3f %8.0f",
                        count * sizeof(float), count, max_us, algbw, busbw, total_wrong));
      }
    }
    if (total_wrong > 0) {
      return dataLoss(format("allreduce result wrong in %.0f elements at size %" PRIu64, total_wrong, size));
    }
    if (o_.step_factor <= 1 && size == o_.max_bytes) break;
  }
  return okStatus();
}

Status Rank::run(Fd listen) {
  TQ_RETURN_IF_ERROR(setup(std::move(listen)));
  if (o_.mode == "allreduce") return o_.duration_s > 0 ? runAllReduceStream() : runAllReduce();
  if (o_.mode == "pingpong") return runPingPong();
  if (o_.duration_s > 0) return runSendRecvDuration();
  return runSendRecvSweep();
}

// ---- command line -------------------------------------------------------------------------

const char kUsage[] =
    "usage: tenantqos-perf sendrecv|allreduce|pingpong [options]\n"
    "ranks:\n"
    "  --local N                 fork N ranks on this host (rendezvous on 127.0.0.1)\n"
    "  --rank R --nranks N --rendezvous HOST:PORT   one rank of a multi-process run;\n"
    "                            rank 0 listens on HOST:PORT\n"
    "plugin:\n"
    "  --plugin NAME|PATH        default $NCCL_NET_PLUGIN, else tenantqos\n"
    "                            (libnccl-net-NAME.so, also searched in <bindir>/../lib)\n"
    "  --abi 10|11               force an ABI version (default: v11, else v10)\n"
    "  --dev D                   plugin device (default 0)\n"
    "  --trafficclass N          communicator trafficClass (init config in v11, connect in v10)\n"
    "  --tenant NAME             sets TENANTQOS_TENANT\n"
    "  --env NAME=VALUE          sets an environment variable in every rank (repeatable)\n"
    "  --rank-env R:NAME=VALUE   sets it in rank R only (repeatable)\n"
    "sizes and iterations (nccl-tests style; K/M/G = KiB/MiB/GiB):\n"
    "  -b, --minbytes SIZE       default 8\n"
    "  -e, --maxbytes SIZE       default 64M\n"
    "  -f, --stepfactor N        default 2\n"
    "  -n, --iters N             default 20 (pingpong 1000)\n"
    "  -w, --warmup N            default 5 (pingpong 100)\n"
    "  --window N                messages in flight per peer, sendrecv (default 8)\n"
    "  --unidirectional          sendrecv: even ranks send to rank+1 only\n"
    "streaming:\n"
    "  --duration SEC            sendrecv: stream messages of --size for SEC seconds;\n"
    "                            allreduce: back-to-back allreduces of --size for SEC seconds,\n"
    "                            each ring step pipelined in --chunk pieces (like NCCL)\n"
    "  --size SIZE               message (sendrecv) or buffer (allreduce) size (default 4M)\n"
    "  --chunk SIZE              allreduce pipeline chunk (default 512K); --window in flight\n"
    "  --on-off ON_MS:OFF_MS[:PHASE_MS]\n"
    "                            allreduce: start new allreduces only during the first ON_MS of\n"
    "                            every ON_MS+OFF_MS cycle (a tenant going idle and back); cycles\n"
    "                            from the start, or with PHASE_MS on the wall clock: on from\n"
    "                            PHASE_MS past every multiple of the cycle (jobs in phase)\n"
    "  --compute-ms MS           allreduce: a training step: after each complete allreduce, MS\n"
    "                            without traffic before the next; prints one \"iteration\" line\n"
    "                            (JSON) per complete allreduce\n"
    "  --report-interval MS      print per-interval throughput lines (with --duration)\n"
    "checks and output:\n"
    "  --check / --no-check      verify received data (default on: one message per size)\n"
    "  --check-all               verify every message\n"
    "  --timeout SEC             fail after SEC without progress (default 30)\n"
    "  --poll spin|yield|sleep   idle strategy (default sleep: after 16 idle polls, naps\n"
    "                            adapting between 50 us and 1 ms; pingpong: spin)\n"
    "  --json                    one JSON object per line\n";

Result<uint64_t> parseBytes(const std::string& text) {
  if (!text.empty()) {
    const char last = text.back();
    uint64_t mult = 0;
    if (last == 'K' || last == 'k') mult = 1ull << 10;
    if (last == 'M' || last == 'm') mult = 1ull << 20;
    if (last == 'G' || last == 'g') mult = 1ull << 30;
    if (mult != 0) {
      TQ_ASSIGN_OR_RETURN(uint64_t v, parseSize(text.substr(0, text.size() - 1)));
      return v * mult;
    }
  }
  return parseSize(text);
}

Result<Options> parseArgs(int argc, char** argv) {
  Options o;
  if (argc < 2) return invalidArgument("missing mode");
  o.mode = argv[1];
  if (o.mode == "-h" || o.mode == "--help") return invalidArgument("");
  if (o.mode != "sendrecv" && o.mode != "allreduce" && o.mode != "pingpong") {
    return invalidArgument("unknown mode \"" + o.mode + "\"");
  }
  const char* env_plugin = std::getenv("NCCL_NET_PLUGIN");
  o.plugin = env_plugin != nullptr && env_plugin[0] != '\0' ? env_plugin : "tenantqos";
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> Result<std::string> {
      if (i + 1 >= argc) return invalidArgument(a + " needs a value");
      return std::string(argv[++i]);
    };
    auto nextInt = [&]() -> Result<long> {
      TQ_ASSIGN_OR_RETURN(std::string v, next());
      char* end = nullptr;
      const long x = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0') return invalidArgument(a + " " + v + ": not an integer");
      return x;
    };
    auto nextBytes = [&]() -> Result<uint64_t> {
      TQ_ASSIGN_OR_RETURN(std::string v, next());
      return parseBytes(v);
    };
    auto nextDouble = [&]() -> Result<double> {
      TQ_ASSIGN_OR_RETURN(std::string v, next());
      char* end = nullptr;
      const double x = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(x >= 0)) return invalidArgument(a + " " + v + ": not a number");
      return x;
    };
    if (a == "--local") { TQ_ASSIGN_OR_RETURN(long v, nextInt()); o.local = static_cast<int>(v); }
    else if (a == "--rank") { TQ_ASSIGN_OR_RETURN(long v, nextInt()); o.rank = static_cast<int>(v); }
    else if (a == "--nranks") { TQ_ASSIGN_OR_RETURN(long v, nextInt()); o.nranks = static_cast<int>(v); }
    else if (a == "--rendezvous") { TQ_ASSIGN_OR_RETURN(o.rendezvous, next()); }
    else if (a == "--plugin") { TQ_ASSIGN_OR_RETURN(o.plugin, next()); }
    else if (a == "--abi") { TQ_ASSIGN_OR_RETURN(long v, nextInt()); o.abi = static_cast<int>(v); }
    else if (a == "--dev") { TQ_ASSIGN_OR_RETURN(long v, nextInt()); o.dev = static_cast<int>(v); }
    else if (a == "--trafficclass") { TQ_ASSIGN_OR_RETURN(long v, nextInt()); o.traffic_class = static_cast<int>(v); }
    else if (a == "--tenant") { TQ_ASSIGN_OR_RETURN(std::string v, next()); o.env.push_back("TENANTQOS_TENANT=" + v); }
    else if (a == "--env") { TQ_ASSIGN_OR_RETURN(std::string v, next()); o.env.push_back(v); }
    else if (a == "--rank-env") {
      TQ_ASSIGN_OR_RETURN(std::string v, next());
      const size_t colon = v.find(':');
      if (colon == std::string::npos) return invalidArgument("--rank-env " + v + ": expected R:NAME=VALUE");
      o.rank_env.emplace_back(std::atoi(v.substr(0, colon).c_str()), v.substr(colon + 1));
    }
    else if (a == "-b" || a == "--minbytes") { TQ_ASSIGN_OR_RETURN(o.min_bytes, nextBytes()); o.sizes_set = true; }
    else if (a == "-e" || a == "--maxbytes") { TQ_ASSIGN_OR_RETURN(o.max_bytes, nextBytes()); o.sizes_set = true; }
    else if (a == "-f" || a == "--stepfactor") { TQ_ASSIGN_OR_RETURN(long v, nextInt()); o.step_factor = static_cast<uint64_t>(std::max(1L, v)); }
    else if (a == "-n" || a == "--iters") { TQ_ASSIGN_OR_RETURN(long v, nextInt()); o.iters = static_cast<int>(v); }
    else if (a == "-w" || a == "--warmup") { TQ_ASSIGN_OR_RETURN(long v, nextInt()); o.warmup = static_cast<int>(v); }
    else if (a == "--window") { TQ_ASSIGN_OR_RETURN(long v, nextInt()); o.window = static_cast<int>(v); }
    else if (a == "--unidirectional") { o.unidirectional = true; }
    else if (a == "--duration") { TQ_ASSIGN_OR_RETURN(o.duration_s, nextDouble()); }
    else if (a == "--size") { TQ_ASSIGN_OR_RETURN(o.size, nextBytes()); }
    else if (a == "--chunk") { TQ_ASSIGN_OR_RETURN(o.chunk, nextBytes()); }
    else if (a == "--on-off") {
      TQ_ASSIGN_OR_RETURN(std::string v, next());
      // ON_MS:OFF_MS[:PHASE_MS]
      long f[3] = {0, 0, -1};
      size_t n = 0;
      const char* p = v.c_str();
      bool ok = false;  // true once a number ended the text
      while (n < 3) {
        char* e = nullptr;
        f[n++] = std::strtol(p, &e, 10);
        if (e == p || (*e != '\0' && *e != ':')) break;
        if (*e == '\0') {
          ok = true;
          break;
        }
        p = e + 1;
      }
      ok = ok && n >= 2;
      o.on_ms = f[0];
      o.off_ms = f[1];
      o.phase_ms = n == 3 ? f[2] : -1;
      if (!ok || o.on_ms <= 0 || o.off_ms < 0 || (n == 3 && f[2] < 0)) {
        return invalidArgument("--on-off " + v +
                               ": expected ON_MS:OFF_MS[:PHASE_MS], ON_MS > 0, PHASE_MS >= 0");
      }
    }
    else if (a == "--compute-ms") { TQ_ASSIGN_OR_RETURN(long v, nextInt()); o.compute_ms = v; }
    else if (a == "--report-interval") { TQ_ASSIGN_OR_RETURN(long v, nextInt()); o.report_ms = v; }
    else if (a == "--check") { o.check = true; }
    else if (a == "--no-check") { o.check = false; }
    else if (a == "--check-all") { o.check = o.check_all = true; }
    else if (a == "--timeout") { TQ_ASSIGN_OR_RETURN(o.timeout_s, nextDouble()); }
    else if (a == "--json") { o.json = true; }
    else if (a == "--poll") {
      TQ_ASSIGN_OR_RETURN(std::string v, next());
      if (v == "spin") o.poll = PollMode::kSpin;
      else if (v == "yield") o.poll = PollMode::kYield;
      else if (v == "sleep") o.poll = PollMode::kSleep;
      else return invalidArgument("--poll " + v + ": expected spin, yield or sleep");
      o.poll_set = true;
    }
    else if (a == "-h" || a == "--help") { return invalidArgument(""); }
    else { return invalidArgument("unknown option " + a); }
  }
  // Bandwidth modes sleep briefly when idle (spinning steals CPU from the plugin's helper
  // threads on small machines); the latency mode spins.
  if (!o.poll_set) o.poll = o.mode == "pingpong" ? PollMode::kSpin : PollMode::kSleep;
  if (o.mode == "pingpong" && !o.sizes_set) {
    o.min_bytes = 8;
    o.max_bytes = 64 << 10;
  }
  if (o.local > 0) {
    if (o.rank >= 0 || !o.rendezvous.empty()) return invalidArgument("--local excludes --rank/--rendezvous");
    o.nranks = o.local;
  } else if (o.rank < 0 || o.nranks <= 0 || o.rendezvous.empty()) {
    return invalidArgument("give --local N, or --rank R --nranks N --rendezvous HOST:PORT");
  }
  if (o.nranks < 1 || o.nranks > 1024) return invalidArgument("nranks out of range");
  if (o.rank >= o.nranks) return invalidArgument("--rank must be below --nranks");
  if (o.mode == "pingpong" && o.nranks != 2) return invalidArgument("pingpong needs exactly 2 ranks");
  if (o.mode == "sendrecv" && o.unidirectional && o.nranks % 2 != 0) {
    return invalidArgument("--unidirectional needs an even number of ranks");
  }
  if (o.mode == "sendrecv" && o.nranks < 2) return invalidArgument("sendrecv needs at least 2 ranks");
  if (o.min_bytes > o.max_bytes) return invalidArgument("--minbytes above --maxbytes");
  if (o.window < 1 || o.window > 32) return invalidArgument("--window must be 1..32 (NCCL_NET_MAX_REQUESTS)");
  if (o.report_ms > 0 && o.duration_s <= 0) return invalidArgument("--report-interval needs --duration");
  if (o.duration_s > 0 && o.mode == "pingpong") {
    return invalidArgument("--duration applies to sendrecv and allreduce");
  }
  if ((o.on_ms > 0 || o.compute_ms != 0) && (o.mode != "allreduce" || o.duration_s <= 0)) {
    return invalidArgument("--on-off and --compute-ms apply to allreduce --duration");
  }
  if (o.compute_ms < 0) return invalidArgument("--compute-ms must be >= 0");
  if (o.chunk < 4 || o.chunk > (1ull << 30)) return invalidArgument("--chunk must be 4 B..1 GiB");
  return o;
}

void applyEnv(const Options& o, int rank) {
  auto set = [](const std::string& kv) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) return;
    ::setenv(kv.substr(0, eq).c_str(), kv.substr(eq + 1).c_str(), 1);
  };
  for (const std::string& kv : o.env) set(kv);
  for (const auto& [r, kv] : o.rank_env) {
    if (r == rank) set(kv);
  }
}

int runRank(const Options& o, int rank, Fd listen) {
  applyEnv(o, rank);
  setPluginLogPrefix(format("[rank %d] ", rank));
  Status s;
  {
    Rank r(o, rank, o.nranks);
    s = r.run(std::move(listen));
  }
  if (s.ok()) return 0;
  if (o.json) {
    emitLine(format("{\"type\":\"error\",\"rank\":%d,\"message\":%s}", rank,
                    jsonString(s.message()).c_str()));
  }
  std::fprintf(stderr, "[rank %d] tenantqos-perf: error: %s\n", rank, s.message().c_str());
  return 1;
}

// --local N: one listening socket for the rendezvous, N forked ranks, a bounded wait.
int runLocal(Options o) {
  Fd lfd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t alen = sizeof a;
  if (!lfd.valid() || ::bind(lfd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::listen(lfd.get(), 256) != 0 ||
      ::getsockname(lfd.get(), reinterpret_cast<sockaddr*>(&a), &alen) != 0) {
    std::perror("tenantqos-perf: rendezvous socket");
    return 1;
  }
  o.rendezvous = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  std::fflush(stdout);
  std::vector<pid_t> kids;
  for (int r = 0; r < o.local; ++r) {
    const pid_t pid = ::fork();
    if (pid < 0) {
      std::perror("tenantqos-perf: fork");
      for (pid_t k : kids) ::kill(k, SIGKILL);
      return 1;
    }
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // a killed launcher takes its ranks along
      if (r != 0) lfd.reset();
      std::_Exit(runRank(o, r, std::move(lfd)));
    }
    kids.push_back(pid);
  }
  lfd.reset();
  int failed = 0;
  size_t left = kids.size();
  int64_t kill_at = -1;
  while (left > 0) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      --left;
      const auto it = std::find(kids.begin(), kids.end(), pid);
      const int r = static_cast<int>(it - kids.begin());
      if (it != kids.end()) *it = -1;
      const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (!ok) {
        ++failed;
        if (WIFSIGNALED(status)) {
          std::fprintf(stderr, "tenantqos-perf: rank %d killed by signal %d\n", r, WTERMSIG(status));
        }
        // The others notice within their --timeout at worst; do not wait longer than that.
        if (kill_at < 0) kill_at = nowNs() + static_cast<int64_t>((o.timeout_s + 5) * 1e9);
      }
      continue;
    }
    if (kill_at >= 0 && nowNs() > kill_at) {
      for (pid_t k : kids) {
        if (k > 0) ::kill(k, SIGKILL);
      }
      kill_at = nowNs() + 60'000'000'000;
    }
    ::usleep(10'000);
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace tq::perf

int main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);
  auto opts = tq::perf::parseArgs(argc, argv);
  if (!opts.ok()) {
    if (!opts.status().message().empty()) {
      std::fprintf(stderr, "tenantqos-perf: %s\n", opts.status().message().c_str());
    }
    std::fputs(tq::perf::kUsage, stderr);
    return 2;
  }
  if (opts->local > 0) return tq::perf::runLocal(*opts);
  return tq::perf::runRank(*opts, opts->rank, tq::Fd());
}
