// Rank rendezvous for tenantqos-perf over plain TCP: rank 0 listens on HOST:PORT, every other
// rank connects (retrying until the deadline) and keeps its connection for the whole run.
// The connections carry the plugin handles (allGather), barriers, and double as liveness
// links: checkAlive() notices a rank that died (its socket closes) so the others fail with a
// message instead of waiting forever.
//
// Every blocking operation is bounded by the timeout given at creation. Single-threaded.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/fd.h"
#include "common/status.h"

namespace tq::perf {

class Rendezvous {
 public:
  // A valid `listen`: rank 0 uses (and closes) this already-listening socket (--local mode)
  // instead of binding host:port.
  static Result<std::unique_ptr<Rendezvous>> create(int rank, int nranks, const std::string& host,
                                                    uint16_t port, Fd listen, int64_t timeout_ns);

  // Every rank contributes a blob; every rank gets all blobs, by rank.
  Result<std::vector<std::string>> allGather(const std::string& mine);
  Status barrier();
  // Non-blocking: fails if any rendezvous peer has closed its connection.
  Status checkAlive();

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }

 private:
  Rendezvous(int rank, int nranks, int64_t timeout_ns)
      : rank_(rank), nranks_(nranks), timeout_ns_(timeout_ns) {}
  Status sendMsg(int fd, const std::string& m, int64_t deadline);
  Status recvMsg(int fd, int64_t deadline, const std::string& who, std::string* out);

  int rank_;
  int nranks_;
  int64_t timeout_ns_;
  std::vector<Fd> peers_;  // rank 0: one per rank (index 0 unused); others: [0] = rank 0
};

}  // namespace tq::perf
