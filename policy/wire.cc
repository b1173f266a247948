#include "policy/wire.h"

#include "proto/convert.h"

namespace tq::policy {
namespace {

tenantqos::v1::TenantChange::Kind kindToProto(ChangeKind k) {
  switch (k) {
    case ChangeKind::kAdded: return tenantqos::v1::TenantChange::ADDED;
    case ChangeKind::kRemoved: return tenantqos::v1::TenantChange::REMOVED;
    case ChangeKind::kChanged: return tenantqos::v1::TenantChange::CHANGED;
    case ChangeKind::kUnchanged: return tenantqos::v1::TenantChange::UNCHANGED;
  }
  return tenantqos::v1::TenantChange::KIND_UNSPECIFIED;
}

ChangeKind kindFromProto(tenantqos::v1::TenantChange::Kind k) {
  switch (k) {
    case tenantqos::v1::TenantChange::ADDED: return ChangeKind::kAdded;
    case tenantqos::v1::TenantChange::REMOVED: return ChangeKind::kRemoved;
    case tenantqos::v1::TenantChange::CHANGED: return ChangeKind::kChanged;
    default: return ChangeKind::kUnchanged;
  }
}

template <typename Msg>
void changeToProto(const ObjectChange& c, Msg* m) {
  m->set_kind(kindToProto(c.kind));
  for (const std::string& d : c.details) m->add_details(d);
}

}  // namespace

tenantqos::v1::PolicySnapshot toSnapshot(const PolicyRecord& r, bool with_source) {
  tenantqos::v1::PolicySnapshot s;
  s.set_version(r.version);
  *s.mutable_policy() = proto::toProto(r.policy);
  if (with_source) s.set_source_yaml(r.source_yaml);
  s.set_applied_at_unix_ms(r.applied_at_unix_ms);
  s.set_applied_by(r.applied_by);
  s.set_rollback_of(r.rollback_of);
  s.set_checksum(r.checksum);
  for (const std::string& g : r.applied_by_groups) s.add_applied_by_groups(g);
  s.set_source_name(r.source_name);
  s.set_diff_summary(r.diff_summary);
  return s;
}

PolicyRecord fromSnapshot(const tenantqos::v1::PolicySnapshot& s) {
  PolicyRecord r;
  r.version = s.version();
  r.policy = proto::fromProto(s.policy());
  r.source_yaml = s.source_yaml();
  r.applied_at_unix_ms = s.applied_at_unix_ms();
  r.applied_by = s.applied_by();
  r.rollback_of = s.rollback_of();
  r.checksum = s.checksum();
  r.applied_by_groups.assign(s.applied_by_groups().begin(), s.applied_by_groups().end());
  r.source_name = s.source_name();
  r.diff_summary = s.diff_summary();
  return r;
}

tenantqos::v1::VersionInfo toVersionInfo(const VersionSummary& v) {
  tenantqos::v1::VersionInfo i;
  i.set_version(v.version);
  i.set_applied_at_unix_ms(v.applied_at_unix_ms);
  i.set_applied_by(v.applied_by);
  i.set_tenants(v.tenants);
  i.set_rollback_of(v.rollback_of);
  i.set_intact(v.intact);
  i.set_checksum(v.checksum);
  i.set_problem(v.problem);
  for (const std::string& g : v.applied_by_groups) i.add_applied_by_groups(g);
  i.set_source_name(v.source_name);
  i.set_diff_summary(v.diff_summary);
  return i;
}

VersionSummary fromVersionInfo(const tenantqos::v1::VersionInfo& i) {
  VersionSummary v;
  v.version = i.version();
  v.applied_at_unix_ms = i.applied_at_unix_ms();
  v.applied_by = i.applied_by();
  v.tenants = i.tenants();
  v.rollback_of = i.rollback_of();
  v.intact = i.intact();
  v.checksum = i.checksum();
  v.problem = i.problem();
  v.applied_by_groups.assign(i.applied_by_groups().begin(), i.applied_by_groups().end());
  v.source_name = i.source_name();
  v.diff_summary = i.diff_summary();
  return v;
}

void toProto(const PolicyDiff& diff, tenantqos::v1::ApplyPolicyResponse* out) {
  for (const ObjectChange& c : diff.tenants) {
    auto* m = out->add_diff();
    m->set_tenant(c.name);
    changeToProto(c, m);
  }
  for (const ObjectChange& c : diff.links) {
    auto* m = out->add_link_diff();
    m->set_link(c.name);
    changeToProto(c, m);
  }
  for (const ObjectChange& c : diff.shared_links) {
    auto* m = out->add_shared_link_diff();
    m->set_link(c.name);
    changeToProto(c, m);
  }
}

PolicyDiff diffFromProto(const tenantqos::v1::ApplyPolicyResponse& response) {
  PolicyDiff d;
  for (const auto& m : response.diff()) {
    d.tenants.push_back(
        {m.tenant(), kindFromProto(m.kind()), {m.details().begin(), m.details().end()}});
  }
  for (const auto& m : response.link_diff()) {
    d.links.push_back(
        {m.link(), kindFromProto(m.kind()), {m.details().begin(), m.details().end()}});
  }
  for (const auto& m : response.shared_link_diff()) {
    d.shared_links.push_back(
        {m.link(), kindFromProto(m.kind()), {m.details().begin(), m.details().end()}});
  }
  return d;
}

}  // namespace tq::policy
