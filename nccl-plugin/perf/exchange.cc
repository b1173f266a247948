// tenantqos-perf alltoall / incast: a rank exchanges with several peers at once, one plugin
// connection per (sender, receiver) pair, as NCCL's grouped ncclSend/ncclRecv do.
//
//   alltoall  every rank sends --size / nranks bytes to every other rank per iteration and
//             receives as much from each (MoE dispatch / combine); nccl-tests' algbw = size /
//             time, busbw = algbw x (n-1)/n
//   incast    ranks 1..n-1 each send --size bytes to rank 0 per iteration (many-to-one: a
//             gather, a parameter server's push); algbw = busbw = what rank 0 receives per
//             iteration / time
//
// Each connection carries a stream of --chunk messages with up to --window in flight (NCCL
// pipelines each peer's transfer in chunks the same way); receives are posted with the chunk's
// capacity, as NCCL posts its buffer slots, so the last chunk of a block arrives smaller than
// posted. A rank starts iteration k+1 while k is still in flight (at most two at once) unless
// --compute-ms asks for a training step; with --duration the stream ends like the streaming
// allreduce (allreduce.cc): every sender posts a zero-byte marker after its last data, every
// receiver drains until the markers of all its peers, and only complete iterations count.
#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <cstring>
#include <vector>

#include "nccl-plugin/perf/rank.h"
#include "nccl-plugin/perf/report.h"

namespace tq::perf {

// One run of the exchange loop: one size of a sweep (a fixed number of iterations), or the
// whole --duration stream.
struct Rank::ExchangeRun {
  // One direction of one connection: a ring of `w` requests over chunk tasks numbered
  // (iteration, chunk) in order; both ends post them in that order, which is how they match.
  struct Flow {
    Conn* conn = nullptr;
    void* mh = nullptr;
    uint8_t* slots = nullptr;  // receives: w slots of `chunk` bytes
    std::vector<void*> req;
    uint64_t posted = 0, done = 0;
    uint64_t limit = UINT64_MAX;  // stopping: no real task at or beyond
    EndMarker marker;             // sends (streaming)
    bool marker_rcvd = false;     // receives (streaming)
  };

  uint64_t block = 0;  // bytes per connection per iteration
  uint64_t chunk = 0;  // bytes per message (the last one of a block may be smaller)
  uint64_t cpi = 0;    // chunks per iteration
  uint64_t w = 0;
  uint64_t iters = UINT64_MAX;  // a sweep's iteration count; UINT64_MAX while streaming
  bool streaming = false;
  int64_t start = 0, end = INT64_MAX;
  uint8_t* sendbuf = nullptr;  // `block` bytes of this rank's pattern
  std::vector<Flow> tx, rx;
  uint64_t started = 0, complete = 0;
  uint64_t tx_bytes = 0, rx_bytes = 0, wrong = 0;
  int64_t last_complete = 0;
  bool stopping = false;
  IntervalReporter* rep = nullptr;

  uint64_t iterOf(uint64_t task) const { return task / cpi; }
  uint64_t offsetOf(uint64_t task) const { return (task % cpi) * chunk; }
  uint64_t lengthOf(uint64_t task) const { return std::min(chunk, block - offsetOf(task)); }
  void beginStop() {
    if (stopping) return;
    stopping = true;
    // What is posted completes; receives beyond only drain up to each peer's marker.
    for (Flow& f : tx) f.limit = f.posted;
    for (Flow& f : rx) f.limit = f.posted;
  }
};

Status Rank::exchangeIterations(ExchangeRun& x) {
  const int64_t compute_ns = o_.compute_ms * 1'000'000;
  const int64_t cycle_ns = (o_.on_ms + o_.off_ms) * 1'000'000;
  // With a PHASE_MS the on/off cycle runs on the wall clock (jobs on one schedule).
  const int64_t cycle_origin =
      o_.phase_ms < 0 ? x.start : x.start - (realClock().wallNs() - o_.phase_ms * 1'000'000);
  const int64_t report_ns = o_.report_ms * 1'000'000;
  auto mayStart = [&](int64_t now) {
    if (x.stopping || x.started >= x.iters || x.started - x.complete >= 2) return false;
    if (o_.compute_ms > 0 && x.started > 0 &&
        (x.complete < x.started || now < x.last_complete + compute_ns)) {
      return false;
    }
    if (cycle_ns <= 0) return true;
    const int64_t in_cycle = ((now - cycle_origin) % cycle_ns + cycle_ns) % cycle_ns;
    return in_cycle < o_.on_ms * 1'000'000;
  };
  auto finished = [&]() {
    if (!x.streaming) return x.complete >= x.iters;
    for (const auto& f : x.tx) {
      if (!f.marker.done) return false;
    }
    for (const auto& f : x.rx) {
      if (!f.marker_rcvd) return false;
    }
    return true;
  };
  while (!finished()) {
    bool progress = false, paced = false;
    const int64_t now = nowNs();
    if (x.rep != nullptr && report_ns > 0 && now - x.rep->last() >= report_ns) {
      x.rep->report(now, x.tx_bytes, x.rx_bytes);
    }
    if (x.streaming && now >= x.end) x.beginStop();
    while (mayStart(now)) ++x.started;
    const uint64_t real_end = x.started * x.cpi;  // tasks of the iterations started so far

    for (auto& f : x.rx) {
      while (!f.marker_rcvd && f.posted - f.done < x.w) {
        const bool real = f.posted < f.limit && f.posted < real_end;
        if (!real && !x.stopping) break;  // nothing to receive before the next iteration
        void*& r = f.req[f.posted % x.w];
        TQ_RETURN_IF_ERROR_CTX(
            net_->irecv(f.conn->comm, f.slots + (f.posted % x.w) * x.chunk, x.chunk, 0, f.mh, &r),
            format("receive from rank %d", f.conn->peer));
        if (r == nullptr) {  // the plugin asks to retry (its receive side is paced)
          paced = true;
          break;
        }
        ++f.posted;
        progress = true;
      }
      while (f.done < f.posted) {
        bool done = false;
        int got = -1;
        TQ_RETURN_IF_ERROR_CTX(net_->test(f.req[f.done % x.w], &done, &got),
                               format("receive from rank %d", f.conn->peer));
        if (!done) break;
        progress = true;
        if (got == 0 && x.streaming) {  // the peer's end marker
          f.marker_rcvd = true;
          x.beginStop();
          ++f.done;
          break;
        }
        if (f.done < f.limit) {
          const uint64_t len = x.lengthOf(f.done);
          if (got < 0 || static_cast<uint64_t>(got) != len) {
            return dataLoss(format("received %d bytes from rank %d for a %" PRIu64 "-byte chunk",
                                   got, f.conn->peer, len));
          }
          if (o_.check && (o_.check_all || x.iterOf(f.done) == 0)) {
            const uint8_t* p = f.slots + (f.done % x.w) * x.chunk;
            const uint64_t off = x.offsetOf(f.done);
            for (uint64_t i = 0; i < len; ++i) {
              x.wrong += p[i] != patternByte(off + i, f.conn->peer) ? 1 : 0;
            }
          }
        }
        x.rx_bytes += static_cast<uint64_t>(std::max(got, 0));
        ++f.done;
      }
    }

    for (auto& f : x.tx) {
      while (f.posted < f.limit && f.posted < real_end && f.posted - f.done < x.w) {
        void*& r = f.req[f.posted % x.w];
        TQ_RETURN_IF_ERROR_CTX(net_->isend(f.conn->comm, x.sendbuf + x.offsetOf(f.posted),
                                           x.lengthOf(f.posted), rank_, f.mh, &r),
                               format("send to rank %d", f.conn->peer));
        if (r == nullptr) {  // paced: retry on the next pass
          paced = true;
          break;
        }
        ++f.posted;
        progress = true;
      }
      TQ_RETURN_IF_ERROR(reapSends(f.conn->peer, f.req, f.posted, &f.done, &x.tx_bytes, &progress));
      if (x.streaming) {
        TQ_RETURN_IF_ERROR_CTX(stepEndMarker(f.conn->comm, x.stopping && f.done == f.posted,
                                             x.sendbuf, f.mh, &f.marker, &progress, &paced),
                               format("end marker to rank %d", f.conn->peer));
      }
    }

    // An iteration is complete when every connection has moved all of its chunks both ways.
    for (;;) {
      const uint64_t need = (x.complete + 1) * x.cpi;
      bool all = x.complete < x.started;
      for (const auto& f : x.tx) all = all && f.done >= need && need <= f.limit;
      for (const auto& f : x.rx) all = all && f.done >= need && need <= f.limit;
      if (!all) break;
      ++x.complete;
      x.last_complete = nowNs();
      if (o_.compute_ms > 0 && o_.json) {
        emitLine(format("{\"type\":\"iteration\",\"rank\":%d,\"iter\":%" PRIu64
                        ",\"wall_ns\":%" PRId64 "}",
                        rank_, x.complete - 1, realClock().wallNs()));
      }
    }
    TQ_RETURN_IF_ERROR(idle(progress, paced));
  }
  return okStatus();
}

Status Rank::runExchange() {
  if (n_ < 2) return invalidArgument(o_.mode + " needs at least 2 ranks");
  const bool alltoall = o_.mode == "alltoall";
  const uint64_t n = static_cast<uint64_t>(n_);
  // Per connection and iteration; what one iteration moves in nccl-tests' terms (the size the
  // algbw divides: alltoall's whole buffer, what incast's rank 0 receives).
  auto blockOf = [&](uint64_t size) { return std::max<uint64_t>(alltoall ? size / n : size, 1); };
  auto bytesOf = [&](uint64_t block) { return alltoall ? block * n : block * (n - 1); };
  const bool streaming = o_.duration_s > 0;
  const uint64_t max_block = blockOf(streaming ? o_.size : o_.max_bytes);
  const uint64_t w = static_cast<uint64_t>(std::max(1, o_.window));
  const uint64_t max_chunk = std::min(max_block, o_.chunk);

  auto* sendbuf = static_cast<uint8_t*>(buffer(max_block));
  if (sendbuf == nullptr) return resourceExhausted("out of memory for buffers");
  fillPattern(sendbuf, max_block, rank_);
  ExchangeRun x;
  x.w = w;
  x.sendbuf = sendbuf;
  for (Conn& c : sends_) {
    ExchangeRun::Flow f;
    f.conn = &c;
    TQ_ASSIGN_OR_RETURN(f.mh, reg(c.comm, sendbuf, max_block));
    x.tx.push_back(std::move(f));
  }
  for (Conn& c : recvs_) {
    ExchangeRun::Flow f;
    f.conn = &c;
    f.slots = static_cast<uint8_t*>(buffer(w * max_chunk));
    if (f.slots == nullptr) return resourceExhausted("out of memory for buffers");
    TQ_ASSIGN_OR_RETURN(f.mh, reg(c.comm, f.slots, w * max_chunk));
    x.rx.push_back(std::move(f));
  }
  auto reset = [&](uint64_t block, uint64_t iters) {
    x.block = block;
    x.chunk = std::min(block, o_.chunk);
    x.cpi = (block + x.chunk - 1) / x.chunk;
    x.iters = iters;
    x.started = x.complete = 0;
    x.stopping = false;
    for (auto* flows : {&x.tx, &x.rx}) {
      for (auto& f : *flows) {
        f.req.assign(w, nullptr);
        f.posted = f.done = 0;
        f.limit = UINT64_MAX;
      }
    }
  };
  const char* shape = alltoall ? "every rank to every rank" : "ranks 1..n-1 to rank 0";

  if (streaming) {
    header(format(" | %s stream %.2f s (%s) | size %" PRIu64 " | chunk %" PRIu64
                  " | window %" PRIu64 " per connection | report %" PRId64 " ms",
                  o_.mode.c_str(), o_.duration_s, shape, bytesOf(max_block), max_chunk, w,
                  o_.report_ms));
    if (rank_ == 0 && !o_.json && o_.report_ms > 0) {
      emitLine("# interval rank  t(s)  dt(s)  tx_bytes  rx_bytes  tx(Gbit/s)  rx(Gbit/s)");
    }
    reset(max_block, UINT64_MAX);
    x.streaming = true;
    TQ_RETURN_IF_ERROR(rv_->barrier());
    const double cpu_u0 = cpuSeconds(true), cpu_s0 = cpuSeconds(false);
    x.start = x.last_complete = nowNs();
    x.end = x.start + static_cast<int64_t>(o_.duration_s * 1e9);
    IntervalReporter rep(o_.mode.c_str(), rank_, o_.json, x.start);
    x.rep = &rep;
    TQ_RETURN_IF_ERROR(exchangeIterations(x));
    const int64_t stop = nowNs();
    if (o_.report_ms > 0 && stop - rep.last() > 1'000'000) rep.report(stop, x.tx_bytes, x.rx_bytes);
    const double elapsed = static_cast<double>(x.last_complete - x.start) / 1e9;
    TQ_ASSIGN_OR_RETURN(double max_elapsed, maxOverRanks(elapsed));
    const double algbw =
        max_elapsed > 0 ? static_cast<double>(x.complete * bytesOf(x.block)) / max_elapsed / 1e9
                        : 0;
    const double busbw =
        alltoall ? algbw * static_cast<double>(n - 1) / static_cast<double>(n) : algbw;
    const double cpu_u = cpuSeconds(true) - cpu_u0, cpu_s = cpuSeconds(false) - cpu_s0;
    const double run_s = static_cast<double>(stop - x.start) / 1e9;
    if (o_.json) {
      emitLine(
          format("{\"type\":\"summary\",\"mode\":\"%s\",\"rank\":%d,\"nranks\":%d,\"size\":%" PRIu64
                 ",\"iterations\":%" PRIu64
                 ",\"elapsed_s\":%.6f,\"algbw_GBps\":%.4f,\"busbw_GBps\":%.4f,"
                 "\"tx_bytes\":%" PRIu64 ",\"rx_bytes\":%" PRIu64
                 ",\"tx_gbps\":%.4f,\"rx_gbps\":%.4f,"
                 "\"cpu_user_s\":%.4f,\"cpu_sys_s\":%.4f,\"wrong\":%" PRIu64 "}",
                 o_.mode.c_str(), rank_, n_, bytesOf(x.block), x.complete, max_elapsed, algbw,
                 busbw, x.tx_bytes, x.rx_bytes, run_s > 0 ? x.tx_bytes * 8 / run_s / 1e9 : 0,
                 run_s > 0 ? x.rx_bytes * 8 / run_s / 1e9 : 0, cpu_u, cpu_s, x.wrong));
    } else {
      emitLine(format("summary rank %d: %" PRIu64 " %ss of %" PRIu64 " B in %.3f s: algbw %.4f "
                      "GB/s busbw %.4f GB/s; tx %" PRIu64 " B rx %" PRIu64
                      " B; cpu %.3f s user %.3f s sys; %" PRIu64 " wrong",
                      rank_, x.complete, o_.mode.c_str(), bytesOf(x.block), max_elapsed, algbw,
                      busbw, x.tx_bytes, x.rx_bytes, cpu_u, cpu_s, x.wrong));
    }
    if (x.wrong > 0) return dataLoss(format("%" PRIu64 " corrupted bytes received", x.wrong));
    return rv_->barrier();
  }

  const int iters = o_.iters >= 0 ? o_.iters : 20;
  const int warmup = o_.warmup >= 0 ? o_.warmup : 5;
  header(format(" | iters %d warmup %d | %s, chunk %" PRIu64, iters, warmup, shape, o_.chunk));
  if (rank_ == 0 && !o_.json) {
    emitLine("#");
    emitLine("#        size       count    time(us)  algbw(GB/s)  busbw(GB/s)   #wrong");
  }
  for (uint64_t size = o_.min_bytes; size <= o_.max_bytes;
       size = o_.step_factor > 1 ? size * o_.step_factor : size + 1) {
    const uint64_t block = blockOf(size);
    x.wrong = 0;
    reset(block, static_cast<uint64_t>(warmup));
    TQ_RETURN_IF_ERROR(exchangeIterations(x));
    TQ_RETURN_IF_ERROR(rv_->barrier());
    reset(block, static_cast<uint64_t>(iters));
    const int64_t t0 = nowNs();
    TQ_RETURN_IF_ERROR(exchangeIterations(x));
    const double us = iters > 0 ? static_cast<double>(nowNs() - t0) / 1e3 / iters : 0;
    TQ_ASSIGN_OR_RETURN(double max_us, maxOverRanks(us));
    TQ_ASSIGN_OR_RETURN(double total_wrong, maxOverRanks(static_cast<double>(x.wrong)));
    const uint64_t bytes = bytesOf(block);
    const double algbw = max_us > 0 ? static_cast<double>(bytes) / (max_us * 1e3) : 0;  // GB/s
    const double busbw =
        alltoall ? algbw * static_cast<double>(n - 1) / static_cast<double>(n) : algbw;
    if (rank_ == 0) {
      if (o_.json) {
        emitLine(format("{\"type\":\"result\",\"mode\":\"%s\",\"nranks\":%d,\"size\":%" PRIu64
                        ",\"count\":%" PRIu64 ",\"dtype\":\"uint8\",\"iters\":%d,"
                        "\"time_us\":%.3f,\"algbw_GBps\":%.4f,\"busbw_GBps\":%.4f,"
                        "\"wrong\":%.0f}",
                        o_.mode.c_str(), n_, bytes, bytes, iters, max_us, algbw, busbw,
                        total_wrong));
      } else {
        emitLine(format("%13" PRIu64 " %11" PRIu64 " %11.2f %12.3f %12.3f %8.0f", bytes, bytes,
                        max_us, algbw, busbw, total_wrong));
      }
    }
    if (total_wrong > 0) {
      return dataLoss(format("%.0f corrupted bytes at size %" PRIu64, total_wrong, bytes));
    }
    if (o_.step_factor <= 1 && size == o_.max_bytes) break;
  }
  return okStatus();
}

}  // namespace tq::perf
