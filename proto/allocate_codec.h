// Compact PolicyService.Allocate streams (docs/fabric.md, "Compact streams"): the encoders and
// decoders that both ends of the stream run, and that bench/fabric counts its control bytes
// with.
//
// A stream's entries are named by a small integer key instead of their names: the entry that
// first uses a key on the stream carries the names with it (the table each side learns once
// per stream), later ones the key alone. After the first message, a message carries only the
// entries that changed since the previous one on the stream (a delta; the others keep their
// values), and a whole message comes at least every full_every_ns, so a stream that started
// (or a decoder that lost its state) converges to the full state. Each side switches only when
// the other said it reads the compact form (DemandReport.compact_caps,
// NodeCaps.compact_reports): an older agent or policyd keeps getting whole messages with names.
//
// The decoders read hostile input: a key that was never named, a key rebound to other names,
// a removal of a key not held, a delta before any whole message, more keys than max_keys or
// names longer than 253 bytes are refused with kInvalidArgument naming the key (the entries held
// stay as they were); what the decoder holds is bounded by max_keys keys. They return the node's
// whole state as the message an older peer would have sent (names, no keys), so that the code
// behind them (the allocator's checks, the agent's caps) is unchanged.
//
// Thread-safety: none; one encoder and one decoder per stream and direction, used by whoever
// reads or writes that stream.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"
#include "tenantqos/v1/policy.pb.h"

namespace tq::proto {

inline constexpr int64_t kAllocateFullEveryNs = 10'000'000'000;

// Whether a demand went from `a` to `b` by more than `deadband` (a fraction of the larger), or
// to or from zero or backlogged (UINT64_MAX): worth a report before the refresh.
bool demandMovedPast(uint64_t a, uint64_t b, double deadband);

// A demand move past this fraction (or to or from zero or backlogged, or an entry that appears
// or goes) is an *edge*: a tenant starting, stopping or jumping. The agent reports it at once
// and policyd runs a round a few ms after it (agent/fabric_client.h,
// policy/allocator_service.h); smaller moves wait for the report interval and the round period.
inline constexpr double kDemandEdgeFraction = 0.25;

// ---- The key tables, one rule for both directions ---------------------------------------------

// The names that identify an entry of each direction: its key stands for them. The one place
// that says which fields they are.
template <typename E>
struct EntryNames;
template <>
struct EntryNames<tenantqos::v1::LinkDemand> {
  using E = tenantqos::v1::LinkDemand;
  static std::array<const std::string*, 2> of(const E& e) { return {&e.tenant(), &e.link()}; }
  static std::array<std::string*, 2> of(E* e) { return {e->mutable_tenant(), e->mutable_link()}; }
};
template <>
struct EntryNames<tenantqos::v1::LinkCap> {
  using E = tenantqos::v1::LinkCap;
  static std::array<const std::string*, 3> of(const E& e) {
    return {&e.tenant(), &e.link(), &e.group()};
  }
  static std::array<std::string*, 3> of(E* e) {
    return {e->mutable_tenant(), e->mutable_link(), e->mutable_group()};
  }
};

// The encoding side's table of one stream and direction: each entry's key, numbered from 1 in
// the order of its names' first use and never rebound on the stream (the decoder refuses a
// rebound key), and what the peer holds under each key (Held: what the encoder compares the
// next value with).
template <typename E, typename Held>
class KeyTable {
 public:
  uint32_t keyOf(const E& e) {
    Names names;
    const auto fields = EntryNames<E>::of(e);
    for (size_t i = 0; i < names.size(); ++i) names[i] = *fields[i];
    auto [it, fresh] = keys_.try_emplace(std::move(names), next_key_);
    if (fresh) ++next_key_;
    return it->second;
  }
  // nullptr: the peer holds nothing under `key`, so the entry goes with its names.
  const Held* held(uint32_t key) const {
    auto it = held_.find(key);
    return it == held_.end() ? nullptr : &it->second;
  }
  size_t heldCount() const { return held_.size(); }
  void hold(uint32_t key, Held value) { held_[key] = std::move(value); }
  void drop(uint32_t key) { held_.erase(key); }
  void dropAll() { held_.clear(); }  // a whole message replaces what the peer holds
  // The keys the peer holds that are not among `keys` (a message's entries), ascending.
  std::vector<uint32_t> gone(std::vector<uint32_t> keys) const {
    std::sort(keys.begin(), keys.end());
    std::vector<uint32_t> out;
    for (const auto& [k, v] : held_) {
      if (!std::binary_search(keys.begin(), keys.end(), k)) out.push_back(k);
    }
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  using Names =
      std::array<std::string,
                 std::tuple_size_v<decltype(EntryNames<E>::of(std::declval<const E&>()))>>;
  uint32_t next_key_ = 1;
  std::map<Names, uint32_t> keys_;
  std::unordered_map<uint32_t, Held> held_;
};

// The decoding side's table and held state of one stream and direction.
template <typename E>
class KeyedState {
 public:
  explicit KeyedState(size_t max_keys) : max_keys_(max_keys) {}
  // Applies one message's entries (whole: they replace the state; else a delta) and writes
  // the whole state, names filled and keys cleared, to `out`. Not ok: the stream is to end.
  Status apply(const google::protobuf::RepeatedPtrField<E>& entries, bool delta,
               const google::protobuf::RepeatedField<uint32_t>& removed,
               google::protobuf::RepeatedPtrField<E>* out);
  size_t keys() const { return names_.size(); }

 private:
  // A keyed entry: checks its names, and learns those of a new key (appended to `learned`).
  Status learn(const E& e, std::vector<uint32_t>* learned);
  const size_t max_keys_;
  std::unordered_map<uint32_t, E> names_;  // key -> an entry holding its names only
  std::vector<uint32_t> order_;            // keys held, in the order they came
  std::unordered_map<uint32_t, E> held_;   // key -> its latest entry (names filled)
  std::vector<E> unkeyed_;                 // entries of the last whole message without a key
  bool whole_seen_ = false;
};

// One direction's decoder: a message of the stream -> the node's whole state as an older peer
// would have sent it (names, no keys). Msg is DemandReport or NodeCaps (the aliases below say
// what each fills in); decode() is defined for those two.
template <typename Msg, typename E>
class AllocateDecoder {
 public:
  explicit AllocateDecoder(size_t max_keys) : state_(max_keys) {}
  Result<Msg> decode(const Msg& msg);

 private:
  KeyedState<E> state_;
  Msg stream_;  // what a delta may leave out, as the stream last said it
};

// ---- DemandReport: the agent encodes, policyd decodes -----------------------------------------

class DemandEncoder {
 public:
  struct Options {
    // An entry goes into a delta when it moved by more than this fraction, or to or from zero
    // or backlogged (UINT64_MAX); a whole message carries every entry's exact value.
    double deadband = 0.01;
    int64_t refresh_ns = 1'000'000'000;  // a message at least this often (the node's heartbeat)
    int64_t full_every_ns = kAllocateFullEveryNs;
    bool compact_caps = true;  // DemandReport.compact_caps: ask policyd for compact NodeCaps
  };
  explicit DemandEncoder(Options options) : options_(options) {}

  // policyd said NodeCaps.compact_reports on this stream: deltas from the next message.
  void setPeerCompact() { peer_compact_ = true; }
  bool peerCompact() const { return peer_compact_; }

  // `whole` is the node's demand as an older agent sends it (names, no keys). Returns what to
  // write now, or nullopt when no entry moved past the deadband, the entries, addresses and
  // policy version are those last written, the refresh is not due and `force` is false (a
  // caller that paces its reports itself forces: then a message always, maybe a delta with no
  // entries). What it returns is taken as written (a new stream needs a new encoder). The
  // caller sets the sequence.
  std::optional<tenantqos::v1::DemandReport> encode(const tenantqos::v1::DemandReport& whole,
                                                    int64_t now_ns, bool force = false);

 private:
  const Options options_;
  bool peer_compact_ = false;
  bool started_ = false;
  KeyTable<tenantqos::v1::LinkDemand, std::pair<uint64_t, uint64_t>> table_;  // (tx, rx) held
  std::vector<std::string> addresses_;
  uint64_t policy_version_ = 0;
  int64_t last_ns_ = 0, last_whole_ns_ = 0;
};

// The stream's node and addresses filled in when a delta leaves them out; a message naming
// another node keeps that name (the allocator refuses it).
using DemandDecoder = AllocateDecoder<tenantqos::v1::DemandReport, tenantqos::v1::LinkDemand>;
template <>
Result<tenantqos::v1::DemandReport> DemandDecoder::decode(const tenantqos::v1::DemandReport& msg);

// ---- NodeCaps: policyd encodes, the agent decodes ---------------------------------------------

class CapsEncoder {
 public:
  explicit CapsEncoder(int64_t full_every_ns = kAllocateFullEveryNs)
      : full_every_ns_(full_every_ns) {}
  // The agent set DemandReport.compact_caps: keys and deltas from the next message.
  void setPeerCompact() { peer_compact_ = true; }
  bool peerCompact() const { return peer_compact_; }
  // What to write for `whole` (the node's every cap, with names): always a message (an
  // unchanged set still carries the round, the term and the hold's heartbeat), with
  // compact_reports set. Taken as written.
  tenantqos::v1::NodeCaps encode(const tenantqos::v1::NodeCaps& whole, int64_t now_ns);

 private:
  const int64_t full_every_ns_;
  bool peer_compact_ = false;
  bool started_ = false;
  KeyTable<tenantqos::v1::LinkCap, std::string> table_;  // held: the entry's serialised values
  std::string node_, allocator_;
  int64_t last_whole_ns_ = 0;
};

// The node and allocator filled in when a delta leaves them out.
using CapsDecoder = AllocateDecoder<tenantqos::v1::NodeCaps, tenantqos::v1::LinkCap>;
template <>
Result<tenantqos::v1::NodeCaps> CapsDecoder::decode(const tenantqos::v1::NodeCaps& msg);

}  // namespace tq::proto
