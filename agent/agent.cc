#include "agent/agent.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "agent/metrics.h"
#include "agent/tc_executor_applier.h"
#include "common/attach_protocol.h"
#include "common/file_util.h"
#include "common/log.h"
#include "rpc/tls.h"

namespace tq::agent {

std::string fabricReadiness(const FabricStatus& f) {
  const auto ms = [](int64_t ns) { return std::to_string(ns / 1'000'000) + " ms"; };
  switch (f.mode) {
    case FabricMode::kNone: return "";
    case FabricMode::kAllocator:
      return "fabric: the cluster allocator's caps on " + std::to_string(f.links.size()) +
             " shared link(s) (term " + std::to_string(f.term) + ", " + f.allocator + ")\n";
    case FabricMode::kHeld:
      return "warning: fabric: the cluster allocator is lost; holding its last caps (" +
             ms(f.last_caps_age_ns) + " old)\n";
    case FabricMode::kStatic:
      return "warning: fabric: no caps from the cluster allocator" +
             (f.last_caps_age_ns < 0 ? std::string(" yet") : " for " + ms(f.last_caps_age_ns)) +
             "; static split on " + std::to_string(f.links.size()) +
             " shared link(s) (each tenant's guarantee there over its nodes, docs/fabric.md)\n";
  }
  return "";
}

Agent::Agent(AgentConfig config, std::unique_ptr<TcApplier> tc)
    : config_(std::move(config)), tc_(std::move(tc)), store_(config_.state_dir) {}

Agent::~Agent() { stop(); }

Status Agent::start() {
  // The certificate files first: a bad --tls-* is a configuration error to report at once.
  TQ_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> credentials,
                      rpc::channelCredentials(config_.tls));
  TQ_RETURN_IF_ERROR_CTX(makeDirs(config_.run_dir, 0755), "--run-dir " + config_.run_dir);
  TQ_RETURN_IF_ERROR_CTX(checkWritableDir(config_.run_dir), "--run-dir");
  TQ_RETURN_IF_ERROR_CTX(makeDirs(config_.state_dir, 0755), "--state-dir " + config_.state_dir);
  TQ_RETURN_IF_ERROR_CTX(checkWritableDir(config_.state_dir), "--state-dir");
  if (tc_ == nullptr) return failedPrecondition("no tc executor");

  AttachServer::Options ao;
  ao.run_dir = config_.run_dir;
  TQ_ASSIGN_OR_RETURN(attach_, AttachServer::start(ao));

  ReconcilerOptions ro;
  ro.attach = attach_.get();
  ro.default_tenant = config_.default_tenant;
  ro.node = config_.node;
  ro.devices = config_.devices;
  ro.run_dir = config_.run_dir;
  ro.tc_mode = config_.tc_mode;
  ro.period_ns = config_.period_ns;
  ro.burst_bytes = config_.burst_bytes;
  ro.bucket_depth_ns = config_.bucket_depth_ns;
  ro.sysfs_root = config_.sysfs_root;
  reconciler_ = std::make_unique<Reconciler>(ro, tc_.get(), realClock(), &board_);
  loop_ = std::make_unique<ReconcileLoop>(*reconciler_);

  // Metrics before any thread runs: /healthz answers (and /readyz says why not ready) from the
  // first moment.
  std::map<std::string, HttpServer::Handler> routes;
  routes["/metrics"] = [this] {
    WatchStatus watch = board_.watchStatus();
    if (const PolicyWatcher* w = watch_counters_.load(std::memory_order_acquire)) {
      watch.reconnect_waits = w->backoffs();
    }
    return HttpResponse{200, kMetricsContentType, renderMetrics(board_.snapshot(), watch)};
  };
  routes["/healthz"] = [this] {
    const int64_t stuck_ns = std::max(kStuckPeriods * config_.period_ns, kMinStuckNs);
    const int64_t idle_ns = loop_ ? realClock().nowNs() - loop_->lastPassNs() : 0;
    if (idle_ns > stuck_ns) {
      return HttpResponse{500, "text/plain; charset=utf-8",
                          "unhealthy: the reconcile thread has not finished a pass for " +
                              std::to_string(idle_ns / 1'000'000) + " ms\n"};
    }
    return HttpResponse{200, "text/plain; charset=utf-8", "ok\n"};
  };
  routes["/readyz"] = [this] {
    AgentState s = board_.snapshot();
    if (s.ready) {
      // Still ready (the node enforces its policy); the store notice is the detail to act on.
      const std::string notice = board_.watchStatus().store_notice;
      return HttpResponse{200, "text/plain; charset=utf-8",
                          "ready: enforcing policy v" + std::to_string(s.policy_version) + "\n" +
                              (notice.empty() ? "" : "warning: " + notice + "\n") +
                              fabricReadiness(s.fabric)};
    }
    return HttpResponse{
        503, "text/plain; charset=utf-8",
        "not ready: " +
            (s.not_ready_reason.empty() ? std::string("starting") : s.not_ready_reason) + "\n"};
  };
  TQ_ASSIGN_OR_RETURN(http_, HttpServer::start(config_.metrics_address, std::move(routes)));
  TQ_LOG(kInfo, "metrics on http://%s:%d/metrics (also /healthz, /readyz)", http_->host().c_str(),
         http_->port());
  if (!config_.metrics_port_file.empty()) {
    TQ_RETURN_IF_ERROR_CTX(
        writeFileAtomic(config_.metrics_port_file, std::to_string(http_->port()) + "\n"),
        "--metrics-port-file");
  }

  // Fail-static: enforce what we last knew before talking to policyd.
  uint64_t known_version = 0;
  std::string known_epoch;
  auto persisted = store_.load();
  if (!persisted.ok()) {
    TQ_LOG(kWarn, "ignoring the persisted policy: %s; waiting for policyd at %s",
           persisted.status().message().c_str(), config_.policyd.c_str());
  } else if (!persisted->has_value()) {
    TQ_LOG(kInfo, "no persisted policy in %s; waiting for policyd at %s", config_.state_dir.c_str(),
           config_.policyd.c_str());
  } else {
    known_version = (*persisted)->version;
    known_epoch = (*persisted)->store_epoch;
    TQ_LOG(kInfo, "enforcing persisted policy v%llu from %s before contacting policyd",
           static_cast<unsigned long long>(known_version), store_.path().c_str());
    loop_->postPolicy(**persisted, PolicySource::kPersisted);
  }
  loop_->start();

  BackoffOptions backoff;  // 100 ms .. 5 s, x2, ±20 %
  endpoints_ = rpc::makeChannelRing(config_.policyd_endpoints, backoff, std::move(credentials));
  PolicyWatcher::Options wo;
  wo.node = config_.node;
  wo.known_version = known_version;
  wo.known_store_epoch = known_epoch;
  wo.backoff = backoff;
  watcher_ = std::make_unique<PolicyWatcher>(
      endpoints_, wo, &store_, &board_,
      [this](VersionedPolicy p) { loop_->postPolicy(std::move(p), PolicySource::kPolicyd); },
      realClock());
  watch_counters_.store(watcher_.get(), std::memory_order_release);
  watcher_->start();
  reporter_ =
      std::make_unique<UsageReporter>(endpoints_, board_, config_.report_interval_ns, realClock());
  reporter_->start();
  // The cluster allocator's stream, while this node is behind a shared link of the policy.
  FabricClient::Options fo;
  fo.node = config_.node;
  fo.interval_ns = config_.fabric_report_interval_ns;
  fo.backoff = backoff;
  std::vector<std::string> devices;
  for (const DeviceMapping& d : config_.devices) devices.push_back(d.device);
  fo.addresses = [devices] { return deviceAddresses(devices); };
  fabric_ = std::make_unique<FabricClient>(
      endpoints_, fo, board_,
      [this](FabricCapsMessage m) {
        loop_->post([m = std::move(m)](Reconciler& r) mutable { r.onFabricCaps(std::move(m)); });
      },
      [this](bool connected) {
        loop_->post([connected](Reconciler& r) { r.onFabricConnected(connected); });
      },
      realClock());
  fabric_->start();
  if (config_.qp_scan_interval_ns > 0) {
    // The one place that says which processes are attached: today the pids the reconcile
    // thread last published from the tenant files' slots (read every period once a policy is
    // applied; before that, nothing is known).
    AttachedProcessesFn attached = [this]() -> std::optional<AttachedProcesses> {
      AgentState s = board_.snapshot();
      if (!s.ready) return std::nullopt;
      AttachedProcesses out;
      for (const AttachedProcess& p : s.attached) out.emplace(p.pid, p.tenant);
      return out;
    };
    qp_scanner_ = std::make_unique<UngovernedQpScanner>(
        std::make_unique<ib::NetlinkQpSource>([] { return ib::openRdmaNetlink(1000); },
                                              realClock()),
        std::make_unique<ProcFsProcessTable>(), std::move(attached), &board_, realClock(),
        config_.qp_scan_interval_ns);
    qp_scanner_->start();
  }
  TQ_LOG(kInfo, "tenantqos-agent started: node %s, %zu device(s), tc-mode %s, period %lld ms",
         config_.node.c_str(), config_.devices.size(),
         std::string(tcModeName(config_.tc_mode)).c_str(),
         static_cast<long long>(config_.period_ns / 1'000'000));
  return okStatus();
}

void Agent::stop() {
  if (stopped_) return;
  stopped_ = true;
  if (watcher_) watcher_->stop();
  if (reporter_) reporter_->stop();
  if (fabric_) fabric_->stop();
  if (qp_scanner_) qp_scanner_->stop();
  if (loop_) loop_->stop();
  attach_.reset();  // closes the sockets; attached processes keep their memory (fail-static)
  http_.reset();
  TQ_LOG(kInfo, "tenantqos-agent stopped; tc trees and shm files left in place (fail-static)");
}

Status runCleanup(const AgentConfig& config, TcApplier* tc) {
  Status first;
  auto note = [&](Status s) {
    if (!s.ok()) {
      TQ_LOG(kError, "cleanup: %s", s.message().c_str());
      if (first.ok()) first = s;
    }
  };
  if (tc != nullptr) {
    for (const DeviceMapping& d : config.devices) {
      Status s = tc->remove(d.device);
      if (s.ok()) TQ_LOG(kInfo, "cleanup: removed the tc tree on dev %s", d.device.c_str());
      note(s);
    }
  }
  // Sockets and tenant directories (and layout v1 files an older agent left). Attached
  // processes keep their memory; this is an explicit operator request.
  const std::string tenants = attach::tenantsDir(config.run_dir);
  if (DIR* d = ::opendir(tenants.c_str())) {
    std::vector<std::string> names;
    while (dirent* e = ::readdir(d)) names.emplace_back(e->d_name);
    ::closedir(d);
    for (const std::string& name : names) {
      if (name == "." || name == "..") continue;
      const std::string path = tenants + "/" + name;
      ::unlink((path + "/agent.sock").c_str());
      if (::rmdir(path.c_str()) != 0 && ::unlink(path.c_str()) != 0 && errno != ENOENT) {
        note(errnoStatus("remove " + path));
      } else {
        TQ_LOG(kInfo, "cleanup: removed %s", path.c_str());
      }
    }
  }
  for (const std::string& path :
       {attach::nodeSocketPath(config.run_dir), attach::trafficClassesPath(config.run_dir)}) {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) note(errnoStatus("unlink " + path));
  }
  ::rmdir(attach::tenantsDir(config.run_dir).c_str());  // only if empty; failure is fine
  SnapshotStore store(config.state_dir);
  note(store.remove());
  const std::string classes = config.state_dir + "/" + kTcClassesFileName;
  if (::unlink(classes.c_str()) != 0 && errno != ENOENT) note(errnoStatus("unlink " + classes));
  TQ_LOG(kInfo, "cleanup: removed %s and %s", store.path().c_str(), classes.c_str());
  return first;
}

}  // namespace tq::agent
