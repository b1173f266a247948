// Helpers for the plugin's functional tests: run tenantqos-perf (or any program) as a child
// process with a bounded lifetime, capture its output, and read its JSON-lines output.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/temp_dir.h"

namespace tq::plugin::testing {

struct ProcResult {
  int exit_code = -1;  // -1 if killed by a signal or timed out
  int signal = 0;
  bool timed_out = false;
  double seconds = 0;  // wall time until exit
  std::string out;
  std::string err;
};

// A running child; output is collected when waited for. The destructor kills it (SIGKILL)
// if it still runs, so a failing test never leaves processes behind.
class Proc {
 public:
  Proc(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env);
  ~Proc();
  Proc(const Proc&) = delete;
  Proc& operator=(const Proc&) = delete;
  pid_t pid() const { return pid_; }
  // Reads available output without blocking; true while the child runs.
  bool poll();
  const std::string& out() const { return out_; }
  const std::string& err() const { return err_; }
  ProcResult wait(double timeout_s);
  void kill(int sig);

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1, err_fd_ = -1;
  std::string out_, err_;
  double start_ = 0;
  bool exited_ = false;
  int status_ = 0;
};

ProcResult run(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
               double timeout_s);

double monotonicSeconds();

// Minimal JSON-lines access: the lines whose "type" is `type`, and numeric/string fields.
std::vector<std::string> jsonLines(const std::string& out, const std::string& type);
std::optional<double> jsonNumber(const std::string& line, const std::string& key);

// tenantqos-perf --duration runs: the first kRateWarmupS seconds are not counted.
inline constexpr double kRateWarmupS = 0.5;

struct RateWindow {
  double bytes = 0;
  double seconds = 0;
  double rate() const { return seconds > 0 ? bytes / seconds : 0; }
};

// Receiver-side bytes per second of `rank` over its full interval reports that lie within
// [from_wall, to_wall] (CLOCK_REALTIME seconds) and start after the warm-up.
RateWindow receiverWindow(const std::string& out, int rank, double from_wall = 0,
                          double to_wall = 1e300);
std::optional<std::string> jsonText(const std::string& line, const std::string& key);

// The one rule of the rate tests (loopback and Soft-RoCE) for a paced rate short of its target:
// it is measured a second time before the test fails. A scheduling stall of the test machine
// (or of its VM) longer than the plugin's catch-up (TENANTQOS_CATCHUP_MS) loses tokens for good:
// CI's shared 2-core VM once ran three rate tests at 0.78-0.96 in one run that pass alone, and
// the same figures come back here with CPU hogs beside the test; a pacer that undershoots does
// so on both tries. A rate above its bound is never tried again. Returns true when the caller
// is done: `ratio` >= `floor`, or this was try 2 (then it adds a failure); false: measure again.
// Prints what it decides.
bool doneTrying(int attempt, double ratio, double floor = 0.97);

// The wall-clock span [first, last] (CLOCK_REALTIME seconds) of the interval reports in a
// tenantqos-perf --json output, of `rank` only (-1: every rank's); {1e300, 0} when none.
std::pair<double, double> intervalSpan(const std::string& out, int rank = -1);
// The span all of `outs` reported intervals in: [the latest first, the earliest last] (empty,
// first >= last, when they did not run together).
std::pair<double, double> commonSpan(const std::vector<const std::string*>& outs, int rank = -1);
// The receivers' (rank 1) windows of runs that ran at the same time: each over the span all of
// `outs` reported in (commonSpan() of `span_rank`), less `warmup_s` at its start and `tail_s` at
// its end. span_s: the length of what is left (<= 0 when they did not overlap; check it).
struct TogetherWindows {
  std::vector<RateWindow> windows;  // one per out, in order
  double span_s = 0;
};
TogetherWindows togetherWindows(const std::vector<const std::string*>& outs,
                                double warmup_s = kRateWarmupS, double tail_s = 0.2,
                                int span_rank = -1);

// A tenantqos-perf command line as the functional tests run it: a one-way stream of `size`
// messages for `seconds` through `plugin`, a JSON line every `report_interval_ms`. Name the
// fields that differ (designated initializers); `extra` goes last (--env, --rank-env, ...).
struct PerfRun {
  std::string bin;     // tenantqos-perf
  std::string plugin;  // the plugin's .so
  std::string mode = "sendrecv";
  int local = 2;  // --local N (ranks forked here); 0: one rank of a job across processes:
  int rank = 0, nranks = 2;
  std::string rendezvous;        // HOST:PORT where rank 0 listens
  double seconds = 0;            // --duration; 0: none
  std::string size;              // --size; "": none
  int report_interval_ms = 100;  // --report-interval; 0: none
  bool json = true;
  std::optional<std::string> tenant;  // --tenant; none: the process asks for no tenant
  int timeout_s = 30;
  std::vector<std::string> extra;
};
std::vector<std::string> perfArgv(const PerfRun& run);

// A free TCP port on 127.0.0.1 (bound then released; tiny race, fine for tests).
uint16_t freePort();

using ::tq::testing::TempDir;  // tests/support/temp_dir.h

}  // namespace tq::plugin::testing
