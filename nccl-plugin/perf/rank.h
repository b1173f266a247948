// One rank of a tenantqos-perf run: the rendezvous, the plugin, its connections (to the ring
// neighbours, or to every peer of an alltoall / incast), buffers and registrations, and the
// bounded idle loop every mode polls through. The modes are Rank members, one file each:
// sendrecv.cc, allreduce.cc, pingpong.cc, exchange.cc (alltoall, incast).
//
// Not thread-safe: one Rank per rank process, used from one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/fd.h"
#include "common/status.h"
#include "nccl-plugin/perf/net_plugin.h"
#include "nccl-plugin/perf/options.h"
#include "nccl-plugin/perf/rendezvous.h"

namespace tq::perf {

inline int64_t nowNs() { return realClock().nowNs(); }

// ---- data patterns --------------------------------------------------------------------------

inline uint8_t patternByte(uint64_t i, int rank) {
  return static_cast<uint8_t>((i * 131u + static_cast<uint64_t>(rank) * 17u + 7u) ^ (i >> 11));
}
void fillPattern(uint8_t* p, uint64_t n, int rank);
uint64_t countWrongBytes(const uint8_t* p, uint64_t n, int rank);
// Allreduce inputs: small integers, so float sums are exact in any order.
inline float arValue(int rank, uint64_t i) {
  return static_cast<float>((rank + 1) * static_cast<int>((i % 13) + 1));
}

class Rank {
 public:
  Rank(Options o, int rank, int nranks) : o_(std::move(o)), rank_(rank), n_(nranks) {}
  ~Rank() {
    for (auto& [comm, mh] : mrs_) (void)net_->deregMr(comm, mh);
    if (net_ != nullptr) {
      for (Conn& c : sends_) {
        if (c.comm != nullptr) (void)net_->closeSend(c.comm);
      }
      for (Conn& c : recvs_) {
        if (c.comm != nullptr) (void)net_->closeRecv(c.comm);
        if (c.listen != nullptr) (void)net_->closeListen(c.listen);
      }
      (void)net_->finalize();
    }
    for (void* b : buffers_) std::free(b);
  }

  // `listen`: rank 0's already-listening rendezvous socket (--local), or invalid.
  Status run(Fd listen);

 private:
  // One plugin connection: a send comm to `peer`, or a recv comm (and the listen comm it was
  // accepted on; NCCL listens once per connection) from `peer`.
  struct Conn {
    int peer = -1;
    void* comm = nullptr;
    void* listen = nullptr;
  };

  Status setup(Fd listen);
  // Connects sends_ and accepts recvs_ (their peers set): one listen handle per receive
  // connection, exchanged through the rendezvous, connect and accept polled alternately.
  Status connectPeers();
  // Poll strategy, the no-progress deadline and the liveness of the other ranks. `paced`: an
  // isend was refused (NULL request); retry soon rather than after a long nap.
  Status idle(bool progressed, bool paced = false);
  void* buffer(uint64_t bytes);
  Result<void*> reg(void* comm, void* data, uint64_t bytes);
  Status waitAll(std::vector<void*>& reqs);
  // Streaming modes: test()s the sends to `peer` in `reqs` (a ring of posted requests) oldest
  // first, from *done up to `posted`, until one is not complete; adds the bytes sent to *tx.
  Status reapSends(int peer, std::vector<void*>& reqs, uint64_t posted, uint64_t* done,
                   uint64_t* tx, bool* progress);

  Status runSendRecvSweep();
  Status runSendRecvDuration();
  Status runPingPong();
  Status runAllReduce();
  Status runAllReduceStream();
  // alltoall / incast (exchange.cc): a stream for --duration, or a sweep over sizes.
  Status runExchange();
  struct ExchangeRun;
  Status exchangeIterations(ExchangeRun& x);
  Status sendRecvIterations(uint64_t size, int count, uint8_t* sbuf, void* smr,
                            const std::vector<uint8_t*>& rbufs, const std::vector<void*>& rmrs,
                            uint64_t* wrong, bool verify);
  Result<double> maxOverRanks(double v);

  // The zero-byte end marker of a streaming sender on send comm `comm` (its receiver stops at
  // it): posted once `ready` (all data sent), then tested to completion. Never blocks; sets *paced
  // when the plugin refused it, *progress when it moved.
  struct EndMarker {
    void* req = nullptr;
    bool sent = false;
    bool done = false;
  };
  Status stepEndMarker(void* comm, bool ready, void* buf, void* mh, EndMarker* m, bool* progress,
                       bool* paced);

  void header(const std::string& extra);

  Options o_;
  const int rank_;
  const int n_;
  std::unique_ptr<NetPlugin> net_;
  std::unique_ptr<Rendezvous> rv_;
  std::string dev_name_;
  int send_to_ = -1;    // ring modes: the successor (sendrecv, allreduce, pingpong)
  int recv_from_ = -1;  // ring modes: the predecessor
  std::vector<Conn> sends_;
  std::vector<Conn> recvs_;
  void* send_ = nullptr;  // ring modes: sends_[0].comm
  void* recv_ = nullptr;  // ring modes: recvs_[0].comm
  std::vector<void*> buffers_;
  std::vector<std::pair<void*, void*>> mrs_;
  int64_t last_progress_ = 0;
  int64_t next_alive_check_ = 0;
  uint64_t idle_spins_ = 0;
  static constexpr int64_t kMinNapUs = 50;
  static constexpr int64_t kMaxNapUs = 1000;
  int64_t nap_us_ = kMinNapUs;
};

}  // namespace tq::perf
