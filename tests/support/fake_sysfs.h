// A fake sysfs tree with the subset of /sys/class/infiniband (and /sys/class/net/<dev>/mtu) that
// ib/sysfs.h reads, in a temporary directory: RDMA discovery and port counters are tested on
// hosts without RDMA, by the ib/ unit tests and by the agent's unit and functional tests (the
// agent's --sysfs-root points at root()). The presets copy the layout and values seen on real
// devices: rxe0 as Linux 6.1 shows it inside the rxe VM (RoCE v2 only, no PMA counters, driver
// counters in hw_counters) and mlx5_0 as a native InfiniBand HCA with PMA counters.
//
// Header-only and gtest-aware: a file that cannot be written is a test failure (ADD_FAILURE), so
// the calling test fails with the reason instead of asserting on a half-built tree. The
// directory is removed by the destructor. Writes are atomic (a reader never sees half a file),
// so a test may change counters while an agent process reads them. Thread-compatible.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>

#include "common/file_util.h"
#include "tests/support/temp_dir.h"

namespace tq::testing {

class FakeSysfs {
 public:
  FakeSysfs() : dir_("tq-fake-sysfs") {
    if (!dir_.ok()) ADD_FAILURE() << "fake sysfs: " << dir_.error();
  }
  FakeSysfs(const FakeSysfs&) = delete;
  FakeSysfs& operator=(const FakeSysfs&) = delete;

  // The directory to pass as sysfs root (it has class/infiniband/... below it once a device
  // exists; until then it is an empty directory: "no RDMA on this host").
  const std::string& root() const { return dir_.path(); }

  // Writes <root>/<rel>, creating directories.
  void put(const std::string& rel, const std::string& content) {
    const std::string path = dir_ / rel;
    Status s = makeDirs(path.substr(0, path.rfind('/')));
    if (s.ok()) s = writeFileAtomic(path, content);
    if (!s.ok()) ADD_FAILURE() << "fake sysfs: " << s.toString();
  }
  // Removes <root>/<rel> and everything below it (e.g. "class/infiniband/rxe0": device gone).
  void remove(const std::string& rel) {
    std::error_code ec;
    std::filesystem::remove_all(dir_ / rel, ec);
    if (ec) ADD_FAILURE() << "fake sysfs: remove " << rel << ": " << ec.message();
  }

  static std::string portDir(const std::string& dev, int p) {
    return "class/infiniband/" + dev + "/ports/" + std::to_string(p) + "/";
  }
  // A port: state "4: ACTIVE" / "1: DOWN", link layer "InfiniBand" / "Ethernet", rate as
  // sysfs prints it ("100 Gb/sec (4X EDR)").
  void port(const std::string& dev, int p, const std::string& state, const std::string& ll,
            const std::string& rate) {
    const std::string d = portDir(dev, p);
    put(d + "state", state + "\n");
    put(d + "phys_state", "5: LinkUp\n");
    put(d + "link_layer", ll + "\n");
    put(d + "rate", rate + "\n");
    put(d + "lid", "0x0\n");
  }
  void setState(const std::string& dev, int p, const std::string& state) {
    put(portDir(dev, p) + "state", state + "\n");
  }
  // GID table entry i; empty type/ndev leave those attributes out (unused entries).
  void gid(const std::string& dev, int p, int i, const std::string& g, const std::string& type,
           const std::string& ndev) {
    const std::string d = portDir(dev, p);
    put(d + "gids/" + std::to_string(i), g + "\n");
    if (!type.empty()) put(d + "gid_attrs/types/" + std::to_string(i), type + "\n");
    if (!ndev.empty()) put(d + "gid_attrs/ndevs/" + std::to_string(i), ndev + "\n");
  }
  // ports/<p>/counters/<name> (IB PMA) and ports/<p>/hw_counters/<name> (driver).
  void counter(const std::string& dev, int p, const std::string& name, uint64_t value) {
    put(portDir(dev, p) + "counters/" + name, std::to_string(value) + "\n");
  }
  void hwCounter(const std::string& dev, int p, const std::string& name, uint64_t value) {
    put(portDir(dev, p) + "hw_counters/" + name, std::to_string(value) + "\n");
  }

  // rxe0 on netdev rxeveth0 (MTU 9000), port 1 ACTIVE, RoCE v2 GIDs 0 (link-local) and 1
  // (::ffff:10.77.0.1), two unused entries; hw_counters sent_pkts 12345, rcvd_pkts 678,
  // retry_exceeded_err 0 and lifespan 12 (a setting, not a counter). No PMA counters.
  void rxe0() {
    put("class/infiniband/rxe0/node_type", "1: CA\n");
    put("class/infiniband/rxe0/node_guid", "d478:75ff:fed2:9ccf\n");
    put("class/infiniband/rxe0/fw_ver", "\n");
    port("rxe0", 1, "4: ACTIVE", "Ethernet", "10 Gb/sec (1X FDR10)");
    gid("rxe0", 1, 0, "fe80:0000:0000:0000:d478:75ff:fed2:9ccf", "RoCE v2", "rxeveth0");
    gid("rxe0", 1, 1, "0000:0000:0000:0000:0000:ffff:0a4d:0001", "RoCE v2", "rxeveth0");
    // Unused entries: zeros, and their attributes cannot be read (no files here).
    gid("rxe0", 1, 2, "0000:0000:0000:0000:0000:0000:0000:0000", "", "");
    gid("rxe0", 1, 10, "0000:0000:0000:0000:0000:0000:0000:0000", "", "");
    put("class/net/rxeveth0/mtu", "9000\n");
    hwCounter("rxe0", 1, "sent_pkts", 12345);
    hwCounter("rxe0", 1, "rcvd_pkts", 678);
    hwCounter("rxe0", 1, "retry_exceeded_err", 0);
    hwCounter("rxe0", 1, "lifespan", 12);
  }

  // mlx5_0, native InfiniBand: port 1 ACTIVE at 200 Gb/s with GID 0 and PMA counters
  // port_xmit_data 1000 and port_rcv_data 250 (4-octet words: 4000 and 1000 bytes),
  // port_xmit_packets 40, port_rcv_packets 10, symbol_error "N/A" (non-numeric: skipped);
  // port 2 DOWN, without counters.
  void mlx5Ib() {
    port("mlx5_0", 1, "4: ACTIVE", "InfiniBand", "200 Gb/sec (4X HDR)");
    port("mlx5_0", 2, "1: DOWN", "InfiniBand", "10 Gb/sec (4X SDR)");
    gid("mlx5_0", 1, 0, "fe80:0000:0000:0000:0c42:a103:0065:4a2e", "IB/RoCE v1", "");
    counter("mlx5_0", 1, "port_xmit_data", 1000);
    counter("mlx5_0", 1, "port_rcv_data", 250);
    counter("mlx5_0", 1, "port_xmit_packets", 40);
    counter("mlx5_0", 1, "port_rcv_packets", 10);
    put(portDir("mlx5_0", 1) + "counters/symbol_error", "N/A\n");
  }

 private:
  TempDir dir_;
};

}  // namespace tq::testing
