#include "policy/allocator_election.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cinttypes>
#include <mutex>
#include <vector>

#include "common/log.h"
#include "common/thread_annotations.h"
#include "common/worker.h"
#include "etcd/rpc.grpc.pb.h"
#include "policy/etcd_txn.h"

namespace tq::policy {

void LeaseDeadline::acknowledged(int64_t sent_ns, int64_t ttl_s) {
  if (ttl_s <= 0) {
    end(sent_ns);
    return;
  }
  deadline_ns_ = std::max(deadline_ns_, sent_ns + ttl_s * kNsPerSec - margin_ns_);
}

void LeaseDeadline::end(int64_t now_ns) { deadline_ns_ = std::min(deadline_ns_, now_ns); }

std::string allocatorElectionKey(const std::string& prefix) { return prefix + "allocator"; }

namespace {

namespace pb = etcdserverpb;

// The deadline of one lease grant or keepalive attempt.
constexpr int64_t kAttemptNs = 500'000'000;

// ---------------------------------------------------------------------------------------------

class SoleElection final : public AllocatorElection {
 public:
  SoleElection(Clock& clock, std::string identity)
      : clock_(clock), identity_(std::move(identity)) {}
  ~SoleElection() override { stop(); }

  bool activeAt(int64_t) const override { return active_.load(); }
  uint64_t term() const override { return term_.load(); }
  std::string holder() const override { return identity_; }
  std::string describe() const override { return "sole (file store: this policyd)"; }

  void start(OnChange on_change) override {
    on_change_ = std::move(on_change);
    // A restarted policyd starts a later term (wall-clock milliseconds, at least 1).
    term_ = static_cast<uint64_t>(std::max<int64_t>(1, clock_.wallNs() / kNsPerMs));
    active_ = true;
    TQ_LOG(kInfo, "allocator: active (term %" PRIu64 ", the sole policyd) from monotonic %" PRId64,
           term_.load(), clock_.nowNs());
    if (on_change_) on_change_(true, term_);
  }
  void stop() override {
    if (!active_.exchange(false)) return;
    TQ_LOG(kInfo, "allocator: standby (term %" PRIu64 " resigned) active until monotonic %" PRId64,
           term_.load(), clock_.nowNs());
    if (on_change_) on_change_(false, term_);
  }

 private:
  Clock& clock_;
  const std::string identity_;
  OnChange on_change_;
  std::atomic<bool> active_{false};
  std::atomic<uint64_t> term_{0};
};

// ---------------------------------------------------------------------------------------------

class EtcdElection final : public AllocatorElection {
 public:
  EtcdElection(EtcdElectionOptions o, std::shared_ptr<grpc::ChannelCredentials> creds, Clock& clock)
      : o_(std::move(o)),
        key_(allocatorElectionKey(o_.etcd.prefix)),
        creds_(std::move(creds)),
        clock_(clock),
        deadline_(std::chrono::duration_cast<std::chrono::nanoseconds>(o_.margin).count()),
        worker_(clock) {
    for (const std::string& t : o_.etcd.endpoints) channels_.push_back(makeEtcdChannel(t, creds_));
  }
  ~EtcdElection() override { stop(); }

  bool activeAt(int64_t now_ns) const override {
    MutexLock lock(mu_);
    return deadline_.activeAt(now_ns);
  }
  uint64_t term() const override { return term_.load(); }
  std::string holder() const override {
    MutexLock lock(mu_);
    return holder_;
  }
  std::string describe() const override {
    std::string eps;
    for (const std::string& e : o_.etcd.endpoints) eps += (eps.empty() ? "" : ",") + e;
    return "etcd " + eps + " key " + key_ + " (lease TTL " + std::to_string(o_.ttl_s) + " s)";
  }

  void start(OnChange on_change) override {
    on_change_ = std::move(on_change);
    worker_.start("tq-elect", [this](std::stop_token stop) { run(stop); });
  }

  void stop() override {
    if (stopped_.exchange(true)) return;
    worker_.stop();
    // The thread is gone: resign here, ending activity before the key is released.
    stepDown("resigned", /*revoke=*/true);
  }

 private:
  // ---- etcd calls: each on the current endpoint, moving to the next one when unreachable.
  std::shared_ptr<grpc::Channel> channel() const {
    MutexLock lock(ch_mu_);
    return channels_[at_];
  }
  void failover() {
    MutexLock lock(ch_mu_);
    channels_[at_] = makeEtcdChannel(o_.etcd.endpoints[at_], creds_);  // a fresh channel
    at_ = (at_ + 1) % channels_.size();
  }
  std::string target() const {
    MutexLock lock(ch_mu_);
    return o_.etcd.endpoints[at_];
  }
  // A call's deadline: the request timeout, and no later than `until_ns` (monotonic; 0: none),
  // so that a holder's thread is never blocked past its lease deadline by an RPC.
  void setDeadline(grpc::ClientContext* ctx, int64_t until_ns) const {
    auto d = std::chrono::system_clock::now() + o_.etcd.request_timeout;
    if (until_ns > 0) {
      const int64_t left = std::max<int64_t>(until_ns - clock_.nowNs(), 50'000'000);
      d = std::min(d, std::chrono::system_clock::now() + std::chrono::nanoseconds(left));
    }
    ctx->set_deadline(d);
  }
  Status callFailed(const char* what, const grpc::Status& st) {
    Status s = unavailable("allocator election: etcd " + target() + ": " + what + ": " +
                           st.error_message() + " (grpc code " +
                           std::to_string(static_cast<int>(st.error_code())) + ")");
    if (st.error_code() == grpc::StatusCode::UNAVAILABLE ||
        st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      failover();
    }
    return s;
  }

  Result<pb::LeaseGrantResponse> grant() {
    grpc::ClientContext ctx;
    // Short: a member without a leader would hold the call to the request timeout, while the
    // next endpoint may answer at once.
    setDeadline(&ctx, clock_.nowNs() + kAttemptNs);
    pb::LeaseGrantRequest req;
    req.set_ttl(o_.ttl_s);
    pb::LeaseGrantResponse resp;
    grpc::Status st = pb::Lease::NewStub(channel())->LeaseGrant(&ctx, req, &resp);
    if (!st.ok()) return callFailed("grant a lease", st);
    if (!resp.error().empty() || resp.id() == 0 || resp.ttl() <= 0) {
      return unavailable("allocator election: etcd " + target() +
                         " refused a lease: " + resp.error());
    }
    return resp;
  }

  // Best effort, on each endpoint in turn until one answers: a lease that is not revoked
  // expires after its TTL anyway, but a standby takes over at once when it is.
  void revoke(int64_t lease) {
    for (size_t attempt = 0; attempt < o_.etcd.endpoints.size(); ++attempt) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
      pb::LeaseRevokeRequest req;
      req.set_id(lease);
      pb::LeaseRevokeResponse resp;
      grpc::Status st = pb::Lease::NewStub(channel())->LeaseRevoke(&ctx, req, &resp);
      if (st.ok() || st.error_code() == grpc::StatusCode::NOT_FOUND) return;
      TQ_LOG(kDebug, "allocator election: revoke lease %" PRIx64 " on %s: %s",
             static_cast<uint64_t>(lease), target().c_str(), st.error_message().c_str());
      failover();
    }
  }

  // One keepalive: the TTL etcd answered (<= 0: the lease is gone), or an error. Each attempt
  // is short, so that several endpoints can be tried before the lease deadline.
  Result<int64_t> keepAlive(int64_t lease, int64_t until_ns) {
    grpc::ClientContext ctx;
    setDeadline(&ctx, std::min(until_ns, clock_.nowNs() + kAttemptNs));
    {
      MutexLock lock(ctx_mu_);
      if (worker_.stopRequested()) return unavailable("stopping");
      call_ = &ctx;
    }
    auto stream = pb::Lease::NewStub(channel())->LeaseKeepAlive(&ctx);
    pb::LeaseKeepAliveRequest req;
    req.set_id(lease);
    pb::LeaseKeepAliveResponse resp;
    const bool got = stream->Write(req) && stream->Read(&resp);
    stream->WritesDone();
    if (got) ctx.TryCancel();  // one answer is all this call waits for
    grpc::Status st = stream->Finish();
    {
      MutexLock lock(ctx_mu_);
      call_ = nullptr;
    }
    if (!got) return callFailed("keep the lease alive", st);
    return resp.ttl();
  }

  // Blocks until the key is deleted after `revision`, `recheck` passes, or stop.
  void waitForRelease(int64_t revision) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + o_.recheck);
    ctx.AddMetadata("hasleader", "true");  // a member without a leader ends the watch
    {
      MutexLock lock(ctx_mu_);
      if (worker_.stopRequested()) return;
      call_ = &ctx;
    }
    auto stream = pb::Watch::NewStub(channel())->Watch(&ctx);
    pb::WatchRequest req;
    pb::WatchCreateRequest* create = req.mutable_create_request();
    create->set_key(key_);
    create->set_start_revision(revision + 1);
    pb::WatchResponse resp;
    bool released = false;
    if (stream->Write(req)) {
      while (!released && stream->Read(&resp)) {
        if (resp.canceled() || resp.compact_revision() > 0) break;
        for (const pb::Event& e : resp.events()) released |= e.type() == pb::Event::DELETE;
      }
    }
    ctx.TryCancel();
    stream->WritesDone();
    grpc::Status st = stream->Finish();
    {
      MutexLock lock(ctx_mu_);
      call_ = nullptr;
    }
    if (!released && st.error_code() == grpc::StatusCode::UNAVAILABLE) failover();
  }

  // ---- the states

  // Campaigns once: true when this replica now holds the key (term_ set, active).
  bool campaign() {
    const int64_t sent = clock_.nowNs();
    Result<pb::LeaseGrantResponse> g = grant();
    if (!g.ok()) {
      logProblem(g.status().message());
      return false;
    }
    const int64_t lease = g->id();
    const pb::TxnRequest txn = createOrReadTxn(key_, o_.identity, lease);
    pb::TxnResponse resp;
    grpc::ClientContext ctx;
    // No later than the lease could end: an answer after that would be a win already lost.
    setDeadline(&ctx, sent + g->ttl() * kNsPerSec);
    grpc::Status st = pb::KV::NewStub(channel())->Txn(&ctx, txn, &resp);
    if (!st.ok()) {
      logProblem(callFailed("campaign", st).message());
      revoke(lease);  // a transaction that did commit is undone with its lease
      return false;
    }
    uint64_t term = 0;
    std::string holder;
    int64_t revision = resp.header().revision();
    if (resp.succeeded()) {
      term = static_cast<uint64_t>(revision);  // the put's revision: the key's create revision
      holder = o_.identity;
    } else {
      const auto& kvs = resp.responses(0).response_range().kvs();
      if (!kvs.empty()) {
        holder = kvs[0].value();
        if (kvs[0].lease() == lease) term = static_cast<uint64_t>(kvs[0].create_revision());
      }
    }
    {
      MutexLock lock(mu_);
      holder_ = holder;
    }
    if (term == 0) {
      revoke(lease);
      if (holder != last_logged_holder_) {
        TQ_LOG(kInfo, "allocator: standby; %s is the active allocator", holder.c_str());
        last_logged_holder_ = holder;
      }
      waitForRelease(revision);
      return false;
    }
    lease_ = lease;
    term_ = term;
    const int64_t from = clock_.nowNs();
    {
      MutexLock lock(mu_);
      deadline_.reset();
      deadline_.acknowledged(sent, g->ttl());
      if (!deadline_.activeAt(from)) {
        // Granted, but the campaign took longer than the lease can be counted on.
        TQ_LOG(kWarn, "allocator: won term %" PRIu64 " too late to count on its lease; again",
               term);
        lease_ = 0;
        revoke(lease);
        return false;
      }
    }
    ttl_s_ = g->ttl();
    problem_logged_.clear();
    last_logged_holder_ = o_.identity;
    TQ_LOG(kInfo,
           "allocator: active (term %" PRIu64 ", lease %" PRIx64 ", TTL %" PRId64
           " s) from monotonic %" PRId64,
           term, static_cast<uint64_t>(lease), ttl_s_, from);
    if (on_change_) on_change_(true, term);
    return true;
  }

  // Keeps the lease alive until it is lost or stop is requested.
  void hold(const std::stop_token& stop) {
    const int64_t period = std::max<int64_t>(ttl_s_ * kNsPerSec / 3, 100'000'000);
    int64_t next = clock_.nowNs() + period;
    while (!stop.stop_requested()) {
      const int64_t deadline = deadlineNs();
      if (clock_.nowNs() >= deadline) {
        stepDown("no keepalive acknowledged before the lease deadline", true);
        return;
      }
      if (!worker_.waitUntil(std::min(next, deadline))) return;
      if (clock_.nowNs() >= deadlineNs()) continue;  // handled at the top
      const int64_t sent = clock_.nowNs();
      Result<int64_t> ttl = keepAlive(lease_, deadline);
      if (!ttl.ok()) {
        if (stop.stop_requested()) return;
        logProblem(ttl.status().message());
        next = clock_.nowNs() + 100'000'000;  // try the next endpoint soon
        continue;
      }
      if (*ttl <= 0) {
        stepDown("etcd says the lease expired", false);
        return;
      }
      {
        MutexLock lock(mu_);
        deadline_.acknowledged(sent, *ttl);
      }
      next = sent + period;
    }
  }

  void stepDown(const char* why, bool revoke_lease) {
    int64_t until;
    {
      MutexLock lock(mu_);
      if (lease_ == 0) return;
      deadline_.end(clock_.nowNs());
      until = deadline_.deadlineNs();
    }
    TQ_LOG(kWarn, "allocator: standby (term %" PRIu64 ": %s) active until monotonic %" PRId64,
           term_.load(), why, until);
    if (on_change_) on_change_(false, term_);
    const int64_t lease = lease_;
    lease_ = 0;
    if (revoke_lease) revoke(lease);
  }

  int64_t deadlineNs() const {
    MutexLock lock(mu_);
    return deadline_.deadlineNs();
  }

  void logProblem(const std::string& message) {
    if (message == problem_logged_) return;  // one line per distinct problem, not per retry
    TQ_LOG(kWarn, "%s", message.c_str());
    problem_logged_ = message;
  }

  void run(const std::stop_token& stop) {
    std::stop_callback cancel(stop, [this] {
      MutexLock lock(ctx_mu_);
      if (call_ != nullptr) call_->TryCancel();
    });
    while (!stop.stop_requested()) {
      if (campaign()) {
        hold(stop);
        continue;
      }
      // After a failed call (or a watch that ended): a short pause, so that an unreachable
      // etcd is not hammered.
      if (!worker_.waitFor(200'000'000)) return;
    }
  }

  const EtcdElectionOptions o_;
  const std::string key_;
  const std::shared_ptr<grpc::ChannelCredentials> creds_;
  Clock& clock_;
  OnChange on_change_;

  mutable Mutex ch_mu_;
  std::vector<std::shared_ptr<grpc::Channel>> channels_ TQ_GUARDED_BY(ch_mu_);  // one per endpoint
  size_t at_ TQ_GUARDED_BY(ch_mu_) = 0;                                         // the current one
  mutable Mutex mu_;
  LeaseDeadline deadline_ TQ_GUARDED_BY(mu_);
  std::string holder_ TQ_GUARDED_BY(mu_);
  std::atomic<uint64_t> term_{0};

  // Election thread only (and stop(), after the thread has exited).
  int64_t lease_ = 0;  // the lease held while active (0: none)
  int64_t ttl_s_ = 0;
  std::string problem_logged_;
  std::string last_logged_holder_;

  Mutex ctx_mu_;
  grpc::ClientContext* call_ TQ_GUARDED_BY(ctx_mu_) = nullptr;  // the blocking call in flight
  std::atomic<bool> stopped_{false};
  Worker worker_;  // last: its thread uses everything above
};

}  // namespace

std::unique_ptr<AllocatorElection> makeSoleElection(Clock& clock, std::string identity) {
  return std::make_unique<SoleElection>(clock, std::move(identity));
}

Result<std::unique_ptr<AllocatorElection>> makeEtcdElection(EtcdElectionOptions options,
                                                            Clock& clock) {
  if (options.etcd.endpoints.empty())
    return invalidArgument("allocator election: no etcd endpoints");
  if (options.ttl_s < 1) return invalidArgument("allocator election: the lease TTL is below 1 s");
  if (options.margin.count() * 1'000'000 >= options.ttl_s * kNsPerSec) {
    return invalidArgument("allocator election: the margin is not below the lease TTL");
  }
  TQ_ASSIGN_OR_RETURN(auto creds, etcdCredentials(options.etcd));
  return std::unique_ptr<AllocatorElection>(
      std::make_unique<EtcdElection>(std::move(options), std::move(creds), clock));
}

}  // namespace tq::policy
