#include "proto/allocate_codec.h"

#include <algorithm>

namespace tq::proto {
namespace {

namespace v1 = tenantqos::v1;

constexpr size_t kMaxNameBytes = 253;

// The names of an entry, per message type.
struct DemandNames {
  static bool any(const v1::LinkDemand& e) { return !e.tenant().empty() || !e.link().empty(); }
  static bool all(const v1::LinkDemand& e) { return !e.tenant().empty() && !e.link().empty(); }
  static bool fit(const v1::LinkDemand& e) {
    return e.tenant().size() <= kMaxNameBytes && e.link().size() <= kMaxNameBytes;
  }
  static bool same(const v1::LinkDemand& a, const v1::LinkDemand& b) {
    return a.tenant() == b.tenant() && a.link() == b.link();
  }
  static void copy(const v1::LinkDemand& from, v1::LinkDemand* to) {
    to->set_tenant(from.tenant());
    to->set_link(from.link());
  }
  static std::string text(const v1::LinkDemand& e) {
    return "(" + e.tenant().substr(0, 64) + ", " + e.link().substr(0, 64) + ")";
  }
};
struct CapNames {
  static bool any(const v1::LinkCap& e) {
    return !e.tenant().empty() || !e.link().empty() || !e.group().empty();
  }
  static bool all(const v1::LinkCap& e) {
    return !e.tenant().empty() && !e.link().empty() && !e.group().empty();
  }
  static bool fit(const v1::LinkCap& e) {
    return e.tenant().size() <= kMaxNameBytes && e.link().size() <= kMaxNameBytes &&
           e.group().size() <= kMaxNameBytes;
  }
  static bool same(const v1::LinkCap& a, const v1::LinkCap& b) {
    return a.tenant() == b.tenant() && a.link() == b.link() && a.group() == b.group();
  }
  static void copy(const v1::LinkCap& from, v1::LinkCap* to) {
    to->set_tenant(from.tenant());
    to->set_link(from.link());
    to->set_group(from.group());
  }
  static std::string text(const v1::LinkCap& e) {
    return "(" + e.tenant().substr(0, 64) + ", " + e.link().substr(0, 64) + ", " +
           e.group().substr(0, 64) + ")";
  }
};
template <typename E>
struct NamesOf;
template <>
struct NamesOf<v1::LinkDemand> : DemandNames {};
template <>
struct NamesOf<v1::LinkCap> : CapNames {};

}  // namespace

bool demandMovedPast(uint64_t a, uint64_t b, double deadband) {
  if (a == b) return false;
  if (a == 0 || b == 0 || a == UINT64_MAX || b == UINT64_MAX) return true;
  const double hi = static_cast<double>(std::max(a, b));
  const double lo = static_cast<double>(std::min(a, b));
  return hi - lo > deadband * hi;
}

template <typename E>
Status KeyedState<E>::learn(const E& e) {
  using N = NamesOf<E>;
  const uint32_t key = e.key();
  auto it = names_.find(key);
  if (!N::any(e)) {
    if (it == names_.end()) {
      return invalidArgument("key " + std::to_string(key) + " was never named on this stream");
    }
    return okStatus();
  }
  if (!N::all(e) || !N::fit(e)) {
    return invalidArgument("key " + std::to_string(key) + " names " + N::text(e) +
                           ": every name must be 1-253 bytes");
  }
  if (it != names_.end()) {
    if (!N::same(it->second, e)) {
      return invalidArgument("key " + std::to_string(key) + " was " + N::text(it->second) +
                             " on this stream, now " + N::text(e) + ": a key is never rebound");
    }
    return okStatus();
  }
  if (names_.size() >= max_keys_) {
    return invalidArgument("key " + std::to_string(key) + ": more than " +
                           std::to_string(max_keys_) + " keys on one stream");
  }
  E names;
  N::copy(e, &names);
  names_.emplace(key, std::move(names));
  return okStatus();
}

template <typename E>
Status KeyedState<E>::apply(const google::protobuf::RepeatedPtrField<E>& entries, bool delta,
                            const google::protobuf::RepeatedField<uint32_t>& removed,
                            google::protobuf::RepeatedPtrField<E>* out) {
  using N = NamesOf<E>;
  if (delta && !whole_seen_) return invalidArgument("a delta before any whole message");
  if (!delta && !removed.empty()) return invalidArgument("removed keys in a whole message");
  if (static_cast<size_t>(entries.size()) > max_keys_) {
    return invalidArgument(std::to_string(entries.size()) + " entries, at most " +
                           std::to_string(max_keys_));
  }
  // Checked in full before anything changes: a refused message leaves the state as it was.
  for (const E& e : entries) {
    if (e.key() == 0) {
      if (delta) return invalidArgument("an entry without a key in a delta");
      continue;
    }
    TQ_RETURN_IF_ERROR(learn(e));
  }
  for (uint32_t k : removed) {
    if (!held_.count(k)) {
      return invalidArgument("key " + std::to_string(k) + " removed but not held");
    }
  }
  if (!delta) {
    held_.clear();
    order_.clear();
    unkeyed_.clear();
    whole_seen_ = true;
  }
  for (uint32_t k : removed) {
    held_.erase(k);
    order_.erase(std::find(order_.begin(), order_.end(), k));
  }
  for (const E& e : entries) {
    if (e.key() == 0) {
      unkeyed_.push_back(e);
      continue;
    }
    E full = e;
    N::copy(names_.at(e.key()), &full);
    auto [it, fresh] = held_.insert_or_assign(e.key(), std::move(full));
    (void)it;
    if (fresh) order_.push_back(e.key());
  }
  out->Clear();
  out->Reserve(static_cast<int>(unkeyed_.size() + order_.size()));
  for (const E& e : unkeyed_) *out->Add() = e;
  for (uint32_t k : order_) {
    E* e = out->Add();
    *e = held_.at(k);
    e->clear_key();
  }
  return okStatus();
}

template class KeyedState<v1::LinkDemand>;
template class KeyedState<v1::LinkCap>;

std::optional<v1::DemandReport> DemandEncoder::encode(const v1::DemandReport& whole, int64_t now_ns,
                                                      bool force) {
  std::vector<std::string> addresses(whole.addresses().begin(), whole.addresses().end());
  std::vector<uint32_t> keys;
  keys.reserve(static_cast<size_t>(whole.demands_size()));
  bool moved = !started_ || addresses != addresses_ || whole.policy_version() != policy_version_;
  for (const v1::LinkDemand& d : whole.demands()) {
    auto [it, fresh] = keys_.try_emplace({d.tenant(), d.link()}, next_key_);
    if (fresh) ++next_key_;
    keys.push_back(it->second);
    auto s = sent_.find(it->second);
    moved = moved || s == sent_.end() ||
            demandMovedPast(s->second.first, d.transmit_bytes_per_second(), options_.deadband) ||
            demandMovedPast(s->second.second, d.receive_bytes_per_second(), options_.deadband);
  }
  // Keys held by the peer that this demand no longer has.
  std::vector<uint32_t> removed;
  if (sent_.size() != keys.size() || moved) {
    std::vector<uint32_t> now_keys = keys;
    std::sort(now_keys.begin(), now_keys.end());
    for (const auto& [k, v] : sent_) {
      if (!std::binary_search(now_keys.begin(), now_keys.end(), k)) removed.push_back(k);
    }
    std::sort(removed.begin(), removed.end());
  }
  moved = moved || !removed.empty();
  if (!moved && !force && now_ns - last_ns_ < options_.refresh_ns) return std::nullopt;

  const bool whole_message = !peer_compact_ || !started_ || addresses != addresses_ ||
                             now_ns - last_whole_ns_ >= options_.full_every_ns;
  v1::DemandReport out;
  out.set_policy_version(whole.policy_version());
  out.set_compact_caps(true);
  if (whole_message) {
    out.set_node(whole.node());
    *out.mutable_addresses() = whole.addresses();
    sent_.clear();
  } else {
    out.set_delta(true);
    for (uint32_t k : removed) {
      out.add_removed_keys(k);
      sent_.erase(k);
    }
  }
  for (int i = 0; i < whole.demands_size(); ++i) {
    const v1::LinkDemand& d = whole.demands(i);
    const uint32_t key = keys[static_cast<size_t>(i)];
    auto s = sent_.find(key);
    if (!whole_message && s != sent_.end() &&
        !demandMovedPast(s->second.first, d.transmit_bytes_per_second(), options_.deadband) &&
        !demandMovedPast(s->second.second, d.receive_bytes_per_second(), options_.deadband)) {
      continue;  // the peer holds it within the deadband
    }
    v1::LinkDemand* e = out.add_demands();
    e->set_key(key);
    // Names with a key's first use on the stream, and in every whole message (so that an
    // older policyd, which ignores keys, reads it as before).
    if (whole_message || s == sent_.end()) {
      e->set_tenant(d.tenant());
      e->set_link(d.link());
    }
    e->set_transmit_bytes_per_second(d.transmit_bytes_per_second());
    e->set_receive_bytes_per_second(d.receive_bytes_per_second());
    sent_[key] = {d.transmit_bytes_per_second(), d.receive_bytes_per_second()};
  }
  started_ = true;
  addresses_ = std::move(addresses);
  policy_version_ = whole.policy_version();
  last_ns_ = now_ns;
  if (whole_message) last_whole_ns_ = now_ns;
  return out;
}

Result<v1::DemandReport> DemandDecoder::decode(const v1::DemandReport& msg) {
  v1::DemandReport out;
  Status st = state_.apply(msg.demands(), msg.delta(), msg.removed_keys(), out.mutable_demands());
  if (!st.ok()) {
    return invalidArgument("Allocate: DemandReport " + std::to_string(msg.sequence()) + ": " +
                           st.message());
  }
  if (!msg.node().empty()) {
    if (node_.empty()) node_ = msg.node();
    out.set_node(msg.node());
  } else {
    if (node_.empty()) return invalidArgument("Allocate: the stream's first report names no node");
    out.set_node(node_);
  }
  if (!msg.delta() || msg.addresses_size() > 0) {
    addresses_.assign(msg.addresses().begin(), msg.addresses().end());
  }
  for (const std::string& a : addresses_) out.add_addresses(a);
  out.set_policy_version(msg.policy_version());
  out.set_sequence(msg.sequence());
  out.set_compact_caps(msg.compact_caps());
  return out;
}

v1::NodeCaps CapsEncoder::encode(const v1::NodeCaps& whole, int64_t now_ns) {
  v1::NodeCaps out = whole;
  out.set_compact_reports(true);
  if (!peer_compact_) return out;  // an older agent: the whole message, names and all
  const bool whole_message = !started_ || now_ns - last_whole_ns_ >= full_every_ns_;
  out.clear_caps();
  std::vector<uint32_t> keys;
  keys.reserve(static_cast<size_t>(whole.caps_size()));
  for (const v1::LinkCap& c : whole.caps()) {
    auto [it, fresh] =
        keys_.try_emplace(c.tenant() + '\n' + c.link() + '\n' + c.group(), next_key_);
    if (fresh) ++next_key_;
    keys.push_back(it->second);
  }
  if (whole_message) {
    sent_.clear();
  } else {
    out.set_delta(true);
    std::vector<uint32_t> now_keys = keys;
    std::sort(now_keys.begin(), now_keys.end());
    std::vector<uint32_t> removed;
    for (const auto& [k, v] : sent_) {
      if (!std::binary_search(now_keys.begin(), now_keys.end(), k)) removed.push_back(k);
    }
    std::sort(removed.begin(), removed.end());
    for (uint32_t k : removed) {
      out.add_removed_keys(k);
      sent_.erase(k);
    }
    if (whole.node() == node_) out.clear_node();
    if (whole.allocator() == allocator_) out.clear_allocator();
  }
  for (int i = 0; i < whole.caps_size(); ++i) {
    v1::LinkCap values = whole.caps(i);
    values.clear_tenant();
    values.clear_link();
    values.clear_group();
    values.clear_key();
    std::string bytes = values.SerializeAsString();
    const uint32_t key = keys[static_cast<size_t>(i)];
    auto s = sent_.find(key);
    if (!whole_message && s != sent_.end() && s->second == bytes) continue;  // unchanged
    v1::LinkCap* e = out.add_caps();
    *e = std::move(values);
    e->set_key(key);
    if (whole_message || s == sent_.end()) {
      e->set_tenant(whole.caps(i).tenant());
      e->set_link(whole.caps(i).link());
      e->set_group(whole.caps(i).group());
    }
    sent_[key] = std::move(bytes);
  }
  started_ = true;
  node_ = whole.node();
  allocator_ = whole.allocator();
  if (whole_message) last_whole_ns_ = now_ns;
  return out;
}

Result<v1::NodeCaps> CapsDecoder::decode(const v1::NodeCaps& msg) {
  v1::NodeCaps out = msg;
  Status st = state_.apply(msg.caps(), msg.delta(), msg.removed_keys(), out.mutable_caps());
  if (!st.ok()) {
    return invalidArgument("NodeCaps round " + std::to_string(msg.round()) + ": " + st.message());
  }
  out.clear_delta();
  out.clear_removed_keys();
  if (msg.node().empty() && msg.delta()) {
    out.set_node(node_);
  } else {
    node_ = msg.node();
  }
  if (msg.allocator().empty() && msg.delta()) {
    out.set_allocator(allocator_);
  } else {
    allocator_ = msg.allocator();
  }
  return out;
}

}  // namespace tq::proto
