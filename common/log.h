// Logging facade. Libraries log through TQ_LOG(level, fmt, ...) (printf-style, checked by the
// compiler); the executable decides where lines go by installing a sink. The NCCL plugin installs
// a sink that forwards to NCCL's logger, so plugin code never writes to stderr itself. The daemons
// keep the default sink: one line per message on stderr,
//   2026-11-29T19:20:01.123Z INFO agent/reconciler.cc:88] applied policy v7
// Thread-safety: logging and level changes are safe from any thread; setLogSink() should be
// called before other threads log (it is not synchronised with concurrent logging).
#pragma once

#include <cstdarg>
#include <string>
#include <string_view>

#include "common/status.h"

namespace tq {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3, kTrace = 4 };

std::string_view logLevelName(LogLevel level);
// Accepts error|warn|warning|info|debug|trace (any case).
Result<LogLevel> parseLogLevel(std::string_view text);

using LogSink = void (*)(LogLevel level, const char* file, int line, const char* message);

void setLogLevel(LogLevel level);
LogLevel logLevel();
inline bool logEnabled(LogLevel level);
// nullptr restores the default stderr sink.
void setLogSink(LogSink sink);

void logMessage(LogLevel level, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));
void logMessageV(LogLevel level, const char* file, int line, const char* fmt, va_list ap);

namespace detail {
extern int g_log_level;  // read racily on purpose: a stale level only mis-filters one line
}
inline bool logEnabled(LogLevel level) {
  return static_cast<int>(level) <= __atomic_load_n(&detail::g_log_level, __ATOMIC_RELAXED);
}

}  // namespace tq

#define TQ_LOG(level, ...)                                                      \
  do {                                                                          \
    if (::tq::logEnabled(::tq::LogLevel::level))                                \
      ::tq::logMessage(::tq::LogLevel::level, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
