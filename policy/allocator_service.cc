#include "policy/allocator_service.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <set>
#include <tuple>
#include <unordered_map>

#include "common/log.h"
#include "common/thread_annotations.h"
#include "policy/audit_log.h"
#include "policy/metrics.h"
#include "policy/service.h"
#include "proto/allocate_codec.h"

namespace tq::policy {
namespace {

namespace v1 = tenantqos::v1;

constexpr int64_t kAuditEveryNs = 1'000'000'000;  // at most one refusal line per identity per s

bool isIpLiteral(const std::string& s) {
  if (s.empty() || s.size() > 45) return false;
  unsigned char buf[16];
  return ::inet_pton(AF_INET, s.c_str(), buf) == 1 || ::inet_pton(AF_INET6, s.c_str(), buf) == 1;
}

bool printableName(const std::string& s) {
  if (s.empty() || s.size() > 253) return false;
  for (char c : s) {
    if (c <= ' ' || c > '~') return false;
  }
  return true;
}

}  // namespace

AllocatorService::AllocatorService(Clock& clock, PolicydMetrics* metrics, AuditLog* audit,
                                   AllocatorOptions options)
    : clock_(clock), metrics_(metrics), audit_(audit), options_(options), worker_(clock) {}

AllocatorService::~AllocatorService() { stop(); }

void AllocatorService::start(AllocatorElection& election) {
  if (started_.exchange(true)) return;
  election_ = &election;
  election.start([this](bool active, uint64_t term) { onElection(active, term); });
  worker_.start("tq-allocate", [this](std::stop_token stop) { run(stop); });
}

void AllocatorService::stop() {
  if (!started_.load() || stopped_.exchange(true)) return;
  worker_.stop();
  election_.load()->stop();
  closeAll(unavailable("tenantqos-policyd is shutting down"));
}

bool AllocatorService::active() const {
  const AllocatorElection* e = election_.load();
  return e != nullptr && e->activeAt(clock_.nowNs());
}

uint64_t AllocatorService::term() const {
  const AllocatorElection* e = election_.load();
  return e != nullptr ? e->term() : 0;
}

size_t AllocatorService::streams() const {
  MutexLock lock(mu_);
  size_t n = 0;
  for (const auto& [name, s] : nodes_) n += s.sink != nullptr;
  return n;
}

size_t AllocatorService::nodesWithDemand() const {
  MutexLock lock(mu_);
  size_t n = 0;
  for (const auto& [name, s] : nodes_) n += !s.entries.empty();
  return n;
}

void AllocatorService::onPolicy(const std::shared_ptr<const PolicyRecord>& record) {
  if (!record) return;
  Model m;
  m.version = record->version;
  if (!record->policy.shared_links.empty()) {
    Result<fabric::FabricModel> built = fabric::FabricModel::build(record->policy);
    if (built.ok()) {
      m.fabric = std::make_shared<const fabric::FabricModel>(std::move(*built));
    } else {
      // Validation admitted it, so this is a bug; the allocator keeps the model it had.
      m.problem = built.status().message();
      MutexLock lock(mu_);  // the round thread reads model_ under it
      TQ_LOG(kError, "allocator: policy version %" PRIu64 ": %s; keeping version %" PRIu64,
             record->version, m.problem.c_str(), model_.version);
      return;
    }
  }
  MutexLock lock(mu_);
  if (m.version < model_.version) return;  // publishers may deliver out of order
  model_ = std::move(m);
  for (auto& [name, n] : nodes_) n.peers_sent.clear();  // groups may have changed
  ++peers_generation_;
}

void AllocatorService::onElection(bool active, uint64_t term) {
  if (metrics_ != nullptr) metrics_->setAllocatorState(active, term);
  if (!active) {
    closeAll(unavailable("tenantqos-policyd stepped down as the active cluster allocator (term " +
                         std::to_string(term) + "); try another replica"));
  }
  worker_.withLock([] {});  // the round loop re-checks at once
}

Status AllocatorService::attach(const Caller& caller, const std::string& node,
                                std::shared_ptr<CapsSink> sink) {
  if (!printableName(node)) {
    return invalidArgument("Allocate: the report's node name must be 1-253 printable characters");
  }
  Status own = authorize(caller, "Allocate", Permission::kAllocate, node);
  if (!own.ok()) return refuse(caller, node, own.message());
  if (!active()) {
    const AllocatorElection* e = election_.load();
    const std::string holder = e != nullptr ? e->holder() : "";
    return unavailable("Allocate: this tenantqos-policyd is a standby cluster allocator" +
                       (holder.empty() ? std::string() : " (the active one: " + holder + ")") +
                       "; try another replica");
  }
  std::shared_ptr<CapsSink> replaced;
  {
    MutexLock lock(mu_);
    auto it = nodes_.find(node);
    if (it == nodes_.end() && nodes_.size() >= kMaxUsageNodes) {
      return resourceExhausted("Allocate from " + node + ": already " +
                               std::to_string(nodes_.size()) + " nodes (at most " +
                               std::to_string(kMaxUsageNodes) + ")");
    }
    NodeState& n = nodes_[node];
    replaced = std::move(n.sink);
    entries_ -= n.entries.size() + (n.waiting ? n.waiting->entries.size() : 0);
    n = NodeState{};
    n.sink = std::move(sink);
  }
  if (replaced) {
    replaced->close(aborted("Allocate: a newer stream of node " + node + " replaced this one"));
  }
  if (metrics_ != nullptr) metrics_->setAllocatorStreams(streams());
  return okStatus();
}

void AllocatorService::detach(const std::string& node, const CapsSink* sink) {
  std::shared_ptr<CapsSink> gone;  // released outside the lock
  {
    MutexLock lock(mu_);
    auto it = nodes_.find(node);
    if (it == nodes_.end() || it->second.sink.get() != sink) return;  // replaced already
    const NodeState& n = it->second;
    entries_ -= n.entries.size() + (n.waiting ? n.waiting->entries.size() : 0);
    gone = std::move(it->second.sink);
    nodes_.erase(it);
  }
  if (metrics_ != nullptr) metrics_->setAllocatorStreams(streams());
}

Status AllocatorService::refuse(const Caller& caller, const std::string& node,
                                const std::string& why) {
  if (metrics_ != nullptr) metrics_->countDemandReport("refused");
  // One log and audit line per identity per second; the refusals in between are counted and
  // the next line says how many (a refused stream ends, but an agent may open another).
  const int64_t now = clock_.nowNs();
  AuditLog::Refusal r;
  {
    MutexLock lock(mu_);
    if (audited_ns_.size() >= kMaxUsageNodes && !audited_ns_.count(caller.identity)) {
      audited_ns_.clear();  // bounded: identities are as many as nodes
      audit_suppressed_.clear();
    }
    auto [it, fresh] = audited_ns_.emplace(caller.identity, now);
    if (!fresh && now - it->second < kAuditEveryNs) {
      ++audit_suppressed_[caller.identity];
      return permissionDenied(why);
    }
    it->second = now;
    auto s = audit_suppressed_.find(caller.identity);
    if (s != audit_suppressed_.end()) {
      r.suppressed = s->second;
      audit_suppressed_.erase(s);
    }
  }
  if (r.suppressed == 0) {
    TQ_LOG(kWarn, "refused: %s", why.c_str());
  } else {
    TQ_LOG(kWarn, "refused: %s (and %" PRIu64 " refusals of %s since the last line)", why.c_str(),
           r.suppressed, caller.identity.c_str());
  }
  if (audit_ != nullptr) {
    r.unix_ms = clock_.wallNs() / kNsPerMs;
    r.method = "Allocate";
    r.identity = caller.identity;
    r.groups = caller.groups;
    r.node = node;
    r.reason = why;
    Status st = audit_->appendRefusal(r);
    if (!st.ok()) TQ_LOG(kError, "audit log: %s", st.message().c_str());
  }
  return permissionDenied(why);
}

Status AllocatorService::report(const Caller& caller, const CapsSink* sink,
                                const v1::DemandReport& r) {
  const std::string& node = r.node();
  if (!printableName(node)) {
    return invalidArgument("Allocate: the report's node name must be 1-253 printable characters");
  }
  Status own = authorize(caller, "Allocate", Permission::kAllocate, node);
  if (!own.ok()) return refuse(caller, node, own.message());
  if (static_cast<size_t>(r.demands_size()) > kMaxDemandEntries) {
    return invalidArgument("Allocate from " + node + ": " + std::to_string(r.demands_size()) +
                           " demand entries, at most " + std::to_string(kMaxDemandEntries));
  }
  if (static_cast<size_t>(r.addresses_size()) > kMaxNodeAddresses) {
    return invalidArgument("Allocate from " + node + ": " + std::to_string(r.addresses_size()) +
                           " addresses, at most " + std::to_string(kMaxNodeAddresses));
  }
  for (const std::string& a : r.addresses()) {
    if (!isIpLiteral(a)) {
      return invalidArgument("Allocate from " + node + ": address \"" + a.substr(0, 64) +
                             "\" is not an IPv4 or IPv6 literal");
    }
  }
  const int64_t now = clock_.nowNs();
  MutexLock lock(mu_);
  auto it = nodes_.find(node);
  if (it == nodes_.end() || it->second.sink.get() != sink) {
    return failedPrecondition(
        "Allocate: a stream carries the reports of the node its first "
        "report named, or it was replaced by a newer stream of " +
        node);
  }
  NodeState& n = it->second;
  const fabric::FabricModel* m = model_.fabric.get();
  const bool same_version = r.policy_version() == model_.version;
  const std::optional<uint32_t> node_index = m ? m->nodeIndex(node) : std::nullopt;
  std::vector<Entry> entries;
  entries.reserve(static_cast<size_t>(r.demands_size()));
  std::set<std::pair<uint32_t, uint32_t>> seen;
  size_t skipped = 0;
  for (const v1::LinkDemand& d : r.demands()) {
    std::optional<uint32_t> t = m ? m->tenantIndex(d.tenant()) : std::nullopt;
    std::optional<uint32_t> c = m ? m->classIndex(d.link()) : std::nullopt;
    std::string why;
    if (!t) {
      why = "tenant \"" + d.tenant().substr(0, 64) + "\" is not in the policy";
    } else if (!c) {
      why = "\"" + d.link().substr(0, 64) + "\" is not a shared link of the policy";
    } else if (!node_index || m->linkOf(*node_index, *c) == fabric::kNone) {
      why = "the node is in no group of shared link \"" + d.link() + "\"";
    }
    if (!why.empty()) {
      if (!same_version) {
        ++skipped;  // a rollout in progress: names of another version
        continue;
      }
      const uint64_t version = model_.version;
      lock.unlock();
      return refuse(caller, node,
                    "Allocate: node " + node + " reported demand of tenant \"" +
                        d.tenant().substr(0, 64) + "\" on \"" + d.link().substr(0, 64) +
                        "\", which it does not host: " + why + " (policy version " +
                        std::to_string(version) + ")");
    }
    if (!seen.emplace(*t, *c).second) {
      return invalidArgument("Allocate from " + node + ": tenant " + d.tenant() + " on " +
                             d.link() + " is reported twice");
    }
    entries.push_back(
        {d.tenant(), d.link(), d.transmit_bytes_per_second(), d.receive_bytes_per_second()});
  }
  // Checked in full first (a hostile report is refused however fast it came). One that follows
  // the last taken too closely waits: the node's newest such report replaces the one waiting
  // and is taken by the first round min_report_interval after the last taken (a flood costs
  // its parse and one report's room per node, never a round more than min_round_gap allows;
  // and an edge that came right after a periodic report is late, never lost).
  const bool early = n.received_ns != 0 && now - n.received_ns < options_.min_report_interval_ns;
  const size_t replaced = early ? (n.waiting ? n.waiting->entries.size() : 0) : n.entries.size();
  if (entries_ - replaced + entries.size() > options_.max_entries) {
    return resourceExhausted("Allocate from " + node + ": " + std::to_string(entries.size()) +
                             " demand entries would exceed the " +
                             std::to_string(options_.max_entries) + " kept over all nodes");
  }
  entries_ += entries.size();
  Report taken{std::move(entries),
               std::vector<std::string>(r.addresses().begin(), r.addresses().end()),
               r.policy_version(), r.sequence()};
  int64_t round_at = 0;
  if (early) {
    ++n.reports_dropped;
    if (n.waiting) entries_ -= n.waiting->entries.size();
    n.waiting = std::move(taken);
    round_at = n.received_ns + options_.min_report_interval_ns;
  } else {
    if (n.waiting) {  // superseded by this one
      entries_ -= n.waiting->entries.size();
      n.waiting.reset();
    }
    if (take(n, std::move(taken), now)) round_at = now + options_.coalesce_ns;
  }
  lock.unlock();
  if (round_at != 0) askRound(round_at);
  if (early) {
    if (metrics_ != nullptr) metrics_->countDemandReport("too_frequent");
    return okStatus();
  }
  if (metrics_ != nullptr) {
    metrics_->countDemandReport("accepted");
    if (skipped > 0) metrics_->countDemandEntriesSkipped(skipped);
  }
  return okStatus();
}

bool AllocatorService::take(NodeState& n, Report report, int64_t now) {
  // The agent's edge rule: smaller moves are for the period's round.
  const bool edge =
      !std::equal(report.entries.begin(), report.entries.end(), n.entries.begin(), n.entries.end(),
                  [](const Entry& a, const Entry& b) {
                    return a.tenant == b.tenant && a.link == b.link &&
                           !proto::demandMovedPast(a.tx, b.tx, proto::kDemandEdgeFraction) &&
                           !proto::demandMovedPast(a.rx, b.rx, proto::kDemandEdgeFraction);
                  });
  entries_ -= n.entries.size();  // the caller counted the new entries in
  n.entries = std::move(report.entries);
  if (report.addresses != n.addresses) {
    n.addresses = std::move(report.addresses);
    for (auto& [name, other] : nodes_) other.peers_sent.clear();
    ++peers_generation_;
  }
  n.policy_version = report.policy_version;
  n.sequence = report.sequence;
  n.received_ns = now;
  return edge;
}

void AllocatorService::askRound(int64_t at_ns) {
  if (options_.coalesce_ns <= 0) return;  // rounds only every period
  // The earliest time asked for since the last round wins; later asks join it (coalescing).
  int64_t cur = round_wanted_ns_.load();
  while (cur == 0 || at_ns < cur) {
    if (round_wanted_ns_.compare_exchange_weak(cur, at_ns)) {
      worker_.withLock([] {});  // the round loop re-checks its deadline
      return;
    }
  }
}

size_t AllocatorService::runRound() {
  const int64_t start = clock_.nowNs();
  AllocatorElection* election = election_.load();
  if (election == nullptr || !election->activeAt(start)) return 0;
  std::shared_ptr<const fabric::FabricModel> model;
  uint64_t version;
  std::vector<fabric::DemandReport> reports;
  std::vector<std::string> node_of;  // model node index -> name, for the nodes in `reports`
  int64_t next_waiting = 0;          // the earliest report still waiting, to ask a round for
  {
    MutexLock lock(mu_);
    model = model_.fabric;
    version = model_.version;
    if (!model) return 0;
    for (auto it = nodes_.begin(); it != nodes_.end(); ++it) {
      NodeState& n = it->second;
      if (n.waiting) {
        const int64_t due = n.received_ns + options_.min_report_interval_ns;
        if (start >= due) {
          Report w = std::move(*n.waiting);
          n.waiting.reset();
          take(n, std::move(w), start);
        } else if (next_waiting == 0 || due < next_waiting) {
          next_waiting = due;
        }
      }
      if (!n.entries.empty() && start - n.received_ns > options_.stale_after_ns) {
        entries_ -= n.entries.size();
        n.entries.clear();  // silent: no demand (its stream stays for its caps)
      }
      const std::optional<uint32_t> ni = model->nodeIndex(it->first);
      if (!ni) continue;
      for (const Entry& e : n.entries) {
        const std::optional<uint32_t> t = model->tenantIndex(e.tenant);
        const std::optional<uint32_t> c = model->classIndex(e.link);
        if (!t || !c) continue;  // reported under another policy version
        reports.push_back({*ni, *t, *c, fabric::Direction::kTx, e.tx});
        reports.push_back({*ni, *t, *c, fabric::Direction::kRx, e.rx});
      }
    }
  }
  if (next_waiting != 0) askRound(next_waiting);
  fabric::RoundOptions ro;
  ro.hierarchy_passes = options_.hierarchy_passes;
  fabric::RoundResult rr;
  {
    MutexLock lock(workspace_mu_);
    rr = fabric::allocateRound(*model, reports, ro, workspace_);
  }
  const int64_t computed = clock_.nowNs();
  // One stamp for the round's every message: when its caps were computed, not when each node's
  // message was built (agents and the benches measure the push from it).
  const int64_t computed_unix_ms = clock_.wallNs() / kNsPerMs;
  last_round_ns_ = computed;
  uint64_t round;
  {
    MutexLock lock(mu_);
    round = ++round_;
  }
  rounds_.fetch_add(1);

  // Per (link, tenant): the tenant's nodes there; per link: the (tenant, node) pairs.
  std::unordered_map<uint64_t, uint32_t> tenant_nodes;
  std::unordered_map<uint32_t, uint32_t> link_pairs;
  for (const fabric::TenantOnLink& t : rr.tenants) {
    if (t.direction != fabric::Direction::kTx) continue;
    tenant_nodes[static_cast<uint64_t>(t.link) << 32 | t.tenant] = t.nodes;
    link_pairs[t.link] += t.nodes;
  }
  // The caps of each node: rr.caps is sorted by (node, tenant, class, direction).
  std::map<std::string, v1::NodeCaps> messages;
  for (size_t i = 0; i < rr.caps.size(); ++i) {
    const fabric::LinkCap& c = rr.caps[i];
    v1::NodeCaps& msg = messages[model->nodeName(c.node)];
    v1::LinkCap* out = nullptr;
    if (msg.caps_size() > 0) {
      v1::LinkCap* last = msg.mutable_caps(msg.caps_size() - 1);
      if (last->tenant() == model->tenantName(c.tenant) &&
          last->link() == model->className(c.cls)) {
        out = last;
      }
    }
    if (out == nullptr) {
      out = msg.add_caps();
      out->set_tenant(model->tenantName(c.tenant));
      out->set_link(model->className(c.cls));
      out->set_group(model->groupName(c.link));
      auto tn = tenant_nodes.find(static_cast<uint64_t>(c.link) << 32 | c.tenant);
      out->set_tenant_nodes(tn == tenant_nodes.end() ? 1 : tn->second);
      auto lp = link_pairs.find(c.link);
      out->set_link_pairs(lp == link_pairs.end() ? 1 : lp->second);
    }
    if (c.direction == fabric::Direction::kTx) {
      out->set_transmit_cap_bytes_per_second(c.cap);
    } else {
      out->set_receive_cap_bytes_per_second(c.cap);
    }
  }

  // What each attached node is sent. Under the lock only a snapshot of the nodes (and, when a
  // node needs its peers, the address maps); the messages are built and compared outside it,
  // so that the agents' reports (gRPC threads, 10,000 a second from 1,000 agents) never wait
  // for 1,000 messages being built; what was sent is written back under the lock after.
  struct Pending {
    std::string name;
    std::shared_ptr<CapsSink> sink;
    std::shared_ptr<const v1::NodeCaps> sent;
    int64_t sent_ns = 0;
    bool needs_peers = false;
    uint64_t sequence = 0;
  };
  std::vector<Pending> pending;
  std::map<uint32_t, std::vector<std::pair<std::string, std::string>>> members;
  uint64_t peers_generation;
  {
    MutexLock lock(mu_);
    peers_generation = peers_generation_;
    bool peers_needed = false;
    pending.reserve(nodes_.size());
    for (const auto& [name, n] : nodes_) {
      if (n.sink == nullptr) continue;
      pending.push_back({name, n.sink, n.sent, n.sent_ns, n.peers_sent.empty(), n.sequence});
      peers_needed |= n.peers_sent.empty();
    }
    if (peers_needed) {
      // Peers: per link (class x group), the addresses of its nodes; an address claimed by two
      // nodes is in no map (its traffic counts as crossing, the safe side).
      std::map<std::string, int> claims;
      for (const auto& [name, n] : nodes_)
        for (const std::string& a : n.addresses) ++claims[a];
      for (const auto& [name, n] : nodes_) {
        const std::optional<uint32_t> ni = model->nodeIndex(name);
        if (!ni) continue;
        for (uint32_t c = 0; c < model->classCount(); ++c) {
          const uint32_t link = model->linkOf(*ni, c);
          if (link == fabric::kNone) continue;
          for (const std::string& a : n.addresses) {
            if (claims[a] == 1) members[link].push_back({name, a});
          }
        }
      }
    }
  }
  const uint64_t term = election->term();
  const std::string holder = election->holder();
  std::vector<std::pair<std::shared_ptr<CapsSink>, std::shared_ptr<const v1::NodeCaps>>> sends;
  std::vector<size_t> sent_index;  // into `pending`, per entry of `sends`
  for (size_t i = 0; i < pending.size(); ++i) {
    const Pending& p = pending[i];
    auto msg = std::make_shared<v1::NodeCaps>();
    auto found = messages.find(p.name);
    if (found != messages.end()) msg->Swap(&found->second);
    const bool same_caps = p.sent && p.sent->caps_size() == msg->caps_size() &&
                           std::equal(p.sent->caps().begin(), p.sent->caps().end(),
                                      msg->caps().begin(), [](const auto& a, const auto& b) {
                                        return a.SerializeAsString() == b.SerializeAsString();
                                      });
    if (p.needs_peers) {
      const std::optional<uint32_t> ni = model->nodeIndex(p.name);
      v1::NodeCaps peers;
      for (uint32_t c = 0; ni && c < model->classCount(); ++c) {
        const uint32_t link = model->linkOf(*ni, c);
        if (link == fabric::kNone) continue;
        v1::GroupPeers* g = peers.add_peers();
        g->set_link(model->className(c));
        g->set_group(model->groupName(link));
        for (const auto& [other, address] : members[link]) {
          if (other != p.name) g->add_addresses(address);
        }
      }
      msg->set_has_peers(true);
      msg->mutable_peers()->Swap(peers.mutable_peers());
    }
    if (same_caps && !p.needs_peers && computed - p.sent_ns < options_.keepalive_ns) continue;
    msg->set_node(p.name);
    msg->set_term(term);
    msg->set_round(round);
    msg->set_policy_version(version);
    msg->set_computed_at_unix_ms(computed_unix_ms);
    msg->set_hold_ms(static_cast<uint32_t>(options_.hold_ns / kNsPerMs));
    msg->set_demand_sequence(p.sequence);
    msg->set_allocator(holder);
    sends.emplace_back(p.sink, std::move(msg));
    sent_index.push_back(i);
  }
  {
    MutexLock lock(mu_);
    for (size_t k = 0; k < sends.size(); ++k) {
      const Pending& p = pending[sent_index[k]];
      auto it = nodes_.find(p.name);
      if (it == nodes_.end() || it->second.sink != p.sink) continue;  // replaced or gone
      NodeState& n = it->second;
      n.sent = sends[k].second;
      n.sent_ns = computed;
      // Peers built before a policy or an address changed are stale: the next round resends.
      if (p.needs_peers && peers_generation == peers_generation_) n.peers_sent = "sent";
    }
  }
  // The last check before anything leaves: a replica whose lease deadline passed while it
  // computed sends nothing (its successor may be active already).
  if (!election->activeAt(clock_.nowNs())) return 0;
  for (auto& [sink, msg] : sends) sink->sendCaps(std::move(msg));
  if (metrics_ != nullptr) {
    metrics_->observeAllocatorRound(static_cast<double>(computed - start) / 1e9, rr.rejected,
                                    sends.size());
  }
  return sends.size();
}

void AllocatorService::closeAll(const Status& status) {
  std::vector<std::shared_ptr<CapsSink>> sinks;
  {
    MutexLock lock(mu_);
    for (auto& [name, n] : nodes_) {
      if (n.sink != nullptr) sinks.push_back(std::move(n.sink));
    }
    nodes_.clear();
    entries_ = 0;
  }
  for (const std::shared_ptr<CapsSink>& s : sinks) s->close(status);
  if (metrics_ != nullptr) metrics_->setAllocatorStreams(0);
}

void AllocatorService::run(const std::stop_token& stop) {
  int64_t next = clock_.nowNs() + options_.period_ns;
  int64_t last_round = INT64_MIN / 2;
  bool was_active = false;
  while (!stop.stop_requested()) {
    // The period's round, or an earlier one a report asked for (not within the minimum gap of
    // the last round); a new request re-computes the deadline.
    const int64_t wanted = round_wanted_ns_.load();
    const int64_t deadline =
        wanted == 0 ? next
                    : std::min(next, std::max(wanted, last_round + options_.min_round_gap_ns));
    if (!worker_.waitUntil(deadline, [&] { return round_wanted_ns_.load() != wanted; })) return;
    const int64_t now = clock_.nowNs();
    if (now < deadline) continue;  // asked for a round: a new deadline
    // Reports from now on ask for the next round: this one may have read them already, or not.
    round_wanted_ns_.store(0);
    const bool is_active = active();
    if (was_active && !is_active) {
      // The deadline passed before the election thread said so: end the streams now.
      closeAll(
          unavailable("tenantqos-policyd is no longer the active cluster allocator; try "
                      "another replica"));
    }
    was_active = is_active;
    if (is_active) runRound();
    last_round = now;
    if (now >= next) next = std::max(next + options_.period_ns, now);
  }
}

}  // namespace tq::policy
