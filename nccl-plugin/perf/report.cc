#include "nccl-plugin/perf/report.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdarg>
#include <cstdio>

#include "common/clock.h"

namespace tq::perf {

void emitLine(const std::string& line) {
  std::string l = line + "\n";
  size_t off = 0;
  while (off < l.size()) {
    const ssize_t n = ::write(1, l.data() + off, l.size() - off);
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

std::string format(const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

double cpuSeconds(bool user) {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  const timeval& t = user ? ru.ru_utime : ru.ru_stime;
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6;
}

void IntervalReporter::report(int64_t now, uint64_t tx, uint64_t rx) {
  const double dt = static_cast<double>(now - last_) / 1e9;
  const double t = static_cast<double>(now - start_) / 1e9;
  const uint64_t dtx = tx - tx_rep_, drx = rx - rx_rep_;
  const double tx_gbps = dt > 0 ? dtx * 8 / dt / 1e9 : 0, rx_gbps = dt > 0 ? drx * 8 / dt / 1e9 : 0;
  if (json_) {
    emitLine(
        format("{\"type\":\"interval\",\"mode\":\"%s\",\"rank\":%d,\"t_s\":%.6f,"
               "\"interval_s\":%.6f,\"wall_ns\":%" PRId64 ",\"tx_bytes\":%" PRIu64
               ",\"rx_bytes\":%" PRIu64 ",\"tx_gbps\":%.4f,\"rx_gbps\":%.4f}",
               mode_, rank_, t, dt, realClock().wallNs(), dtx, drx, tx_gbps, rx_gbps));
  } else {
    emitLine(format("interval %d %.3f %.3f %" PRIu64 " %" PRIu64 " %.3f %.3f", rank_, t, dt, dtx,
                    drx, tx_gbps, rx_gbps));
  }
  tx_rep_ = tx;
  rx_rep_ = rx;
  last_ = now;
}

}  // namespace tq::perf
