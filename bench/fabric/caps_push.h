// bench/fabric's real-path part: one round of per-node caps pushed by a real tenantqos-policyd
// (its Allocate service, mutual TLS with openssl certificates, one TCP connection and identity
// per agent) to N agent streams on this machine, and when the last agent holds its caps after
// policyd computed the round (docs/fabric.md, "Caps through gRPC").
#pragma once

#include <cstddef>
#include <string>

#include "common/status.h"

namespace tq::bench {

struct CapsPushOptions {
  size_t agents = 1000;
  int rounds = 20;  // measured rounds (each a demand step of every agent)
  // policyd's --allocator-period: long enough that the 1,000 reports of a step, written right
  // after a round, all reach policyd before the next one on a busy 2-core machine (at 100 ms
  // they straddled rounds: reports took 50-150 ms to land); the push is the same work at any
  // period.
  int period_ms = 500;
  size_t leaf_size = 64;     // nodes per leaf group
  std::string policyd;       // tenantqos-policyd
  std::string certs_script;  // scripts/tq-certs.sh
};

struct CapsPushResult {
  size_t agents = 0;
  int rounds = 0;        // rounds whose caps reached every agent (measured)
  int split_rounds = 0;  // steps whose reports straddled two rounds (not measured)
  double p50_ms = 0, p99_ms = 0, max_ms = 0;  // computed -> the last agent holds its caps
  double setup_s = 0;                         // certificates, policyd, streams
};

// Runs the measurement (a temporary directory, removed after). Progress lines on stderr.
Result<CapsPushResult> measureCapsPush(const CapsPushOptions& options);

}  // namespace tq::bench
