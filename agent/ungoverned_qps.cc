#include "agent/ungoverned_qps.h"

#include <algorithm>
#include <charconv>

#include "common/file_util.h"
#include "common/log.h"

namespace tq::agent {
namespace {

constexpr size_t kMaxCommBytes = 15;  // TASK_COMM_LEN - 1

std::string printableComm(std::string_view raw) {
  std::string s;
  for (char c : raw) {
    if (c == '\n' || s.size() >= kMaxCommBytes) break;
    const auto u = static_cast<unsigned char>(c);
    s.push_back(u >= 0x20 && u < 0x7f ? c : '?');
  }
  return s;
}

std::optional<int32_t> tgidOf(const std::string& status) {
  constexpr std::string_view kKey = "\nTgid:";
  const size_t at = status.find(kKey);
  if (at == std::string::npos) return std::nullopt;
  size_t i = at + kKey.size();
  while (i < status.size() && (status[i] == ' ' || status[i] == '\t')) ++i;
  int32_t v = 0;
  const auto [end, ec] = std::from_chars(status.data() + i, status.data() + status.size(), v);
  if (ec != std::errc() || v <= 0) return std::nullopt;
  return v;
}

}  // namespace

std::optional<ProcessIdentity> ProcFsProcessTable::identify(int32_t tid) const {
  // /proc/<tid> exists for every thread (hidden from readdir, not from open), so a thread id
  // from RDMA netlink finds its thread group here. Files bounded: status is ~1.5 KiB.
  auto status = readFile(root_ + "/" + std::to_string(tid) + "/status", 16 * 1024);
  if (!status.ok()) return std::nullopt;
  auto tgid = tgidOf("\n" + *status);
  if (!tgid) return std::nullopt;
  auto comm = readFile(root_ + "/" + std::to_string(*tgid) + "/comm", 64);
  return ProcessIdentity{*tgid, comm.ok() ? printableComm(*comm) : std::string()};
}

UngovernedQpTracker::UngovernedQpTracker(const ProcessTable& procs, UngovernedQpOptions options)
    : procs_(procs), options_(options) {}

std::vector<RdmaQpCounts> UngovernedQpTracker::update(const ib::QpListing& listing,
                                                      const AttachedProcesses& attached,
                                                      int64_t now_ns) {
  std::unordered_map<int32_t, std::optional<ProcessIdentity>> identities;  // by creator tid
  std::vector<RdmaQpCounts> out;
  // Per device: ungoverned QPs per owning process.
  std::vector<std::map<int32_t, uint64_t>> per_owner;
  // pid -> (name, "rxe0:2 rxe1:1") for the log lines.
  std::map<int32_t, std::pair<std::string, std::string>> owners;
  std::map<int32_t, std::string> names;
  std::unordered_map<std::string, size_t> slot;  // device name -> index in out
  auto countsOf = [&](const std::string& device) -> size_t {
    auto [it, added] = slot.emplace(device, out.size());
    if (added) {
      out.push_back({});
      out.back().device = device;
      per_owner.emplace_back();
    }
    return it->second;
  };
  for (const ib::RdmaDevice& d : listing.devices) countsOf(d.name);  // zeros for idle devices
  for (const ib::RdmaQp& qp : listing.qps) {
    const size_t d = countsOf(qp.device);
    RdmaQpCounts& c = out[d];
    if (qp.kernel()) {
      c.kernel++;
      continue;
    }
    std::optional<ProcessIdentity> who;
    if (qp.pid) {
      auto it = identities.find(*qp.pid);
      if (it == identities.end() && identities.size() < options_.max_owner_lookups) {
        it = identities.emplace(*qp.pid, procs_.identify(*qp.pid)).first;
      }
      if (it != identities.end()) who = it->second;
    }
    if (!who) {
      c.unknown++;
    } else if (attached.count(who->pid) != 0) {
      c.governed++;
    } else {
      c.ungoverned++;
      per_owner[d][who->pid]++;
      names[who->pid] = who->comm;
    }
  }
  for (size_t d = 0; d < out.size(); ++d) {
    RdmaQpCounts& c = out[d];
    std::vector<UngovernedOwner> all;
    for (const auto& [pid, n] : per_owner[d]) {
      all.push_back({pid, names[pid], n});
      auto& [name, where] = owners[pid];
      name = names[pid];
      where += (where.empty() ? "" : ", ") + c.device + ":" + std::to_string(n);
    }
    std::sort(all.begin(), all.end(), [](const UngovernedOwner& a, const UngovernedOwner& b) {
      return a.qps != b.qps ? a.qps > b.qps : a.pid < b.pid;
    });
    c.ungoverned_owners = all.size();
    for (size_t i = options_.top_owners; i < all.size(); ++i) c.other_ungoverned += all[i].qps;
    if (all.size() > options_.top_owners) all.resize(options_.top_owners);
    c.top = std::move(all);
  }

  uint64_t unknown = 0;
  for (const RdmaQpCounts& c : out) unknown += c.unknown;
  if (unknown > 0 && !unknown_logged_) {
    TQ_LOG(kWarn,
           "%llu RDMA QP(s) have an owner this agent cannot see (no pid from RDMA netlink, or "
           "gone from /proc): counted as unknown. An agent outside the host pid namespace sees "
           "every user QP this way (run it with hostPID)",
           static_cast<unsigned long long>(unknown));
  }
  unknown_logged_ = unknown > 0;
  logNewOwners(owners, now_ns);
  return out;
}

void UngovernedQpTracker::logNewOwners(
    const std::map<int32_t, std::pair<std::string, std::string>>& owners, int64_t now_ns) {
  if (now_ns - window_start_ns_ >= options_.log_window_ns) {
    if (window_suppressed_ > 0) {
      TQ_LOG(kWarn,
             "%d more process(es) newly owning ungoverned RDMA QPs were not logged in "
             "the last %lld s (see tenantqos_ungoverned_qps)",
             window_suppressed_, static_cast<long long>(options_.log_window_ns / 1'000'000'000));
    }
    window_start_ns_ = now_ns;
    window_lines_ = 0;
    window_suppressed_ = 0;
  }
  std::set<int32_t> now_owners;
  for (const auto& [pid, what] : owners) {
    now_owners.insert(pid);
    if (known_owners_.count(pid) != 0) continue;
    if (window_lines_ >= options_.log_lines_per_window) {
      window_suppressed_++;
      continue;
    }
    window_lines_++;
    TQ_LOG(kWarn,
           "ungoverned RDMA QPs: pid %d (%s) owns QPs (%s) without being attached to the agent: "
           "tenantqos does not pace or tag its traffic",
           pid, what.first.c_str(), what.second.c_str());
  }
  known_owners_ = std::move(now_owners);
}

UngovernedQpScanner::UngovernedQpScanner(std::unique_ptr<ib::QpSource> source,
                                         std::unique_ptr<ProcessTable> procs,
                                         AttachedProcessesFn attached, StateBoard* board,
                                         Clock& clock, int64_t interval_ns,
                                         UngovernedQpOptions options)
    : source_(std::move(source)),
      procs_(std::move(procs)),
      attached_(std::move(attached)),
      board_(board),
      interval_ns_(interval_ns),
      tracker_(*procs_, options),
      worker_(clock) {}

UngovernedQpScanner::~UngovernedQpScanner() { stop(); }

void UngovernedQpScanner::start() {
  worker_.start("tq-qpscan", [this](std::stop_token) {
    while (worker_.waitFor(interval_ns_)) scanOnce();
  });
}

void UngovernedQpScanner::stop() { worker_.stop(); }

void UngovernedQpScanner::scanOnce() {
  const std::optional<AttachedProcesses> attached = attached_();
  if (!attached) {
    board_->publishRdmaQps(std::nullopt);
    return;
  }
  auto listing = source_->listQps();
  if (!listing.ok()) {
    if (logged_error_ != listing.status().message()) {
      // kUnavailable: a node without RDMA (no NETLINK_RDMA), as normal as no RDMA ports.
      if (listing.status().code() == StatusCode::kUnavailable) {
        TQ_LOG(kInfo, "cannot list RDMA QPs: %s; no ungoverned-QP metrics until it works",
               listing.status().message().c_str());
      } else {
        TQ_LOG(kWarn, "cannot list RDMA QPs: %s; no ungoverned-QP metrics until it works",
               listing.status().message().c_str());
      }
      logged_error_ = listing.status().message();
    }
    board_->publishRdmaQps(std::nullopt);
    return;
  }
  if (logged_error_) {
    TQ_LOG(kInfo, "listing RDMA QPs works again");
    logged_error_.reset();
  }
  std::set<std::string> device_errors(listing->device_errors.begin(), listing->device_errors.end());
  for (const std::string& e : device_errors) {
    if (logged_device_errors_.count(e) == 0) {
      TQ_LOG(kWarn, "RDMA QPs of device %s are not counted", e.c_str());
    }
  }
  logged_device_errors_ = std::move(device_errors);
  if (listing->truncated && !logged_truncated_) {
    TQ_LOG(kWarn, "more than %zu RDMA QPs on this node: the rest are not counted",
           listing->qps.size());
  }
  logged_truncated_ = listing->truncated;
  board_->publishRdmaQps(tracker_.update(*listing, *attached, worker_.clock().nowNs()));
}

}  // namespace tq::agent
