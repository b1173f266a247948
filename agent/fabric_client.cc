#include "agent/fabric_client.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <algorithm>
#include <set>

#include "common/allocation.h"
#include "common/fabric_peers.h"
#include "common/log.h"
#include "proto/allocate_codec.h"
#include "tenantqos/v1/policy.grpc.pb.h"

namespace tq::agent {
namespace {

namespace v1 = tenantqos::v1;

constexpr size_t kMaxAddresses = 16;        // what policyd accepts
constexpr size_t kMaxCapsKeys = 4096 * 64;  // (tenant, link) pairs a node's caps may hold

}  // namespace

std::vector<std::string> deviceAddresses(const std::vector<std::string>& devices) {
  std::vector<std::string> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  std::set<std::string> wanted(devices.begin(), devices.end());
  for (ifaddrs* i = list; i != nullptr && out.size() < kMaxAddresses; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_name == nullptr || !wanted.count(i->ifa_name)) continue;
    char text[INET6_ADDRSTRLEN] = {};
    if (i->ifa_addr->sa_family == AF_INET) {
      const auto* a = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
      if (::inet_ntop(AF_INET, &a->sin_addr, text, sizeof text) == nullptr) continue;
    } else if (i->ifa_addr->sa_family == AF_INET6) {
      const auto* a = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr);
      if (IN6_IS_ADDR_LINKLOCAL(&a->sin6_addr)) continue;  // not routed between nodes
      if (::inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof text) == nullptr) continue;
    } else {
      continue;
    }
    if (auto c = canonicalAddress(text)) {
      if (std::find(out.begin(), out.end(), *c) == out.end()) out.push_back(*c);
    }
  }
  ::freeifaddrs(list);
  return out;
}

bool demandMoved(const FabricDemand& sent, const FabricDemand& now, double deadband) {
  if (sent.policy_version != now.policy_version || sent.entries.size() != now.entries.size()) {
    return true;
  }
  auto moved = [deadband](uint64_t a, uint64_t b) {
    return proto::demandMovedPast(a, b, deadband);
  };
  for (size_t i = 0; i < now.entries.size(); ++i) {
    const FabricDemandEntry& a = sent.entries[i];
    const FabricDemandEntry& b = now.entries[i];
    if (a.tenant != b.tenant || a.link != b.link || moved(a.tx, b.tx) || moved(a.rx, b.rx)) {
      return true;
    }
  }
  return false;
}

int64_t DemandReportPacer::dueNs(const FabricDemand& demand, int64_t now_ns) const {
  if (!last_) return now_ns;
  if (demandEdge(*last_, demand, options_.edge_fraction)) return last_ns_ + options_.min_gap_ns;
  if (demandMoved(*last_, demand, options_.deadband)) {
    return last_ns_ + std::max(options_.interval_ns, options_.min_gap_ns);
  }
  return last_ns_ + options_.refresh_ns;
}

v1::DemandReport toDemandReport(const std::string& node, const FabricDemand& demand,
                                const std::vector<std::string>& addresses, uint64_t sequence) {
  v1::DemandReport r;
  r.set_node(node);
  r.set_policy_version(demand.policy_version);
  r.set_sequence(sequence);
  for (const FabricDemandEntry& e : demand.entries) {
    v1::LinkDemand* d = r.add_demands();
    d->set_tenant(e.tenant);
    d->set_link(e.link);
    d->set_transmit_bytes_per_second(e.tx);
    d->set_receive_bytes_per_second(e.rx);
  }
  for (size_t i = 0; i < addresses.size() && i < kMaxAddresses; ++i) r.add_addresses(addresses[i]);
  return r;
}

FabricCapsMessage fromNodeCaps(const v1::NodeCaps& c) {
  FabricCapsMessage m;
  m.node = c.node();
  m.term = c.term();
  m.round = c.round();
  m.policy_version = c.policy_version();
  m.hold_ns = static_cast<int64_t>(c.hold_ms()) * 1'000'000;
  m.allocator = c.allocator();
  for (const v1::LinkCap& cap : c.caps()) {
    m.caps.push_back({cap.tenant(), cap.link(), cap.group(), cap.transmit_cap_bytes_per_second(),
                      cap.receive_cap_bytes_per_second(), cap.tenant_nodes(), cap.link_pairs()});
  }
  if (c.has_peers()) {
    std::vector<FabricGroupPeers> peers;
    for (const v1::GroupPeers& g : c.peers()) {
      peers.push_back({g.link(), g.group(), {g.addresses().begin(), g.addresses().end()}});
    }
    m.peers = std::move(peers);
  }
  return m;
}

FabricClient::FabricClient(std::shared_ptr<rpc::ChannelRing> ring, Options options,
                           StateBoard& board, std::function<void(FabricCapsMessage)> on_caps,
                           std::function<void(bool)> on_connected, Clock& clock)
    : ring_(std::move(ring)),
      options_(std::move(options)),
      board_(board),
      on_caps_(std::move(on_caps)),
      on_connected_(std::move(on_connected)),
      clock_(clock),
      worker_(clock) {}

FabricClient::~FabricClient() { stop(); }

void FabricClient::start() {
  board_.setFabricEdgeListener([this] { onEdge(); });
  worker_.start("tq-fabric", [this](std::stop_token stop) { run(stop); });
}

void FabricClient::stop() {
  board_.setFabricEdgeListener({});  // no call into this client once it returns
  worker_.stop();
  if (follower_) {
    follower_->stop();
    follower_.reset();
  }
  following_ = false;
}

void FabricClient::run(const std::stop_token& stop) {
  // Follows the allocator while the node is behind a shared link (the reconcile thread
  // publishes demand then), checked once a second.
  while (!stop.stop_requested()) {
    const bool wanted = board_.fabricDemand().has_value();
    if (wanted && !follower_) {
      rpc::StreamFollower::Options o;
      o.what = "cluster allocator stream";
      o.thread = "tq-allocate";
      o.backoff = options_.backoff;
      o.seed = options_.seed;
      follower_ = std::make_unique<rpc::StreamFollower>(
          ring_, o,
          [this](const std::shared_ptr<grpc::Channel>& ch, grpc::ClientContext& ctx,
                 const std::string& target) { return session(ch, ctx, target); },
          [this](bool connected) {
            if (on_connected_) on_connected_(connected);
          },
          clock_);
      follower_->start();
      following_ = true;
    } else if (!wanted && follower_) {
      // The policy no longer puts this node behind a shared link.
      follower_->stop();
      follower_.reset();
      following_ = false;
    }
    if (!worker_.waitFor(1'000'000'000)) return;
  }
}

void FabricClient::onEdge() {
  edges_.fetch_add(1);
  MutexLock lock(writer_mu_);
  if (writer_ != nullptr) writer_->withLock([] {});  // its wait re-checks edges_
}

rpc::StreamFollower::StreamEnd FabricClient::session(const std::shared_ptr<grpc::Channel>& channel,
                                                     grpc::ClientContext& ctx,
                                                     const std::string& target) {
  auto stub = v1::PolicyService::NewStub(channel);
  auto stream = stub->Allocate(&ctx);
  const std::vector<std::string> addresses =
      options_.addresses ? options_.addresses() : std::vector<std::string>{};
  TQ_LOG(kDebug, "cluster allocator stream to %s as %s (%zu addresses)", target.c_str(),
         options_.node.c_str(), addresses.size());
  // The writer: one report now (policyd attaches the node on its first), then as
  // DemandReportPacer says: an edge at once (the board's listener wakes this wait), at most one
  // per min_gap; a move past the deadband at the next interval; else the heartbeat. Once
  // policyd said it reads them (NodeCaps.compact_reports), reports carry keys and only what
  // moved (proto/allocate_codec.h, forced: the pacer says when); before, and for an older
  // policyd, whole reports with names.
  // gRPC allows one thread writing while another reads the same stream.
  std::atomic<bool> peer_compact{false};
  Worker writer(clock_);
  writer.start("tq-demand", [&](std::stop_token st) {
    DemandReportPacer pacer({options_.interval_ns, options_.refresh_ns, options_.min_gap_ns,
                             options_.deadband, options_.edge_fraction});
    proto::DemandEncoder::Options eo;
    eo.deadband = options_.deadband;
    eo.refresh_ns = options_.refresh_ns;
    proto::DemandEncoder encoder(eo);
    while (!st.stop_requested()) {
      const uint64_t edges = edges_.load();
      std::optional<FabricDemand> d = board_.fabricDemand();
      if (!d) d = FabricDemand{};
      const int64_t now = clock_.nowNs();
      const int64_t due = pacer.dueNs(*d, now);
      if (due <= now) {
        if (peer_compact.load() && !encoder.peerCompact()) encoder.setPeerCompact();
        std::optional<v1::DemandReport> msg =
            encoder.encode(toDemandReport(options_.node, *d, addresses, 0), now, /*force=*/true);
        if (msg) {
          msg->set_sequence(++sequence_);
          if (!stream->Write(*msg)) return;
          sent_++;
        }
        pacer.sent(std::move(*d), now);
        continue;
      }
      // Until it is due, or the next look for a move past the deadband (the board does not
      // say those), or an edge.
      if (!writer.waitUntil(std::min(due, now + options_.interval_ns),
                            [&] { return edges_.load() != edges; })) {
        return;
      }
    }
  });
  {
    MutexLock lock(writer_mu_);
    writer_ = &writer;
  }
  rpc::StreamFollower::StreamEnd end;
  v1::NodeCaps caps;
  proto::CapsDecoder decoder(kMaxCapsKeys);
  std::optional<Status> refused;
  while (stream->Read(&caps)) {
    end.delivered = true;
    received_++;
    if (caps.compact_reports()) peer_compact = true;
    Result<v1::NodeCaps> whole = decoder.decode(caps);
    if (!whole.ok()) {  // a policyd bug or a corrupted stream: a new stream starts whole
      refused = whole.status();
      break;
    }
    if (on_caps_) on_caps_(fromNodeCaps(*whole));
  }
  ctx.TryCancel();  // a writer blocked in Write returns
  {
    MutexLock lock(writer_mu_);
    writer_ = nullptr;
  }
  writer.stop();
  end.status = stream->Finish();
  if (refused) {
    TQ_LOG(kWarn, "cluster allocator stream to %s: %s; reconnecting", target.c_str(),
           refused->message().c_str());
    end.status = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, refused->message());
  }
  return end;
}

}  // namespace tq::agent
