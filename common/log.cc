#include "common/log.h"
#include "common/thread_annotations.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>

namespace tq {
namespace detail {
int g_log_level = static_cast<int>(LogLevel::kInfo);
}

namespace {

// Strips the build's absolute source prefix so lines show "agent/reconciler.cc:88".
const char* shortFile(const char* file) {
  static const char* const kRoots[] = {"/common/", "/policy/",      "/agent/", "/tc/",
                                       "/ib/",     "/nccl-plugin/", "/proto/", "/rpc/",
                                       "/tests/",  "/bench/"};
  const char* best = file;
  for (const char* root : kRoots) {
    const char* p = std::strstr(file, root);
    if (p != nullptr && (best == file || p > best)) best = p + 1;
  }
  return best;
}

void stderrSink(LogLevel level, const char* file, int line, const char* message) {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  tm t{};
  gmtime_r(&ts.tv_sec, &t);
  char stamp[96];
  std::snprintf(stamp, sizeof stamp, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", t.tm_year + 1900,
                t.tm_mon + 1, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec, ts.tv_nsec / 1000000);
  static Mutex mu;  // keeps lines whole when several threads log at once
  MutexLock lock(mu);
  std::fprintf(stderr, "%s %s %s:%d] %s\n", stamp, logLevelName(level).data(), shortFile(file),
               line, message);
}

LogSink g_sink = &stderrSink;

}  // namespace

std::string_view logLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kError: return "ERROR";
    case LogLevel::kWarn: return "WARN";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kDebug: return "DEBUG";
    case LogLevel::kTrace: return "TRACE";
  }
  return "?";
}

Result<LogLevel> parseLogLevel(std::string_view text) {
  std::string s(text);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  if (s == "error") return LogLevel::kError;
  if (s == "warn" || s == "warning") return LogLevel::kWarn;
  if (s == "info") return LogLevel::kInfo;
  if (s == "debug") return LogLevel::kDebug;
  if (s == "trace") return LogLevel::kTrace;
  return invalidArgument("unknown log level \"" + std::string(text) +
                         "\" (expected error, warn, info, debug or trace)");
}

void setLogLevel(LogLevel level) {
  __atomic_store_n(&detail::g_log_level, static_cast<int>(level), __ATOMIC_RELAXED);
}
LogLevel logLevel() {
  return static_cast<LogLevel>(__atomic_load_n(&detail::g_log_level, __ATOMIC_RELAXED));
}
void setLogSink(LogSink sink) { g_sink = sink != nullptr ? sink : &stderrSink; }

void logMessageV(LogLevel level, const char* file, int line, const char* fmt, va_list ap) {
  char buf[2048];
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  g_sink(level, file, line, buf);
}

void logMessage(LogLevel level, const char* file, int line, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  logMessageV(level, file, line, fmt, ap);
  va_end(ap);
}

}  // namespace tq
