#include "proto/allocate_codec.h"

#include <algorithm>

namespace tq::proto {
namespace {

namespace v1 = tenantqos::v1;

constexpr size_t kMaxNameBytes = 253;

// The rules on an entry's names (which fields they are: EntryNames in the header).
template <typename E>
bool anyName(const E& e) {
  for (const std::string* n : EntryNames<E>::of(e)) {
    if (!n->empty()) return true;
  }
  return false;
}
template <typename E>
bool namesValid(const E& e) {  // every name 1-253 bytes
  for (const std::string* n : EntryNames<E>::of(e)) {
    if (n->empty() || n->size() > kMaxNameBytes) return false;
  }
  return true;
}
template <typename E>
bool sameNames(const E& a, const E& b) {
  const auto an = EntryNames<E>::of(a), bn = EntryNames<E>::of(b);
  for (size_t i = 0; i < an.size(); ++i) {
    if (*an[i] != *bn[i]) return false;
  }
  return true;
}
template <typename E>
void copyNames(const E& from, E* to) {
  const auto src = EntryNames<E>::of(from);
  const auto dst = EntryNames<E>::of(to);
  for (size_t i = 0; i < src.size(); ++i) *dst[i] = *src[i];
}
template <typename E>
void clearNames(E* e) {
  for (std::string* n : EntryNames<E>::of(e)) n->clear();
}
// "(tenant, link[, group])" for errors, each name cut at 64 bytes (they are hostile).
template <typename E>
std::string namesText(const E& e) {
  std::string out;
  for (const std::string* n : EntryNames<E>::of(e)) {
    out += (out.empty() ? "(" : ", ") + n->substr(0, 64);
  }
  return out + ")";
}

}  // namespace

bool demandMovedPast(uint64_t a, uint64_t b, double deadband) {
  if (a == b) return false;
  if (a == 0 || b == 0 || a == UINT64_MAX || b == UINT64_MAX) return true;
  const double hi = static_cast<double>(std::max(a, b));
  const double lo = static_cast<double>(std::min(a, b));
  return hi - lo > deadband * hi;
}

template <typename E>
Status KeyedState<E>::learn(const E& e, std::vector<uint32_t>* learned) {
  const uint32_t key = e.key();
  auto it = names_.find(key);
  if (!anyName(e)) {
    if (it == names_.end()) {
      return invalidArgument("key " + std::to_string(key) + " was never named on this stream");
    }
    return okStatus();
  }
  if (!namesValid(e)) {
    return invalidArgument("key " + std::to_string(key) + " names " + namesText(e) +
                           ": every name must be 1-253 bytes");
  }
  if (it != names_.end()) {
    if (!sameNames(it->second, e)) {
      return invalidArgument("key " + std::to_string(key) + " was " + namesText(it->second) +
                             " on this stream, now " + namesText(e) + ": a key is never rebound");
    }
    return okStatus();
  }
  if (names_.size() >= max_keys_) {
    return invalidArgument("key " + std::to_string(key) + ": more than " +
                           std::to_string(max_keys_) + " keys on one stream");
  }
  E names;
  copyNames(e, &names);
  names_.emplace(key, std::move(names));
  learned->push_back(key);
  return okStatus();
}

template <typename E>
Status KeyedState<E>::apply(const google::protobuf::RepeatedPtrField<E>& entries, bool delta,
                            const google::protobuf::RepeatedField<uint32_t>& removed,
                            google::protobuf::RepeatedPtrField<E>* out) {
  if (delta && !whole_seen_) return invalidArgument("a delta before any whole message");
  if (!delta && !removed.empty()) return invalidArgument("removed keys in a whole message");
  if (static_cast<size_t>(entries.size()) > max_keys_) {
    return invalidArgument(std::to_string(entries.size()) + " entries, at most " +
                           std::to_string(max_keys_));
  }
  // Checked in full before anything changes: a refused message leaves the state as it was,
  // the names its keys would have taught forgotten too.
  std::vector<uint32_t> learned;
  auto refuse = [&](Status why) {
    for (uint32_t k : learned) names_.erase(k);
    return why;
  };
  for (const E& e : entries) {
    if (e.key() == 0) {
      if (delta) return refuse(invalidArgument("an entry without a key in a delta"));
      continue;
    }
    if (Status st = learn(e, &learned); !st.ok()) return refuse(std::move(st));
  }
  for (uint32_t k : removed) {
    if (!held_.count(k)) {
      return refuse(invalidArgument("key " + std::to_string(k) + " removed but not held"));
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
    copyNames(names_.at(e.key()), &full);
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
  // Whether the peer holds `d` under `key` within the deadband.
  auto holds = [&](uint32_t key, const v1::LinkDemand& d) {
    const std::pair<uint64_t, uint64_t>* h = table_.held(key);
    return h != nullptr &&
           !demandMovedPast(h->first, d.transmit_bytes_per_second(), options_.deadband) &&
           !demandMovedPast(h->second, d.receive_bytes_per_second(), options_.deadband);
  };
  std::vector<uint32_t> keys;
  keys.reserve(static_cast<size_t>(whole.demands_size()));
  bool moved = !started_ || addresses != addresses_ || whole.policy_version() != policy_version_;
  for (const v1::LinkDemand& d : whole.demands()) {
    keys.push_back(table_.keyOf(d));
    moved = moved || !holds(keys.back(), d);
  }
  // Keys held by the peer that this demand no longer has.
  std::vector<uint32_t> removed;
  if (table_.heldCount() != keys.size() || moved) removed = table_.gone(keys);
  moved = moved || !removed.empty();
  if (!moved && !force && now_ns - last_ns_ < options_.refresh_ns) return std::nullopt;

  const bool whole_message = !peer_compact_ || !started_ || addresses != addresses_ ||
                             now_ns - last_whole_ns_ >= options_.full_every_ns;
  v1::DemandReport out;
  out.set_policy_version(whole.policy_version());
  out.set_compact_caps(options_.compact_caps);
  if (whole_message) {
    out.set_node(whole.node());
    *out.mutable_addresses() = whole.addresses();
    table_.dropAll();
  } else {
    out.set_delta(true);
    for (uint32_t k : removed) {
      out.add_removed_keys(k);
      table_.drop(k);
    }
  }
  for (int i = 0; i < whole.demands_size(); ++i) {
    const v1::LinkDemand& d = whole.demands(i);
    const uint32_t key = keys[static_cast<size_t>(i)];
    if (!whole_message && holds(key, d)) continue;
    v1::LinkDemand* e = out.add_demands();
    e->set_key(key);
    // Names with a key's first use on the stream, and in every whole message (so that an
    // older policyd, which ignores keys, reads it as before).
    if (whole_message || table_.held(key) == nullptr) copyNames(d, e);
    e->set_transmit_bytes_per_second(d.transmit_bytes_per_second());
    e->set_receive_bytes_per_second(d.receive_bytes_per_second());
    table_.hold(key, {d.transmit_bytes_per_second(), d.receive_bytes_per_second()});
  }
  started_ = true;
  addresses_ = std::move(addresses);
  policy_version_ = whole.policy_version();
  last_ns_ = now_ns;
  if (whole_message) last_whole_ns_ = now_ns;
  return out;
}

template <>
Result<v1::DemandReport> DemandDecoder::decode(const v1::DemandReport& msg) {
  v1::DemandReport out;
  Status st = state_.apply(msg.demands(), msg.delta(), msg.removed_keys(), out.mutable_demands());
  if (!st.ok()) {
    return invalidArgument("Allocate: DemandReport " + std::to_string(msg.sequence()) + ": " +
                           st.message());
  }
  if (!msg.node().empty()) {
    if (stream_.node().empty()) stream_.set_node(msg.node());
    out.set_node(msg.node());
  } else {
    if (stream_.node().empty()) {
      return invalidArgument("Allocate: the stream's first report names no node");
    }
    out.set_node(stream_.node());
  }
  if (!msg.delta() || msg.addresses_size() > 0) *stream_.mutable_addresses() = msg.addresses();
  *out.mutable_addresses() = stream_.addresses();
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
  for (const v1::LinkCap& c : whole.caps()) keys.push_back(table_.keyOf(c));
  if (whole_message) {
    table_.dropAll();
  } else {
    out.set_delta(true);
    for (uint32_t k : table_.gone(keys)) {
      out.add_removed_keys(k);
      table_.drop(k);
    }
    if (whole.node() == node_) out.clear_node();
    if (whole.allocator() == allocator_) out.clear_allocator();
  }
  for (int i = 0; i < whole.caps_size(); ++i) {
    v1::LinkCap values = whole.caps(i);
    clearNames(&values);
    values.clear_key();
    std::string bytes = values.SerializeAsString();
    const uint32_t key = keys[static_cast<size_t>(i)];
    const std::string* held = table_.held(key);
    if (!whole_message && held != nullptr && *held == bytes) continue;  // unchanged
    v1::LinkCap* e = out.add_caps();
    *e = std::move(values);
    e->set_key(key);
    if (whole_message || held == nullptr) copyNames(whole.caps(i), e);
    table_.hold(key, std::move(bytes));
  }
  started_ = true;
  node_ = whole.node();
  allocator_ = whole.allocator();
  if (whole_message) last_whole_ns_ = now_ns;
  return out;
}

template <>
Result<v1::NodeCaps> CapsDecoder::decode(const v1::NodeCaps& msg) {
  v1::NodeCaps out = msg;
  Status st = state_.apply(msg.caps(), msg.delta(), msg.removed_keys(), out.mutable_caps());
  if (!st.ok()) {
    return invalidArgument("NodeCaps round " + std::to_string(msg.round()) + ": " + st.message());
  }
  out.clear_delta();
  out.clear_removed_keys();
  if (msg.node().empty() && msg.delta()) {
    out.set_node(stream_.node());
  } else {
    stream_.set_node(msg.node());
  }
  if (msg.allocator().empty() && msg.delta()) {
    out.set_allocator(stream_.allocator());
  } else {
    stream_.set_allocator(msg.allocator());
  }
  return out;
}

}  // namespace tq::proto
