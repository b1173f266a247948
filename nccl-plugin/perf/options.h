// tenantqos-perf's command line: the options of one run, parsed (one flag table,
// common/flags.h) and checked before any rank starts.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace tq::perf {

enum class PollMode { kSpin, kYield, kSleep };

struct Options {
  std::string mode;
  std::string plugin;
  int rank = -1;
  int nranks = -1;
  std::string rendezvous;
  int local = 0;
  int dev = 0;
  int abi = 0;
  uint64_t min_bytes = 8;
  uint64_t max_bytes = 64ull << 20;
  uint64_t step_factor = 2;
  bool sizes_set = false;
  int iters = -1;
  int warmup = -1;
  double duration_s = 0;
  uint64_t size = 4ull << 20;
  int64_t report_ms = 0;
  int window = 8;
  uint64_t chunk = 512ull << 10;  // allreduce --duration: pipeline chunk
  int64_t on_ms = 0;              // allreduce --duration: on/off cycle (0 = always on)
  int64_t off_ms = 0;
  // -1: the cycle starts at the rank's start; else at wall-clock times (CLOCK_REALTIME ms) that
  // are PHASE_MS past a multiple of the cycle, so several jobs run on one schedule.
  int64_t phase_ms = -1;
  int64_t compute_ms = 0;  // allreduce --duration: idle this long after each complete iteration
  bool unidirectional = false;
  int traffic_class = -1;
  bool check = true;
  bool check_all = false;
  double timeout_s = 30;
  bool json = false;
  PollMode poll = PollMode::kYield;
  bool poll_set = false;
  std::vector<std::string> env;
  std::vector<std::pair<int, std::string>> rank_env;
  bool help = false;  // -h/--help: nothing else was read
};

// The --help text, and the flag table of docs/plugin.md.
std::string usage();
std::string flagsMarkdown();

// SIZE with an optional K/M/G suffix (KiB/MiB/GiB), nccl-tests style.
Result<uint64_t> parseBytes(const std::string& text);
Result<Options> parseArgs(int argc, char** argv);

}  // namespace tq::perf
