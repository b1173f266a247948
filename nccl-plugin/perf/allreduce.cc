// tenantqos-perf allreduce: ring reduce-scatter + all-gather over the plugin on host float
// buffers, result verified; over message sizes, or streaming (--duration).
#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "nccl-plugin/perf/rank.h"
#include "nccl-plugin/perf/report.h"

namespace tq::perf {

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
  const uint64_t seg_f = count / n;                      // equal segments
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
      if (r == nullptr) {  // the plugin asks to retry (its receive side is paced)
        paced = true;
        break;
      }
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
          return dataLoss(
              format("received %d bytes for a %" PRIu64 "-byte chunk", got, len * sizeof(float)));
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
    TQ_RETURN_IF_ERROR(reapSends(send_to_, sreq, s_posted, &s_done, &tx, &progress));
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
    TQ_RETURN_IF_ERROR(stepEndMarker(send_, stopping && s_done == s_posted, sendbuf, m_send,
                                     &marker, &progress, &paced));
    TQ_RETURN_IF_ERROR(idle(progress, paced));
  }
  const int64_t stop = nowNs();
  if (report_ns > 0 && stop - rep.last() > 1'000'000) rep.report(stop, tx, rx);
  // busbw over the complete iterations (nccl-tests' formula).
  const double elapsed = static_cast<double>(last_complete_ns - start) / 1e9;
  TQ_ASSIGN_OR_RETURN(double max_elapsed, maxOverRanks(elapsed));
  const double algbw =
      max_elapsed > 0 ? static_cast<double>(complete_iters * bytes) / max_elapsed / 1e9 : 0;
  const double busbw = algbw * 2.0 * (n_ - 1) / n_;
  const double cpu_u = cpuSeconds(true) - cpu_u0, cpu_s = cpuSeconds(false) - cpu_s0;
  const double run_s = static_cast<double>(stop - start) / 1e9;
  if (o_.json) {
    emitLine(
        format("{\"type\":\"summary\",\"mode\":\"allreduce\",\"rank\":%d,\"nranks\":%d,"
               "\"size\":%" PRIu64 ",\"iterations\":%" PRIu64 ",\"elapsed_s\":%.6f,"
               "\"algbw_GBps\":%.4f,\"busbw_GBps\":%.4f,\"tx_bytes\":%" PRIu64
               ",\"rx_bytes\":%" PRIu64 ",\"tx_gbps\":%.4f,\"rx_gbps\":%.4f,\"cpu_user_s\":%.4f,"
               "\"cpu_sys_s\":%.4f,\"wrong\":%" PRIu64 "}",
               rank_, n_, bytes, complete_iters, max_elapsed, algbw, busbw, tx, rx,
               run_s > 0 ? tx * 8 / run_s / 1e9 : 0, run_s > 0 ? rx * 8 / run_s / 1e9 : 0, cpu_u,
               cpu_s, wrong));
  } else {
    emitLine(
        format("summary rank %d: %" PRIu64 " allreduces of %" PRIu64 " B in %.3f s: algbw %.4f "
               "GB/s busbw %.4f GB/s; tx %" PRIu64 " B rx %" PRIu64 " B; cpu %.3f s user %.3f s "
               "sys; %" PRIu64 " wrong",
               rank_, complete_iters, bytes, max_elapsed, algbw, busbw, tx, rx, cpu_u, cpu_s,
               wrong));
  }
  if (wrong > 0) return dataLoss(format("allreduce result wrong in %" PRIu64 " elements", wrong));
  return rv_->barrier();
}

Status Rank::runAllReduce() {
  const int iters = o_.iters >= 0 ? o_.iters : 20;
  const int warmup = o_.warmup >= 0 ? o_.warmup : 5;
  const uint64_t max_count = o_.max_bytes / sizeof(float);
  auto* sendbuf = static_cast<float*>(buffer(max_count * sizeof(float)));
  auto* recvbuf = static_cast<float*>(buffer(max_count * sizeof(float)));
  auto* tmp =
      static_cast<float*>(buffer((max_count / static_cast<uint64_t>(n_) + 1) * sizeof(float)));
  if (sendbuf == nullptr || recvbuf == nullptr || tmp == nullptr) {
    return resourceExhausted("out of memory for buffers");
  }
  void *s_send = nullptr, *s_recv = nullptr, *r_recv = nullptr, *r_tmp = nullptr;
  if (n_ > 1) {
    TQ_ASSIGN_OR_RETURN(s_send, reg(send_, sendbuf, max_count * sizeof(float)));
    TQ_ASSIGN_OR_RETURN(s_recv, reg(send_, recvbuf, max_count * sizeof(float)));
    TQ_ASSIGN_OR_RETURN(r_recv, reg(recv_, recvbuf, max_count * sizeof(float)));
    TQ_ASSIGN_OR_RETURN(
        r_tmp, reg(recv_, tmp, (max_count / static_cast<uint64_t>(n_) + 1) * sizeof(float)));
  }
  header(format(" | iters %d warmup %d | ring reduce-scatter + all-gather, sum, float", iters,
                warmup));
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
      TQ_RETURN_IF_ERROR_CTX(
          net_->irecv(recv_, dst, len(recv_chunk) * sizeof(float), 0, dmr, &reqs[0]),
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
        TQ_RETURN_IF_ERROR(
            step(s == 0 ? sendbuf : recvbuf, s == 0 ? s_send : s_recv, tmp, r_tmp, sc, rc));
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
    const double algbw =
        max_us > 0 ? static_cast<double>(count * sizeof(float)) / (max_us * 1e3) : 0;
    const double busbw = algbw * 2.0 * (n_ - 1) / n_;
    if (rank_ == 0) {
      if (o_.json) {
        emitLine(
            format("{\"type\":\"result\",\"mode\":\"allreduce\",\"nranks\":%d,\"size\":%" PRIu64
                   ",\"count\":%" PRIu64 ",\"dtype\":\"float\",\"redop\":\"sum\",\"iters\":%d,"
                   "\"time_us\":%.3f,\"algbw_GBps\":%.4f,\"busbw_GBps\":%.4f,\"wrong\":%.0f}",
                   n_, count * sizeof(float), count, iters, max_us, algbw, busbw, total_wrong));
      } else {
        emitLine(format("%13" PRIu64 " %11" PRIu64 " %11.2f %12.3f %12.3f %8.0f",
                        count * sizeof(float), count, max_us, algbw, busbw, total_wrong));
      }
    }
    if (total_wrong > 0) {
      return dataLoss(
          format("allreduce result wrong in %.0f elements at size %" PRIu64, total_wrong, size));
    }
    if (o_.step_factor <= 1 && size == o_.max_bytes) break;
  }
  return okStatus();
}

}  // namespace tq::perf
