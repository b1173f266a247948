#include "agent/metrics.h"

#include <prometheus/text_serializer.h>

#include <limits>
#include <optional>
#include <sstream>

#include "common/allocation.h"
#include "tc/plan.h"

namespace tq::agent {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

MetricFamily family(std::string name, std::string help, MetricType type) {
  MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = type;
  return f;
}

ClientMetric sample(std::vector<ClientMetric::Label> labels, MetricType type, double value) {
  ClientMetric m;
  m.label = std::move(labels);
  if (type == MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  return m;
}

MetricFamily histogram(std::string name, std::string help, const DurationHistogram& h) {
  MetricFamily f = family(std::move(name), std::move(help), MetricType::Histogram);
  ClientMetric m;
  m.histogram.sample_count = h.count();
  m.histogram.sample_sum = h.sum();
  for (size_t i = 0; i < DurationHistogram::kBounds.size(); ++i) {
    m.histogram.bucket.push_back({h.cumulative()[i], DurationHistogram::kBounds[i]});
  }
  m.histogram.bucket.push_back({h.count(), std::numeric_limits<double>::infinity()});
  f.metric.push_back(std::move(m));
  return f;
}

}  // namespace

std::vector<MetricFamily> metricFamilies(const AgentState& s, const WatchStatus& watch) {
  std::vector<MetricFamily> out;

  struct TenantFamily {
    const char* name;
    const char* help;
    MetricType type;
    double (*value)(const TenantStatus&);
  };
  static const TenantFamily kTenantFamilies[] = {
      {"tenantqos_tenant_transmit_bytes_total",
       "Bytes the tenant's processes on this node sent through the plugin (incl. exited ones).",
       MetricType::Counter, [](const TenantStatus& t) { return double(t.transmit_bytes); }},
      {"tenantqos_tenant_receive_bytes_total",
       "Bytes the tenant's processes on this node received through the plugin.",
       MetricType::Counter, [](const TenantStatus& t) { return double(t.receive_bytes); }},
      {"tenantqos_tenant_throttled_seconds_total",
       "Process-seconds the tenant's senders spent refused by their token buckets.",
       MetricType::Counter, [](const TenantStatus& t) { return double(t.throttled_ns) / 1e9; }},
      {"tenantqos_tenant_allocated_rate_bytes_per_second",
       "Rate the allocator currently gives the tenant's sends on this node (its tx buckets, "
       "summed over devices).",
       MetricType::Gauge,
       [](const TenantStatus& t) { return double(t.allocated_bytes_per_second); }},
      {"tenantqos_tenant_guarantee_bytes_per_second",
       "The tenant's guarantee per device of its link, in each direction.", MetricType::Gauge,
       [](const TenantStatus& t) { return double(t.guarantee_bytes_per_second); }},
      {"tenantqos_tenant_limit_bytes_per_second",
       "The tenant's limit per device of its link, in each direction.", MetricType::Gauge,
       [](const TenantStatus& t) { return double(t.limit_bytes_per_second); }},
      {"tenantqos_tenant_backlog_bytes",
       "Bytes the tenant's senders have waiting for tokens (demand signal).", MetricType::Gauge,
       [](const TenantStatus& t) { return double(t.backlog_bytes); }},
      {"tenantqos_tenant_processes", "Processes of the tenant attached to its shm file.",
       MetricType::Gauge, [](const TenantStatus& t) { return double(t.processes); }},
  };
  for (const TenantFamily& tf : kTenantFamilies) {
    MetricFamily f = family(tf.name, tf.help, tf.type);
    for (const TenantStatus& t : s.tenants) {
      f.metric.push_back(sample({{"node", s.node}, {"tenant", t.name}}, tf.type, tf.value(t)));
    }
    out.push_back(std::move(f));
  }

  // Per bucket: a device of the tenant's link and a direction (tx: sends, rx: receives).
  struct BucketFamily {
    const char* name;
    const char* help;
    MetricType type;
    double (*value)(const BucketStatus&);
  };
  static const BucketFamily kBucketFamilies[] = {
      {"tenantqos_bucket_bytes_total",
       "Bytes the tenant's processes sent (tx: admitted by the bucket) or received (rx) on the "
       "device.",
       MetricType::Counter, [](const BucketStatus& b) { return double(b.bytes); }},
      {"tenantqos_bucket_throttled_seconds_total",
       "Process-seconds the tenant's sends (tx) or receives (rx) on the device waited for tokens.",
       MetricType::Counter, [](const BucketStatus& b) { return double(b.throttled_ns) / 1e9; }},
      {"tenantqos_bucket_backlog_bytes",
       "Bytes waiting for the bucket's tokens (sends, or receives not yet let in): demand.",
       MetricType::Gauge, [](const BucketStatus& b) { return double(b.backlog_bytes); }},
      {"tenantqos_bucket_allocated_rate_bytes_per_second",
       "The bucket's refill rate: the allocator's share, at least the guarantee.",
       MetricType::Gauge,
       [](const BucketStatus& b) { return double(b.allocated_bytes_per_second); }},
      {"tenantqos_bucket_depth_bytes", "The bucket's depth (its rate x --bucket-depth-us).",
       MetricType::Gauge, [](const BucketStatus& b) { return double(b.depth_bytes); }},
      {"tenantqos_bucket_demand_bytes_per_second",
       "The demand the allocator estimated for the bucket (+Inf: backlogged, it takes what it "
       "gets).",
       MetricType::Gauge,
       [](const BucketStatus& b) {
         return b.demand_bytes_per_second == kUnboundedDemand
                    ? std::numeric_limits<double>::infinity()
                    : double(b.demand_bytes_per_second);
       }},
      {"tenantqos_bucket_overrun_bytes_total",
       "Bytes the tenant used on the device beyond what the bucket allowed, as its processes' "
       "counters or the kernel's count of its class showed them (it pays them back: fenced).",
       MetricType::Counter, [](const BucketStatus& b) { return double(b.overrun_bytes); }},
      {"tenantqos_bucket_fenced",
       "1 while the bucket's rate is lowered to pay back an overrun, else 0.", MetricType::Gauge,
       [](const BucketStatus& b) { return b.fenced ? 1.0 : 0.0; }},
  };
  for (const BucketFamily& bf : kBucketFamilies) {
    MetricFamily f = family(bf.name, bf.help, bf.type);
    for (const TenantStatus& t : s.tenants) {
      for (const BucketStatus& b : t.buckets) {
        if (b.fabric_link) continue;  // below, per shared link
        f.metric.push_back(sample({{"device", b.device},
                                   {"direction", b.receive ? "rx" : "tx"},
                                   {"node", s.node},
                                   {"tenant", t.name}},
                                  bf.type, bf.value(b)));
      }
    }
    out.push_back(std::move(f));
  }

  // Per shared fabric link the node is behind (docs/fabric.md): the tenant's bucket of the
  // link, per direction (tx: leaving the node's group, rx: entering it).
  static const BucketFamily kLinkFamilies[] = {
      {"tenantqos_fabric_link_bytes_total",
       "Bytes of the tenant's connections that cross the shared link (tx: sent, rx: received).",
       MetricType::Counter, kBucketFamilies[0].value},
      {"tenantqos_fabric_link_throttled_seconds_total",
       "Process-seconds the tenant's transfers across the shared link waited for its tokens.",
       MetricType::Counter, kBucketFamilies[1].value},
      {"tenantqos_fabric_link_backlog_bytes",
       "Bytes waiting for the link bucket's tokens: demand on the shared link.", MetricType::Gauge,
       kBucketFamilies[2].value},
      {"tenantqos_fabric_link_cap_bytes_per_second",
       "What the link bucket refills at: the cluster allocator's cap, or the static split.",
       MetricType::Gauge, kBucketFamilies[3].value},
      {"tenantqos_fabric_link_demand_bytes_per_second",
       "The demand reported to the cluster allocator for the link (+Inf: backlogged).",
       MetricType::Gauge, kBucketFamilies[5].value},
  };
  for (const BucketFamily& bf : kLinkFamilies) {
    MetricFamily f = family(bf.name, bf.help, bf.type);
    for (const TenantStatus& t : s.tenants) {
      for (const BucketStatus& b : t.buckets) {
        if (!b.fabric_link) continue;
        f.metric.push_back(sample({{"direction", b.receive ? "rx" : "tx"},
                                   {"link", b.device},
                                   {"node", s.node},
                                   {"tenant", t.name}},
                                  bf.type, bf.value(b)));
      }
    }
    if (!f.metric.empty()) out.push_back(std::move(f));
  }
  if (s.fabric.mode != FabricMode::kNone) {
    MetricFamily mode = family("tenantqos_fabric_mode",
                               "1 for the mode the shared-link caps are in: allocator (fresh "
                               "caps), held (the allocator lost, its last caps within their hold "
                               "time), static (the static split).",
                               MetricType::Gauge);
    for (FabricMode m : {FabricMode::kAllocator, FabricMode::kHeld, FabricMode::kStatic}) {
      mode.metric.push_back(
          sample({{"mode", fabricModeName(m)}}, MetricType::Gauge, s.fabric.mode == m ? 1 : 0));
    }
    out.push_back(std::move(mode));
    MetricFamily age =
        family("tenantqos_fabric_caps_age_seconds",
               "Age of the cluster allocator's last message (-1: none yet).", MetricType::Gauge);
    age.metric.push_back(
        sample({}, MetricType::Gauge,
               s.fabric.last_caps_age_ns < 0 ? -1.0 : double(s.fabric.last_caps_age_ns) / 1e9));
    out.push_back(std::move(age));
    MetricFamily conn =
        family("tenantqos_fabric_allocator_connected",
               "1 while the stream to the active cluster allocator is up.", MetricType::Gauge);
    conn.metric.push_back(sample({}, MetricType::Gauge, s.fabric.connected ? 1 : 0));
    out.push_back(std::move(conn));
    MetricFamily term =
        family("tenantqos_fabric_allocator_term",
               "The election term of the allocator whose caps were last taken.", MetricType::Gauge);
    term.metric.push_back(sample({}, MetricType::Gauge, double(s.fabric.term)));
    out.push_back(std::move(term));
    MetricFamily refused = family("tenantqos_fabric_caps_refusals_total",
                                  "Caps messages not taken (an older election term, another node).",
                                  MetricType::Counter);
    refused.metric.push_back(sample({}, MetricType::Counter, double(s.fabric.caps_refused)));
    out.push_back(std::move(refused));
  }

  struct ClassFamily {
    const char* name;
    const char* help;
    uint64_t ClassStat::*field;
  };
  static const ClassFamily kClassFamilies[] = {
      {"tenantqos_tc_class_bytes_total", "Bytes sent by the tc class (kernel counter).",
       &ClassStat::bytes},
      {"tenantqos_tc_class_packets_total", "Packets sent by the tc class (kernel counter).",
       &ClassStat::packets},
      {"tenantqos_tc_class_drops_total", "Packets dropped by the tc class (kernel counter).",
       &ClassStat::drops},
      {"tenantqos_tc_class_overlimits_total",
       "Times the tc class was over its rate (kernel counter).", &ClassStat::overlimits},
  };
  for (const ClassFamily& cf : kClassFamilies) {
    MetricFamily f = family(cf.name, cf.help, MetricType::Counter);
    for (const ClassStat& c : s.classes) {
      f.metric.push_back(sample({{"class", c.class_id}, {"device", c.device}, {"tenant", c.tenant}},
                                MetricType::Counter, double(c.*cf.field)));
    }
    out.push_back(std::move(f));
  }

  // RDMA ports: a family only when some port has that counter, so a host without RDMA (or a
  // device without PMA byte counters, like rxe) exports no such series at all.
  struct RdmaFamily {
    const char* name;
    const char* help;
    MetricType type;
    std::optional<double> (*value)(const RdmaPortStat&);
  };
  static const RdmaFamily kRdmaFamilies[] = {
      {"tenantqos_rdma_port_transmit_bytes_total",
       "Bytes the RDMA port sent, all traffic (IB PMA PortXmitData x 4; absent without PMA "
       "counters, e.g. on rxe).",
       MetricType::Counter,
       [](const RdmaPortStat& p) -> std::optional<double> {
         return p.transmit_bytes ? std::optional<double>(double(*p.transmit_bytes)) : std::nullopt;
       }},
      {"tenantqos_rdma_port_receive_bytes_total",
       "Bytes the RDMA port received, all traffic (IB PMA PortRcvData x 4).", MetricType::Counter,
       [](const RdmaPortStat& p) -> std::optional<double> {
         return p.receive_bytes ? std::optional<double>(double(*p.receive_bytes)) : std::nullopt;
       }},
      {"tenantqos_rdma_port_transmit_packets_total",
       "Packets the RDMA port sent (IB PMA PortXmitPkts, else the driver's sent_pkts).",
       MetricType::Counter,
       [](const RdmaPortStat& p) -> std::optional<double> {
         return p.transmit_packets ? std::optional<double>(double(*p.transmit_packets))
                                   : std::nullopt;
       }},
      {"tenantqos_rdma_port_receive_packets_total",
       "Packets the RDMA port received (IB PMA PortRcvPkts, else the driver's rcvd_pkts).",
       MetricType::Counter,
       [](const RdmaPortStat& p) -> std::optional<double> {
         return p.receive_packets ? std::optional<double>(double(*p.receive_packets))
                                  : std::nullopt;
       }},
      {"tenantqos_rdma_port_up", "1 while the RDMA port's logical state is ACTIVE, else 0.",
       MetricType::Gauge,
       [](const RdmaPortStat& p) -> std::optional<double> { return p.up ? 1.0 : 0.0; }},
  };
  for (const RdmaFamily& rf : kRdmaFamilies) {
    MetricFamily f = family(rf.name, rf.help, rf.type);
    for (const RdmaPortStat& p : s.rdma_ports) {
      const std::optional<double> v = rf.value(p);
      if (!v) continue;
      f.metric.push_back(sample({{"device", p.device},
                                 {"link_layer", p.link_layer},
                                 {"netdev", p.netdev},
                                 {"port", std::to_string(p.port)}},
                                rf.type, *v));
    }
    if (!f.metric.empty()) out.push_back(std::move(f));
  }

  // Ungoverned traffic (docs/agent.md, "Ungoverned traffic").
  // TCP path: what the HTB default class carried, i.e. traffic with no tenant's DSCP.
  const std::string default_class =
      tc::formatHandle(tc::makeHandle(tc::kRootMajor, tc::kDefaultClassMinor));
  MetricFamily bytes = family("tenantqos_ungoverned_bytes_total",
                              "Bytes sent outside every tenant: on the TCP path, what the HTB "
                              "default class carried (kernel counter).",
                              MetricType::Counter);
  for (const ClassStat& c : s.classes) {
    if (c.class_id != default_class) continue;
    bytes.metric.push_back(
        sample({{"device", c.device}, {"path", "tcp"}}, MetricType::Counter, double(c.bytes)));
  }
  if (!bytes.metric.empty()) out.push_back(std::move(bytes));
  // RDMA: QPs by owner, only while RDMA netlink can be read.
  if (s.rdma_qps) {
    MetricFamily qps = family("tenantqos_rdma_qps",
                              "RDMA QPs on the device by owner: governed (a process attached to "
                              "the agent), ungoverned, kernel, unknown (owner not visible).",
                              MetricType::Gauge);
    MetricFamily owners = family("tenantqos_ungoverned_qp_owners",
                                 "Processes owning RDMA QPs on the device without being attached "
                                 "to the agent.",
                                 MetricType::Gauge);
    MetricFamily top = family("tenantqos_ungoverned_qps",
                              "RDMA QPs of a process not attached to the agent: the processes "
                              "with the most such QPs per device, the rest as pid=\"other\".",
                              MetricType::Gauge);
    for (const RdmaQpCounts& d : *s.rdma_qps) {
      const std::pair<const char*, uint64_t> by_owner[] = {{"governed", d.governed},
                                                           {"kernel", d.kernel},
                                                           {"ungoverned", d.ungoverned},
                                                           {"unknown", d.unknown}};
      for (const auto& [owner, n] : by_owner) {
        qps.metric.push_back(
            sample({{"device", d.device}, {"owner", owner}}, MetricType::Gauge, double(n)));
      }
      owners.metric.push_back(
          sample({{"device", d.device}}, MetricType::Gauge, double(d.ungoverned_owners)));
      for (const UngovernedOwner& o : d.top) {
        top.metric.push_back(
            sample({{"comm", o.comm}, {"device", d.device}, {"pid", std::to_string(o.pid)}},
                   MetricType::Gauge, double(o.qps)));
      }
      if (d.other_ungoverned > 0) {
        top.metric.push_back(sample({{"comm", "other"}, {"device", d.device}, {"pid", "other"}},
                                    MetricType::Gauge, double(d.other_ungoverned)));
      }
    }
    for (MetricFamily* f : {&qps, &owners, &top}) {
      if (!f->metric.empty()) out.push_back(std::move(*f));
    }
  }

  auto scalar = [&](const char* name, const char* help, MetricType type, double v) {
    MetricFamily f = family(name, help, type);
    f.metric.push_back(sample({}, type, v));
    out.push_back(std::move(f));
  };
  scalar("tenantqos_policy_version", "Policy version this node enforces (0 = none yet).",
         MetricType::Gauge, double(s.policy_version));
  scalar("tenantqos_policy_latest_seen_version",
         "Newest policy version this node has received (may differ while it fails to apply).",
         MetricType::Gauge, double(s.latest_seen_version));
  scalar("tenantqos_policyd_connected", "1 while the policy watch stream to policyd is up.",
         MetricType::Gauge, watch.connected ? 1 : 0);
  scalar("tenantqos_policy_store_epoch_changes_total",
         "Snapshots of a new policy store (another epoch) adopted whatever their version.",
         MetricType::Counter, double(watch.store_epoch_changes));
  scalar("tenantqos_policy_older_offers_total",
         "Older versions of the held store offered by policyd and not taken.", MetricType::Counter,
         double(watch.older_versions_offered));
  scalar("tenantqos_policy_older_offered_version",
         "The older version of the held store policyd last offered, while unresolved (else 0).",
         MetricType::Gauge, double(watch.store_notice.empty() ? 0 : watch.older_offered_version));
  scalar("tenantqos_policyd_reconnect_waits_total",
         "Backoff waits of the policy watch (a policyd unreachable, a stream ended).",
         MetricType::Counter, double(watch.reconnect_waits));
  scalar("tenantqos_agent_ready", "1 once a policy (persisted or received) has been applied.",
         MetricType::Gauge, s.ready ? 1 : 0);
  scalar("tenantqos_reconcile_errors_total",
         "Reconcile attempts that failed (the node kept its last good state).", MetricType::Counter,
         double(s.reconcile_errors_total));
  scalar("tenantqos_reconcile_unresolved_errors",
         "Reconcile errors not yet resolved by a later successful attempt.", MetricType::Gauge,
         double(s.errors.size()));
  scalar("tenantqos_stats_reads_total",
         "Reads of the kernel's tc class and RDMA port counters (one per stats interval).",
         MetricType::Counter, double(s.stats_reads_total));
  scalar(
      "tenantqos_qp_scans_total",
      "Scans of the node's RDMA QPs (--qp-scan-interval-ms), whether they could list them or not.",
      MetricType::Counter, double(s.qp_scans_total));
  out.push_back(histogram("tenantqos_reconcile_duration_seconds",
                          "Time to apply one policy snapshot to tc and the shm files.",
                          s.reconcile_duration));
  out.push_back(histogram("tenantqos_allocation_duration_seconds",
                          "Time of one allocation pass (read usage, compute and publish rates).",
                          s.allocation_duration));
  return out;
}

std::string renderMetrics(const AgentState& state, const WatchStatus& watch) {
  std::ostringstream os;
  prometheus::TextSerializer().Serialize(os, metricFamilies(state, watch));
  return os.str();
}

}  // namespace tq::agent
