// Routes the project's logging facade (common/log.h) into NCCL's logger.
//
// The plugin never writes to stderr: installNcclLogger() installs a tq::LogSink that forwards
// every line to the ncclDebugLogger_t NCCL handed to init(), prefixed "NET/tenantqos", with the
// NCCL_NET subsystem flag (NCCL_INIT too for warnings, so NCCL_DEBUG_SUBSYS=INIT shows them).
// Lines logged before the first init() are dropped. Thread-safe: the logger pointer is atomic.
#pragma once

#include "nccl-plugin/abi/net_common.h"

namespace tq::plugin {

// Sets the NCCL logger (nullptr drops lines) and installs the forwarding sink. Idempotent.
void installNcclLogger(ncclDebugLogger_t logger);
ncclDebugLogger_t ncclLogger();

}  // namespace tq::plugin
