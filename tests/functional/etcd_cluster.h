// Test helper: a real 3-member etcd cluster (Debian's etcd-server, /usr/bin/etcd) on loopback
// ports, each member with its own data dir under a temporary directory. Members are started,
// killed (SIGKILL by PID) and restarted by index; every member still running when the cluster
// is destroyed is killed, and the directory removed. Waits poll with deadlines.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tests/functional/subprocess.h"

namespace tq::test {

inline constexpr char kEtcdBinary[] = "/usr/bin/etcd";

// A free loopback TCP port (bound to 0, read back, released), for servers that cannot take 0.
int freeLoopbackPort();

class EtcdCluster {
 public:
  // Starts `members` members and waits (up to `timeout`) until the cluster answers a quorum
  // read. Empty (with the reason in error()) when etcd is missing or does not come up.
  static std::unique_ptr<EtcdCluster> start(
      int members = 3, std::chrono::milliseconds timeout = std::chrono::seconds(30));
  ~EtcdCluster();

  // "127.0.0.1:P0,127.0.0.1:P1,..." and the list.
  std::string endpointList() const;
  const std::vector<std::string>& endpoints() const { return endpoints_; }
  int size() const { return static_cast<int>(endpoints_.size()); }

  void kill(int member);
  // Restarts a killed member with its data dir (it rejoins the cluster).
  void restart(int member);
  bool running(int member) const;
  // True once a linearizable read through `member` succeeds (it has a leader and quorum).
  bool waitQuorum(int member, std::chrono::milliseconds timeout);
  // The index of the member that is the raft leader (Maintenance.Status of the running
  // members), or -1 when none of them knows one.
  int leader() const;
  // How many KV.Txn calls `member` has answered since it started (etcd's
  // grpc_server_handled_total on its /metrics), -1 if it cannot be read.
  int64_t txnsServed(int member) const;
  const std::string& dir() const { return dir_; }
  std::string log(int member) const;

  static const std::string& error();

 private:
  EtcdCluster() = default;
  void launch(int member, bool existing);

  std::string dir_;
  std::vector<std::string> endpoints_;
  std::vector<int> peer_ports_;
  std::vector<std::unique_ptr<ChildProcess>> procs_;
};

}  // namespace tq::test
