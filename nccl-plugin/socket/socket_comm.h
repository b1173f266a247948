// The data path of the socket transport: one established connection (one end of it).
//
// A connection is nsocks TCP data streams plus one control stream. Per message the sender
// writes a 16-byte frame on the control stream (wire.h); messages up to `inline_max` bytes
// follow their frame on the control stream, larger ones are cut into at most one stripe per
// data stream (planStripes) that both ends compute from the same inputs.
//
// Threads:
//  * The caller (NCCL's proxy thread: isend/irecv/test) owns the control stream and the request
//    pool, under `mu_` — uncontended in practice (one caller per comm), never held by helpers.
//    Inline messages are written/read entirely by the caller: no thread hand-off on the
//    latency-critical small-message path.
//  * `nthreads` helper threads, owned by the comm, move stripes on the data streams with
//    non-blocking send/recv directly from/into the user's buffers (no copy), sleeping in poll()
//    when blocked or idle. The caller hands them stripes through lock-free SPSC rings and wakes
//    a sleeping helper with an eventfd.
//  * A request is done when its control part is done and its stripe counter reached zero
//    (release/acquire, so the received bytes are visible to the caller).
// Pacing (transport.h "Pacing contract"; setPacing before the first isend/irecv): each helper
// admits every read or write of a stripe through its own Admission, at most chunkBytes() ahead,
// and sleeps until the tokens are there (a receiver that reads no faster than its tenant's rx
// bucket holds the sender through TCP flow control, also a sender that skipped the plugin);
// inline messages (at most one chunk when paced) are admitted whole by the caller: isend returns
// no request while the tx bucket refuses; a received inline payload is moved into the user's
// buffer as the rx bucket admits it, chunk by chunk (test() progress; the rest waits in the
// control stream). A sending helper that waited on POLLOUT asks the kernel how long the
// connection was limited by the receiver's window (TCP_INFO tcpi_rwnd_limited) and reports it
// as peer wait: the receiver's pacing, not demand at this end.
// Windows (paced ends, cfg.window_ns > 0): what may wait in the kernel follows the bucket, not
// the kernel's autotuning (MBs per stream). A receiving stream's TCP window is bounded to its
// share of rate x window_ns (SO_RCVBUF: the buffer, and so the window, stop following the
// kernel's autotuning), so the sender holds what the reader has not admitted: the
// bytes on the wire into a paced receiver follow its pacing within that window, as a
// clear-to-send does on ib, and a switch port towards it holds at most the windows of those
// sending into it. A sending stream's unsent bytes are bounded the same way
// (TCP_NOTSENT_LOWAT), so a backlog in the socket cannot leave faster than the tx bucket
// admitted it once the receiver opens up. The control stream, which carries inline messages, is
// sized like a data stream (by the first helper). Each helper resizes its streams when the rate or
// the process's count of paced streams changes (pacedWindowBytes), never below 8 segments. With
// window_rtt a receiving stream's window also covers its measured round trip (windowRttNs), read
// (TCP_INFO, one getsockopt per stream) at those moments and at least every kRttRefreshNs, on
// the helper, never per send or receive. Errors:
// the first error (peer closed, reset, truncation) is stored and returned by every later call; a
// receiver that gets a message larger than the posted receive fails it with kOutOfRange and tells
// the sender with an error frame, which fails the sender's requests too. Destruction stops and
// joins the helpers, then closes the sockets: no hang, no leak, also with requests in flight.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "nccl-plugin/oob/tcp.h"
#include "nccl-plugin/socket/wire.h"
#include "nccl-plugin/transport.h"

namespace tq::plugin::socket {

class SocketComm;

struct StripeTask {
  char* ptr = nullptr;
  uint64_t len = 0;
  uint64_t done = 0;  // written by the helper only
  class SockRequest* req = nullptr;
};

// Single producer (the caller, under the comm's mutex) / single consumer (the stream's helper).
class StripeRing {
 public:
  // >= kMaxRequests: a request puts at most one stripe on a stream.
  static constexpr uint32_t kCapacity = 64;
  bool push(const StripeTask& t);
  StripeTask* front();  // consumer
  void pop();           // consumer
  bool empty() const;

 private:
  std::array<StripeTask, kCapacity> items_{};
  alignas(64) std::atomic<uint32_t> head_{0};
  alignas(64) std::atomic<uint32_t> tail_{0};
};

class SockRequest final : public Request {
 public:
  Status test(bool* done, size_t* bytes) override;

  SocketComm* comm = nullptr;
  int index = 0;
  bool in_use = false;
  char* data = nullptr;
  uint64_t capacity = 0;  // receive: posted size
  uint64_t size = 0;      // bytes of the message
  uint32_t seq = 0;
  bool matched = false;         // receive: its frame has been read
  bool ctl_done = false;        // frame written (send) / frame + inline payload read (receive)
  std::atomic<int> pending{0};  // stripes not yet moved by the helpers
};

struct SocketCommConfig {
  int nthreads = 1;
  uint64_t inline_max = 64 * 1024;
  uint64_t min_chunk = 64 * 1024;  // the SENDER's value (a receiver learns it from the hello)
  std::string peer;                // for messages: "10.0.0.2:41000"
  int64_t window_ns = 0;           // TENANTQOS_SOCKET_WINDOW_US (ns); 0: the kernel's autotuning
  uint64_t window_min = 8192;      // TENANTQOS_SOCKET_WINDOW_MIN
  bool window_rtt = false;         // TENANTQOS_SOCKET_WINDOW_RTT: receive windows cover the RTT
  const Clock* clock = nullptr;    // when to re-read round trips; null: realClock()
};

// The window of one paced stream (bytes): its even share of `rate` (bytes/s) x `window_ns` over
// `streams` paced streams of the process in that direction, at least `min_bytes` and
// kWindowSegments segments of `mss` bytes (below that TCP's silly-window avoidance and TSO
// deferral stall a stream, and a receive buffer pays per-skb overhead out of it), at most
// kMaxStreamWindowBytes. Pure; the one place this rule lives.
inline constexpr uint64_t kMaxStreamWindowBytes = 16u << 20;
inline constexpr uint64_t kWindowSegments = 8;
uint64_t pacedWindowBytes(uint64_t rate, int64_t window_ns, int streams, uint64_t min_bytes,
                          uint64_t mss);

// Round trip of one stream as the kernel measured it (ns; 0: no sample yet).
struct StreamRtt {
  int64_t rtt_ns = 0;      // receiving end: tcpi_rcv_rtt (the receiver's own smoothed estimate)
  int64_t min_rtt_ns = 0;  // tcpi_min_rtt (on a receive-only stream: the handshake's)
};

// The round trip a paced receiving stream's window covers on top of `window_ns`
// (TENANTQOS_SOCKET_WINDOW_RTT; the window is then pacedWindowBytes(rate, window_ns + this)).
// A stream moves at most window / round trip, so a window of rate x window_ns alone idles a
// stream whose path holds a queue (the fabric's spine: up to 4 ms of port queue on every round
// trip) and the link goes unused. Covering the measured round trip keeps about window_ns of the
// rate waiting at the reader (Little: what is in flight is rate x round trip, the rest of the
// window is the reader's reserve), which is what the wire can carry above the rate in a window.
// Bounded, because the loop closes on itself: a larger window lets a burst queue more, which
// raises the round trip, which grows the window; and the receiver's estimate also counts the
// time a paced or idle sender took to answer a window update (samples are "my ACK -> data
// echoing it"), with 1 ms granularity under TCP timestamps. So the measured value counts only
// up to the connection's minimum plus window_ns (a queue of window_ns is the most it follows:
// the testbed's ports hold 4 ms), and never more than kMaxWindowRttNs (a hostile peer delaying
// its handshake or its echoes gains at most that, and the window stays within
// kMaxStreamWindowBytes). The minimum alone would not do: it leaves out the very queue that
// idled the streams. 0 when no sample exists yet (the configured time alone, as without it).
// Pure; the one place this rule lives.
inline constexpr int64_t kMaxWindowRttNs = 50'000'000;
int64_t windowRttNs(const StreamRtt& rtt, int64_t window_ns);

// A receiving stream's round trip as its kernel estimates it (one getsockopt TCP_INFO); zeros
// when the kernel cannot say (no sample yet; a kernel without tcpi_min_rtt, < 4.6).
StreamRtt receivingStreamRtt(int fd);

// Paced streams of this process in one direction (data and control, all comms, all devices):
// the windows' divisor. For tests and diagnostics.
int pacedStreamCount(bool send);

class SocketComm {
 public:
  enum class Side { kSend, kRecv };
  SocketComm(Side side, Fd ctl, std::vector<Fd> data, SocketCommConfig cfg);
  ~SocketComm();
  SocketComm(const SocketComm&) = delete;
  SocketComm& operator=(const SocketComm&) = delete;

  Status start();  // spawns the helper threads
  // Pacing of this end's direction; before the first isend/irecv (helpers may already run).
  void setPacing(Pacing* pacing);

  Status isend(void* data, size_t size, Request** out);
  Status irecv(void* data, size_t size, Request** out);
  Status test(SockRequest* r, bool* done, size_t* bytes);

  // Records the first error; thread-safe. Later calls return it.
  void fail(const Status& s);
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  Status error() const;
  // The error, after the helpers have stopped for good (no user buffer is touched again).
  Status failedError();

  // Sockets of this comm (control last), for tests of marking.
  std::vector<int> fds() const;
  const std::string& peer() const { return cfg_.peer; }

 private:
  class Helper;
  struct Stream {
    Fd fd;
    StripeRing ring;
    Helper* helper = nullptr;
    int index = 0;        // among the comm's data streams (messages)
    int rcvlowat = 1;     // the socket's SO_RCVLOWAT as last set (receive side; its helper only)
    uint64_t credit = 0;  // bytes admitted and not moved yet (its helper only)
    int64_t rwnd_limited_us = -1;  // send side: tcpi_rwnd_limited at the last look (helper)
    uint64_t window = 0;  // bytes of its window as last set (pacedWindowBytes; 0: never set)
    uint32_t mss = 0;     // its segment size (TCP_MAXSEG), read when first sized
  };
  struct CtlOut {
    uint8_t hdr[kFrameBytes];
    const char* payload = nullptr;
    uint64_t payload_len = 0;
    std::string owned;  // payload storage for error frames
    uint64_t off = 0;   // over hdr + payload
    SockRequest* req = nullptr;
  };

  SockRequest* allocRequest() TQ_REQUIRES(mu_);
  void releaseRequest(SockRequest* r) TQ_REQUIRES(mu_);
  Status tooManyRequests(const char* op) const;
  void queueStripes(SockRequest* r) TQ_REQUIRES(mu_);
  // Caller-side progress of the control stream; mu_ held.
  // `from_isend_or_test`: the send side reads the (rarely used) reverse direction of the
  // control stream only every kSendSideReadEvery calls, keeping syscalls off the hot path.
  void progressControl() TQ_REQUIRES(mu_);
  void flushControlOut() TQ_REQUIRES(mu_);
  void readControlSend() TQ_REQUIRES(mu_);
  void readControlRecv() TQ_REQUIRES(mu_);
  // Receive side: fills the staging buffer with one recv (frame + small payload + maybe the
  // next frames in a single syscall). kWouldBlock/kClosed/kError as oob::recvSome.
  oob::IoResult fillStage(size_t max_bytes, int* err) TQ_REQUIRES(mu_);
  // Receive side, caller: bytes of an inline payload the rx bucket lets it move now (admitting
  // one chunk when the credit is spent; 0: refused) and what it moved of them.
  uint64_t inlineAllowance(uint64_t need) TQ_REQUIRES(mu_);
  void consumeCredit(uint64_t bytes) TQ_REQUIRES(mu_);
  void rejectMessage(SockRequest* r, const Frame& f) TQ_REQUIRES(mu_);

  const Side side_;
  Fd ctl_;
  std::vector<std::unique_ptr<Stream>> streams_;
  std::vector<std::unique_ptr<Helper>> helpers_;
  const SocketCommConfig cfg_;

  mutable Mutex mu_;  // caller side: pool, control stream, sequence numbers
  std::array<SockRequest, kMaxRequests> reqs_ TQ_GUARDED_BY(mu_);
  std::vector<int> free_ TQ_GUARDED_BY(mu_);
  uint32_t next_seq_ TQ_GUARDED_BY(mu_) = 0;
  std::deque<CtlOut> ctl_out_ TQ_GUARDED_BY(mu_);
  // Receive side: posted, not yet matched requests (posting order); bytes read from the control
  // stream and not consumed yet (stage_[stage_begin_, stage_end_)); an inline payload in
  // progress. Small messages arrive with one recv into the stage; large remainders of inline
  // payloads are read straight into the user's buffer.
  std::deque<SockRequest*> posted_ TQ_GUARDED_BY(mu_);
  static constexpr size_t kStageBytes = 32 * 1024 + 64;
  static constexpr size_t kDirectReadBytes = 1024;
  // A frame read also takes up to this much of what follows (a small payload, further frames),
  // but not more: a larger payload is better read straight into the user's buffer.
  static constexpr size_t kFrameReadAhead = 16 * 1024;
  std::unique_ptr<uint8_t[]> stage_ TQ_GUARDED_BY(mu_);
  size_t stage_begin_ TQ_GUARDED_BY(mu_) = 0;
  size_t stage_end_ TQ_GUARDED_BY(mu_) = 0;
  SockRequest* inline_req_ TQ_GUARDED_BY(mu_) = nullptr;  // receiving its inline payload
  uint64_t inline_got_ TQ_GUARDED_BY(mu_) = 0;
  // Send side: the reverse direction carries only error frames; read it every few calls.
  static constexpr uint32_t kSendSideReadEvery = 32;
  uint32_t calls_since_read_ TQ_GUARDED_BY(mu_) = 0;
  uint8_t in_frame_[kFrameBytes] TQ_GUARDED_BY(mu_);
  size_t in_frame_got_ TQ_GUARDED_BY(mu_) = 0;
  // Send side: an error frame's text being read.
  bool reading_error_text_ TQ_GUARDED_BY(mu_) = false;
  std::string error_text_ TQ_GUARDED_BY(mu_);
  uint64_t error_text_len_ TQ_GUARDED_BY(mu_) = 0;
  bool peer_closed_ TQ_GUARDED_BY(mu_) = false;

  // The caller's admitter (inline messages); null until setPacing. Its credit: bytes admitted
  // and not moved yet (receive side, mu_).
  std::atomic<Admission*> admission_{nullptr};
  uint64_t ctl_credit_ TQ_GUARDED_BY(mu_) = 0;
  // Its streams (data and control) are counted in pacedStreamCount (setPacing; until
  // destruction).
  bool counted_ = false;
  // The control stream's window as last set and its segment size (the first helper's only).
  uint64_t ctl_window_ = 0;
  uint32_t ctl_mss_ = 0;

  std::atomic<bool> failed_{false};
  mutable Mutex err_mu_;
  Status error_ TQ_GUARDED_BY(err_mu_);
};

}  // namespace tq::plugin::socket
