// A TcNetlink decorator for tests: passes everything to an inner implementation (the real
// libnl one or the in-memory fake), records every WRITE, and can fail a chosen write.
//
// Injected failures happen before the inner write, so the kernel never sees the failed request
// (like a kernel refusal). Thread-compatible.
#pragma once

#include <string>
#include <vector>

#include "tc/netlink.h"

namespace tq::testing {

class RecordingTcNetlink final : public tc::TcNetlink {
 public:
  explicit RecordingTcNetlink(tc::TcNetlink& inner) : inner_(inner) {}

  // The `nth` write from now (1-based) fails with `error`; with `persistent`, so does every
  // later write (to exercise a failing rollback).
  void failWrite(int nth, Status error, bool persistent = false) {
    fail_at_ = writes_ + nth;
    error_ = std::move(error);
    persistent_ = persistent;
  }
  void clearFailure() { fail_at_ = 0; }

  int writes() const { return writes_; }
  // One line per attempted write: "create class 1:2b", "delete filter pref 1 handle 800::10a"...
  const std::vector<std::string>& log() const { return log_; }
  void resetLog() {
    log_.clear();
    writes_ = 0;
    fail_at_ = 0;
  }
  int countPrefix(std::string_view prefix) const {
    int n = 0;
    for (const std::string& l : log_) n += l.rfind(prefix, 0) == 0;
    return n;
  }

  Result<int> linkIndex(std::string_view device) override { return inner_.linkIndex(device); }
  Result<uint32_t> linkMtu(std::string_view device) override { return inner_.linkMtu(device); }
  Result<std::vector<tc::QdiscInfo>> qdiscs(int ifindex) override { return inner_.qdiscs(ifindex); }
  Result<std::vector<tc::ClassInfo>> classes(int ifindex) override {
    return inner_.classes(ifindex);
  }
  Result<std::vector<tc::FilterInfo>> filters(int ifindex, uint32_t parent) override {
    return inner_.filters(ifindex, parent);
  }

  Status createRoot(int ifindex, const tc::HtbRoot& root) override {
    TQ_RETURN_IF_ERROR(record("create root " + tc::formatHandle(root.handle)));
    return inner_.createRoot(ifindex, root);
  }
  Status deleteRoot(int ifindex, uint32_t handle) override {
    TQ_RETURN_IF_ERROR(record("delete root " + tc::formatHandle(handle)));
    return inner_.deleteRoot(ifindex, handle);
  }
  Status createClass(int ifindex, const tc::HtbClass& cls) override {
    TQ_RETURN_IF_ERROR(record("create class " + tc::formatHandle(cls.classid)));
    return inner_.createClass(ifindex, cls);
  }
  Status changeClass(int ifindex, const tc::HtbClass& cls) override {
    TQ_RETURN_IF_ERROR(record("change class " + tc::formatHandle(cls.classid)));
    return inner_.changeClass(ifindex, cls);
  }
  Status deleteClass(int ifindex, uint32_t classid) override {
    TQ_RETURN_IF_ERROR(record("delete class " + tc::formatHandle(classid)));
    return inner_.deleteClass(ifindex, classid);
  }
  Status createFilter(int ifindex, uint32_t parent, const tc::U32Filter& f) override {
    TQ_RETURN_IF_ERROR(record("create filter pref " + std::to_string(f.pref) + " handle " +
                              tc::formatU32Handle(f.handle)));
    return inner_.createFilter(ifindex, parent, f);
  }
  Status changeFilter(int ifindex, uint32_t parent, const tc::U32Filter& f) override {
    TQ_RETURN_IF_ERROR(record("change filter pref " + std::to_string(f.pref) + " handle " +
                              tc::formatU32Handle(f.handle)));
    return inner_.changeFilter(ifindex, parent, f);
  }
  Status deleteFilter(int ifindex, uint32_t parent, const tc::FilterRef& ref) override {
    TQ_RETURN_IF_ERROR(record("delete filter pref " + std::to_string(ref.pref) + " handle " +
                              tc::formatU32Handle(ref.handle)));
    return inner_.deleteFilter(ifindex, parent, ref);
  }

 private:
  Status record(std::string what) {
    ++writes_;
    log_.push_back(std::move(what));
    if (fail_at_ != 0 && (writes_ == fail_at_ || (persistent_ && writes_ > fail_at_)))
      return error_;
    return okStatus();
  }

  tc::TcNetlink& inner_;
  int writes_ = 0;
  int fail_at_ = 0;
  bool persistent_ = false;
  Status error_;
  std::vector<std::string> log_;
};

}  // namespace tq::testing
