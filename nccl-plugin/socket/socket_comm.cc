#include "nccl-plugin/socket/socket_comm.h"

#include <linux/tcp.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <utility>
#include <vector>

#include "common/log.h"
#include "common/thread_annotations.h"

namespace tq::plugin::socket {

// The out-of-band layer's non-blocking I/O is this transport's data path too.
using oob::IoResult;
using oob::netError;
using oob::recvSome;
using oob::sendSome;

// ---------------------------------------------------------------------------------------------
// Windows of paced streams

namespace {
// Paced streams (data and control) of this process, [0] sending, [1] receiving
// (SocketComm::setPacing to its destruction). Relaxed: a helper that reads a stale count resizes at
// its next round.
std::atomic<int> g_paced_streams[2];
}  // namespace

uint64_t pacedWindowBytes(uint64_t rate, int64_t window_ns, int streams, uint64_t min_bytes,
                          uint64_t mss) {
  const unsigned __int128 total =
      static_cast<unsigned __int128>(rate) * static_cast<uint64_t>(std::max<int64_t>(0, window_ns));
  const uint64_t share = static_cast<uint64_t>(std::min<unsigned __int128>(
      total / 1'000'000'000u / static_cast<unsigned>(std::max(1, streams)), kMaxStreamWindowBytes));
  const uint64_t floor =
      std::min(std::max(min_bytes, kWindowSegments * std::min<uint64_t>(mss, 1u << 20)),
               kMaxStreamWindowBytes);
  return std::clamp<uint64_t>(share, floor, kMaxStreamWindowBytes);
}

int64_t windowRttNs(const StreamRtt& rtt, int64_t window_ns) {
  if (rtt.rtt_ns <= 0) return 0;
  const int64_t floor = rtt.min_rtt_ns > 0 ? std::min(rtt.min_rtt_ns, rtt.rtt_ns) : rtt.rtt_ns;
  const int64_t queue = std::clamp<int64_t>(window_ns, 0, kMaxWindowRttNs);
  return std::min({rtt.rtt_ns, std::min(floor, kMaxWindowRttNs) + queue, kMaxWindowRttNs});
}

StreamRtt receivingStreamRtt(int fd) {
  tcp_info info{};
  socklen_t len = sizeof info;
  StreamRtt r;
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0 ||
      len < offsetof(tcp_info, tcpi_min_rtt) + sizeof(info.tcpi_min_rtt)) {
    return r;
  }
  r.rtt_ns = static_cast<int64_t>(info.tcpi_rcv_rtt) * 1000;
  r.min_rtt_ns = static_cast<int64_t>(info.tcpi_min_rtt) * 1000;
  return r;
}

int pacedStreamCount(bool send) {
  return g_paced_streams[send ? 0 : 1].load(std::memory_order_relaxed);
}

// ---------------------------------------------------------------------------------------------
// StripeRing

bool StripeRing::push(const StripeTask& t) {
  const uint32_t tail = tail_.load(std::memory_order_relaxed);
  if (tail - head_.load(std::memory_order_acquire) >= kCapacity) return false;
  items_[tail % kCapacity] = t;
  tail_.store(tail + 1, std::memory_order_release);
  return true;
}

StripeTask* StripeRing::front() {
  const uint32_t head = head_.load(std::memory_order_relaxed);
  if (head == tail_.load(std::memory_order_acquire)) return nullptr;
  return &items_[head % kCapacity];
}

void StripeRing::pop() {
  head_.store(head_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
}

bool StripeRing::empty() const {
  return head_.load(std::memory_order_acquire) == tail_.load(std::memory_order_acquire);
}

// ---------------------------------------------------------------------------------------------
// Helper thread: moves stripes of its streams; sleeps in poll() when blocked or idle.

class SocketComm::Helper {
 public:
  Helper(SocketComm* comm, bool send) : comm_(comm), send_(send) {}
  ~Helper() { stop(); }

  Status start(int index) {
    efd_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (!efd_.valid()) return netError(errno, "eventfd for helper thread");
    index_ = index;
    thread_ = std::thread([this] { run(); });
    return okStatus();
  }
  void stop() {
    if (!thread_.joinable()) return;
    stop_.store(true, std::memory_order_release);
    wake();
    thread_.join();
  }
  void add(Stream* s) { streams_.push_back(s); }
  // This helper's admitter (its own backlog entry); set once, possibly while it runs.
  void setAdmission(Admission* a) {
    admission_.store(a, std::memory_order_release);
    notify();
  }

  // Called by the producer after pushing work (Dekker pairing with run()'s sleep check).
  void notify() {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (sleeping_.load(std::memory_order_relaxed)) wake();
  }

 private:
  void wake() {
    const uint64_t one = 1;
    ssize_t rc = ::write(efd_.get(), &one, sizeof one);
    (void)rc;  // EAGAIN only when the counter is saturated: already awake
  }

  // Bytes of task `t` this helper may move now: all of it when unpaced, else what the stream's
  // credit covers, admitting one more chunk when the credit is spent. 0 with *wait_ns set: the
  // bucket refused; try again after that long. Receives are counted when they complete, so an
  // unpaced receive takes no tokens; an unpaced send is admitted to count it.
  // `refused`: an older stripe was refused in this round; a younger one then waits too (only
  // its credit moves), so tokens go to messages in order and each completes at the tenant's
  // rate instead of all of them together at a fraction of it.
  uint64_t allowance(Stream* s, const StripeTask& t, bool refused, int64_t* wait_ns) {
    const uint64_t left = t.len - t.done;
    Admission* adm = admission_.load(std::memory_order_acquire);
    if (adm == nullptr || left == 0) return left;
    if (s->credit == 0) {
      const uint64_t chunk = adm->chunkBytes();
      if (chunk == 0 && !send_) return left;
      const uint64_t take = chunk > 0 ? std::min(left, chunk) : left;
      if (refused || !adm->tryAdmit(take, left)) {
        *wait_ns = std::clamp<int64_t>(adm->waitNs(take), kMinTokenWaitNs, kMaxTokenWaitNs);
        return 0;
      }
      s->credit = take;
    }
    return std::min(left, s->credit);
  }

  // Sizes this helper's streams' windows (socket_comm.h "Windows") when the bucket's rate or
  // the process's count of paced streams moved by more than an eighth since the last time.
  // Unpaced (no admitter, a chunk of 0): the kernel's own sizing, restored to the largest
  // window if one had been set. A setsockopt that fails leaves that stream as it was (logged
  // once per helper): the pacing still holds, only the wire may run ahead of it.
  // With window_rtt (receive side) the round trips are re-read at least every kRttRefreshNs
  // too: a capped tenant's rate may not move for seconds while the queues on its path do.
  void sizeWindows() {
    const SocketCommConfig& cfg = comm_->cfg_;
    Admission* adm = admission_.load(std::memory_order_acquire);
    if (cfg.window_ns <= 0 || adm == nullptr) return;
    const bool paced = adm->chunkBytes() > 0;
    const uint64_t rate = paced ? adm->rateBytesPerSecond() : 0;
    const int count = pacedStreamCount(send_);
    const bool follow_rtt = cfg.window_rtt && !send_ && paced;
    const int64_t now = follow_rtt ? clock_->nowNs() : 0;
    const bool rtt_due = follow_rtt && now - sized_at_ns_ >= kRttRefreshNs;
    if (rate == sized_rate_ && count == sized_count_ && paced == sized_paced_ && !rtt_due) return;
    sized_at_ns_ = now;
    sized_rate_ = rate;
    sized_count_ = count;
    sized_paced_ = paced;
    for (Stream* s : streams_)
      sizeWindow(s->fd.get(), s->index, paced, rate, count, &s->window, &s->mss);
    // The control stream carries inline messages (up to TENANTQOS_SOCKET_INLINE: all of an
    // all-to-all's small pieces), paced by NCCL's thread: the first helper sizes it too.
    if (index_ == 0) {
      sizeWindow(comm_->ctl_.get(), -1, paced, rate, count, &comm_->ctl_window_, &comm_->ctl_mss_);
    }
  }

  void sizeWindow(int fd, int index, bool paced, uint64_t rate, int count, uint64_t* window,
                  uint32_t* mss) {
    if (*window == 0 && !paced) return;  // never sized: nothing to undo
    if (*mss == 0) *mss = segmentBytes(fd);
    const SocketCommConfig& cfg = comm_->cfg_;
    const int64_t rtt_ns =
        paced && cfg.window_rtt && !send_ ? windowRttNs(receivingStreamRtt(fd), cfg.window_ns) : 0;
    const uint64_t w =
        paced ? pacedWindowBytes(rate, cfg.window_ns + rtt_ns, count, cfg.window_min, *mss)
              : kMaxStreamWindowBytes;
    const uint64_t diff = w > *window ? w - *window : *window - w;
    if (*window != 0 && diff <= *window / 8) return;
    if (setWindow(fd, index, w)) *window = w;
  }

  // The connection's segment size (TCP_MAXSEG; 1448 on a 1500-byte Ethernet, 65483 on loopback).
  static uint32_t segmentBytes(int fd) {
    int mss = 0;
    socklen_t len = sizeof mss;
    if (::getsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &mss, &len) != 0 || mss <= 0) return 1448;
    return static_cast<uint32_t>(mss);
  }

  bool setWindow(int fd, int index, uint64_t bytes) {
    const int w = static_cast<int>(bytes);
    int rc = 0;
    const char* what = nullptr;
    if (send_) {
      rc = ::setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &w, sizeof w);
      what = "TCP_NOTSENT_LOWAT";
    } else {
      // The receive buffer, which the kernel doubles (its sk_rcvbuf is then `bytes`): the
      // window it advertises is that memory times its measured payload/overhead ratio, so at
      // most `bytes`. Setting it also stops autotuning, which would grow it again. The clamp
      // alone would not hold: the kernel (6.x) re-derives it from the buffer whenever that
      // ratio changes; it is set too so that a window grows at once when the rate does (a
      // clamp derived from a smaller buffer would otherwise hold it until the next change).
      const int half = std::max(w / 2, 1);
      rc = ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &half, sizeof half);
      what = "SO_RCVBUF";
      if (rc == 0) {
        rc = ::setsockopt(fd, IPPROTO_TCP, TCP_WINDOW_CLAMP, &w, sizeof w);
        what = "TCP_WINDOW_CLAMP";
      }
    }
    if (rc != 0 && !window_error_logged_) {
      window_error_logged_ = true;
      TQ_LOG(kWarn, "%s comm with %s: setting %s to %d bytes on %s stream %d failed: %s",
             send_ ? "send" : "receive", comm_->peer().c_str(), what, w,
             index < 0 ? "the control" : "data", index, std::strerror(errno));
    }
    return rc == 0;
  }

  void run() {
    std::vector<pollfd> pfds;
    pfds.reserve(streams_.size() + 1);
    std::vector<Stream*> waited;   // send side: streams blocked on POLLOUT in this round
    std::vector<Stream*> starved;  // streams waiting for tokens in this round
    while (!stop_.load(std::memory_order_acquire) && !comm_->failed()) {
      sizeWindows();
      bool progress = false;
      bool idle_work = false;  // a stream got work we have not tried yet
      int64_t token_wait_ns = -1;
      pfds.clear();
      waited.clear();
      starved.clear();
      orderStreams();
      bool refused = false;
      for (Stream* s : order_) {
        const size_t i = static_cast<size_t>(s->index);
        while (StripeTask* t = s->ring.front()) {
          int64_t wait_ns = -1;
          const uint64_t allowed = allowance(s, *t, refused, &wait_ns);
          if (allowed == 0 && t->done < t->len) {
            token_wait_ns = token_wait_ns < 0 ? wait_ns : std::min(token_wait_ns, wait_ns);
            starved.push_back(s);
            refused = true;
            break;  // no tokens: neither polled nor retried before they come
          }
          int err = 0;
          const uint64_t before = t->done;
          const IoResult r = send_
                                 ? sendSome(s->fd.get(), t->ptr + t->done, allowed, &t->done, &err)
                                 : recvSome(s->fd.get(), t->ptr + t->done, allowed, &t->done, &err);
          const uint64_t moved = t->done - before;
          s->credit = s->credit > moved ? s->credit - moved : 0;
          if (r == IoResult::kProgress) {
            progress = true;
            if (t->done == t->len) {
              SockRequest* req = t->req;
              s->ring.pop();
              req->pending.fetch_sub(1, std::memory_order_acq_rel);
            }
            continue;
          }
          if (r == IoResult::kWouldBlock) {
            if (!send_) setLowWater(s, allowed);
            pfds.push_back({s->fd.get(), static_cast<short>(send_ ? POLLOUT : POLLIN), 0});
            if (send_) waited.push_back(s);
            break;
          }
          const std::string what = std::string(send_ ? "send to " : "receive from ") +
                                   comm_->peer() + " on data stream " + std::to_string(i);
          comm_->fail(r == IoResult::kClosed
                          ? unavailable(what + ": peer closed the connection (process gone?)")
                          : netError(err, what));
          return;
        }
      }
      if (progress) continue;
      sleeping_.store(true, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      for (Stream* s : streams_) {
        const bool polled = std::any_of(pfds.begin(), pfds.end(),
                                        [&](const pollfd& p) { return p.fd == s->fd.get(); });
        const bool waits = std::find(starved.begin(), starved.end(), s) != starved.end();
        if (!polled && !waits && !s->ring.empty()) idle_work = true;
      }
      if (!idle_work && !stop_.load(std::memory_order_acquire)) {
        pfds.push_back({efd_.get(), POLLIN, 0});
        int64_t timeout_ns = (lowered_ ? kLowWaterPollMs : 1000) * int64_t{1'000'000};
        if (token_wait_ns >= 0) timeout_ns = std::min(timeout_ns, token_wait_ns);
        const timespec ts{static_cast<time_t>(timeout_ns / 1'000'000'000),
                          static_cast<long>(timeout_ns % 1'000'000'000)};
        const int rc = ::ppoll(pfds.data(), pfds.size(), &ts, nullptr);
        if (rc > 0 && (pfds.back().revents & POLLIN) != 0) {
          uint64_t v;
          ssize_t n = ::read(efd_.get(), &v, sizeof v);
          (void)n;
        }
        if (!waited.empty()) reportPeerWait(waited);
      }
      sleeping_.store(false, std::memory_order_relaxed);
    }
  }

  // The streams, those with the oldest message first when paced (sequence numbers wrap: compared
  // as differences).
  void orderStreams() {
    if (order_.size() != streams_.size()) order_ = streams_;
    Admission* adm = admission_.load(std::memory_order_acquire);
    if (adm == nullptr || order_.size() < 2) return;
    const uint32_t base = [&] {
      for (Stream* s : order_) {
        if (const StripeTask* t = s->ring.front()) return t->req->seq;
      }
      return 0u;
    }();
    // Keys taken once, then sorted: NCCL's thread pushes into the rings while this runs, and a
    // comparator reading them could see a stream's front appear mid-sort, which is not a strict
    // weak order (std::sort's unguarded insertion then runs off the vector: SIGSEGV, seen in
    // the testbed). Streams with nothing queued go last.
    keyed_.clear();
    for (Stream* s : order_) {
      const StripeTask* t = s->ring.front();
      keyed_.emplace_back(
          t == nullptr ? INT64_MAX : static_cast<int64_t>(static_cast<int32_t>(t->req->seq - base)),
          s);
    }
    std::sort(keyed_.begin(), keyed_.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (size_t i = 0; i < keyed_.size(); ++i) order_[i] = keyed_[i].second;
  }

  // Send side, after waiting for room in the socket: how long (since the last look) the kernel
  // held the connection back for the receiver's window, the longest of the streams waited on.
  // That is the receiver's pacing (or a slow receiver), not demand at this end (Admission::
  // peerWait). One getsockopt per stream waited on, on this thread, never NCCL's.
  void reportPeerWait(const std::vector<Stream*>& waited) {
    Admission* adm = admission_.load(std::memory_order_acquire);
    if (adm == nullptr) return;
    int64_t longest_us = 0;
    for (Stream* s : waited) {
      tcp_info info{};
      socklen_t len = sizeof info;
      if (::getsockopt(s->fd.get(), IPPROTO_TCP, TCP_INFO, &info, &len) != 0 ||
          len < offsetof(tcp_info, tcpi_rwnd_limited) + sizeof(info.tcpi_rwnd_limited)) {
        continue;  // a kernel without the field (< 4.10): no peer wait reported
      }
      const auto now_us = static_cast<int64_t>(info.tcpi_rwnd_limited);
      if (s->rwnd_limited_us >= 0 && now_us > s->rwnd_limited_us) {
        longest_us = std::max(longest_us, now_us - s->rwnd_limited_us);
      }
      s->rwnd_limited_us = now_us;
    }
    if (longest_us > 0) adm->peerWait(longest_us * 1000);
  }

  // Receive side: wake only when the rest of the stripe is in the socket (SO_RCVLOWAT), not on
  // every segment. On loopback each wake-up is an IPI that the sender's send() pays for; waking
  // once per stripe instead of once per 64 KiB segment took 4 MiB messages from 39 to 63 Gbit/s
  // on 2 cores (the sender's thread stopped being the bottleneck; bench/plugin). The kernel
  // still wakes early when the window closes or under memory pressure (tcp_epollin_ready), so a
  // remainder larger than the socket can hold cannot stall; the short poll timeout while a low
  // water mark is set is a backstop for kernels without that rule. Small remainders use 1: a
  // setsockopt per stripe would cost more than the wake-ups it saves. At most 1 MiB: the kernel
  // grows a socket's receive buffer to hold the mark (about twice it), and per stream per comm
  // that must stay bounded; 1 MiB measured as fast as the whole stripe for 16 MiB messages
  // (55 vs 45 Gbit/s), 512 KiB slower (47 vs 57 at 4 MiB). `remaining`: what this helper may
  // read now (paced: its credit), so a paced reader never waits for more than it may take.
  void setLowWater(Stream* s, size_t remaining) {
    // A mark above half the window would never be reached (the sender stops at the window, and
    // a buffer sized for it is never under pressure): wake for what the window can bring.
    if (s->window > 0) remaining = std::min<size_t>(remaining, s->window / 2);
    const int want = remaining >= kLowWaterMinBytes
                         ? static_cast<int>(std::min<size_t>(remaining, kLowWaterMaxBytes))
                         : 1;
    if (want == s->rcvlowat) return;
    if (::setsockopt(s->fd.get(), SOL_SOCKET, SO_RCVLOWAT, &want, sizeof want) == 0) {
      s->rcvlowat = want;
    }  // on failure keep waking per segment: slower, never stuck
    lowered_ = std::any_of(streams_.begin(), streams_.end(),
                           [](const Stream* x) { return x->rcvlowat > 1; });
  }

  // How often a receiving helper re-reads its streams' round trips when nothing else made it
  // resize (window_rtt): a getsockopt per stream 50 times a second, against a queue that moves
  // at the agent's period (10 ms) and a window that changes only by more than an eighth.
  static constexpr int64_t kRttRefreshNs = 20'000'000;
  static constexpr size_t kLowWaterMinBytes = 256 * 1024;
  static constexpr size_t kLowWaterMaxBytes = 1u << 20;
  static constexpr int kLowWaterPollMs = 20;
  // Shortest sleep for tokens: below this a wake-up costs more than the precision buys.
  static constexpr int64_t kMinTokenWaitNs = 20'000;
  // Longest sleep for tokens. The wait is computed at the bucket's current rate, but the agent
  // may raise it at any period (10 ms by default): a tenant without a guarantee whose demand
  // looked like nothing for one period has a bucket rate of 0 (a wait of "never", which was the
  // 1 s poll timeout), and a waiter that slept on would miss the new rate. Seen in the testbed:
  // noisy's receives (16 streams, paced at 350 Mbit/s) stalled for 0.1-1 s at a time and got
  // 0.04-0.10 Gbit/s. So a starved helper looks again every millisecond (at most 1,000 wake-ups
  // a second), about the bucket's depth in time.
  static constexpr int64_t kMaxTokenWaitNs = 1'000'000;

  SocketComm* const comm_;
  const bool send_;
  const Clock* const clock_ = comm_->cfg_.clock != nullptr ? comm_->cfg_.clock : &realClock();
  bool lowered_ = false;  // some stream has SO_RCVLOWAT > 1
  // sizeWindows' inputs at its last sizing.
  uint64_t sized_rate_ = 0;
  int64_t sized_at_ns_ = INT64_MIN / 2;  // clock_ at the last sizing (window_rtt only)
  int sized_count_ = -1;
  bool sized_paced_ = false;
  bool window_error_logged_ = false;
  int index_ = 0;
  std::vector<Stream*> streams_;
  std::vector<Stream*> order_;                      // streams_, oldest message first (orderStreams)
  std::vector<std::pair<int64_t, Stream*>> keyed_;  // orderStreams' scratch: (key, stream)
  Fd efd_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> sleeping_{false};
  std::atomic<Admission*> admission_{nullptr};
};

// ---------------------------------------------------------------------------------------------
// SockRequest

Status SockRequest::test(bool* done, size_t* bytes) { return comm->test(this, done, bytes); }

// ---------------------------------------------------------------------------------------------
// SocketComm

SocketComm::SocketComm(Side side, Fd ctl, std::vector<Fd> data, SocketCommConfig cfg)
    : side_(side), ctl_(std::move(ctl)), cfg_(std::move(cfg)) {
  for (Fd& fd : data) {
    auto s = std::make_unique<Stream>();
    s->fd = std::move(fd);
    streams_.push_back(std::move(s));
  }
  for (int i = 0; i < kMaxRequests; ++i) {
    reqs_[i].comm = this;
    reqs_[i].index = i;
    reqs_[i].is_recv = side == Side::kRecv;
  }
  free_.reserve(kMaxRequests);
  for (int i = kMaxRequests - 1; i >= 0; --i) free_.push_back(i);
  if (side == Side::kRecv) stage_.reset(new uint8_t[kStageBytes]);
}

SocketComm::~SocketComm() {
  for (auto& h : helpers_) h->stop();
  helpers_.clear();
  if (counted_) {
    g_paced_streams[side_ == Side::kSend ? 0 : 1].fetch_sub(static_cast<int>(streams_.size()) + 1,
                                                            std::memory_order_relaxed);
  }
}

Status SocketComm::start() {
  const int n =
      std::clamp(cfg_.nthreads, 1, static_cast<int>(std::max<size_t>(1, streams_.size())));
  for (int i = 0; i < n && !streams_.empty(); ++i) {
    helpers_.push_back(std::make_unique<Helper>(this, side_ == Side::kSend));
  }
  for (size_t i = 0; i < streams_.size(); ++i) {
    Helper* h = helpers_[i % helpers_.size()].get();
    streams_[i]->helper = h;
    streams_[i]->index = static_cast<int>(i);
    h->add(streams_[i].get());
  }
  for (size_t i = 0; i < helpers_.size(); ++i) {
    TQ_RETURN_IF_ERROR_CTX(helpers_[i]->start(static_cast<int>(i)), "start helper thread");
  }
  return okStatus();
}

void SocketComm::setPacing(Pacing* pacing) {
  if (!counted_) {
    counted_ = true;
    g_paced_streams[side_ == Side::kSend ? 0 : 1].fetch_add(static_cast<int>(streams_.size()) + 1,
                                                            std::memory_order_relaxed);
  }
  admission_.store(pacing->newAdmission(), std::memory_order_release);
  for (auto& h : helpers_) h->setAdmission(pacing->newAdmission());
}

std::vector<int> SocketComm::fds() const {
  std::vector<int> out;
  for (const auto& s : streams_) out.push_back(s->fd.get());
  out.push_back(ctl_.get());
  return out;
}

void SocketComm::fail(const Status& s) {
  MutexLock lock(err_mu_);
  if (failed_.load(std::memory_order_relaxed)) return;
  error_ = s;
  failed_.store(true, std::memory_order_release);
  TQ_LOG(kWarn, "%s comm with %s failed: %s", side_ == Side::kSend ? "send" : "receive",
         cfg_.peer.c_str(), s.message().c_str());
}

Status SocketComm::error() const {
  MutexLock lock(err_mu_);
  return error_;
}

Status SocketComm::failedError() {
  // Before NCCL hears of the failure (and may free the buffers of failed requests), make sure
  // no helper touches a user buffer again: stop and join them (they never block, so this is
  // quick). Only on this error path does a caller wait.
  for (auto& h : helpers_) h->stop();
  return error();
}

SockRequest* SocketComm::allocRequest() {
  if (free_.empty()) return nullptr;
  SockRequest* r = &reqs_[free_.back()];
  free_.pop_back();
  r->in_use = true;
  r->data = nullptr;
  r->capacity = r->size = 0;
  r->matched = r->ctl_done = false;
  r->pending.store(0, std::memory_order_relaxed);
  return r;
}

void SocketComm::releaseRequest(SockRequest* r) {
  if (!r->in_use) return;
  r->in_use = false;
  free_.push_back(r->index);
}

Status SocketComm::tooManyRequests(const char* op) const {
  return failedPrecondition(std::string(op) + " to/from " + cfg_.peer + ": " +
                            std::to_string(kMaxRequests) +
                            " requests already in flight on this comm (NCCL_NET_MAX_REQUESTS); "
                            "test() some to completion first");
}

void SocketComm::queueStripes(SockRequest* r) {
  Stripe plan[kMaxSocks];
  const int n =
      planStripes(r->size, static_cast<int>(streams_.size()), r->seq, cfg_.min_chunk, plan);
  r->pending.store(n, std::memory_order_release);
  for (int j = 0; j < n; ++j) {
    Stream& s = *streams_[plan[j].stream];
    // Cannot overflow: at most one stripe per in-flight request per stream (kCapacity >= 32).
    s.ring.push({r->data + plan[j].offset, plan[j].length, 0, r});
    s.helper->notify();
  }
}

Status SocketComm::isend(void* data, size_t size, Request** out) {
  MutexLock lock(mu_);
  progressControl();
  if (failed()) return failedError();
  if (peer_closed_)
    return unavailable("send to " + cfg_.peer + ": the receiver closed the connection");
  if (free_.empty()) return tooManyRequests("isend");
  // An inline message is admitted whole, here: refused, no request (NCCL retries). A striped
  // one is admitted chunk by chunk by the helpers, so one larger than a paced chunk is striped
  // (an admission larger than the bucket's depth would need the bucket full: no slack for a
  // late retry).
  Admission* adm = admission_.load(std::memory_order_acquire);
  const uint64_t chunk = adm != nullptr ? adm->chunkBytes() : 0;
  const bool inl = size <= cfg_.inline_max && (chunk == 0 || size <= chunk);
  if (inl && adm != nullptr && !adm->tryAdmit(size, size)) {
    *out = nullptr;
    return okStatus();
  }
  SockRequest* r = allocRequest();
  r->data = static_cast<char*>(data);
  r->size = size;
  r->seq = next_seq_++;
  CtlOut& c = ctl_out_.emplace_back();
  encodeFrame({FrameType::kMessage, static_cast<uint8_t>(inl ? kFrameInline : 0), r->seq, size},
              c.hdr);
  c.req = r;
  if (inl) {
    c.payload = r->data;
    c.payload_len = size;
  } else {
    queueStripes(r);
  }
  flushControlOut();
  *out = r;
  return okStatus();
}

Status SocketComm::irecv(void* data, size_t size, Request** out) {
  MutexLock lock(mu_);
  if (failed()) return failedError();
  SockRequest* r = allocRequest();
  if (r == nullptr) return tooManyRequests("irecv");
  r->data = static_cast<char*>(data);
  r->capacity = size;
  posted_.push_back(r);
  // No read here: the first test() does it. In a ping-pong the message cannot be there yet,
  // and a syscall returning EAGAIN would sit on the critical path.
  *out = r;
  return okStatus();
}

Status SocketComm::test(SockRequest* r, bool* done, size_t* bytes) {
  MutexLock lock(mu_);
  *done = false;
  if (!r->in_use) return invalidArgument("test: request is not in flight (already completed?)");
  progressControl();
  if (r->ctl_done && r->pending.load(std::memory_order_acquire) == 0) {
    *done = true;
    *bytes = r->size;
    releaseRequest(r);
    return okStatus();
  }
  if (failed()) {
    releaseRequest(r);
    return failedError();
  }
  return okStatus();
}

void SocketComm::progressControl() {
  if (failed()) return;
  if (side_ == Side::kSend) {
    if (++calls_since_read_ >= kSendSideReadEvery) {
      calls_since_read_ = 0;
      readControlSend();
    }
  } else {
    readControlRecv();
  }
  if (!failed() && !ctl_out_.empty()) flushControlOut();
}

void SocketComm::flushControlOut() {
  while (!ctl_out_.empty()) {
    CtlOut& c = ctl_out_.front();
    iovec iov[2];
    int n = 0;
    if (c.off < kFrameBytes) iov[n++] = {c.hdr + c.off, kFrameBytes - c.off};
    const uint64_t pay_off = c.off > kFrameBytes ? c.off - kFrameBytes : 0;
    const char* payload = c.owned.empty() ? c.payload : c.owned.data();
    if (c.payload_len > pay_off) {
      iov[n++] = {const_cast<char*>(payload) + pay_off, c.payload_len - pay_off};
    }
    if (n > 0) {
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = static_cast<size_t>(n);
      const ssize_t w = ::sendmsg(ctl_.get(), &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (w < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        fail(netError(errno, "write control stream to " + cfg_.peer));
        return;
      }
      c.off += static_cast<uint64_t>(w);
      if (c.off < kFrameBytes + c.payload_len) return;  // short write: socket buffer full
    }
    if (c.req != nullptr) c.req->ctl_done = true;
    ctl_out_.pop_front();
  }
}

void SocketComm::readControlSend() {
  // The receiver writes only error frames (followed by their text) on the control stream.
  for (;;) {
    int err = 0;
    IoResult r;
    if (!reading_error_text_) {
      r = recvSome(ctl_.get(), in_frame_ + in_frame_got_, kFrameBytes - in_frame_got_,
                   &in_frame_got_, &err);
    } else {
      size_t got = error_text_.size();
      error_text_.resize(error_text_len_);
      r = recvSome(ctl_.get(), error_text_.data() + got, error_text_len_ - got, &got, &err);
      error_text_.resize(got);
    }
    if (r == IoResult::kWouldBlock) return;
    if (r == IoResult::kClosed) {
      bool outstanding = free_.size() < static_cast<size_t>(kMaxRequests);
      peer_closed_ = true;
      if (outstanding) {
        fail(unavailable("send to " + cfg_.peer +
                         ": the receiver closed the connection with messages in flight "
                         "(process gone?)"));
      }
      return;
    }
    if (r == IoResult::kError) {
      fail(netError(err, "read control stream from " + cfg_.peer));
      return;
    }
    if (!reading_error_text_ && in_frame_got_ == kFrameBytes) {
      in_frame_got_ = 0;
      auto f = parseFrame(in_frame_, kFrameBytes);
      if (!f.ok() || f->type != FrameType::kError) {
        fail(dataLoss("control stream from " + cfg_.peer + ": unexpected data (" +
                      (f.ok() ? std::string("a message frame") : f.status().message()) + ")"));
        return;
      }
      reading_error_text_ = true;
      error_text_.clear();
      error_text_len_ = f->size;
    }
    if (reading_error_text_ && error_text_.size() == error_text_len_) {
      reading_error_text_ = false;
      fail(outOfRange("receiver " + cfg_.peer + " rejected a message: " + error_text_));
      return;
    }
  }
}

void SocketComm::rejectMessage(SockRequest* r, const Frame& f) {
  const std::string text = "message #" + std::to_string(f.seq) + " of " + std::to_string(f.size) +
                           " bytes is larger than the posted receive of " +
                           std::to_string(r->capacity) + " bytes";
  CtlOut& c = ctl_out_.emplace_back();
  c.owned = text.substr(0, kMaxErrorText);
  c.payload_len = c.owned.size();
  encodeFrame({FrameType::kError, 0, f.seq, c.payload_len}, c.hdr);
  flushControlOut();
  fail(outOfRange("receive from " + cfg_.peer + ": " + text +
                  " (send larger than receive; message truncated)"));
}

uint64_t SocketComm::inlineAllowance(uint64_t need) {
  Admission* adm = admission_.load(std::memory_order_acquire);
  if (adm == nullptr || need == 0) return need;
  if (ctl_credit_ == 0) {
    const uint64_t chunk = adm->chunkBytes();
    if (chunk == 0) return need;  // unpaced: completions count the bytes
    const uint64_t take = std::min(need, chunk);
    if (!adm->tryAdmit(take, need)) return 0;
    ctl_credit_ = take;
  }
  return std::min(need, ctl_credit_);
}

void SocketComm::consumeCredit(uint64_t bytes) {
  ctl_credit_ = ctl_credit_ > bytes ? ctl_credit_ - bytes : 0;
}

IoResult SocketComm::fillStage(size_t max_bytes, int* err) {
  if (stage_begin_ > 0) {
    std::memmove(stage_.get(), stage_.get() + stage_begin_, stage_end_ - stage_begin_);
    stage_end_ -= stage_begin_;
    stage_begin_ = 0;
  }
  size_t got = 0;
  const IoResult io = recvSome(ctl_.get(), stage_.get() + stage_end_,
                               std::min(max_bytes, kStageBytes - stage_end_), &got, err);
  stage_end_ += got;
  return io;
}

void SocketComm::readControlRecv() {
  for (;;) {
    int err = 0;
    IoResult io = IoResult::kProgress;
    if (inline_req_ != nullptr) {
      SockRequest* r = inline_req_;
      // What the rx bucket lets this thread move into the user's buffer now (paced: its
      // credit, one chunk at a time; refused: test() looks again later).
      const uint64_t allowed = inlineAllowance(r->size - inline_got_);
      if (allowed == 0 && inline_got_ < r->size) return;
      const uint64_t take = std::min<uint64_t>(stage_end_ - stage_begin_, allowed);
      std::memcpy(r->data + inline_got_, stage_.get() + stage_begin_, take);
      stage_begin_ += take;
      inline_got_ += take;
      consumeCredit(take);
      if (inline_got_ == r->size) {
        r->ctl_done = true;
        inline_req_ = nullptr;
        continue;
      }
      if (take == allowed) continue;  // the credit is spent: admit the next chunk
      const uint64_t need = std::min(r->size - inline_got_, allowed - take);
      if (need >= kDirectReadBytes) {  // a large remainder: straight into the user's buffer
        size_t got = inline_got_;
        io = recvSome(ctl_.get(), r->data + got, need, &got, &err);
        consumeCredit(got - inline_got_);
        inline_got_ = got;
      } else {
        io = fillStage(need + kFrameReadAhead, &err);
      }
      if (io == IoResult::kProgress) continue;
      if (io == IoResult::kWouldBlock) return;
      fail(io == IoResult::kClosed
               ? unavailable("receive from " + cfg_.peer +
                             ": the sender closed the connection in the middle of a message")
               : netError(err, "read control stream from " + cfg_.peer));
      return;
    }
    if (posted_.empty()) return;  // frames are matched to posted receives in order
    if (stage_end_ - stage_begin_ < kFrameBytes) {
      io = fillStage(kFrameBytes + kFrameReadAhead, &err);
      if (io == IoResult::kProgress) continue;
      if (io == IoResult::kWouldBlock) return;
      fail(io == IoResult::kClosed
               ? unavailable("receive from " + cfg_.peer +
                             ": the sender closed the connection with receives posted (process "
                             "gone?)")
               : netError(err, "read control stream from " + cfg_.peer));
      return;
    }
    auto f = parseFrame(stage_.get() + stage_begin_, kFrameBytes);
    if (!f.ok() || f->type != FrameType::kMessage) {
      fail(dataLoss("control stream from " + cfg_.peer + ": " +
                    (f.ok() ? std::string("unexpected frame type") : f.status().message())));
      return;
    }
    SockRequest* r = posted_.front();
    const uint32_t expect = next_seq_;
    if (f->seq != expect) {
      fail(dataLoss("control stream from " + cfg_.peer + ": message #" + std::to_string(f->seq) +
                    " arrived, expected #" + std::to_string(expect)));
      return;
    }
    if (f->size > r->capacity) {
      stage_begin_ += kFrameBytes;
      posted_.pop_front();
      rejectMessage(r, *f);
      return;
    }
    stage_begin_ += kFrameBytes;
    posted_.pop_front();
    ++next_seq_;
    r->seq = f->seq;
    r->size = f->size;
    r->matched = true;
    if ((f->flags & kFrameInline) != 0) {
      if (r->size == 0) {
        r->ctl_done = true;
      } else {
        inline_req_ = r;
        inline_got_ = 0;
      }
    } else {
      queueStripes(r);
      r->ctl_done = true;
    }
  }
}

}  // namespace tq::plugin::socket
