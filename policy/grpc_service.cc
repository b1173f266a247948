#include "policy/grpc_service.h"

#include <grpcpp/support/proto_buffer_reader.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/log.h"
#include "common/thread_annotations.h"
#include "policy/allocator_service.h"
#include "policy/authz.h"
#include "policy/wire.h"
#include "proto/allocate_codec.h"
#include "proto/convert.h"
#include "proto/snapshot_codec.h"

namespace tq::policy {
namespace {

namespace v1 = tenantqos::v1;

// Status messages travel in HTTP/2 trailers, which clients cap (8 KiB by default in gRPC), so a
// very long error list is cut; `tenantqosctl validate FILE` prints all of it.
constexpr size_t kMaxStatusMessageBytes = 6000;

std::string capMessage(const std::string& m) {
  if (m.size() <= kMaxStatusMessageBytes) return m;
  size_t cut = m.rfind('\n', kMaxStatusMessageBytes);
  if (cut == std::string::npos) cut = kMaxStatusMessageBytes;
  size_t more = 0;
  for (size_t i = cut; i < m.size(); ++i) more += m[i] == '\n';
  return m.substr(0, cut) + "\n... " + std::to_string(more) +
         " more lines not shown (run `tenantqosctl validate FILE` to see every error)";
}

template <typename Msg>
bool parseMessage(const grpc::ByteBuffer* in, Msg* out) {
  if (in == nullptr) return false;
  grpc::ByteBuffer copy(*in);  // Deserialize consumes its buffer; copies share the slices
  return grpc::SerializationTraits<Msg>::Deserialize(&copy, out).ok();
}

template <typename Msg>
grpc::Status serializeMessage(const Msg& msg, grpc::ByteBuffer* out) {
  bool own = false;
  return grpc::SerializationTraits<Msg>::Serialize(msg, out, &own);
}

// A unary call's reactor that counts itself in flight until gRPC is done with it (status
// sent: the response taken by the client or the call cancelled), so shutdown can wait for
// exactly that; it gives back the response's budget then.
class CountedUnaryReactor final : public grpc::ServerUnaryReactor {
 public:
  CountedUnaryReactor(std::atomic<int>* in_flight, ResponseBudget* budget)
      : in_flight_(in_flight), budget_(budget) {
    in_flight_->fetch_add(1, std::memory_order_relaxed);
  }
  void holds(std::string identity, size_t bytes) {
    identity_ = std::move(identity);
    bytes_ = bytes;
  }
  void OnDone() override {
    if (bytes_ > 0) budget_->give(identity_, bytes_);
    in_flight_->fetch_sub(1, std::memory_order_release);
    delete this;
  }

 private:
  std::atomic<int>* in_flight_;
  ResponseBudget* budget_;
  std::string identity_;
  size_t bytes_ = 0;
};

Caller callerOf(const grpc::ServerContextBase& ctx, const GrpcServiceOptions& options) {
  std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
  return makeCaller(auth ? rpc::peerIdentity(*auth) : rpc::PeerIdentity{}, options.insecure,
                    ctx.peer());
}

// Runs `fn(caller, request, &response) -> grpc::Status` for a raw unary call once the caller
// holds `permission` (checked before the request is even parsed).
template <typename Req, typename Resp, typename Fn>
grpc::ServerUnaryReactor* unaryCall(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
                                    grpc::ByteBuffer* out, std::atomic<int>* in_flight,
                                    ResponseBudget* budget, const GrpcServiceOptions& options,
                                    const char* method, Permission permission, Fn fn) {
  auto* reactor = new CountedUnaryReactor(in_flight, budget);
  grpc::Status status;
  try {
    Req req;
    const Caller caller = callerOf(*ctx, options);
    Status allowed = authorize(caller, method, permission);
    if (!allowed.ok()) {
      TQ_LOG(kInfo, "refused: %s", allowed.message().c_str());
      status = toGrpcStatus(allowed);
    } else if (!parseMessage(in, &req)) {
      status = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            std::string(method) + ": the request is not a valid " +
                                Req::descriptor()->full_name() + " message");
    } else {
      Resp resp;
      status = fn(caller, req, &resp);
      if (status.ok()) {
        const size_t bytes = resp.ByteSizeLong();
        Status room = budget->take(caller.identity, bytes);
        if (!room.ok()) {
          status = toGrpcStatus(room.withContext(method));
        } else {
          reactor->holds(caller.identity, bytes);
          status = serializeMessage(resp, out);
        }
      }
    }
  } catch (const std::exception& e) {  // nothing may escape into gRPC's threads
    status = grpc::Status(grpc::StatusCode::INTERNAL, std::string(method) + ": " + e.what());
  }
  if (!status.ok()) {
    TQ_LOG(kDebug, "%s from %s: %d %s", method, ctx->peer().c_str(),
           static_cast<int>(status.error_code()), status.error_message().c_str());
  }
  reactor->Finish(status);
  return reactor;
}

void fillApplyResponse(const ApplyResult& r, v1::ApplyPolicyResponse* resp) {
  resp->set_version(r.version);
  resp->set_changed(r.changed);
  resp->set_dry_run(r.dry_run);
  toProto(r.diff, resp);
}

}  // namespace

Status ResponseBudget::take(const std::string& identity, size_t bytes) {
  MutexLock lock(mu_);
  size_t& mine = by_identity_[identity];
  if (mine + bytes > per_identity_ || held_ + bytes > total_) {
    const bool own = mine + bytes > per_identity_;
    const std::string held = std::to_string((own ? mine : held_) >> 10);
    if (mine == 0) by_identity_.erase(identity);
    return resourceExhausted(
        "a response of " + std::to_string(bytes >> 10) + " KiB would exceed the " +
        std::to_string((own ? per_identity_ : total_) >> 10) + " KiB of responses policyd holds " +
        (own ? "for " + identity : "for all callers") + " until they are read (" + held +
        " KiB held now): read the answers of calls in flight, or retry");
  }
  mine += bytes;
  held_ += bytes;
  return okStatus();
}

void ResponseBudget::give(const std::string& identity, size_t bytes) {
  MutexLock lock(mu_);
  auto it = by_identity_.find(identity);
  if (it != by_identity_.end()) {
    it->second -= std::min(it->second, bytes);
    if (it->second == 0) by_identity_.erase(it);
  }
  held_ -= std::min(held_, bytes);
}

size_t ResponseBudget::held() const {
  MutexLock lock(mu_);
  return held_;
}

grpc::Status toGrpcStatus(const Status& s) {
  using C = grpc::StatusCode;
  C c = C::UNKNOWN;
  switch (s.code()) {
    case StatusCode::kOk: return grpc::Status::OK;
    case StatusCode::kInvalidArgument: c = C::INVALID_ARGUMENT; break;
    case StatusCode::kNotFound: c = C::NOT_FOUND; break;
    case StatusCode::kAlreadyExists: c = C::ALREADY_EXISTS; break;
    case StatusCode::kFailedPrecondition: c = C::FAILED_PRECONDITION; break;
    case StatusCode::kOutOfRange: c = C::OUT_OF_RANGE; break;
    case StatusCode::kResourceExhausted: c = C::RESOURCE_EXHAUSTED; break;
    case StatusCode::kPermissionDenied: c = C::PERMISSION_DENIED; break;
    case StatusCode::kUnauthenticated: c = C::UNAUTHENTICATED; break;
    case StatusCode::kUnavailable: c = C::UNAVAILABLE; break;
    case StatusCode::kDeadlineExceeded: c = C::DEADLINE_EXCEEDED; break;
    case StatusCode::kAborted: c = C::ABORTED; break;
    case StatusCode::kUnimplemented: c = C::UNIMPLEMENTED; break;
    case StatusCode::kDataLoss: c = C::DATA_LOSS; break;
    case StatusCode::kInternal: c = C::INTERNAL; break;
  }
  return grpc::Status(c, capMessage(s.message()));
}

// ---------------------------------------------------------------------------------------------
// Watch streams

struct EncodedSnapshot {
  uint64_t version = 0;
  grpc::ByteBuffer bytes;  // a serialised tenantqos.v1.PolicySnapshot (no source_yaml)
  // The same deflated (proto/snapshot_codec.h), for watchers that accept it; nullopt if
  // deflating failed (they get `bytes`).
  std::optional<grpc::ByteBuffer> deflated;
  const grpc::ByteBuffer& forWatcher(bool accepts_deflated) const {
    return accepts_deflated && deflated ? *deflated : bytes;
  }
};

class WatchReactor;

// The watch streams' encoding of `record`: serialised once, and deflated once; nullptr, logged,
// if it does not serialise. The fan-out thread's (WatchHub::publish).
std::shared_ptr<const EncodedSnapshot> encodeForWatch(const PolicyRecord& record,
                                                      const std::string& epoch) {
  auto s = std::make_shared<EncodedSnapshot>();
  s->version = record.version;
  v1::PolicySnapshot snap = toSnapshot(record, /*with_source=*/false);
  snap.set_store_epoch(epoch);
  std::string raw;  // serialised once: sent as it is, and deflated
  if (!snap.SerializeToString(&raw)) {
    TQ_LOG(kError, "cannot serialise policy version %" PRIu64 " for watchers", record.version);
    return nullptr;
  }
  {
    grpc::Slice slice(raw);
    s->bytes = grpc::ByteBuffer(&slice, 1);
  }
  grpc::Status st;
  Result<v1::PolicySnapshot> deflated =
      proto::deflateSerializedSnapshot(record.version, epoch, raw);
  if (deflated.ok()) {
    s->deflated.emplace();
    st = serializeMessage(*deflated, &*s->deflated);
  }
  if (!deflated.ok() || !st.ok()) {
    s->deflated.reset();
    TQ_LOG(kWarn, "policy version %" PRIu64 " goes to every watcher undeflated: %s", record.version,
           deflated.ok() ? st.error_message().c_str() : deflated.status().message().c_str());
  }
  return s;
}

// The set of open watch streams and the latest snapshot. Calls into reactors are made outside
// the hub's mutex, because a reactor's OnDone (which may run on any gRPC thread) takes it.
// A new version is offered to the streams by the hub's own thread (tq-watch-fanout), not by the
// apply that published it: each offer's StartWrite runs gRPC's framing, TLS and sendmsg on the
// calling thread, and 1,000 watchers of a 1000-tenant policy made the apply wait for all of
// them (docs/cli.md, "Fan-out and the allocator's load").
class WatchHub {
 public:
  WatchHub(PolicydMetrics* metrics, size_t max_per_identity);
  ~WatchHub();

  // Registers a reactor (the hub owns it until its OnDone) and offers it the latest snapshot,
  // which it takes only if newer than what its watcher knows. A reactor whose identity already
  // has max_per_identity streams open is ended with RESOURCE_EXHAUSTED instead.
  void add(std::shared_ptr<WatchReactor> reactor);
  void remove(WatchReactor* reactor);
  // Hands `record` (of the store `epoch`) to the fan-out thread, which encodes it for watchers
  // (serialises and deflates it: not on the apply's path, whose answer waits for this call),
  // makes it the latest (streams that open later get it at once) and offers it to every
  // stream; returns without waiting. A newer record published before the thread got to an
  // older one replaces it (watchers may skip intermediate versions); an older one is ignored.
  void publish(std::shared_ptr<const PolicyRecord> record, const std::string& epoch);
  void close(const grpc::Status& status);
  size_t size() const {
    MutexLock lock(mu_);
    return reactors_.size();
  }

 private:
  void fanOut();  // the fan-out thread's body

  PolicydMetrics* metrics_;
  mutable Mutex mu_;
  std::condition_variable fan_out_cv_;
  std::shared_ptr<const EncodedSnapshot> latest_ TQ_GUARDED_BY(mu_);
  // Published, not yet encoded and offered to every stream; and its store epoch.
  std::shared_ptr<const PolicyRecord> to_offer_ TQ_GUARDED_BY(mu_);
  std::string to_offer_epoch_ TQ_GUARDED_BY(mu_);
  uint64_t published_version_ TQ_GUARDED_BY(mu_) = 0;  // the newest handed to publish()
  bool stopping_ TQ_GUARDED_BY(mu_) = false;
  std::unordered_map<WatchReactor*, std::shared_ptr<WatchReactor>> reactors_ TQ_GUARDED_BY(mu_);
  std::unordered_map<std::string, size_t> per_identity_
      TQ_GUARDED_BY(mu_);  // open streams per caller identity
  const size_t max_per_identity_;
  std::optional<grpc::Status> closed_ TQ_GUARDED_BY(mu_);
  std::thread fan_out_;  // last: started once the members above exist
};

class WatchReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  WatchReactor(WatchHub* hub, std::string peer, std::string identity)
      : hub_(hub), peer_(std::move(peer)), identity_(std::move(identity)) {}

  void setWatcher(std::string node, uint64_t known_version, bool accepts_deflated) {
    MutexLock lock(mu_);
    node_ = std::move(node);
    newest_ = known_version;
    accepts_deflated_ = accepts_deflated;
  }

  // Queues `s` unless the watcher already has it or something newer. Any thread.
  void offer(const std::shared_ptr<const EncodedSnapshot>& s) {
    MutexLock lock(mu_);
    if (finishing_ || s->version <= newest_) return;
    newest_ = s->version;
    if (writing_) {
      pending_ = s;  // replaces an older pending one: intermediate versions are skipped
      return;
    }
    writing_ = true;
    in_flight_ = s->forWatcher(accepts_deflated_);
    lock.unlock();
    StartWrite(&in_flight_);
  }

  // Ends the stream with `status` (after the write in flight, if any). Idempotent.
  void close(const grpc::Status& status) {
    MutexLock lock(mu_);
    if (finishing_) return;
    finishing_ = true;
    final_ = status;
    pending_.reset();
    if (writing_) return;  // OnWriteDone finishes
    lock.unlock();
    Finish(status);
  }

  void OnWriteDone(bool ok) override {
    MutexLock lock(mu_);
    writing_ = false;
    in_flight_.Clear();
    if (!ok && !finishing_) {
      finishing_ = true;
      final_ = grpc::Status(grpc::StatusCode::UNAVAILABLE, "watch stream write failed");
      pending_.reset();
    }
    if (finishing_) {
      grpc::Status st = final_;
      lock.unlock();
      Finish(st);
      return;
    }
    if (pending_) {
      writing_ = true;
      in_flight_ = pending_->forWatcher(accepts_deflated_);
      pending_.reset();
      lock.unlock();
      StartWrite(&in_flight_);
    }
  }

  void OnCancel() override { close(grpc::Status::CANCELLED); }

  void OnDone() override {
    std::string node;
    {
      MutexLock lock(mu_);
      node = node_;
    }
    TQ_LOG(kDebug, "watch from %s (node %s) ended", peer_.c_str(), node.c_str());
    // Drops the hub's reference: `this` may be deleted inside, so nothing may follow.
    hub_->remove(this);
  }

  const std::string& peer() const { return peer_; }
  const std::string& identity() const { return identity_; }

 private:
  WatchHub* const hub_;
  const std::string peer_;
  const std::string identity_;
  Mutex mu_;
  std::string node_ TQ_GUARDED_BY(mu_);
  uint64_t newest_ TQ_GUARDED_BY(mu_) =
      0;  // newest version written or pending (or known to the client)
  bool accepts_deflated_ TQ_GUARDED_BY(mu_) = false;  // WatchPolicyRequest.accept_deflated
  std::shared_ptr<const EncodedSnapshot> pending_ TQ_GUARDED_BY(mu_);
  grpc::ByteBuffer in_flight_;  // stays untouched while writing_
  bool writing_ TQ_GUARDED_BY(mu_) = false;
  bool finishing_ TQ_GUARDED_BY(mu_) = false;
  grpc::Status final_ TQ_GUARDED_BY(mu_);
};

WatchHub::WatchHub(PolicydMetrics* metrics, size_t max_per_identity)
    : metrics_(metrics), max_per_identity_(max_per_identity) {
  fan_out_ = std::thread([this] { fanOut(); });
}

WatchHub::~WatchHub() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  fan_out_cv_.notify_all();
  fan_out_.join();
  // Normally empty: grpc::Server::Shutdown waits for every reactor's OnDone.
  MutexLock lock(mu_);
  if (!reactors_.empty()) {
    TQ_LOG(kWarn, "policy service destroyed with %zu watch streams still open", reactors_.size());
  }
}

void WatchHub::fanOut() {
  pthread_setname_np(pthread_self(), "tq-watch-fanout");
  MutexLock lock(mu_);
  for (;;) {
    fan_out_cv_.wait(lock.native(),
                     [this]() TQ_REQUIRES(mu_) { return stopping_ || to_offer_ != nullptr; });
    if (stopping_) return;
    std::shared_ptr<const PolicyRecord> record = std::move(to_offer_);
    to_offer_.reset();
    const std::string epoch = to_offer_epoch_;
    lock.unlock();
    std::shared_ptr<const EncodedSnapshot> snapshot = encodeForWatch(*record, epoch);
    record.reset();
    lock.lock();
    if (!snapshot || (latest_ && latest_->version >= snapshot->version)) continue;
    // Latest and the streams to offer it to in one step: a stream that opens meanwhile is either
    // among the targets or gets the new latest from add().
    latest_ = snapshot;
    std::vector<std::shared_ptr<WatchReactor>> targets;
    targets.reserve(reactors_.size());
    for (auto& [raw, r] : reactors_) targets.push_back(r);
    lock.unlock();
    for (auto& r : targets) r->offer(snapshot);
    targets.clear();  // a reactor's last reference may go here: outside the lock
    lock.lock();
  }
}

void WatchHub::add(std::shared_ptr<WatchReactor> reactor) {
  WatchReactor* raw = reactor.get();
  std::shared_ptr<const EncodedSnapshot> latest;
  std::optional<grpc::Status> closed;
  size_t n;
  {
    MutexLock lock(mu_);
    reactors_.emplace(raw, std::move(reactor));
    latest = latest_;
    closed = closed_;
    n = reactors_.size();
    size_t& mine = per_identity_[raw->identity()];
    if (!closed && mine >= max_per_identity_) {
      closed = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                            "WatchPolicy: " + raw->identity() + " already has " +
                                std::to_string(mine) + " watch streams open (at most " +
                                std::to_string(max_per_identity_) + " per identity)");
    }
    ++mine;
  }
  if (metrics_ != nullptr) metrics_->setWatchers(static_cast<int64_t>(n));
  if (closed) {
    raw->close(*closed);
    return;
  }
  if (latest) raw->offer(latest);
}

void WatchHub::remove(WatchReactor* reactor) {
  std::shared_ptr<WatchReactor> keep;
  size_t n;
  {
    MutexLock lock(mu_);
    auto it = reactors_.find(reactor);
    if (it != reactors_.end()) {
      keep = std::move(it->second);
      reactors_.erase(it);
      auto id = per_identity_.find(reactor->identity());
      if (id != per_identity_.end() && --id->second == 0) per_identity_.erase(id);
    }
    n = reactors_.size();
  }
  if (metrics_ != nullptr) metrics_->setWatchers(static_cast<int64_t>(n));
  // `keep` is released here, possibly deleting the reactor.
}

void WatchHub::publish(std::shared_ptr<const PolicyRecord> record, const std::string& epoch) {
  {
    MutexLock lock(mu_);
    if (published_version_ >= record->version) return;
    published_version_ = record->version;
    to_offer_ = std::move(record);
    to_offer_epoch_ = epoch;
  }
  fan_out_cv_.notify_all();
}

void WatchHub::close(const grpc::Status& status) {
  std::vector<std::shared_ptr<WatchReactor>> targets;
  {
    MutexLock lock(mu_);
    closed_ = status;
    for (auto& [raw, r] : reactors_) targets.push_back(r);
  }
  for (auto& r : targets) r->close(status);
}

// ---------------------------------------------------------------------------------------------
// Allocate streams

class AllocateReactor;

// Owns the Allocate reactors from their start until their OnDone, so that shutdown can end
// every one (also those not attached to the allocator yet: waiting for their first report).
class AllocateHub {
 public:
  void add(std::shared_ptr<AllocateReactor> r);
  void remove(AllocateReactor* r);
  void close(const grpc::Status& status);
  size_t size() const {
    MutexLock lock(mu_);
    return reactors_.size();
  }

 private:
  mutable Mutex mu_;
  std::unordered_map<AllocateReactor*, std::shared_ptr<AllocateReactor>> reactors_
      TQ_GUARDED_BY(mu_);
  std::optional<grpc::Status> closed_ TQ_GUARDED_BY(mu_);
};

class AllocateReactor final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
                              public CapsSink,
                              public std::enable_shared_from_this<AllocateReactor> {
 public:
  AllocateReactor(AllocateHub* hub, AllocatorService* allocator, Caller caller, std::string peer)
      : hub_(hub), allocator_(allocator), caller_(std::move(caller)), peer_(std::move(peer)) {}

  void begin(const grpc::Status* refusal) {
    if (refusal != nullptr) {
      finish(*refusal);
      return;
    }
    readNext();
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the agent half-closed or the stream broke
      finish(grpc::Status::OK);
      return;
    }
    v1::DemandReport wire;
    grpc::ByteBuffer copy(in_);
    in_.Clear();
    Status st;
    if (!grpc::SerializationTraits<v1::DemandReport>::Deserialize(&copy, &wire).ok()) {
      st = invalidArgument("Allocate: a message is not a valid tenantqos.v1.DemandReport");
    } else {
      try {
        st = onReport(wire);
      } catch (const std::exception& e) {  // nothing may escape into gRPC's threads
        st = internalError(std::string("Allocate: ") + e.what());
      }
    }
    if (!st.ok()) {
      TQ_LOG(kDebug, "Allocate from %s (%s): %s", peer_.c_str(), caller_.identity.c_str(),
             st.message().c_str());
      finish(toGrpcStatus(st));
      return;
    }
    readNext();
  }

  void sendCaps(std::shared_ptr<const v1::NodeCaps> caps) override {
    MutexLock lock(mu_);
    if (finishing_) return;
    if (writing_) {
      pending_ = std::move(caps);  // the newest caps replace any not yet written
      return;
    }
    if (!encode(*caps)) return;
    writing_ = true;
    lock.unlock();
    StartWrite(&out_);
  }

  void close(const Status& status) override { finish(toGrpcStatus(status)); }

  void OnWriteDone(bool ok) override {
    MutexLock lock(mu_);
    writing_ = false;
    out_.Clear();
    if (!ok && !finishing_) {
      finishing_ = true;
      final_ = grpc::Status(grpc::StatusCode::UNAVAILABLE, "Allocate stream write failed");
    }
    if (finishing_) {
      const grpc::Status st = final_;
      lock.unlock();
      doFinish(st);
      return;
    }
    if (pending_) {
      const std::shared_ptr<const v1::NodeCaps> next = std::move(pending_);
      pending_.reset();
      if (!encode(*next)) return;
      writing_ = true;
      lock.unlock();
      StartWrite(&out_);
    }
  }

  void OnCancel() override { finish(grpc::Status::CANCELLED); }

  void OnDone() override {
    std::string node;
    {
      MutexLock lock(mu_);
      node = node_;
    }
    if (!node.empty()) allocator_->detach(node, this);
    // Drops the hub's reference: `this` may be deleted inside (or when the allocator lets go
    // of its copy), so nothing may follow.
    hub_->remove(this);
  }

 private:
  // One report read from the stream: decoded (keys and deltas, proto/allocate_codec.h) into
  // the node's whole report as an older agent sends it, so that the allocator checks the same
  // either way; the first attaches the stream. Not ok: the stream ends with it.
  Status onReport(const v1::DemandReport& wire) {
    Result<v1::DemandReport> decoded = decoder_.decode(wire);
    if (!decoded.ok()) return decoded.status();
    const v1::DemandReport& report = *decoded;
    bool first;
    {
      MutexLock lock(mu_);  // (OnDone reads node_ on another thread)
      if (report.compact_caps()) caps_encoder_.setPeerCompact();
      first = node_.empty();
    }
    if (first) {
      TQ_RETURN_IF_ERROR(allocator_->attach(caller_, report.node(), shared_from_this()));
      MutexLock lock(mu_);
      node_ = report.node();
    }
    // Authorizes first (a report for another node is refused and audited), then checks that
    // it is this stream's node.
    return allocator_->report(caller_, this, report);
  }

  // `caps` as this stream's next message (compact when the agent reads it: encoded against
  // what was written before, so only when the write starts) into out_. Under mu_, with no
  // write in flight.
  bool encode(const v1::NodeCaps& caps) TQ_REQUIRES(mu_) {
    // The encoder's clock is the round's stamp: a whole message at least every 10 s of rounds.
    const v1::NodeCaps msg =
        caps_encoder_.encode(caps, caps.computed_at_unix_ms() * int64_t{1'000'000});
    out_.Clear();
    return serializeMessage(msg, &out_).ok();
  }

  // StartRead and Finish under op_mu_, so that no read starts after Finish. Recursive: gRPC
  // may run a reaction inline.
  void readNext() {
    RecursiveMutexLock lock(op_mu_);
    if (finished_) return;
    StartRead(&in_);
  }
  void doFinish(const grpc::Status& status) {
    RecursiveMutexLock lock(op_mu_);
    if (finished_) return;
    finished_ = true;
    Finish(status);
  }

  // Ends the stream (after the write in flight, if any). Idempotent.
  void finish(const grpc::Status& status) {
    MutexLock lock(mu_);
    if (finishing_) return;
    finishing_ = true;
    final_ = status;
    pending_.reset();
    if (writing_) return;  // OnWriteDone finishes
    lock.unlock();
    doFinish(status);
  }

  AllocateHub* const hub_;
  AllocatorService* const allocator_;
  const Caller caller_;
  const std::string peer_;
  grpc::ByteBuffer in_;  // the read in flight (gRPC thread of OnReadDone only)
  proto::DemandDecoder decoder_{kMaxDemandEntries};  // OnReadDone only (one read at a time)
  RecursiveMutex op_mu_;
  bool finished_ TQ_GUARDED_BY(op_mu_) = false;  // Finish was called
  Mutex mu_;
  std::string node_ TQ_GUARDED_BY(mu_);  // set by the first report
  grpc::ByteBuffer out_;                 // the write in flight: untouched while writing_
  std::shared_ptr<const v1::NodeCaps> pending_ TQ_GUARDED_BY(mu_);  // the next, whole
  proto::CapsEncoder caps_encoder_ TQ_GUARDED_BY(mu_);              // against what was written
  bool writing_ TQ_GUARDED_BY(mu_) = false;
  bool finishing_ TQ_GUARDED_BY(mu_) = false;
  grpc::Status final_ TQ_GUARDED_BY(mu_);
};

void AllocateHub::add(std::shared_ptr<AllocateReactor> r) {
  std::optional<grpc::Status> closed;
  AllocateReactor* raw = r.get();
  {
    MutexLock lock(mu_);
    reactors_.emplace(raw, std::move(r));
    closed = closed_;
  }
  if (closed) raw->close(unavailable(closed->error_message()));
}

void AllocateHub::remove(AllocateReactor* r) {
  std::shared_ptr<AllocateReactor> keep;
  {
    MutexLock lock(mu_);
    auto it = reactors_.find(r);
    if (it == reactors_.end()) return;
    keep = std::move(it->second);
    reactors_.erase(it);
  }
}

void AllocateHub::close(const grpc::Status& status) {
  std::vector<std::shared_ptr<AllocateReactor>> targets;
  {
    MutexLock lock(mu_);
    closed_ = status;
    for (auto& [raw, r] : reactors_) targets.push_back(r);
  }
  for (auto& r : targets) r->close(unavailable(status.error_message()));
}

// ---------------------------------------------------------------------------------------------

PolicyGrpcService::PolicyGrpcService(PolicyCore& core, PolicydMetrics* metrics,
                                     GrpcServiceOptions options, AllocatorService* allocator)
    : core_(core),
      metrics_(metrics),
      options_(options),
      hub_(std::make_unique<WatchHub>(metrics, options.max_streams_per_identity)),
      allocator_(allocator),
      allocate_hub_(std::make_unique<AllocateHub>()),
      budget_(options.max_response_bytes_per_identity, options.max_response_bytes) {
  WatchHub* hub = hub_.get();
  core_.setPublisher(
      [hub, allocator, epoch = core_.epoch()](const std::shared_ptr<const PolicyRecord>& r) {
        hub->publish(r, epoch);
        if (allocator != nullptr) allocator->onPolicy(r);
      });
  // publish() ignores versions it already has, so an apply racing with this line is harmless.
  if (auto latest = core_.latest()) {
    hub->publish(latest, core_.epoch());
    if (allocator != nullptr) allocator->onPolicy(latest);
  }
}

PolicyGrpcService::~PolicyGrpcService() { core_.setPublisher(nullptr); }

void PolicyGrpcService::closeWatchers(const std::string& reason) {
  hub_->close(grpc::Status(grpc::StatusCode::UNAVAILABLE, reason));
  allocate_hub_->close(grpc::Status(grpc::StatusCode::UNAVAILABLE, reason));
}

size_t PolicyGrpcService::allocateStreams() const { return allocate_hub_->size(); }

size_t PolicyGrpcService::watcherCount() const { return hub_->size(); }

size_t PolicyGrpcService::callsInFlight() const {
  return static_cast<size_t>(std::max(0, in_flight_.load(std::memory_order_acquire))) +
         hub_->size() + allocate_hub_->size();
}

grpc::ServerUnaryReactor* PolicyGrpcService::ApplyPolicy(grpc::CallbackServerContext* ctx,
                                                         const grpc::ByteBuffer* in,
                                                         grpc::ByteBuffer* out) {
  return unaryCall<v1::ApplyPolicyRequest, v1::ApplyPolicyResponse>(
      ctx, in, out, &in_flight_, &budget_, options_, "ApplyPolicy", Permission::kChange,
      [&](const Caller& caller, const v1::ApplyPolicyRequest& req, v1::ApplyPolicyResponse* resp) {
        ApplyRequest a;
        a.yaml = req.policy_yaml();
        if (!req.source_name().empty()) a.source_name = req.source_name();
        a.dry_run = req.dry_run();
        if (req.has_expected_version()) a.expected_version = req.expected_version();
        a.author = {caller.identity, caller.groups};  // never the request's applied_by
        Result<ApplyResult> r = core_.apply(a);
        if (!r.ok()) return toGrpcStatus(r.status());
        fillApplyResponse(*r, resp);
        return grpc::Status::OK;
      });
}

grpc::ServerUnaryReactor* PolicyGrpcService::GetPolicy(grpc::CallbackServerContext* ctx,
                                                       const grpc::ByteBuffer* in,
                                                       grpc::ByteBuffer* out) {
  return unaryCall<v1::GetPolicyRequest, v1::PolicySnapshot>(
      ctx, in, out, &in_flight_, &budget_, options_, "GetPolicy", Permission::kRead,
      [&](const Caller&, const v1::GetPolicyRequest& req, v1::PolicySnapshot* resp) {
        Result<PolicyRecord> r = core_.get(req.version());
        if (!r.ok()) return toGrpcStatus(r.status());
        *resp = toSnapshot(*r);
        resp->set_store_epoch(core_.epoch());
        return grpc::Status::OK;
      });
}

grpc::ServerUnaryReactor* PolicyGrpcService::ListVersions(grpc::CallbackServerContext* ctx,
                                                          const grpc::ByteBuffer* in,
                                                          grpc::ByteBuffer* out) {
  return unaryCall<v1::ListVersionsRequest, v1::ListVersionsResponse>(
      ctx, in, out, &in_flight_, &budget_, options_, "ListVersions", Permission::kRead,
      [&](const Caller&, const v1::ListVersionsRequest&, v1::ListVersionsResponse* resp) {
        for (const VersionSummary& s : core_.list()) *resp->add_versions() = toVersionInfo(s);
        return grpc::Status::OK;
      });
}

grpc::ServerUnaryReactor* PolicyGrpcService::Rollback(grpc::CallbackServerContext* ctx,
                                                      const grpc::ByteBuffer* in,
                                                      grpc::ByteBuffer* out) {
  return unaryCall<v1::RollbackRequest, v1::ApplyPolicyResponse>(
      ctx, in, out, &in_flight_, &budget_, options_, "Rollback", Permission::kChange,
      [&](const Caller& caller, const v1::RollbackRequest& req, v1::ApplyPolicyResponse* resp) {
        std::optional<uint64_t> expected;
        if (req.has_expected_version()) expected = req.expected_version();
        Result<ApplyResult> r =
            core_.rollback(req.version(), expected, Author{caller.identity, caller.groups});
        if (!r.ok()) return toGrpcStatus(r.status());
        fillApplyResponse(*r, resp);
        return grpc::Status::OK;
      });
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* PolicyGrpcService::WatchPolicy(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in) {
  const Caller caller = callerOf(*ctx, options_);
  auto reactor = std::make_shared<WatchReactor>(hub_.get(), ctx->peer(), caller.identity);
  WatchReactor* raw = reactor.get();
  v1::WatchPolicyRequest req;
  Status allowed = authorize(caller, "WatchPolicy", Permission::kWatch);
  std::optional<grpc::Status> refusal;
  if (!allowed.ok()) {
    TQ_LOG(kInfo, "refused: %s", allowed.message().c_str());
    refusal = toGrpcStatus(allowed);
  } else if (!parseMessage(in, &req)) {
    refusal = grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        "WatchPolicy: the request is not a valid tenantqos.v1.WatchPolicyRequest message");
  }
  if (refusal) {
    raw->setWatcher("", UINT64_MAX, false);  // nothing is newer: no snapshot is offered
    hub_->add(std::move(reactor));
    raw->close(*refusal);
    return raw;
  }
  TQ_LOG(kDebug, "watch from %s (%s, node %s), known version %" PRIu64 " of store %s",
         ctx->peer().c_str(), caller.identity.c_str(), req.node().c_str(), req.known_version(),
         req.known_store_epoch().c_str());
  // Versions are compared within one store only (see WatchPolicyRequest.known_store_epoch).
  uint64_t newer_than = req.known_version();
  if (!req.known_store_epoch().empty()) {
    if (req.known_store_epoch() != core_.epoch()) {
      newer_than = 0;  // another store: its latest, whatever the numbers
    } else if (auto l = core_.latest(); l && l->version < newer_than) {
      // Older than what the agent holds: a replica behind etcd, or a store restored from an old
      // backup. Catch up first; if still older, send it so the agent reports it.
      Status synced = core_.sync();
      if (!synced.ok()) TQ_LOG(kWarn, "watch: %s", synced.message().c_str());
      if (auto now = core_.latest(); now && now->version < newer_than) {
        TQ_LOG(kWarn,
               "watch from %s (%s, node %s): it holds version %" PRIu64
               " of this store, newer than "
               "the latest %" PRIu64 " (was the store restored from an old backup?)",
               ctx->peer().c_str(), caller.identity.c_str(), req.node().c_str(),
               req.known_version(), now->version);
        if (metrics_ != nullptr) metrics_->countWatcherAhead();
        newer_than = 0;
      }
    }
  }
  raw->setWatcher(req.node(), newer_than, req.accept_deflated());
  hub_->add(std::move(reactor));
  return raw;
}

grpc::ServerUnaryReactor* PolicyGrpcService::ReportUsage(grpc::CallbackServerContext* ctx,
                                                         const grpc::ByteBuffer* in,
                                                         grpc::ByteBuffer* out) {
  return unaryCall<v1::ReportUsageRequest, v1::ReportUsageResponse>(
      ctx, in, out, &in_flight_, &budget_, options_, "ReportUsage", Permission::kReport,
      [&](const Caller& caller, const v1::ReportUsageRequest& req, v1::ReportUsageResponse*) {
        // An agent reports for the node its certificate names, and for no other.
        Status own = authorize(caller, "ReportUsage", Permission::kReport, req.node());
        if (!own.ok()) return toGrpcStatus(own);
        return toGrpcStatus(core_.reportUsage(proto::fromReportUsageRequest(req)));
      });
}

grpc::ServerUnaryReactor* PolicyGrpcService::GetUsage(grpc::CallbackServerContext* ctx,
                                                      const grpc::ByteBuffer* in,
                                                      grpc::ByteBuffer* out) {
  return unaryCall<v1::GetUsageRequest, v1::GetUsageResponse>(
      ctx, in, out, &in_flight_, &budget_, options_, "GetUsage", Permission::kUsage,
      [&](const Caller&, const v1::GetUsageRequest& req, v1::GetUsageResponse* resp) {
        ClusterUsage u = core_.usage(req.page_token());
        for (const NodeUsageEntry& n : u.nodes)
          *resp->add_nodes() = proto::toNodeUsage(n.report, n.received_unix_ms);
        for (const TenantUsageReport& t : u.totals) *resp->add_tenants() = proto::toProto(t);
        resp->set_latest_version(u.latest_version);
        resp->set_next_page_token(u.next_page_token);
        resp->set_total_nodes(u.total_nodes);
        resp->set_omitted_tenants(u.omitted_totals);
        return grpc::Status::OK;
      });
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* PolicyGrpcService::Allocate(
    grpc::CallbackServerContext* ctx) {
  const Caller caller = callerOf(*ctx, options_);
  auto reactor =
      std::make_shared<AllocateReactor>(allocate_hub_.get(), allocator_, caller, ctx->peer());
  AllocateReactor* raw = reactor.get();
  std::optional<grpc::Status> refusal;
  Status allowed = authorize(caller, "Allocate", Permission::kAllocate);
  if (!allowed.ok()) {
    TQ_LOG(kInfo, "refused: %s", allowed.message().c_str());
    refusal = toGrpcStatus(allowed);
  } else if (allocator_ == nullptr) {
    refusal = grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                           "Allocate: this server runs no cluster allocator");
  }
  allocate_hub_->add(std::move(reactor));
  raw->begin(refusal ? &*refusal : nullptr);
  return raw;
}

// ---------------------------------------------------------------------------------------------
// The call gate (makeCallGate)

namespace {

bool hasRole(const Caller& c) {
  if (c.insecure) return true;
  for (const std::string& g : c.groups) {
    if (g == kAdminsGroup || g == kViewersGroup || g == kAgentsGroup) return true;
  }
  return false;
}

constexpr std::string_view kPolicyServicePrefix = "/tenantqos.v1.PolicyService/";

class CallGate {
 public:
  explicit CallGate(GrpcServiceOptions options) : options_(options) {}
  const GrpcServiceOptions& options() const { return options_; }
  bool enter(const std::string& identity) {
    MutexLock lock(mu_);
    size_t& n = open_[identity];
    if (n >= options_.max_streams_per_identity) return false;
    ++n;
    return true;
  }
  void leave(const std::string& identity) {
    MutexLock lock(mu_);
    auto it = open_.find(identity);
    if (it != open_.end() && --it->second == 0) open_.erase(it);
  }

 private:
  const GrpcServiceOptions options_;
  Mutex mu_;
  std::unordered_map<std::string, size_t> open_ TQ_GUARDED_BY(mu_);  // streams open per identity
};

class GateInterceptor final : public grpc::experimental::Interceptor {
 public:
  GateInterceptor(grpc::experimental::ServerRpcInfo* info, CallGate* gate)
      : info_(info), gate_(gate) {}
  ~GateInterceptor() override {
    if (counted_) gate_->leave(identity_);
  }
  void Intercept(grpc::experimental::InterceptorBatchMethods* m) override {
    if (!decided_ && m->QueryInterceptionHookPoint(
                         grpc::experimental::InterceptionHookPoints::POST_RECV_INITIAL_METADATA)) {
      decided_ = true;
      decide();
    }
    m->Proceed();
  }

 private:
  void decide() {
    const std::string method = info_->method() != nullptr ? info_->method() : "";
    grpc::ServerContextBase* ctx = info_->server_context();
    const Caller caller = callerOf(*ctx, gate_->options());
    std::string why;
    if (method == "/grpc.health.v1.Health/Check") return;  // unary, a few bytes: anyone
    if (!hasRole(caller)) {
      why = caller.identity +
            " holds no tenantqos role: it may call grpc.health.v1.Health/Check "
            "only, not " +
            method;
    } else if (info_->type() != grpc::experimental::ServerRpcInfo::Type::UNARY) {
      if (gate_->enter(caller.identity)) {
        counted_ = true;
        identity_ = caller.identity;
        return;
      }
      why = caller.identity + " already has " +
            std::to_string(gate_->options().max_streams_per_identity) +
            " streams of health or reflection open (--max-streams-per-identity): " + method;
    } else {
      return;
    }
    TQ_LOG(kInfo, "refused (cancelled): %s", why.c_str());
    ctx->TryCancel();
  }

  grpc::experimental::ServerRpcInfo* info_;
  CallGate* gate_;
  bool decided_ = false;
  bool counted_ = false;
  std::string identity_;
};

class GateFactory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit GateFactory(GrpcServiceOptions options) : gate_(options) {}
  // PolicyService's own calls authorize themselves (service.h): they get no interceptor at
  // all, not one that lets them through. gRPC runs a call's interceptors on every message it
  // reads or writes, and the Allocate streams carry 10,000 reports a second from 1,000 agents
  // and a round's 1,000 caps messages (docs/fabric.md, "Caps through gRPC").
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    const char* method = info->method();
    if (method != nullptr && std::string_view(method).starts_with(kPolicyServicePrefix)) {
      return nullptr;
    }
    return new GateInterceptor(info, &gate_);
  }

 private:
  CallGate gate_;
};

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> makeCallGate(
    GrpcServiceOptions options) {
  return std::make_unique<GateFactory>(options);
}

}  // namespace tq::policy
