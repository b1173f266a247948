// tenantqos-perf sendrecv: rank r sends to r+1 and receives from r-1 (nccl-tests
// sendrecv_perf), over message sizes or as a fixed-size stream for --duration seconds.
#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <vector>

#include "nccl-plugin/perf/rank.h"
#include "nccl-plugin/perf/report.h"

namespace tq::perf {

// `count` messages of `size` from this rank to send_to_ and from recv_from_, at most
// o_.window in flight each way, completions tested oldest first.
Status Rank::sendRecvIterations(uint64_t size, int count, uint8_t* sbuf, void* smr,
                                const std::vector<uint8_t*>& rbufs, const std::vector<void*>& rmrs,
                                uint64_t* wrong, bool verify) {
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
      if (r == nullptr) {  // the plugin asks to retry (its receive side is paced)
        paced = true;
        break;
      }
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
      1, std::min<uint64_t>(static_cast<uint64_t>(o_.window),
                            (1ull << 30) / std::max<uint64_t>(o_.max_bytes, 1))));
  auto* sbuf = static_cast<uint8_t*>(buffer(o_.max_bytes));
  std::vector<uint8_t*> rbufs;
  for (int i = 0; i < w; ++i) rbufs.push_back(static_cast<uint8_t*>(buffer(o_.max_bytes)));
  if (sbuf == nullptr || rbufs.back() == nullptr)
    return resourceExhausted("out of memory for buffers");
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
    if (total_wrong > 0)
      return dataLoss(format("%.0f corrupted bytes at size %" PRIu64, total_wrong, size));
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
  if (sbuf == nullptr || rbufs.back() == nullptr)
    return resourceExhausted("out of memory for buffers");
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
      if (r == nullptr) {  // the plugin asks to retry (its receive side is paced)
        paced = true;
        break;
      }
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
      TQ_RETURN_IF_ERROR(reapSends(send_to_, sreq, sposted, &sdone, &tx, &progress));
      TQ_RETURN_IF_ERROR(stepEndMarker(send_, now >= end && sdone == sposted, sbuf, smr, &marker,
                                       &progress, &paced));
    }
    TQ_RETURN_IF_ERROR(idle(progress, paced));
  }
  const int64_t stop = nowNs();
  if (report_ns > 0 && stop - rep.last() > 1'000'000) rep.report(stop, tx, rx);
  const double elapsed = static_cast<double>(stop - start) / 1e9;
  const double cpu_u = cpuSeconds(true) - cpu_u0, cpu_s = cpuSeconds(false) - cpu_s0;
  if (o_.json) {
    emitLine(
        format("{\"type\":\"summary\",\"mode\":\"sendrecv\",\"rank\":%d,\"nranks\":%d,"
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

}  // namespace tq::perf
