#include "proto/allocate_codec.h"

#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace tq::proto {
namespace {

namespace v1 = tenantqos::v1;

constexpr int64_t kMs = 1'000'000;

v1::DemandReport demand(std::map<std::pair<std::string, std::string>, uint64_t> entries,
                        std::vector<std::string> addresses = {"10.0.0.1"}) {
  v1::DemandReport r;
  r.set_node("node-1");
  r.set_policy_version(3);
  for (const auto& [names, tx] : entries) {
    v1::LinkDemand* d = r.add_demands();
    d->set_tenant(names.first);
    d->set_link(names.second);
    d->set_transmit_bytes_per_second(tx);
    d->set_receive_bytes_per_second(tx / 2);
  }
  for (const std::string& a : addresses) r.add_addresses(a);
  return r;
}

// (tenant, link) -> tx of a decoded whole report; checks it carries no keys.
std::map<std::pair<std::string, std::string>, uint64_t> held(const v1::DemandReport& r) {
  std::map<std::pair<std::string, std::string>, uint64_t> out;
  for (const v1::LinkDemand& d : r.demands()) {
    EXPECT_EQ(d.key(), 0u);
    EXPECT_EQ(d.receive_bytes_per_second(), d.transmit_bytes_per_second() / 2);
    out[{d.tenant(), d.link()}] = d.transmit_bytes_per_second();
  }
  return out;
}

// Whether `got` holds the same entries as `want`, each within the 1 % deadband.
bool within(const std::map<std::pair<std::string, std::string>, uint64_t>& got,
            const std::map<std::pair<std::string, std::string>, uint64_t>& want) {
  if (got.size() != want.size()) return false;
  for (const auto& [names, tx] : want) {
    auto it = got.find(names);
    if (it == got.end() || demandMovedPast(it->second, tx, 0.01)) return false;
  }
  return true;
}

// `msg` is, field for field, the message `text` (protobuf text format) says: what goes on the
// wire, exactly.
template <typename M>
void expectWire(const M& msg, const std::string& text) {
  M want;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &want)) << text;
  EXPECT_EQ(msg.SerializeAsString(), want.SerializeAsString())
      << "got:  " << msg.ShortDebugString() << "\nwant: " << want.ShortDebugString();
}

TEST(DemandCodecTest, OlderPolicydGetsWholeReportsWithNames) {
  DemandEncoder enc({});
  for (int i = 0; i < 3; ++i) {
    auto msg = enc.encode(
        demand({{{"a", "leaf"}, 1000u + 100u * static_cast<uint64_t>(i)}, {{"b", "leaf"}, 5}}),
        i * 100 * kMs);
    ASSERT_TRUE(msg);
    EXPECT_FALSE(msg->delta());
    EXPECT_TRUE(msg->compact_caps());
    EXPECT_EQ(msg->node(), "node-1");
    ASSERT_EQ(msg->demands_size(), 2);
    for (const v1::LinkDemand& d : msg->demands()) EXPECT_FALSE(d.tenant().empty());
  }
}

TEST(DemandCodecTest, DeltasCarryOnlyWhatMovedAndDecodeToTheWholeState) {
  DemandEncoder enc({});
  DemandDecoder dec(1000);
  std::map<std::pair<std::string, std::string>, uint64_t> now = {
      {{"a", "leaf"}, 1000}, {{"b", "leaf"}, 2000}, {{"c", "rail-1"}, 0}};
  auto step = [&](int64_t t) -> std::optional<v1::DemandReport> {
    auto msg = enc.encode(demand(now), t);
    if (!msg) return std::nullopt;
    Result<v1::DemandReport> whole = dec.decode(*msg);
    EXPECT_TRUE(whole.ok()) << whole.status().message();
    if (whole.ok()) {
      EXPECT_EQ(whole->node(), "node-1");
      EXPECT_EQ(whole->addresses_size(), 1);
      EXPECT_TRUE(within(held(*whole), now));
    }
    return msg;
  };
  ASSERT_TRUE(step(0));  // whole, names
  enc.setPeerCompact();
  EXPECT_FALSE(step(100 * kMs));  // nothing moved, no refresh due
  now[{"a", "leaf"}] = 1005;      // within the 1 % deadband
  EXPECT_FALSE(step(200 * kMs));
  // A caller that paces itself gets a message when it asks: the deadband still applies.
  auto forced = enc.encode(demand(now), 250 * kMs, /*force=*/true);
  ASSERT_TRUE(forced);
  EXPECT_TRUE(forced->delta());
  EXPECT_EQ(forced->demands_size(), 0);
  ASSERT_TRUE(dec.decode(*forced).ok());
  now[{"b", "leaf"}] = 3000;
  auto msg = step(300 * kMs);
  ASSERT_TRUE(msg);
  EXPECT_TRUE(msg->delta());
  EXPECT_TRUE(msg->node().empty());
  EXPECT_EQ(msg->addresses_size(), 0);
  ASSERT_EQ(msg->demands_size(), 1);  // b alone, by key
  EXPECT_TRUE(msg->demands(0).tenant().empty());
  EXPECT_NE(msg->demands(0).key(), 0u);
  // A new entry comes with its names; one that left is removed by key.
  now.erase({"c", "rail-1"});
  now[{"d", "leaf"}] = 7;
  msg = step(400 * kMs);
  ASSERT_TRUE(msg);
  ASSERT_EQ(msg->demands_size(), 1);
  EXPECT_EQ(msg->demands(0).tenant(), "d");
  EXPECT_EQ(msg->removed_keys_size(), 1);
  // The refresh: a delta with the entries the deadband held back (exact values not needed).
  msg = step(1400 * kMs);
  ASSERT_TRUE(msg);
  EXPECT_TRUE(msg->delta());
  EXPECT_EQ(msg->demands_size(), 0);
  // Changed addresses: a whole message.
  auto with = enc.encode(demand(now, {"10.0.0.2"}), 1500 * kMs);
  ASSERT_TRUE(with);
  EXPECT_FALSE(with->delta());
}

TEST(DemandCodecTest, ANewOrLossyStreamConvergesToTheWholeState) {
  DemandEncoder enc({});
  enc.setPeerCompact();
  std::map<std::pair<std::string, std::string>, uint64_t> now = {{{"a", "leaf"}, 1000},
                                                                 {{"b", "leaf"}, 2000}};
  DemandDecoder early(100);
  ASSERT_TRUE(early.decode(*enc.encode(demand(now), 0)).ok());
  // A decoder that missed the first message (a new stream's peer, or a lost one) refuses
  // deltas rather than guess...
  now[{"a", "leaf"}] = 5000;
  auto delta = enc.encode(demand(now), 100 * kMs);
  ASSERT_TRUE(delta && delta->delta());
  DemandDecoder late(100);
  EXPECT_FALSE(late.decode(*delta).ok());
  // ...and one that lost a delta holds a stale value until the next whole message, which
  // comes within full_every_ns; from it, both hold the whole state.
  now[{"b", "leaf"}] = 9000;
  auto lost = enc.encode(demand(now), 200 * kMs);
  ASSERT_TRUE(lost && lost->delta());
  int64_t t = 300 * kMs;
  std::optional<v1::DemandReport> msg;
  do {
    t += 1000 * kMs;
    msg = enc.encode(demand(now), t);
    ASSERT_TRUE(msg);
  } while (msg->delta());
  EXPECT_LE(t, kAllocateFullEveryNs + 300 * kMs);
  Result<v1::DemandReport> a = early.decode(*msg);
  Result<v1::DemandReport> b = late.decode(*msg);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(held(*a), now);
  EXPECT_EQ(held(*b), now);
}

// A DemandReport entry in text format as demand() makes it (rx = tx / 2), names left out when
// `tenant` is "".
std::string demandText(uint32_t key, const std::string& tenant, const std::string& link,
                       uint64_t tx) {
  std::string t = " demands { key: " + std::to_string(key);
  if (!tenant.empty()) t += " tenant: '" + tenant + "' link: '" + link + "'";
  return t + " transmit_bytes_per_second: " + std::to_string(tx) +
         " receive_bytes_per_second: " + std::to_string(tx / 2) + " }";
}

TEST(DemandCodecTest, KeysNumberFirstUsesAndNamesGoWithAKeysFirstUseOnly) {
  DemandEncoder enc({});
  enc.setPeerCompact();
  using Now = std::map<std::pair<std::string, std::string>, uint64_t>;
  const std::string whole =
      "node: 'node-1' policy_version: 3 compact_caps: true addresses: '10.0.0.1'";
  const std::string delta = "policy_version: 3 compact_caps: true delta: true";
  Now now = {{{"a", "leaf"}, 1000}, {{"b", "leaf"}, 2000}};
  expectWire(*enc.encode(demand(now), 0),
             whole + demandText(1, "a", "leaf", 1000) + demandText(2, "b", "leaf", 2000));
  now[{"b", "leaf"}] = 3000;
  now[{"c", "rail-1"}] = 10;
  expectWire(*enc.encode(demand(now), 100 * kMs),
             delta + demandText(2, "", "", 3000) + demandText(3, "c", "rail-1", 10));
  now.erase({"a", "leaf"});
  expectWire(*enc.encode(demand(now), 200 * kMs), delta + " removed_keys: 1");
  // An entry that comes back keeps its key and names it again (the peer dropped it).
  now[{"a", "leaf"}] = 1000;
  expectWire(*enc.encode(demand(now), 300 * kMs), delta + demandText(1, "a", "leaf", 1000));
  expectWire(*enc.encode(demand(now), kAllocateFullEveryNs),
             whole + demandText(1, "a", "leaf", 1000) + demandText(2, "b", "leaf", 3000) +
                 demandText(3, "c", "rail-1", 10));
}

TEST(DemandCodecTest, GarbageKeysAreRefusedAndLeaveTheStateAsItWas) {
  DemandDecoder dec(2);
  v1::DemandReport first = demand({{{"a", "leaf"}, 1000}});
  first.mutable_demands(0)->set_key(1);
  ASSERT_TRUE(dec.decode(first).ok());
  auto refused = [&](v1::DemandReport m, const std::string& why) {
    Result<v1::DemandReport> r = dec.decode(m);
    ASSERT_FALSE(r.ok()) << why;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(why), std::string::npos) << r.status().message();
  };
  v1::DemandReport d;
  d.set_delta(true);
  d.add_demands()->set_key(9);
  refused(d, "key 9 was never named");
  d.mutable_demands(0)->set_key(1);
  d.mutable_demands(0)->set_tenant("b");
  d.mutable_demands(0)->set_link("leaf");
  refused(d, "a key is never rebound");
  d.clear_demands();
  d.add_removed_keys(4);
  refused(d, "key 4 removed but not held");
  d.clear_removed_keys();
  d.add_demands()->set_transmit_bytes_per_second(5);
  refused(d, "without a key in a delta");
  d.clear_demands();
  d.add_demands()->set_key(2);
  d.mutable_demands(0)->set_tenant(std::string(300, 't'));
  d.mutable_demands(0)->set_link("leaf");
  refused(d, "1-253 bytes");
  d.mutable_demands(0)->set_tenant("b");
  v1::LinkDemand* third = d.add_demands();
  third->set_key(3);
  third->set_tenant("c");
  third->set_link("leaf");
  refused(d, "more than 2 keys");
  // Key 2's names came in a refused message: not learned.
  d.clear_demands();
  d.add_demands()->set_key(2);
  refused(d, "key 2 was never named");
  // None of it changed what the decoder holds.
  v1::DemandReport refresh;
  refresh.set_delta(true);
  Result<v1::DemandReport> r = dec.decode(refresh);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->node(), "node-1");
  EXPECT_EQ(held(*r),
            (std::map<std::pair<std::string, std::string>, uint64_t>{{{"a", "leaf"}, 1000}}));
}

TEST(DemandCodecTest, AnOlderAgentsReportsDecodeAsThemselves) {
  DemandDecoder dec(100);
  v1::DemandReport r = demand({{{"a", "leaf"}, 1000}, {{"b", "leaf"}, 2000}});
  r.set_sequence(4);
  Result<v1::DemandReport> whole = dec.decode(r);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->SerializeAsString(), r.SerializeAsString());
}

v1::NodeCaps caps(std::map<std::string, uint64_t> tenants, int64_t round) {
  v1::NodeCaps c;
  c.set_node("node-1");
  c.set_term(2);
  c.set_round(static_cast<uint64_t>(round));
  c.set_computed_at_unix_ms(round * 100);
  c.set_allocator("policyd-0:7400");
  for (const auto& [t, cap] : tenants) {
    v1::LinkCap* e = c.add_caps();
    e->set_tenant(t);
    e->set_link("leaf");
    e->set_group("leaf-1");
    e->set_transmit_cap_bytes_per_second(cap);
    e->set_receive_cap_bytes_per_second(cap + 1);
    e->set_tenant_nodes(2);
    e->set_link_pairs(4);
  }
  return c;
}

TEST(CapsCodecTest, AnOlderAgentGetsWholeMessages) {
  CapsEncoder enc;
  const v1::NodeCaps whole = caps({{"a", 10}, {"b", 20}}, 1);
  v1::NodeCaps msg = enc.encode(whole, 0);
  EXPECT_TRUE(msg.compact_reports());
  msg.clear_compact_reports();
  EXPECT_EQ(msg.SerializeAsString(), whole.SerializeAsString());
  msg = enc.encode(whole, 100 * kMs);  // unchanged: still whole
  EXPECT_EQ(msg.caps_size(), 2);
}

TEST(CapsCodecTest, DeltasCarryWhatChangedAndDecodeToTheWholeCaps) {
  CapsEncoder enc;
  enc.setPeerCompact();
  CapsDecoder dec(100);
  auto step = [&](const v1::NodeCaps& whole) {
    v1::NodeCaps msg = enc.encode(whole, whole.computed_at_unix_ms() * kMs);
    Result<v1::NodeCaps> got = dec.decode(msg);
    EXPECT_TRUE(got.ok()) << got.status().message();
    if (got.ok()) {
      v1::NodeCaps expect = whole;
      expect.set_compact_reports(true);
      EXPECT_EQ(got->SerializeAsString(), expect.SerializeAsString());
    }
    return msg;
  };
  v1::NodeCaps m = step(caps({{"a", 10}, {"b", 20}}, 1));
  EXPECT_FALSE(m.delta());
  m = step(caps({{"a", 10}, {"b", 25}}, 2));
  EXPECT_TRUE(m.delta());
  EXPECT_TRUE(m.node().empty());
  EXPECT_TRUE(m.allocator().empty());
  ASSERT_EQ(m.caps_size(), 1);
  EXPECT_TRUE(m.caps(0).tenant().empty());
  m = step(caps({{"a", 10}, {"b", 25}}, 3));  // the heartbeat: the round, no entries
  EXPECT_EQ(m.caps_size(), 0);
  EXPECT_EQ(m.round(), 3u);
  m = step(caps({{"b", 25}, {"c", 1}}, 4));
  EXPECT_EQ(m.removed_keys_size(), 1);
  ASSERT_EQ(m.caps_size(), 1);
  EXPECT_EQ(m.caps(0).tenant(), "c");
  m = step(caps({{"b", 25}, {"c", 1}}, 4 + kAllocateFullEveryNs / kMs / 100));
  EXPECT_FALSE(m.delta());
  EXPECT_EQ(m.caps_size(), 2);
  // Garbage from a broken peer is refused.
  v1::NodeCaps bad;
  bad.set_delta(true);
  bad.add_caps()->set_key(77);
  EXPECT_FALSE(dec.decode(bad).ok());
}

// A NodeCaps entry in text format as caps() makes it (link leaf, rx = tx + 1), names left out
// when `tenant` is "".
std::string capText(uint32_t key, const std::string& tenant, const std::string& group,
                    uint64_t cap) {
  std::string t = " caps { key: " + std::to_string(key);
  if (!tenant.empty()) t += " tenant: '" + tenant + "' link: 'leaf' group: '" + group + "'";
  return t + " transmit_cap_bytes_per_second: " + std::to_string(cap) +
         " receive_cap_bytes_per_second: " + std::to_string(cap + 1) +
         " tenant_nodes: 2 link_pairs: 4 }";
}

TEST(CapsCodecTest, KeysNumberFirstUsesAndNamesGoWithAKeysFirstUseOnly) {
  CapsEncoder enc;
  enc.setPeerCompact();
  expectWire(enc.encode(caps({{"a", 10}, {"b", 20}}, 1), 0),
             "node: 'node-1' term: 2 round: 1 computed_at_unix_ms: 100 allocator: 'policyd-0:7400' "
             "compact_reports: true" +
                 capText(1, "a", "leaf-1", 10) + capText(2, "b", "leaf-1", 20));
  // The node is the stream's, left out; the allocator moved, so it is there.
  v1::NodeCaps moved = caps({{"b", 25}, {"c", 1}}, 2);
  moved.set_allocator("policyd-1:7400");
  expectWire(enc.encode(moved, 100 * kMs),
             "term: 2 round: 2 computed_at_unix_ms: 200 allocator: 'policyd-1:7400' "
             "compact_reports: true delta: true removed_keys: 1" +
                 capText(2, "", "", 25) + capText(3, "c", "leaf-1", 1));
  // Another group of the same (tenant, link) is another entry: a key of its own.
  v1::NodeCaps regrouped = moved;
  regrouped.set_round(3);
  regrouped.mutable_caps(1)->set_group("leaf-2");
  expectWire(enc.encode(regrouped, 200 * kMs),
             "term: 2 round: 3 computed_at_unix_ms: 200 compact_reports: true delta: true "
             "removed_keys: 3" +
                 capText(4, "c", "leaf-2", 1));
}

TEST(CapsCodecTest, GarbageKeysAreRefusedAndLeaveTheCapsAsTheyWere) {
  CapsDecoder dec(2);
  v1::NodeCaps first = caps({{"a", 10}}, 1);
  first.mutable_caps(0)->set_key(1);
  ASSERT_TRUE(dec.decode(first).ok());
  // Deltas whose entries name key 1 or a new key with these (tenant, group) names (link leaf).
  struct Garbage {
    std::vector<std::pair<uint32_t, std::pair<std::string, std::string>>> entries;
    std::string why;
  };
  const std::vector<Garbage> garbage = {
      {{{1, {"a", "leaf-2"}}},
       "key 1 was (a, leaf, leaf-1) on this stream, now (a, leaf, "
       "leaf-2): a key is never rebound"},
      {{{1, {"a", ""}}}, "key 1 names (a, leaf, ): every name must be 1-253 bytes"},
      {{{2, {"b", std::string(254, 'g')}}}, "every name must be 1-253 bytes"},
      {{{2, {"b", "leaf-1"}}, {3, {"c", "leaf-1"}}}, "key 3: more than 2 keys on one stream"},
  };
  for (const Garbage& g : garbage) {
    v1::NodeCaps d;
    d.set_delta(true);
    d.set_round(2);
    for (const auto& [key, names] : g.entries) {
      v1::LinkCap* e = d.add_caps();
      e->set_key(key);
      e->set_tenant(names.first);
      e->set_link("leaf");
      e->set_group(names.second);
    }
    const Status st = dec.decode(d).status();
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << g.why;
    EXPECT_EQ(st.message().find("NodeCaps round 2: "), 0u) << st.message();
    EXPECT_NE(st.message().find(g.why), std::string::npos) << st.message();
  }
  // None of it changed the caps held (a heartbeat decodes to them).
  v1::NodeCaps heartbeat;
  heartbeat.set_delta(true);
  heartbeat.set_round(3);
  Result<v1::NodeCaps> r = dec.decode(heartbeat);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->caps_size(), 1);
  EXPECT_EQ(r->caps(0).key(), 0u);
  EXPECT_EQ(r->caps(0).tenant(), "a");
  EXPECT_EQ(r->caps(0).group(), "leaf-1");
  EXPECT_EQ(r->caps(0).transmit_cap_bytes_per_second(), 10u);
  EXPECT_EQ(r->node(), "node-1");
  EXPECT_EQ(r->allocator(), "policyd-0:7400");
}

}  // namespace
}  // namespace tq::proto
