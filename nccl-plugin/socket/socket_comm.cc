#include "nccl-plugin/socket/socket_comm.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/log.h"

namespace tq::plugin::socket {

// The out-of-band layer's non-blocking I/O is this transport's data path too.
using oob::IoResult;
using oob::netError;
using oob::recvSome;
using oob::sendSome;

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

  void run() {
    std::vector<pollfd> pfds;
    pfds.reserve(streams_.size() + 1);
    while (!stop_.load(std::memory_order_acquire) && !comm_->failed()) {
      bool progress = false;
      bool idle_work = false;  // a stream got work we have not tried yet
      pfds.clear();
      for (size_t i = 0; i < streams_.size(); ++i) {
        Stream* s = streams_[i];
        while (StripeTask* t = s->ring.front()) {
          int err = 0;
          const IoResult r =
              send_ ? sendSome(s->fd.get(), t->ptr + t->done, t->len - t->done, &t->done, &err)
                    : recvSome(s->fd.get(), t->ptr + t->done, t->len - t->done, &t->done, &err);
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
            if (!send_) setLowWater(s, t->len - t->done);
            pfds.push_back({s->fd.get(), static_cast<short>(send_ ? POLLOUT : POLLIN), 0});
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
        if (!polled && !s->ring.empty()) idle_work = true;
      }
      if (!idle_work && !stop_.load(std::memory_order_acquire)) {
        pfds.push_back({efd_.get(), POLLIN, 0});
        const int rc = ::poll(pfds.data(), pfds.size(), lowered_ ? kLowWaterPollMs : 1000);
        if (rc > 0 && (pfds.back().revents & POLLIN) != 0) {
          uint64_t v;
          ssize_t n = ::read(efd_.get(), &v, sizeof v);
          (void)n;
        }
      }
      sleeping_.store(false, std::memory_order_relaxed);
    }
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
  // (55 vs 45 Gbit/s), 512 KiB slower (47 vs 57 at 4 MiB).
  void setLowWater(Stream* s, size_t remaining) {
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

  static constexpr size_t kLowWaterMinBytes = 256 * 1024;
  static constexpr size_t kLowWaterMaxBytes = 1u << 20;
  static constexpr int kLowWaterPollMs = 20;

  SocketComm* const comm_;
  const bool send_;
  bool lowered_ = false;  // some stream has SO_RCVLOWAT > 1
  int index_ = 0;
  std::vector<Stream*> streams_;
  Fd efd_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> sleeping_{false};
};

// ---------------------------------------------------------------------------------------------
// SockRequest

Status SockRequest::test(bool* done, size_t* bytes) { return comm->test(this, done, bytes); }

// ---------------------------------------------------------------------------------------------
// SocketComm

SocketComm::SocketComm(Side side, Fd ctl, std::vector<Fd> data, int family, SocketCommConfig cfg)
    : side_(side), ctl_(std::move(ctl)), family_(family), cfg_(std::move(cfg)) {
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
    h->add(streams_[i].get());
  }
  for (size_t i = 0; i < helpers_.size(); ++i) {
    TQ_RETURN_IF_ERROR_CTX(helpers_[i]->start(static_cast<int>(i)), "start helper thread");
  }
  return okStatus();
}

std::vector<int> SocketComm::fds() const {
  std::vector<int> out;
  for (const auto& s : streams_) out.push_back(s->fd.get());
  out.push_back(ctl_.get());
  return out;
}

void SocketComm::fail(const Status& s) {
  std::lock_guard<std::mutex> lock(err_mu_);
  if (failed_.load(std::memory_order_relaxed)) return;
  error_ = s;
  failed_.store(true, std::memory_order_release);
  TQ_LOG(kWarn, "%s comm with %s failed: %s", side_ == Side::kSend ? "send" : "receive",
         cfg_.peer.c_str(), s.message().c_str());
}

Status SocketComm::error() const {
  std::lock_guard<std::mutex> lock(err_mu_);
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
  std::lock_guard<std::mutex> lock(mu_);
  progressControl();
  if (failed()) return failedError();
  if (peer_closed_)
    return unavailable("send to " + cfg_.peer + ": the receiver closed the connection");
  SockRequest* r = allocRequest();
  if (r == nullptr) return tooManyRequests("isend");
  r->data = static_cast<char*>(data);
  r->size = size;
  r->seq = next_seq_++;
  const bool inl = size <= cfg_.inline_max;
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
  std::lock_guard<std::mutex> lock(mu_);
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
  std::lock_guard<std::mutex> lock(mu_);
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
      const uint64_t take = std::min<uint64_t>(stage_end_ - stage_begin_, r->size - inline_got_);
      std::memcpy(r->data + inline_got_, stage_.get() + stage_begin_, take);
      stage_begin_ += take;
      inline_got_ += take;
      if (inline_got_ == r->size) {
        r->ctl_done = true;
        inline_req_ = nullptr;
        continue;
      }
      const uint64_t need = r->size - inline_got_;
      if (need >= kDirectReadBytes) {  // a large remainder: straight into the user's buffer
        size_t got = inline_got_;
        io = recvSome(ctl_.get(), r->data + got, need, &got, &err);
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
    stage_begin_ += kFrameBytes;
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
    posted_.pop_front();
    if (f->size > r->capacity) {
      rejectMessage(r, *f);
      return;
    }
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
