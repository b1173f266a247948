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
  int rounds = 20;  // measured rounds
  // policyd's --allocator-period, and the agents' report period (they report every period,
  // as node agents do): the push is measured at the period the allocator really runs at.
  int period_ms = 100;
  size_t leaf_size = 64;     // nodes per leaf group
  std::string policyd;       // tenantqos-policyd
  std::string certs_script;  // scripts/tq-certs.sh
};

struct CapsPushResult {
  size_t agents = 0;
  int rounds = 0;          // rounds measured (their caps reached at least half the agents)
  int split_rounds = 0;    // rounds that reached fewer than half the agents (not measured)
  int partial_rounds = 0;  // measured rounds that reached fewer than 90 % of the agents
  double agents_per_round_p50 = 0;
  double p50_ms = 0, p99_ms = 0, max_ms = 0;  // computed -> the last agent holds its caps
  double setup_s = 0;                         // certificates, policyd, streams
};

// Runs the measurement (a temporary directory, removed after). Progress lines on stderr.
Result<CapsPushResult> measureCapsPush(const CapsPushOptions& options);

}  // namespace tq::bench
