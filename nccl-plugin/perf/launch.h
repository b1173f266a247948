// Running tenantqos-perf's ranks: one in this process (--rank), or --local N forked here.
#pragma once

#include "common/fd.h"
#include "nccl-plugin/perf/options.h"

namespace tq::perf {

// Runs rank `rank` of `o` in this process; `listen`: rank 0's already-listening rendezvous
// socket (--local), or invalid. Returns the exit code: 0, or 1 after printing the error.
int runRank(const Options& o, int rank, Fd listen);
// --local N: one listening socket for the rendezvous, N forked ranks, a bounded wait.
// Returns 0 if every rank exited 0, else 1.
int runLocal(Options o);

}  // namespace tq::perf
