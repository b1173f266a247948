// An in-process PolicyService on a loopback port (real gRPC), and the polling helpers the
// tests of policyd's clients share: the rpc/ follower's, the agent's watch and usage reporter.
// Test-only.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/policy.h"
#include "common/thread_annotations.h"
#include "common/worker.h"
#include "proto/convert.h"
#include "tenantqos/v1/policy.grpc.pb.h"

namespace tq::testing {

namespace v1 = tenantqos::v1;

inline constexpr char kEpochA[] = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
inline constexpr char kEpochB[] = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

class FakePolicyService final : public v1::PolicyService::Service {
 public:
  grpc::Status WatchPolicy(grpc::ServerContext* ctx, const v1::WatchPolicyRequest* req,
                           grpc::ServerWriter<v1::PolicySnapshot>* writer) override {
    MutexLock lock(mu_);
    watch_requests.push_back(*req);
    size_t next = 0;
    // Like policyd: send the latest at once if newer than known, then every later version; all
    // of them to a watcher of another store, or when told to offer older versions.
    const bool other_store = !req->known_store_epoch().empty() && req->known_store_epoch() != epoch;
    while (!other_store && !offer_older && next < snapshots_.size() &&
           snapshots_[next].version() <= req->known_version()) {
      ++next;
    }
    while (!ctx->IsCancelled() && !closed_) {
      if (next < snapshots_.size()) {
        v1::PolicySnapshot s = snapshots_[next++];
        lock.unlock();
        writer->Write(s);
        lock.lock();
        continue;
      }
      cv_.wait_for(lock.native(), std::chrono::milliseconds(10));
    }
    return grpc::Status::CANCELLED;
  }
  grpc::Status ReportUsage(grpc::ServerContext*, const v1::ReportUsageRequest* req,
                           v1::ReportUsageResponse*) override {
    MutexLock lock(mu_);
    reports.push_back(*req);
    return grpc::Status::OK;
  }
  void publish(const VersionedPolicy& p) { publishRaw(snapshotOf(p)); }
  // Publishes `s` as it is (a deflated or a hostile snapshot).
  void publishRaw(v1::PolicySnapshot s) {
    MutexLock lock(mu_);
    snapshots_.push_back(std::move(s));
    cv_.notify_all();
  }
  // What publish(p) sends.
  v1::PolicySnapshot snapshotOf(const VersionedPolicy& p) const {
    v1::PolicySnapshot s;
    s.set_version(p.version);
    s.set_store_epoch(epoch);
    *s.mutable_policy() = proto::toProto(p.policy);
    return s;
  }
  void closeStreams() {
    MutexLock lock(mu_);
    closed_ = true;
  }
  template <typename F>
  auto locked(F f) {
    MutexLock lock(mu_);
    return f();
  }

  std::vector<v1::WatchPolicyRequest> watch_requests;
  std::vector<v1::ReportUsageRequest> reports;
  std::string epoch = kEpochA;  // set before publishing
  bool offer_older = false;

 private:
  Mutex mu_;
  std::condition_variable cv_;
  std::vector<v1::PolicySnapshot> snapshots_ TQ_GUARDED_BY(mu_);
  bool closed_ TQ_GUARDED_BY(mu_) = false;
};

struct FakeServer {
  explicit FakeServer(int port = 0) {
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:" + std::to_string(port), grpc::InsecureServerCredentials(),
                       &this->port);
    b.RegisterService(&service);
    server = b.BuildAndStart();
  }
  ~FakeServer() { stop(); }
  void stop() {
    if (!server) return;
    service.closeStreams();
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
    server.reset();
  }
  FakePolicyService service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

template <typename Pred>
bool waitFor(Pred pred, int timeout_ms = 10000) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return pred();
}

// Moves `clock` to each deadline `worker` waits for, until `done()` (bounded in real time).
template <typename Pred>
bool driveUntil(FakeClock& clock, const Worker& worker, Pred done, int timeout_ms = 10000) {
  return waitFor(
      [&] {
        if (done()) return true;
        const int64_t t = worker.sleepingUntilNs();
        if (t > clock.nowNs()) clock.setNs(t);
        return done();
      },
      timeout_ms);
}

}  // namespace tq::testing
