// tenantqos-perf's output: whole lines on stdout, text or JSON (docs/plugin.md documents both).
#pragma once

#include <cstdint>
#include <string>

namespace tq::perf {

// One line per write(2) so lines of several ranks sharing stdout never interleave.
void emitLine(const std::string& line);
// printf into a std::string (at most 1023 characters).
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// CPU time of this process so far, user or system, in seconds.
double cpuSeconds(bool user);

// Per-interval throughput lines of the streaming modes (text or JSON), shared by sendrecv and
// allreduce so both print the same format (docs/plugin.md).
class IntervalReporter {
 public:
  IntervalReporter(const char* mode, int rank, bool json, int64_t start_ns)
      : mode_(mode), rank_(rank), json_(json), start_(start_ns), last_(start_ns) {}
  int64_t last() const { return last_; }
  void report(int64_t now, uint64_t tx, uint64_t rx);

 private:
  const char* mode_;
  int rank_;
  bool json_;
  int64_t start_, last_;
  uint64_t tx_rep_ = 0, rx_rep_ = 0;
};

}  // namespace tq::perf
