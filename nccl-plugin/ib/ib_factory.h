// How the plugin layer (plugin.cc) makes the ib transport without seeing its types: this header
// pulls in no <infiniband/verbs.h>, so a build without the verbs headers (the plugin-only build,
// TQ_PLUGIN_ONLY, on a host without libibverbs-dev) compiles ib_absent.cc in place of the ib
// transport and the plugin is the socket transport alone.
#pragma once

#include <memory>
#include <string>

#include "common/clock.h"
#include "common/status.h"
#include "nccl-plugin/params.h"
#include "nccl-plugin/transport.h"

namespace tq::plugin::ib {

// The ib transport on the ports the parameters select; *summary (not null) says which ports,
// GIDs and handshake address on success. Errors as IbTransport::create (kNotFound: no active
// RDMA port); kUnimplemented where this plugin was built without the ib transport.
Result<std::unique_ptr<Transport>> makeIbTransport(const PluginParams& params, Clock& clock,
                                                   std::string* summary);

}  // namespace tq::plugin::ib
