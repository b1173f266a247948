// The kernel TcApplier. TODO(agent): implement over tc/executor.h once branch tc is merged.
#include "agent/agent.h"

namespace tq::agent {

Result<std::unique_ptr<TcApplier>> makeKernelTcApplier() {
  return unimplemented("the tc executor is not built into this agent yet");
}

}  // namespace tq::agent
