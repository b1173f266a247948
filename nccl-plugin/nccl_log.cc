#include "nccl-plugin/nccl_log.h"

#include <atomic>
#include <mutex>

#include "common/log.h"

namespace tq::plugin {
namespace {

std::atomic<ncclDebugLogger_t> g_logger{nullptr};

void forwardToNccl(LogLevel level, const char* file, int line, const char* message) {
  ncclDebugLogger_t logger = g_logger.load(std::memory_order_acquire);
  if (logger == nullptr) return;
  ncclDebugLogLevel nccl_level = NCCL_LOG_INFO;
  unsigned long flags = NCCL_NET;
  switch (level) {
    case LogLevel::kError:
    case LogLevel::kWarn:
      nccl_level = NCCL_LOG_WARN;
      flags |= NCCL_INIT;
      break;
    case LogLevel::kInfo: nccl_level = NCCL_LOG_INFO; break;
    case LogLevel::kDebug:
    case LogLevel::kTrace: nccl_level = NCCL_LOG_TRACE; break;
  }
  logger(nccl_level, flags, file, line, "NET/tenantqos %s", message);
}

}  // namespace

void installNcclLogger(ncclDebugLogger_t logger) {
  g_logger.store(logger, std::memory_order_release);
  // Once: setLogSink is not synchronised with concurrent logging by earlier comms' threads.
  static std::once_flag once;
  std::call_once(once, [] { setLogSink(&forwardToNccl); });
}

ncclDebugLogger_t ncclLogger() { return g_logger.load(std::memory_order_acquire); }

}  // namespace tq::plugin
