// tenantqos-perf: drives an NCCL net plugin the way NCCL does, without NCCL or GPUs.
//
//   tenantqos-perf sendrecv  [options]   bandwidth over message sizes (nccl-tests sendrecv_perf:
//                                        rank r sends to r+1 and receives from r-1), or a
//                                        fixed-size stream for --duration seconds
//   tenantqos-perf allreduce [options]   ring reduce-scatter + all-gather over the plugin on
//                                        host float buffers, result verified; nccl-tests' algbw
//                                        and busbw = algbw * 2(n-1)/n
//   tenantqos-perf alltoall  [options]   every rank sends --size/n to every other rank (MoE
//                                        dispatch/combine), one connection per pair
//   tenantqos-perf incast    [options]   ranks 1..n-1 each send --size to rank 0 (many-to-one)
//   tenantqos-perf pingpong  [options]   round-trip latency between 2 ranks over message sizes
//
// Ranks are processes: --rank R --nranks N --rendezvous HOST:PORT (rank 0 listens there), or
// --local N to fork N ranks on this host. `tenantqos-perf --help` lists every option; docs/
// plugin.md documents the output formats (text, and --json: one JSON object per line).
//
// Robustness: every wait is bounded. A rank with no progress for --timeout seconds fails; a
// rank that dies closes its rendezvous and plugin connections, which makes the others fail
// with a message within a fraction of a second.
#include <cstdio>

#include "common/daemon.h"
#include "common/fd.h"
#include "common/flags.h"
#include "nccl-plugin/perf/launch.h"
#include "nccl-plugin/perf/options.h"

int main(int argc, char** argv) {
  tq::ignoreSigpipe();  // a rank that died closes its sockets: the others report, not die
  auto opts = tq::perf::parseArgs(argc, argv);
  if (!opts.ok()) {
    std::fputs(tq::usageErrorText("tenantqos-perf", opts.status()).c_str(), stderr);
    return 2;
  }
  if (opts->help) {
    std::fputs(tq::perf::usage().c_str(), stdout);
    return 0;
  }
  if (opts->local > 0) return tq::perf::runLocal(*opts);
  return tq::perf::runRank(*opts, opts->rank, tq::Fd());
}
