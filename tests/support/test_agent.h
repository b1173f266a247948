// The agent's side of attaching, for tests of the plugin: the real AttachServer, TenantShm and
// DefaultTenant (agent/attach_server.h, common/tenant_shm.h, agent/default_tenant.h) over a
// test's run directory, without policyd, tc or the allocator: the default tenant's shares are
// set when a uid first attaches (its share of what the uids in use leave), never by demand.
// Also a process's side, attached in-process (attachAs).
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "agent/attach_server.h"
#include "common/attach_protocol.h"
#include "common/clock.h"
#include "common/file_util.h"
#include "common/tenant_shm.h"

namespace tq::testing {

class TestAgent {
 public:
  // Serves the node-wide socket of `run_dir` (made 0755 so other uids can reach it); the
  // default tenant is "default" at `default_rate` until tenant("default", ...) replaces it.
  // `max_per_uid`: connections of one uid the node-wide socket holds (AttachServer::Options).
  explicit TestAgent(const std::string& run_dir, uint64_t default_rate = 12'500'000,
                     uint32_t max_per_uid = 64)
      : run_dir_(run_dir) {
    agent::AttachServer::Options o;
    o.run_dir = run_dir;
    o.max_connections_per_uid = max_per_uid;
    auto s = agent::AttachServer::start(o);
    if (!s.ok()) fail_ = s.status().toString();
    if (s.ok()) server_ = std::move(s).value();
    ::chmod(run_dir.c_str(), 0755);
    TenantParams p;
    p.limit_bytes_per_second = default_rate;
    // 256 KiB deep: at its limit a tenant makes up nothing for late retries (plugin.md, Late
    // retries), and the tests of which rate applies run beside others on a busy machine.
    p.buckets = nodeBuckets(default_rate, 256 * 1024, default_rate);
    serveDefault(nullptr, p);
  }
  const std::string& failure() const { return fail_; }  // empty when the server runs
  agent::AttachServer& server() { return *server_; }

  // Creates (or updates) `name` with `params` and serves its socket.
  TenantShm* tenant(const std::string& name, const TenantParams& params,
                    std::optional<gid_t> group = std::nullopt) {
    auto& shm = tenants_[name];
    if (!shm) shm = TenantShm::create(name, 0).value();
    shm->publish(params);
    Status s = server_->serve(name, shm, group);
    if (!s.ok()) fail_ = s.toString();
    if (name == "default") serveDefault(shm, params);
    std::vector<std::pair<int, std::string>> map;
    for (const auto& [n, t] : tenants_) {
      for (int32_t tc : t->published().traffic_classes) map.emplace_back(tc, n);
    }
    writeFileAtomic(attach::trafficClassesPath(run_dir_), attach::encodeTrafficClasses(map))
        .ignore();
    return shm.get();
  }
  // A tenant's memory; for "default", the uid's share of it (null: no process of the uid has
  // attached through the node-wide socket).
  TenantShm* shm(const std::string& name, uid_t uid = ::getuid()) {
    if (name == "default" && tenants_.count(name) == 0) return default_->shardOf(uid).get();
    auto it = tenants_.find(name);
    return it == tenants_.end() ? nullptr : it->second.get();
  }
  void remove(const std::string& name) {
    TenantParams p = tenants_.at(name)->published();
    p.deleted = true;
    tenants_.at(name)->publish(p);
    server_->unserve(name);
  }

 private:
  void serveDefault(std::shared_ptr<TenantShm> group, const TenantParams& p) {
    agent::DefaultTenant::Options o;
    o.tenant = "default";
    default_ = std::make_shared<agent::DefaultTenant>(o, std::move(group), realClock());
    default_->setParams(p);
    if (server_) server_->serveDefault(default_);
  }

  std::string run_dir_;
  std::string fail_;
  std::unique_ptr<agent::AttachServer> server_;
  std::shared_ptr<agent::DefaultTenant> default_;
  std::map<std::string, std::shared_ptr<TenantShm>> tenants_;
};

// A process attached through `socket`, in this process (closing it is the process leaving).
struct AttachedProcess {
  attach::Attached raw;  // its connection (conn) stays open while this lives
  std::unique_ptr<TenantShmView> view;
};
inline Result<AttachedProcess> attachAs(const std::string& socket, const std::string& wanted) {
  TQ_ASSIGN_OR_RETURN(attach::Attached a, attach::attachWithin(socket, wanted, 2000, realClock()));
  AttachedProcess p;
  TQ_ASSIGN_OR_RETURN(p.view,
                      TenantShmView::map(std::move(a.params_fd), std::move(a.shared_fd), a.slot));
  p.raw = std::move(a);
  return p;
}

}  // namespace tq::testing
