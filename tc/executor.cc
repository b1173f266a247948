#include "tc/executor.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "common/log.h"

namespace tq::tc {
namespace {

std::string protocolName(uint16_t protocol) {
  if (protocol == kEthPIp) return "ip";
  if (protocol == kEthPIpv6) return "ipv6";
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%04x", protocol);
  return buf;
}

bool isOurClassifier(uint16_t pref, uint16_t protocol) {
  return (pref == kIpv4FilterPref && protocol == kEthPIp) ||
         (pref == kIpv6FilterPref && protocol == kEthPIpv6);
}

bool classEquivalent(const HtbClass& want, const HtbClass& have) {
  return want.classid == have.classid && want.parent == have.parent && want.rate == have.rate &&
         want.ceil == have.ceil && want.quantum == have.quantum && want.prio == have.prio &&
         burstEquivalent(want.burst, have.burst, want.rate) &&
         burstEquivalent(want.cburst, have.cburst, want.ceil);
}

TcOp op(TcOp::Kind kind, std::string label = {}) {
  TcOp o;
  o.kind = kind;
  o.label = std::move(label);
  return o;
}

// Everything needed to build the plan from nothing, after an optional delete of the old root.
void appendFullBuild(const DevicePlan& plan, std::vector<TcOp>* ops) {
  TcOp root = op(TcOp::Kind::kCreateRoot, "tenantqos");
  root.root = plan.root;
  ops->push_back(std::move(root));
  for (const PlannedClass& c : plan.classes) {
    TcOp o = op(TcOp::Kind::kCreateClass, c.label);
    o.cls = c.htb;
    ops->push_back(std::move(o));
  }
  for (const PlannedFilter& f : plan.filters) {
    TcOp o = op(TcOp::Kind::kCreateFilter, f.label);
    o.filter = f.u32;
    ops->push_back(std::move(o));
  }
}

// Depth of a class below the root qdisc (top class = 1), following parents within `byId`.
int classDepth(uint32_t classid, const std::map<uint32_t, const ClassInfo*>& by_id) {
  int depth = 0;
  for (uint32_t id = classid; depth < 64;) {
    auto it = by_id.find(id);
    if (it == by_id.end()) break;
    ++depth;
    id = it->second->htb.parent;
  }
  return depth;
}

}  // namespace

std::string_view rootOwnerName(RootOwner owner) {
  switch (owner) {
    case RootOwner::kKernelDefault: return "kernel default";
    case RootOwner::kOurs: return "tenantqos";
    case RootOwner::kForeign: return "foreign";
  }
  return "?";
}

const ClassInfo* DeviceState::findClass(uint32_t classid) const {
  for (const ClassInfo& c : classes)
    if (c.htb.classid == classid) return &c;
  return nullptr;
}

std::string ApplyReport::toString() const {
  char buf[160];
  std::snprintf(buf, sizeof buf, "qdisc +%d/-%d class +%d/~%d/-%d filter +%d/~%d/-%d%s",
                qdisc_creates, qdisc_deletes, class_creates, class_changes, class_deletes,
                filter_creates, filter_changes, filter_deletes, rebuilt ? " (rebuilt)" : "");
  return buf;
}

std::string TcOp::describe() const {
  std::string s;
  switch (kind) {
    case Kind::kCreateRoot: s = "create qdisc htb " + formatHandle(root.handle) + " root"; break;
    case Kind::kDeleteRoot: s = "delete root qdisc " + formatHandle(handle); break;
    case Kind::kCreateClass: s = "create class " + formatHandle(cls.classid); break;
    case Kind::kChangeClass: s = "change class " + formatHandle(cls.classid); break;
    case Kind::kDeleteClass: s = "delete class " + formatHandle(handle); break;
    case Kind::kCreateFilter:
    case Kind::kChangeFilter:
      s = std::string(kind == Kind::kCreateFilter ? "create" : "change") + " filter " +
          protocolName(filter.protocol) + " pref " + std::to_string(filter.pref) + " handle " +
          formatU32Handle(filter.handle) + " flowid " + formatHandle(filter.classid);
      break;
    case Kind::kDeleteFilter:
      s = "delete filter " + protocolName(filter_ref.protocol) + " pref " +
          std::to_string(filter_ref.pref) + " " + filter_ref.kind +
          (filter_ref.handle ? " handle " + formatU32Handle(filter_ref.handle)
                             : " (whole classifier)");
      break;
  }
  if (!label.empty()) s += " (" + label + ")";
  return s;
}

namespace {

// What diffDevice writes for the classes of a device whose root it keeps.
struct ClassDiff {
  std::vector<TcOp> writes;   // creates and changes
  std::vector<TcOp> deletes;  // classes not in the plan, children before parents
};

// nullopt when only a rebuild reaches the plan: HTB cannot move a class to another parent,
// and a class that is not HTB cannot be changed into one.
std::optional<ClassDiff> diffClasses(const DevicePlan& plan, const DeviceState& actual) {
  ClassDiff d;
  std::map<uint32_t, const ClassInfo*> have;
  for (const ClassInfo& c : actual.classes) have[c.htb.classid] = &c;
  std::set<uint32_t> wanted;
  for (const PlannedClass& c : plan.classes) {
    wanted.insert(c.htb.classid);
    auto it = have.find(c.htb.classid);
    if (it == have.end()) {
      TcOp o = op(TcOp::Kind::kCreateClass, c.label);
      o.cls = c.htb;
      d.writes.push_back(std::move(o));
    } else if (it->second->kind != "htb" || it->second->htb.parent != c.htb.parent) {
      return std::nullopt;
    } else if (!classEquivalent(c.htb, it->second->htb)) {
      TcOp o = op(TcOp::Kind::kChangeClass, c.label);
      o.cls = c.htb;
      d.writes.push_back(std::move(o));
    }
  }
  std::vector<const ClassInfo*> extra;
  for (const ClassInfo& c : actual.classes)
    if (!wanted.count(c.htb.classid)) extra.push_back(&c);
  // Children before parents.
  std::stable_sort(extra.begin(), extra.end(), [&](const ClassInfo* a, const ClassInfo* b) {
    return classDepth(a->htb.classid, have) > classDepth(b->htb.classid, have);
  });
  for (const ClassInfo* c : extra) {
    TcOp o = op(TcOp::Kind::kDeleteClass, "not in plan");
    o.handle = c->htb.classid;
    d.deletes.push_back(std::move(o));
  }
  return d;
}

// What diffDevice writes for the filters: deletes (foreign classifiers, rules not in the
// plan or with other keys) run before writes (changed targets, new rules).
struct FilterDiff {
  std::vector<TcOp> deletes;
  std::vector<TcOp> writes;
};

FilterDiff diffFilters(const DevicePlan& plan, const DeviceState& actual) {
  FilterDiff d;
  using FilterKey = std::tuple<uint16_t, uint16_t, uint32_t>;  // pref, protocol, node
  std::map<FilterKey, const PlannedFilter*> want_filters;
  for (const PlannedFilter& f : plan.filters)
    want_filters[{f.u32.pref, f.u32.protocol, u32Node(f.u32.handle)}] = &f;
  std::set<FilterKey> present;
  std::set<std::tuple<uint16_t, uint16_t, std::string>> foreign_classifiers;
  for (const FilterInfo& f : actual.filters) {
    if (f.kind != "u32" || !isOurClassifier(f.u32.pref, f.u32.protocol)) {
      if (foreign_classifiers.insert({f.u32.pref, f.u32.protocol, f.kind}).second) {
        TcOp o = op(TcOp::Kind::kDeleteFilter, "not in plan");
        o.filter_ref = FilterRef{f.u32.pref, f.u32.protocol, f.kind, 0};
        d.deletes.push_back(std::move(o));
      }
      continue;
    }
    if (f.u32_table) continue;  // the classifier's own hash table
    FilterKey key{f.u32.pref, f.u32.protocol, u32Node(f.u32.handle)};
    auto it = want_filters.find(key);
    TcOp del = op(TcOp::Kind::kDeleteFilter, "not in plan");
    del.filter_ref = FilterRef{f.u32.pref, f.u32.protocol, "u32", f.u32.handle};
    if (it == want_filters.end() || present.count(key)) {
      d.deletes.push_back(std::move(del));
      continue;
    }
    const U32Filter& want = it->second->u32;
    if (f.u32.keys != want.keys) {
      // The kernel keeps a u32 rule's keys on change: replace the rule.
      del.label = it->second->label;
      d.deletes.push_back(std::move(del));
      continue;
    }
    present.insert(key);
    if (f.u32.classid != want.classid) {
      TcOp o = op(TcOp::Kind::kChangeFilter, it->second->label);
      o.filter = want;
      o.filter.handle = f.u32.handle;  // full handle: the rule in its table
      d.writes.push_back(std::move(o));
    }
  }
  for (const PlannedFilter& f : plan.filters) {
    if (present.count({f.u32.pref, f.u32.protocol, u32Node(f.u32.handle)})) continue;
    TcOp o = op(TcOp::Kind::kCreateFilter, f.label);
    o.filter = f.u32;
    d.writes.push_back(std::move(o));
  }
  return d;
}

}  // namespace

Result<std::vector<TcOp>> diffDevice(const DevicePlan& plan, const DeviceState& actual,
                                     const ApplyOptions& options) {
  std::vector<TcOp> ops;
  auto rebuild = [&](bool delete_first) {
    ops.clear();
    if (delete_first) {
      TcOp d = op(TcOp::Kind::kDeleteRoot, actual.root.kind);
      d.handle = actual.root.handle;
      ops.push_back(std::move(d));
    }
    appendFullBuild(plan, &ops);
    return ops;
  };

  switch (actual.owner) {
    case RootOwner::kKernelDefault: return rebuild(false);
    case RootOwner::kForeign:
      if (!options.replace_foreign_root)
        return failedPrecondition("root qdisc " + actual.root.kind + " " +
                                  formatHandle(actual.root.handle) +
                                  " was not created by tenantqos; refusing to replace it "
                                  "(allow with replace_foreign_root)");
      return rebuild(true);
    case RootOwner::kOurs: break;
  }
  if (!(actual.root.htb == plan.root)) return rebuild(true);  // HTB has no qdisc change
  std::optional<ClassDiff> classes = diffClasses(plan, actual);
  if (!classes) return rebuild(true);
  FilterDiff filters = diffFilters(plan, actual);
  // Order: class writes (a filter may target a new class), filter deletes, filter writes,
  // class deletes (no filter points at a deleted class any more).
  for (auto* part : {&classes->writes, &filters.deletes, &filters.writes, &classes->deletes}) {
    for (TcOp& o : *part) ops.push_back(std::move(o));
  }
  return ops;
}

DevicePlan planFromState(const DeviceState& state) {
  DevicePlan plan;
  plan.device = state.device;
  plan.root = state.root.htb;
  std::map<uint32_t, const ClassInfo*> by_id;
  for (const ClassInfo& c : state.classes) by_id[c.htb.classid] = &c;
  std::vector<const ClassInfo*> ordered;
  for (const ClassInfo& c : state.classes)
    if (c.kind == "htb") ordered.push_back(&c);
  // Parents before children.
  std::stable_sort(ordered.begin(), ordered.end(), [&](const ClassInfo* a, const ClassInfo* b) {
    return classDepth(a->htb.classid, by_id) < classDepth(b->htb.classid, by_id);
  });
  for (const ClassInfo* c : ordered) plan.classes.push_back({c->htb, "previous"});
  for (const FilterInfo& f : state.filters) {
    if (f.kind != "u32" || f.u32_table || !isOurClassifier(f.u32.pref, f.u32.protocol)) continue;
    PlannedFilter pf{f.u32, "previous"};
    pf.u32.handle = u32Node(f.u32.handle);
    plan.filters.push_back(std::move(pf));
  }
  return plan;
}

Result<DeviceState> Executor::read(std::string_view device) {
  TQ_ASSIGN_OR_RETURN(int ifindex, nl_.linkIndex(device));
  return readIndex(device, ifindex);
}

Result<DeviceState> Executor::readIndex(std::string_view device, int ifindex) {
  const std::string where = "read tc state of dev " + std::string(device);
  DeviceState st;
  st.device = std::string(device);
  st.ifindex = ifindex;
  auto qdiscs = nl_.qdiscs(ifindex);
  if (!qdiscs.ok()) return qdiscs.status().withContext(where);
  bool found = false;
  for (QdiscInfo& q : *qdiscs) {
    if (q.parent != kTcRoot) continue;
    st.root = std::move(q);
    found = true;
    break;
  }
  if (!found || st.root.handle == 0) {
    st.owner = RootOwner::kKernelDefault;
    return st;
  }
  if (st.root.kind != "htb" || st.root.handle != kRootHandle || st.root.htb.r2q != kOwnerR2q) {
    st.owner = RootOwner::kForeign;
    return st;
  }
  st.owner = RootOwner::kOurs;
  auto classes = nl_.classes(ifindex);
  if (!classes.ok()) return classes.status().withContext(where);
  for (ClassInfo& c : *classes)
    if (handleMajor(c.htb.classid) == kRootMajor) st.classes.push_back(std::move(c));
  std::sort(st.classes.begin(), st.classes.end(),
            [](const ClassInfo& a, const ClassInfo& b) { return a.htb.classid < b.htb.classid; });
  auto filters = nl_.filters(ifindex, kRootHandle);
  if (!filters.ok()) return filters.status().withContext(where);
  st.filters = std::move(*filters);
  return st;
}

Status Executor::execute(const DeviceState& where, const std::vector<TcOp>& ops,
                         ApplyReport* report) {
  const int ifindex = where.ifindex;
  for (const TcOp& o : ops) {
    Status st;
    switch (o.kind) {
      case TcOp::Kind::kCreateRoot:
        st = nl_.createRoot(ifindex, o.root);
        if (st.ok()) ++report->qdisc_creates, report->rebuilt = true;
        break;
      case TcOp::Kind::kDeleteRoot:
        st = nl_.deleteRoot(ifindex, o.handle);
        if (st.ok()) ++report->qdisc_deletes;
        break;
      case TcOp::Kind::kCreateClass:
        st = nl_.createClass(ifindex, o.cls);
        if (st.ok()) ++report->class_creates;
        break;
      case TcOp::Kind::kChangeClass:
        st = nl_.changeClass(ifindex, o.cls);
        if (st.ok()) ++report->class_changes;
        break;
      case TcOp::Kind::kDeleteClass:
        st = nl_.deleteClass(ifindex, o.handle);
        if (st.ok()) ++report->class_deletes;
        break;
      case TcOp::Kind::kCreateFilter:
        st = nl_.createFilter(ifindex, kRootHandle, o.filter);
        if (st.ok()) ++report->filter_creates;
        break;
      case TcOp::Kind::kChangeFilter:
        st = nl_.changeFilter(ifindex, kRootHandle, o.filter);
        if (st.ok()) ++report->filter_changes;
        break;
      case TcOp::Kind::kDeleteFilter:
        st = nl_.deleteFilter(ifindex, kRootHandle, o.filter_ref);
        if (st.ok()) ++report->filter_deletes;
        break;
    }
    if (!st.ok()) return st.withContext(o.describe() + " on dev " + where.device);
  }
  return okStatus();
}

Result<ApplyReport> Executor::apply(const DevicePlan& plan, const ApplyOptions& options) {
  const std::string where = "apply plan on dev " + plan.device;
  auto ifindex = nl_.linkIndex(plan.device);
  if (!ifindex.ok()) return ifindex.status().withContext(where);
  auto before = readIndex(plan.device, *ifindex);
  if (!before.ok()) return before.status().withContext(where);
  auto ops = diffDevice(plan, *before, options);
  if (!ops.ok()) return ops.status().withContext(where);
  ApplyReport report;
  if (ops->empty()) return report;
  Status st = execute(*before, *ops, &report);
  if (st.ok()) {
    TQ_LOG(kDebug, "dev %s: applied %s", plan.device.c_str(), report.toString().c_str());
    return report;
  }
  TQ_LOG(kWarn, "%s failed after %d writes: %s; restoring the previous tree", where.c_str(),
         report.writes(), st.message().c_str());
  Status restored = restore(*before);
  std::string m = st.message();
  if (restored.ok()) {
    m += "; rolled back";
  } else {
    m += "; rollback failed: " + restored.message();
  }
  return Status(st.code(), m).withContext(where);
}

Status Executor::restore(const DeviceState& before) {
  auto now = readIndex(before.device, before.ifindex);
  if (!now.ok()) return now.status();
  ApplyReport ignored;
  if (before.owner != RootOwner::kOurs) {
    // There was no tree of ours: remove what the failed apply built.
    if (now->owner == RootOwner::kOurs) {
      TcOp d = op(TcOp::Kind::kDeleteRoot);
      d.handle = now->root.handle;
      TQ_RETURN_IF_ERROR(execute(*now, {d}, &ignored));
    }
    if (before.owner == RootOwner::kForeign && now->owner != RootOwner::kForeign)
      return failedPrecondition("the previous root qdisc " + before.root.kind + " " +
                                formatHandle(before.root.handle) +
                                " was not created by tenantqos and cannot be recreated; dev " +
                                before.device + " is left with the kernel default root");
    return okStatus();
  }
  const DevicePlan previous = planFromState(before);
  auto ops = diffDevice(previous, *now, ApplyOptions{.replace_foreign_root = false});
  Status st = ops.ok() ? execute(*now, *ops, &ignored) : ops.status();
  if (st.ok()) return st;
  TQ_LOG(kWarn, "dev %s: reconciling back failed (%s); rebuilding the previous tree",
         before.device.c_str(), st.message().c_str());
  // Last resort: rebuild from nothing.
  now = readIndex(before.device, before.ifindex);
  if (!now.ok()) return now.status();
  std::vector<TcOp> rebuild;
  if (now->owner == RootOwner::kOurs || now->owner == RootOwner::kForeign) {
    TcOp d = op(TcOp::Kind::kDeleteRoot);
    d.handle = now->root.handle;
    rebuild.push_back(std::move(d));
  }
  appendFullBuild(previous, &rebuild);
  return execute(*now, rebuild, &ignored);
}

Status Executor::removeAll(std::string_view device) {
  auto ifindex = nl_.linkIndex(device);
  if (!ifindex.ok()) {
    if (ifindex.status().code() == StatusCode::kNotFound) return okStatus();
    return ifindex.status();
  }
  TQ_ASSIGN_OR_RETURN(DeviceState st, readIndex(device, *ifindex));
  if (st.owner != RootOwner::kOurs) return okStatus();
  TcOp d = op(TcOp::Kind::kDeleteRoot);
  d.handle = st.root.handle;
  ApplyReport ignored;
  return execute(st, {d}, &ignored);
}

}  // namespace tq::tc
