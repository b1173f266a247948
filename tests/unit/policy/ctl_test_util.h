// tenantqosctl as the ctl_* unit tests run it: runCtl with string streams and a given
// environment, and a real tenantqos-policyd in this process to talk to (plaintext gRPC on a
// loopback port 0, a file store in a temporary directory removed afterwards).
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "policy/ctl.h"
#include "policy/policyd.h"
#include "tests/support/temp_dir.h"

namespace tq::policy::testing {

struct CtlRun {
  int rc = -1;
  std::string out, err;
};

inline CtlRun runCtlWith(const std::vector<std::string>& args, const std::string& input = "",
                         const std::map<std::string, std::string>& env = {}) {
  std::ostringstream o, e;
  std::istringstream in(input);
  CtlContext ctx{o, e, in, [&env](const std::string& name) {
                   auto it = env.find(name);
                   return it == env.end() ? std::string() : it->second;
                 }};
  CtlRun r;
  r.rc = runCtl(args, ctx);
  r.out = o.str();
  r.err = e.str();
  return r;
}

// The repository's example policy (tenant-a 40/60 Gbit/s, tenant-b 20/40 on link fabric).
inline std::string examplePolicy() { return std::string(TQ_SOURCE_DIR) + "/examples/policy.yaml"; }

class LocalPolicyd {
 public:
  LocalPolicyd() {
    if (!dir_.ok()) {
      ADD_FAILURE() << dir_.error();
      return;
    }
    PolicydOptions o;
    o.listen = "127.0.0.1:0";
    o.data_dir = dir_.path();
    o.tls.insecure = true;
    o.shutdown_grace = std::chrono::milliseconds(100);
    auto d = Policyd::start(o);
    if (!d.ok()) {
      ADD_FAILURE() << "policyd: " << d.status().toString();
      return;
    }
    d_ = std::move(*d);
  }
  ~LocalPolicyd() {
    if (d_) d_->shutdown();
  }
  LocalPolicyd(const LocalPolicyd&) = delete;
  LocalPolicyd& operator=(const LocalPolicyd&) = delete;

  bool ok() const { return d_ != nullptr; }
  std::string address() const { return d_ ? d_->address() : "127.0.0.1:1"; }
  Policyd& policyd() { return *d_; }

  // tenantqosctl --server <this> --insecure ARGS...
  CtlRun ctl(std::vector<std::string> args, const std::string& input = "") const {
    args.insert(args.begin(), {"--server", address(), "--insecure"});
    return runCtlWith(args, input);
  }

 private:
  tq::testing::TempDir dir_{"tqpol-ctl"};  // outlives d_
  std::unique_ptr<Policyd> d_;
};

}  // namespace tq::policy::testing
