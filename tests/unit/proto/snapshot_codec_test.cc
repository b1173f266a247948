// proto/snapshot_codec.h: deflated watch snapshots, and what inflateSnapshot refuses.
#include "proto/snapshot_codec.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <string>

namespace tq::proto {
namespace {

namespace v1 = tenantqos::v1;

v1::PolicySnapshot plainSnapshot(int tenants) {
  v1::PolicySnapshot s;
  s.set_version(7);
  s.set_store_epoch("0123456789abcdef0123456789abcdef");
  s.set_applied_by("admin");
  for (int i = 0; i < tenants; ++i) {
    auto* t = s.mutable_policy()->add_tenants();
    t->set_name("tenant-" + std::to_string(i));
    t->set_link("fabric");
  }
  return s;
}

std::string zlibOf(const std::string& raw) {
  uLongf n = compressBound(static_cast<uLong>(raw.size()));
  std::string out(n, '\0');
  EXPECT_EQ(
      compress2(reinterpret_cast<Bytef*>(out.data()), &n,
                reinterpret_cast<const Bytef*>(raw.data()), static_cast<uLong>(raw.size()), 9),
      Z_OK);
  out.resize(n);
  return out;
}

v1::PolicySnapshot wrapperOf(std::string deflated, uint64_t version = 7,
                             const std::string& epoch = "0123456789abcdef0123456789abcdef") {
  v1::PolicySnapshot w;
  w.set_version(version);
  w.set_store_epoch(epoch);
  w.set_deflated(std::move(deflated));
  return w;
}

std::string refusal(const v1::PolicySnapshot& w, size_t max = kMaxInflatedSnapshotBytes) {
  auto r = inflateSnapshot(w, max);
  EXPECT_FALSE(r.ok());
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  return r.status().message();
}

TEST(SnapshotCodec, RoundTripIsSmallerAndEqual) {
  const v1::PolicySnapshot plain = plainSnapshot(1000);
  auto w = deflateSnapshot(plain);
  ASSERT_TRUE(w.ok()) << w.status().message();
  EXPECT_EQ(w->version(), 7u);
  EXPECT_EQ(w->store_epoch(), plain.store_epoch());
  EXPECT_FALSE(w->has_policy());
  EXPECT_LT(w->ByteSizeLong() * 4, plain.ByteSizeLong());
  auto back = inflateSnapshot(*w);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->SerializeAsString(), plain.SerializeAsString());
}

TEST(SnapshotCodec, PlainSnapshotsPassAndDeflatedOnesAreNotDeflatedTwice) {
  const v1::PolicySnapshot plain = plainSnapshot(3);
  auto same = inflateSnapshot(plain);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->SerializeAsString(), plain.SerializeAsString());
  auto w = deflateSnapshot(plain);
  ASSERT_TRUE(w.ok());
  EXPECT_FALSE(deflateSnapshot(*w).ok());
}

TEST(SnapshotCodec, RefusesHostileStreams) {
  const std::string raw = plainSnapshot(50).SerializeAsString();
  const std::string z = zlibOf(raw);
  EXPECT_NE(refusal(wrapperOf("garbage, not zlib")).find("not a valid zlib stream"),
            std::string::npos);
  EXPECT_NE(refusal(wrapperOf(z.substr(0, z.size() / 2))).find("truncated"), std::string::npos);
  EXPECT_NE(refusal(wrapperOf(z + "xyz")).find("3 bytes follow"), std::string::npos);
  // A bomb: 64 MiB of zeros deflate to ~64 KiB; refused at the bound while inflating.
  const std::string bomb = zlibOf(std::string(64u << 20, '\0'));
  EXPECT_LT(bomb.size(), 100u * 1024);
  EXPECT_NE(refusal(wrapperOf(bomb)).find("inflates to more than 16777216 bytes"),
            std::string::npos);
  EXPECT_NE(refusal(wrapperOf(z), raw.size() - 1).find("more than"), std::string::npos);
  auto exact = inflateSnapshot(wrapperOf(z), raw.size());
  EXPECT_TRUE(exact.ok()) << exact.status().message();
  // Bytes that inflate but are no PolicySnapshot (a field 1 of wire type 7).
  EXPECT_NE(refusal(wrapperOf(zlibOf("\x0f\x01\x02"))).find("not a tenantqos.v1.PolicySnapshot"),
            std::string::npos);
}

TEST(SnapshotCodec, RefusesDisagreementsAndNesting) {
  const v1::PolicySnapshot plain = plainSnapshot(3);
  const std::string z = zlibOf(plain.SerializeAsString());
  EXPECT_NE(refusal(wrapperOf(z, 8)).find("it holds v7"), std::string::npos);
  EXPECT_NE(refusal(wrapperOf(z, 7, "ffffffffffffffffffffffffffffffff")).find("it holds v7"),
            std::string::npos);
  v1::PolicySnapshot extra = wrapperOf(z);
  extra.set_applied_by("mallory");
  EXPECT_NE(refusal(extra).find("fields other than"), std::string::npos);
  v1::PolicySnapshot inner = plain;
  inner.set_deflated("x");
  EXPECT_NE(refusal(wrapperOf(zlibOf(inner.SerializeAsString()))).find("another deflated one"),
            std::string::npos);
}

}  // namespace
}  // namespace tq::proto
