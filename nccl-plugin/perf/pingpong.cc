// tenantqos-perf pingpong: round-trip latency between 2 ranks over message sizes.
#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <vector>

#include "nccl-plugin/perf/rank.h"
#include "nccl-plugin/perf/report.h"

namespace tq::perf {

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
      TQ_RETURN_IF_ERROR(net_->isend(send_, rank_ == 0 ? sbuf : rbuf, size, rank_,
                                     rank_ == 0 ? smr : echo_mr, &r));
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
        if (i + 1 < warmup + iters)
          TQ_RETURN_IF_ERROR(net_->irecv(recv_, rbuf, size, 0, rmr, &rreq));
      } else {
        TQ_RETURN_IF_ERROR(waitOne(rreq, &got));
        if (i == warmup + iters - 1 && o_.check) wrong += countWrongBytes(rbuf, size, 0);
        // Post the next receive before answering, so the next ping finds it.
        if (i + 1 < warmup + iters)
          TQ_RETURN_IF_ERROR(net_->irecv(recv_, rbuf, size, 0, rmr, &rreq));
        TQ_RETURN_IF_ERROR(sendOne(size));
      }
      if (static_cast<uint64_t>(got) != size)
        return dataLoss(format("ping-pong: got %d bytes, sent %" PRIu64, got, size));
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

}  // namespace tq::perf
