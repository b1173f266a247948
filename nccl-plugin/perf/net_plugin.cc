#include "nccl-plugin/perf/net_plugin.h"

#include <dlfcn.h>
#include <unistd.h>

#include <strings.h>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tq::perf {
namespace {

std::string g_prefix;

void perfLogger(ncclDebugLogLevel level, unsigned long /*flags*/, const char* /*file*/,
                int /*line*/, const char* fmt, ...) {
  static const int verbosity = [] {
    const char* d = std::getenv("NCCL_DEBUG");
    if (d == nullptr) return static_cast<int>(NCCL_LOG_WARN);
    if (strcasecmp(d, "INFO") == 0) return static_cast<int>(NCCL_LOG_INFO);
    if (strcasecmp(d, "TRACE") == 0) return static_cast<int>(NCCL_LOG_TRACE);
    if (strcasecmp(d, "VERSION") == 0 || strcasecmp(d, "NONE") == 0) return 0;
    return static_cast<int>(NCCL_LOG_WARN);
  }();
  if (static_cast<int>(level) > verbosity) return;
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  char out[2300];
  const int n = std::snprintf(out, sizeof out, "%s%s %s\n", g_prefix.c_str(),
                              level == NCCL_LOG_WARN ? "WARN" : "INFO", msg);
  if (n > 0) {
    ssize_t w = ::write(2, out, static_cast<size_t>(std::min<int>(n, sizeof out - 1)));
    (void)w;
  }
}

const char* resultName(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "ncclSuccess";
    case ncclUnhandledCudaError: return "ncclUnhandledCudaError";
    case ncclSystemError: return "ncclSystemError";
    case ncclInternalError: return "ncclInternalError";
    case ncclInvalidArgument: return "ncclInvalidArgument";
    case ncclInvalidUsage: return "ncclInvalidUsage";
    case ncclRemoteError: return "ncclRemoteError";
    case ncclInProgress: return "ncclInProgress";
    default: return "unknown ncclResult_t";
  }
}

}  // namespace

void setPluginLogPrefix(const std::string& prefix) { g_prefix = prefix; }

Result<std::unique_ptr<NetPlugin>> NetPlugin::load(const std::string& name,
                                                   const std::vector<std::string>& search_dirs,
                                                   int abi) {
  std::vector<std::string> candidates{name};
  const bool bare = name.find('/') == std::string::npos;
  const bool libso =
      name.rfind("lib", 0) == 0 && name.size() > 3 && name.compare(name.size() - 3, 3, ".so") == 0;
  if (bare && !libso) candidates.push_back("libnccl-net-" + name + ".so");
  if (bare) {
    const std::string file = libso ? name : "libnccl-net-" + name + ".so";
    for (const std::string& d : search_dirs) candidates.push_back(d + "/" + file);
  }
  std::string errors;
  std::unique_ptr<NetPlugin> p(new NetPlugin());
  for (const std::string& c : candidates) {
    p->lib_ = ::dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (p->lib_ != nullptr) {
      p->path_ = c;
      break;
    }
    const char* e = ::dlerror();
    errors += "\n  " + c + ": " + (e != nullptr ? e : "?");
  }
  if (p->lib_ == nullptr) return notFound("cannot load net plugin \"" + name + "\":" + errors);
  char real[4096];
  if (::dlinfo(p->lib_, RTLD_DI_ORIGIN, real) == 0) {
    const std::string base = p->path_.substr(p->path_.rfind('/') + 1);
    p->path_ = std::string(real) + "/" + base;
  }
  if (abi != 10) p->v11_ = static_cast<const ncclNet_v11_t*>(::dlsym(p->lib_, "ncclNetPlugin_v11"));
  if (p->v11_ != nullptr) {
    p->abi_ = 11;
  } else if (abi != 11) {
    p->v10_ = static_cast<const ncclNet_v10_t*>(::dlsym(p->lib_, "ncclNetPlugin_v10"));
    if (p->v10_ != nullptr) p->abi_ = 10;
  }
  if (p->abi_ == 0) {
    return notFound(p->path_ + " exports no ncclNetPlugin_v11" +
                    (abi == 11 ? std::string() : " or ncclNetPlugin_v10"));
  }
  return p;
}

NetPlugin::~NetPlugin() {
  // Never dlclose: a plugin's helper threads may still be winding down (NCCL never unloads).
}

const char* NetPlugin::name() const { return v11_ != nullptr ? v11_->name : v10_->name; }

Status NetPlugin::check(ncclResult_t r, const char* call) const {
  if (r == ncclSuccess) return okStatus();
  const std::string m = std::string("plugin ") + call + " returned " + resultName(r) + " (" +
                        std::to_string(static_cast<int>(r)) + ")";
  switch (r) {
    case ncclInvalidArgument: return invalidArgument(m);
    case ncclInvalidUsage: return outOfRange(m);
    case ncclInternalError: return internalError(m);
    case ncclRemoteError: return aborted(m);
    default: return unavailable(m);
  }
}

Status NetPlugin::init(uint64_t comm_id, int traffic_class) {
  traffic_class_ = traffic_class;
  if (v11_ != nullptr) {
    ncclNetCommConfig_v11_t cfg{traffic_class};
    return check(v11_->init(&ctx_, comm_id, &cfg, perfLogger, nullptr), "init");
  }
  return check(v10_->init(perfLogger, nullptr), "init");
}

Result<int> NetPlugin::devices() {
  int n = 0;
  TQ_RETURN_IF_ERROR(check(v11_ ? v11_->devices(&n) : v10_->devices(&n), "devices"));
  return n;
}

Result<std::string> NetPlugin::deviceName(int dev) {
  if (v11_ != nullptr) {
    ncclNetProperties_v11_t p{};
    TQ_RETURN_IF_ERROR(check(v11_->getProperties(dev, &p), "getProperties"));
    return std::string(p.name != nullptr ? p.name : "?");
  }
  ncclNetProperties_v10_t p{};
  TQ_RETURN_IF_ERROR(check(v10_->getProperties(dev, &p), "getProperties"));
  return std::string(p.name != nullptr ? p.name : "?");
}

Status NetPlugin::listen(int dev, NetHandle* h, void** lc) {
  std::memset(h->bytes, 0, sizeof h->bytes);
  return check(v11_ ? v11_->listen(ctx_, dev, h->bytes, lc) : v10_->listen(dev, h->bytes, lc),
               "listen");
}

Status NetPlugin::connect(int dev, NetHandle* h, void** sc) {
  if (v11_ != nullptr) {
    ncclNetDeviceHandle_v11_t* d = nullptr;
    return check(v11_->connect(ctx_, dev, h->bytes, sc, &d), "connect");
  }
  ncclNetDeviceHandle_v10_t* d = nullptr;
  ncclNetCommConfig_v10_t cfg{traffic_class_};
  return check(v10_->connect(dev, &cfg, h->bytes, sc, &d), "connect");
}

Status NetPlugin::accept(void* lc, void** rc) {
  ncclNetDeviceHandle_v11_t* d = nullptr;
  return check(v11_ ? v11_->accept(lc, rc, &d) : v10_->accept(lc, rc, &d), "accept");
}

Status NetPlugin::regMr(void* comm, void* data, size_t size, void** mh) {
  return check(v11_ ? v11_->regMr(comm, data, size, NCCL_PTR_HOST, mh)
                    : v10_->regMr(comm, data, size, NCCL_PTR_HOST, mh),
               "regMr");
}

Status NetPlugin::deregMr(void* comm, void* mh) {
  return check(v11_ ? v11_->deregMr(comm, mh) : v10_->deregMr(comm, mh), "deregMr");
}

Status NetPlugin::isend(void* sc, void* data, size_t size, int tag, void* mh, void** req) {
  *req = nullptr;
  return check(v11_ ? v11_->isend(sc, data, size, tag, mh, nullptr, req)
                    : v10_->isend(sc, data, size, tag, mh, nullptr, req),
               "isend");
}

Status NetPlugin::irecv(void* rc, void* data, size_t size, int tag, void* mh, void** req) {
  *req = nullptr;
  void* d[1] = {data};
  size_t s[1] = {size};
  int t[1] = {tag};
  void* m[1] = {mh};
  return check(v11_ ? v11_->irecv(rc, 1, d, s, t, m, nullptr, req)
                    : v10_->irecv(rc, 1, d, s, t, m, nullptr, req),
               "irecv");
}

Status NetPlugin::test(void* req, bool* done, int* size) {
  int d = 0;
  const ncclResult_t r = v11_ ? v11_->test(req, &d, size) : v10_->test(req, &d, size);
  *done = d != 0;
  return check(r, "test");
}

Status NetPlugin::closeSend(void* c) {
  return check(v11_ ? v11_->closeSend(c) : v10_->closeSend(c), "closeSend");
}
Status NetPlugin::closeRecv(void* c) {
  return check(v11_ ? v11_->closeRecv(c) : v10_->closeRecv(c), "closeRecv");
}
Status NetPlugin::closeListen(void* c) {
  return check(v11_ ? v11_->closeListen(c) : v10_->closeListen(c), "closeListen");
}

Status NetPlugin::finalize() {
  if (v11_ == nullptr || ctx_ == nullptr) return okStatus();
  Status s = check(v11_->finalize(ctx_), "finalize");
  ctx_ = nullptr;
  return s;
}

}  // namespace tq::perf
