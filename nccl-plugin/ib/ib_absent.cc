// The ib transport's factory in a plugin built without <infiniband/verbs.h> (ib_factory.h).
#include "nccl-plugin/ib/ib_factory.h"

namespace tq::plugin::ib {

Result<std::unique_ptr<Transport>> makeIbTransport(const PluginParams&, Clock&, std::string*) {
  return unimplemented(
      "this plugin was built without its ib transport (no <infiniband/verbs.h> at build time: "
      "install libibverbs-dev and rebuild for RDMA)");
}

}  // namespace tq::plugin::ib
