// The only symbols the shared object exports (see libnccl-net-tenantqos.map): one function
// table per supported ABI version, NCCL probes v12, v11, v10, v9 ... and takes the first found.
// Compiled into the shared object only; everything else is hidden.
#include "nccl-plugin/api.h"
#include "nccl-plugin/plugin.h"

namespace api = tq::plugin::api;

#define TQ_EXPORT __attribute__((visibility("default")))

extern "C" TQ_EXPORT const ncclNet_v12_t ncclNetPlugin_v12 = {
    tq::plugin::kPluginName,
    api::initV11,
    api::devices,
    api::getPropertiesV12,
    api::listenV11,
    api::connectV11,
    api::accept,
    api::regMr,
    api::regMrDmaBuf,
    api::deregMr,
    api::isend,
    api::irecv,
    api::iflush,
    api::test,
    api::closeSend,
    api::closeRecv,
    api::closeListen,
    /*getDeviceMr=*/nullptr,
    /*irecvConsumed=*/nullptr,
    /*makeVDevice=*/nullptr,
    api::finalizeV11,
    /*setNetAttr=*/nullptr,
};

extern "C" TQ_EXPORT const ncclNet_v11_t ncclNetPlugin_v11 = {
    tq::plugin::kPluginName,
    api::initV11,
    api::devices,
    api::getPropertiesV11,
    api::listenV11,
    api::connectV11,
    api::accept,
    api::regMr,
    api::regMrDmaBuf,
    api::deregMr,
    api::isend,
    api::irecv,
    api::iflush,
    api::test,
    api::closeSend,
    api::closeRecv,
    api::closeListen,
    /*getDeviceMr=*/nullptr,
    /*irecvConsumed=*/nullptr,
    /*makeVDevice=*/nullptr,
    api::finalizeV11,
    /*setNetAttr=*/nullptr,
};

extern "C" TQ_EXPORT const ncclNet_v10_t ncclNetPlugin_v10 = {
    tq::plugin::kPluginName,
    api::initV10,
    api::devices,
    api::getPropertiesV10,
    api::listenV10,
    api::connectV10,
    api::accept,
    api::regMr,
    api::regMrDmaBuf,
    api::deregMr,
    api::isend,
    api::irecv,
    api::iflush,
    api::test,
    api::closeSend,
    api::closeRecv,
    api::closeListen,
    /*getDeviceMr=*/nullptr,
    /*irecvConsumed=*/nullptr,
    /*makeVDevice=*/nullptr,
};

extern "C" TQ_EXPORT const ncclNet_v9_t ncclNetPlugin_v9 = {
    tq::plugin::kPluginName,
    api::initV9,
    api::devices,
    api::getPropertiesV9,
    api::listenV10,
    api::connectV9,
    api::accept,
    api::regMr,
    api::regMrDmaBuf,
    api::deregMr,
    api::isendV9,
    api::irecvV9,
    api::iflush,
    api::test,
    api::closeSend,
    api::closeRecv,
    api::closeListen,
    /*getDeviceMr=*/nullptr,
    /*irecvConsumed=*/nullptr,
    /*makeVDevice=*/nullptr,
};
