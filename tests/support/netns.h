// Test fixtures for network namespaces and veth pairs, made with ip(8) and removed by the
// destructor (also when the test fails). Names must carry the test's unique prefix and pid
// (e.g. "tqtc1234s"); veth names are at most 15 bytes.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace tq::testing {

bool runningAsRoot();

class TestNetns {
 public:
  // `ip netns add name`; fails if it already exists (a previous run left it behind).
  static Result<std::unique_ptr<TestNetns>> create(const std::string& name);
  ~TestNetns();  // `ip netns del name` (removes its veths too)
  TestNetns(const TestNetns&) = delete;
  TestNetns& operator=(const TestNetns&) = delete;

  const std::string& name() const { return name_; }
  // ["ip", "netns", "exec", name] + argv
  std::vector<std::string> exec(const std::vector<std::string>& argv) const;
  // Runs a command inside; output on success, error with the output otherwise.
  Result<std::string> run(const std::vector<std::string>& argv, int timeout_ms = 10'000) const;

 private:
  explicit TestNetns(std::string name) : name_(std::move(name)) {}
  std::string name_;
};

// A veth pair `dev_a` in `a` and `dev_b` in `b` (which may be the same namespace), both up,
// with optional IPv4 addresses in CIDR form ("10.77.0.1/24"; "" = none). Also brings lo up.
Status addVethPair(const TestNetns& a, const std::string& dev_a, const TestNetns& b,
                   const std::string& dev_b, const std::string& addr_a = "",
                   const std::string& addr_b = "");

}  // namespace tq::testing
