#include "rpc/runtime.h"

#include <absl/synchronization/mutex.h>

namespace tq::rpc {

void configureGrpcRuntime() { absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore); }

}  // namespace tq::rpc
