#include "tests/support/netns.h"

#include <unistd.h>

#include "common/log.h"
#include "tests/support/process.h"

namespace tq::testing {

bool runningAsRoot() { return geteuid() == 0; }

Result<std::unique_ptr<TestNetns>> TestNetns::create(const std::string& name) {
  TQ_RETURN_IF_ERROR(runOk({"ip", "netns", "add", name}).status());
  return std::unique_ptr<TestNetns>(new TestNetns(name));
}

TestNetns::~TestNetns() {
  auto r = runCommand({"ip", "netns", "del", name_});
  if (!r.ok() || r->exit_code != 0)
    TQ_LOG(kError, "cannot delete network namespace %s: %s", name_.c_str(),
           r.ok() ? r->output.c_str() : r.status().message().c_str());
}

std::vector<std::string> TestNetns::exec(const std::vector<std::string>& argv) const {
  std::vector<std::string> full = {"ip", "netns", "exec", name_};
  full.insert(full.end(), argv.begin(), argv.end());
  return full;
}

Result<std::string> TestNetns::run(const std::vector<std::string>& argv, int timeout_ms) const {
  return runOk(exec(argv), timeout_ms);
}

Status addVethPair(const TestNetns& a, const std::string& dev_a, const TestNetns& b,
                   const std::string& dev_b, const std::string& addr_a, const std::string& addr_b) {
  TQ_RETURN_IF_ERROR(runOk({"ip", "link", "add", dev_a, "netns", a.name(), "type", "veth", "peer",
                            "name", dev_b, "netns", b.name()})
                         .status());
  for (const TestNetns* ns : {&a, &b})
    TQ_RETURN_IF_ERROR(runOk({"ip", "-n", ns->name(), "link", "set", "lo", "up"}).status());
  if (!addr_a.empty())
    TQ_RETURN_IF_ERROR(runOk({"ip", "-n", a.name(), "addr", "add", addr_a, "dev", dev_a}).status());
  if (!addr_b.empty())
    TQ_RETURN_IF_ERROR(runOk({"ip", "-n", b.name(), "addr", "add", addr_b, "dev", dev_b}).status());
  TQ_RETURN_IF_ERROR(runOk({"ip", "-n", a.name(), "link", "set", dev_a, "up"}).status());
  TQ_RETURN_IF_ERROR(runOk({"ip", "-n", b.name(), "link", "set", dev_b, "up"}).status());
  return okStatus();
}

}  // namespace tq::testing
