// An in-memory stand-in for the kernel's tc, behind the TcNetlink seam, for unit tests of the
// executor without root. It keeps the rules that matter for ordering and idempotence, as the
// kernel (6.x) and libnl 3.7 behave (each one checked against the real thing in
// tests/functional/tc_executor_test.cc):
// - a root can only be created over the default root (EEXIST otherwise); deleting it removes
//   every class and filter below it;
// - create is EXCL (EEXIST), change needs the object (ENOENT);
// - a class cannot be deleted while it has children or a filter points to it (EBUSY);
// - u32 rules live in one hash table per (pref, protocol) classifier, whose id the kernel picks
//   (800, 801, ...); the same pref with another protocol is EINVAL;
// - bursts come back rounded like libnl does (bytes -> whole µs -> 1/15.625 µs ticks -> bytes).
#pragma once

#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "tc/netlink.h"

namespace tq::tc {

class FakeTcNetlink final : public TcNetlink {
 public:
  struct Classifier {
    uint32_t htid = 0;
    std::string kind = "u32";
    std::map<uint32_t, U32Filter> rules;  // node -> rule (full handle)
  };
  struct Device {
    int ifindex = 0;
    uint32_t mtu = 1500;
    QdiscInfo root;  // handle 0 = default
    std::map<uint32_t, ClassInfo> classes;
    std::map<std::pair<uint16_t, uint16_t>, Classifier> classifiers;  // (pref, protocol)
  };

  int addDevice(const std::string& name) {
    Device d;
    d.ifindex = next_ifindex_++;
    d.root = defaultRoot();
    devices_[name] = d;
    return d.ifindex;
  }
  Device& device(const std::string& name) { return devices_.at(name); }
  void setForeignRoot(const std::string& name, const std::string& kind, uint32_t handle) {
    Device& d = devices_.at(name);
    d.root = QdiscInfo{handle, kTcRoot, kind, {}};
    if (kind == "htb") d.root.htb = HtbRoot{handle, 10, 0};
    d.classes.clear();
    d.classifiers.clear();
  }
  int reads() const { return reads_; }

  static uint32_t roundBurst(uint32_t bytes, uint64_t rate) {
    if (rate == 0) return bytes;
    double us = std::floor(static_cast<double>(bytes) / static_cast<double>(rate) * 1e6);
    double ticks = std::floor(us * 15.625);
    double us2 = std::floor(ticks / 15.625);
    return static_cast<uint32_t>(us2 * static_cast<double>(rate) / 1e6);
  }

  // ---- TcNetlink ----
  Result<int> linkIndex(std::string_view name) override {
    ++reads_;
    auto it = devices_.find(std::string(name));
    if (it == devices_.end()) return notFound("no such device \"" + std::string(name) + "\"");
    return it->second.ifindex;
  }
  Result<uint32_t> linkMtu(std::string_view name) override {
    ++reads_;
    auto it = devices_.find(std::string(name));
    if (it == devices_.end()) return notFound("no such device \"" + std::string(name) + "\"");
    return it->second.mtu;
  }
  Result<std::vector<QdiscInfo>> qdiscs(int ifindex) override {
    ++reads_;
    TQ_ASSIGN_OR_RETURN(Device * d, byIndex(ifindex));
    return std::vector<QdiscInfo>{d->root};
  }
  Result<std::vector<ClassInfo>> classes(int ifindex) override {
    ++reads_;
    TQ_ASSIGN_OR_RETURN(Device * d, byIndex(ifindex));
    std::vector<ClassInfo> out;
    for (auto& [id, c] : d->classes) out.push_back(c);
    return out;
  }
  Result<std::vector<FilterInfo>> filters(int ifindex, uint32_t parent) override {
    ++reads_;
    TQ_ASSIGN_OR_RETURN(Device * d, byIndex(ifindex));
    std::vector<FilterInfo> out;
    for (auto& [key, cl] : d->classifiers) {
      FilterInfo header;
      header.parent = parent;
      header.kind = cl.kind;
      header.u32.pref = key.first;
      header.u32.protocol = key.second;
      header.u32_table = cl.kind == "u32";
      out.push_back(header);
      if (cl.kind != "u32") continue;
      FilterInfo table = header;
      table.u32.handle = cl.htid;
      out.push_back(table);
      for (auto& [node, rule] : cl.rules) {
        FilterInfo fi;
        fi.parent = parent;
        fi.kind = "u32";
        fi.u32 = rule;
        out.push_back(fi);
      }
    }
    return out;
  }

  Status createRoot(int ifindex, const HtbRoot& root) override {
    TQ_ASSIGN_OR_RETURN(Device * d, byIndex(ifindex));
    if (d->root.handle != 0) return errnoStatus(EEXIST, "fake: root exists");
    d->root = QdiscInfo{root.handle, kTcRoot, "htb", root};
    return okStatus();
  }
  Status deleteRoot(int ifindex, uint32_t handle) override {
    TQ_ASSIGN_OR_RETURN(Device * d, byIndex(ifindex));
    if (d->root.handle == 0) return errnoStatus(ENOENT, "fake: cannot delete default root");
    if (d->root.handle != handle) return errnoStatus(EINVAL, "fake: root handle mismatch");
    d->root = defaultRoot();
    d->classes.clear();
    d->classifiers.clear();
    return okStatus();
  }
  Status createClass(int ifindex, const HtbClass& cls) override {
    TQ_ASSIGN_OR_RETURN(Device * d, htbDevice(ifindex));
    if (d->classes.count(cls.classid)) return errnoStatus(EEXIST, "fake: class exists");
    if (cls.parent != d->root.handle && !d->classes.count(cls.parent))
      return errnoStatus(ENOENT, "fake: no parent");
    if (cls.rate == 0 || cls.ceil == 0) return errnoStatus(EINVAL, "fake: zero rate");
    ClassInfo ci;
    ci.kind = "htb";
    ci.htb = stored(cls);
    d->classes[cls.classid] = ci;
    return okStatus();
  }
  Status changeClass(int ifindex, const HtbClass& cls) override {
    TQ_ASSIGN_OR_RETURN(Device * d, htbDevice(ifindex));
    auto it = d->classes.find(cls.classid);
    if (it == d->classes.end()) return errnoStatus(ENOENT, "fake: no class");
    if (cls.rate == 0 || cls.ceil == 0) return errnoStatus(EINVAL, "fake: zero rate");
    uint32_t parent = it->second.htb.parent;  // HTB ignores a new parent
    it->second.htb = stored(cls);
    it->second.htb.parent = parent;
    return okStatus();
  }
  Status deleteClass(int ifindex, uint32_t classid) override {
    TQ_ASSIGN_OR_RETURN(Device * d, htbDevice(ifindex));
    if (!d->classes.count(classid)) return errnoStatus(ENOENT, "fake: no class");
    for (auto& [id, c] : d->classes)
      if (c.htb.parent == classid) return errnoStatus(EBUSY, "fake: class has children");
    for (auto& [key, cl] : d->classifiers)
      for (auto& [node, rule] : cl.rules)
        if (rule.classid == classid) return errnoStatus(EBUSY, "fake: HTB class in use");
    d->classes.erase(classid);
    return okStatus();
  }
  Status createFilter(int ifindex, uint32_t /*parent*/, const U32Filter& f) override {
    TQ_ASSIGN_OR_RETURN(Device * d, htbDevice(ifindex));
    for (auto& [key, cl] : d->classifiers)
      if (key.first == f.pref && key.second != f.protocol)
        return errnoStatus(EINVAL, "fake: pref in use by another protocol");
    auto key = std::make_pair(f.pref, f.protocol);
    auto it = d->classifiers.find(key);
    if (it == d->classifiers.end()) {
      Classifier cl;
      cl.htid = (0x800u + next_htid_++) << 20;
      it = d->classifiers.emplace(key, cl).first;
    }
    Classifier& cl = it->second;
    if (u32Htid(f.handle) != 0 && u32Htid(f.handle) != cl.htid)
      return errnoStatus(EINVAL, "fake: handle in another table");
    uint32_t node = u32Node(f.handle);
    if (node == 0) {
      node = 0x800;
      while (cl.rules.count(node)) ++node;
    }
    if (cl.rules.count(node)) return errnoStatus(EEXIST, "fake: filter exists");
    U32Filter stored_rule = f;
    stored_rule.handle = cl.htid | node;
    cl.rules[node] = stored_rule;
    return okStatus();
  }
  Status changeFilter(int ifindex, uint32_t /*parent*/, const U32Filter& f) override {
    TQ_ASSIGN_OR_RETURN(Device * d, htbDevice(ifindex));
    auto it = d->classifiers.find({f.pref, f.protocol});
    if (it == d->classifiers.end() || u32Htid(f.handle) != it->second.htid)
      return errnoStatus(ENOENT, "fake: no classifier");
    auto r = it->second.rules.find(u32Node(f.handle));
    if (r == it->second.rules.end()) return errnoStatus(ENOENT, "fake: no filter");
    r->second.classid = f.classid;  // keys stay (as the kernel does)
    return okStatus();
  }
  Status deleteFilter(int ifindex, uint32_t /*parent*/, const FilterRef& ref) override {
    TQ_ASSIGN_OR_RETURN(Device * d, htbDevice(ifindex));
    auto it = d->classifiers.find({ref.pref, ref.protocol});
    if (it == d->classifiers.end()) return errnoStatus(ENOENT, "fake: no classifier");
    if (ref.handle == 0) {
      d->classifiers.erase(it);
      return okStatus();
    }
    if (u32Htid(ref.handle) != it->second.htid || !it->second.rules.erase(u32Node(ref.handle)))
      return errnoStatus(ENOENT, "fake: no filter");
    return okStatus();
  }

  // Test helpers to plant foreign objects under our root.
  void addForeignClassifier(const std::string& dev, uint16_t pref, uint16_t protocol,
                            const std::string& kind) {
    Classifier cl;
    cl.kind = kind;
    cl.htid = (0x800u + next_htid_++) << 20;
    devices_.at(dev).classifiers[{pref, protocol}] = cl;
  }

 private:
  static QdiscInfo defaultRoot() { return QdiscInfo{0, kTcRoot, "noqueue", {}}; }

  static HtbClass stored(const HtbClass& c) {
    HtbClass s = c;
    s.burst = roundBurst(c.burst, c.rate);
    s.cburst = roundBurst(c.cburst, c.ceil);
    return s;
  }

  Result<Device*> byIndex(int ifindex) {
    for (auto& [name, d] : devices_)
      if (d.ifindex == ifindex) return &d;
    return errnoStatus(ENODEV, "fake: ifindex " + std::to_string(ifindex));
  }
  Result<Device*> htbDevice(int ifindex) {
    TQ_ASSIGN_OR_RETURN(Device * d, byIndex(ifindex));
    if (d->root.kind != "htb") return errnoStatus(EOPNOTSUPP, "fake: root is not htb");
    return d;
  }

  std::map<std::string, Device> devices_;
  int next_ifindex_ = 2;
  uint32_t next_htid_ = 0;
  int reads_ = 0;
};

}  // namespace tq::tc
