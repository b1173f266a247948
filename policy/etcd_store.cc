#include "policy/etcd_store.h"

#include <grpcpp/grpcpp.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "common/file_util.h"
#include "common/log.h"
#include "common/thread_annotations.h"
#include "etcd/rpc.grpc.pb.h"
#include "policy/etcd_txn.h"
#include "rpc/channel_ring.h"

namespace tq::policy {
namespace {

namespace pb = etcdserverpb;

constexpr int64_t kWatchRetryMs = 200;
// A leader lookup asks each member's Status; a member that does not answer within this (or
// request_timeout, if shorter) is skipped.
constexpr std::chrono::milliseconds kStatusTimeout{1000};
constexpr int kRangePage = 8;  // records per Range response (each up to ~4 MiB)

// The range_end that selects every key starting with `prefix` (etcd's clientv3.GetPrefixRangeEnd).
std::string prefixEnd(std::string p) {
  while (!p.empty()) {
    if (static_cast<unsigned char>(p.back()) < 0xff) {
      p.back() = static_cast<char>(static_cast<unsigned char>(p.back()) + 1);
      return p;
    }
    p.pop_back();
  }
  return std::string(1, '\0');
}

std::optional<uint64_t> parseDecimal(std::string_view s) {
  if (s.empty() || s.size() > 20) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    if (v > (UINT64_MAX - 9) / 10) return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  return v;
}

std::string joinTargets(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : ",") + s;
  return out;
}

// Plaintext when no TLS file is given (etcd on loopback, or behind its own network policy).
Result<std::shared_ptr<grpc::ChannelCredentials>> credentials(const EtcdStoreOptions& o) {
  rpc::TlsConfig tls = o.tls;
  tls.insecure = tls.ca_file.empty() && tls.cert_file.empty() && tls.key_file.empty();
  return rpc::channelCredentials(tls, rpc::ClientCertificate::kOptional);
}

// One etcd client endpoint: its channel, which a failed call renews (a ChannelRing of this one
// target: a failed target is never retried on its old channel, see ChannelRing::renew), and
// the etcd id of the member there.
struct Endpoint {
  Endpoint(const std::string& t, const rpc::ChannelRing::Factory& make)
      : target(t), channel({t}, make) {}
  const std::string target;
  rpc::ChannelRing channel;
  std::atomic<uint64_t> member_id{0};  // once the member here answered a Status (0: not yet)
};

class EtcdStore final : public IndexedPolicyStore {
 public:
  EtcdStore(EtcdStoreOptions o, const std::shared_ptr<grpc::ChannelCredentials>& creds)
      : o_(std::move(o)),
        epoch_key_(o_.prefix + "epoch"),
        latest_key_(o_.prefix + "latest"),
        versions_prefix_(o_.prefix + "versions/") {
    auto make = [creds](const std::string& target) {  // kept by each ring for renew()
      return makeEtcdChannel(target, creds);
    };
    for (const std::string& target : o_.endpoints) {
      endpoints_.push_back(std::make_unique<Endpoint>(target, make));
    }
  }

  ~EtcdStore() override {
    {
      MutexLock lock(mu_);
      stopping_ = true;
      if (watch_ctx_ != nullptr) watch_ctx_->TryCancel();
    }
    cv_.notify_all();
    {
      MutexLock lock(leader_mu_);
      leader_stopping_ = true;
    }
    leader_cv_.notify_all();
    if (watcher_.joinable()) watcher_.join();
    if (leader_finder_.joinable()) leader_finder_.join();
  }

  Status open() {
    findLeader();  // before the first call: the loads and the first apply already go there
    TQ_RETURN_IF_ERROR(loadEpoch());
    TQ_ASSIGN_OR_RETURN(Snapshot all, readAll());
    {
      MutexLock lock(mu_);
      installLocked(all);
    }
    watcher_ = std::thread([this] { watchLoop(); });
    leader_finder_ = std::thread([this] { leaderLoop(); });
    return okStatus();
  }

  // The transaction runs without mu_ (readers and the watch go on meanwhile); etcd's compare
  // on `latest`'s revision decides between racing appends, of this replica or another.
  Result<PolicyRecord> append(PolicyRecord record) override {
    const uint64_t n = record.version;
    int64_t latest_rev = 0;
    {
      MutexLock lock(mu_);
      if (n != index_.next()) {
        return failedPrecondition("append version " + std::to_string(n) +
                                  ": the store expects version " + std::to_string(index_.next()));
      }
      latest_rev = latest_rev_;
    }
    record.checksum = 0;
    const std::string bytes = encodeRecord(record);
    const std::string key = etcdRecordKey(o_.prefix, n);
    const uint64_t retired = newestRetiredVersion(n, o_.retain_versions);

    pb::TxnRequest txn;
    pb::Compare* c = txn.add_compare();  // nobody moved `latest` since this replica saw it
    c->set_key(latest_key_);
    c->set_target(pb::Compare::MOD);
    c->set_result(pb::Compare::EQUAL);
    c->set_mod_revision(latest_rev);
    compareKeyAbsent(&txn, key);  // and version n was never created (numbers are never reused)
    pb::PutRequest* put = txn.add_success()->mutable_request_put();
    put->set_key(key);
    put->set_value(bytes);
    put = txn.add_success()->mutable_request_put();
    put->set_key(latest_key_);
    put->set_value(std::to_string(n));
    if (retired > 0) {
      pb::DeleteRangeRequest* del = txn.add_success()->mutable_request_delete_range();
      del->set_key(versions_prefix_);
      del->set_range_end(etcdRecordKey(o_.prefix, retired + 1));
    }
    txn.add_failure()->mutable_request_range()->set_key(latest_key_);
    txn.add_failure()->mutable_request_range()->set_key(key);

    pb::TxnResponse resp;
    TQ_RETURN_IF_ERROR_CTX(
        unary("store policy version " + std::to_string(n), &pb::KV::Stub::Txn, txn, &resp),
        "store policy version " + std::to_string(n));
    int64_t rev = resp.header().revision();
    MutexLock lock(mu_);
    if (!resp.succeeded()) {
      // Lost the compare. Either another replica moved on, or this very transaction committed
      // on an attempt whose answer was lost (then versions/n holds exactly our bytes).
      const auto& latest_kvs = resp.responses(0).response_range().kvs();
      const auto& mine = resp.responses(1).response_range().kvs();
      if (!mine.empty() && mine[0].value() == bytes && !latest_kvs.empty() &&
          latest_kvs[0].value() == std::to_string(n)) {
        rev = latest_kvs[0].mod_revision();
      } else {
        uint64_t now = 0;
        if (!latest_kvs.empty()) now = parseDecimal(latest_kvs[0].value()).value_or(0);
        index_.sawVersion(now);
        return failedPrecondition("policy version " + std::to_string(n) +
                                  " was committed by another policyd replica first (the latest "
                                  "in etcd is now " +
                                  std::to_string(now) + ")");
      }
    }
    record.checksum = encodedChecksum(bytes);
    index_.addIntact(record);
    latest_rev_ = std::max(latest_rev_, rev);
    index_.eraseThrough(retired);
    return record;
  }

  Result<PolicyRecord> get(uint64_t version) const override {
    {
      MutexLock lock(mu_);
      if (auto answer = index_.answerWithoutReading(version)) return std::move(*answer);
    }
    pb::RangeRequest req;
    req.set_key(etcdRecordKey(o_.prefix, version));
    pb::RangeResponse resp;
    TQ_RETURN_IF_ERROR(
        unary("read policy version " + std::to_string(version), &pb::KV::Stub::Range, req, &resp));
    if (resp.kvs().empty()) {
      return notFound("policy version " + std::to_string(version) + " does not exist");
    }
    return decodeKv(resp.kvs(0), version);
  }

  std::string epoch() const override { return epoch_; }

  std::string describe() const override {
    return "etcd " + joinTargets(o_.endpoints) + " prefix " + o_.prefix;
  }

  Status sync() override {
    pb::RangeRequest req;
    req.set_key(latest_key_);
    pb::RangeResponse resp;
    TQ_RETURN_IF_ERROR(unary("read the latest policy version", &pb::KV::Stub::Range, req, &resp));
    uint64_t from = 0;
    {
      MutexLock lock(mu_);
      if (resp.kvs().empty() || resp.kvs(0).mod_revision() <= latest_rev_) return okStatus();
      from = index_.newest() + 1;
    }
    // The versions this replica has not seen, as of that read, read without mu_.
    const int64_t as_of = resp.header().revision();
    TQ_ASSIGN_OR_RETURN(std::vector<pb::KeyValue> records,
                        readRange(etcdRecordKey(o_.prefix, from), as_of));
    MutexLock lock(mu_);
    // The watch applied everything up to watched_rev_ in order, deletions included: when it
    // is past this read, the read adds nothing (and could only bring back what it retired).
    if (watched_rev_ >= as_of) return okStatus();
    for (const pb::KeyValue& kv : records) applyRecordKvLocked(kv);
    applyLatestKvLocked(resp.kvs(0));
    return okStatus();
  }

  void setOnExternalAppend(std::function<void()> fn) override {
    MutexLock lock(cb_mu_);
    on_external_ = std::move(fn);
  }

 private:
  // Runs one KV call on the KV endpoint (kv_at_, the leader once found); an unreachable member
  // (UNAVAILABLE) is retried on the next one, each endpoint once. No answer within
  // request_timeout is not retried: without quorum every member would time out the same way.
  // An answer from another raft term than the last leader lookup's (an election happened), or a
  // move to another endpoint, has the leader looked up again, in the background.
  template <typename Req, typename Resp>
  Status unary(const std::string& what,
               grpc::Status (pb::KV::Stub::*method)(grpc::ClientContext*, const Req&, Resp*),
               const Req& req, Resp* resp) const {
    grpc::Status st;
    size_t at = kv_at_.load();
    size_t tried = at;
    for (size_t attempt = 0; attempt < endpoints_.size(); ++attempt) {
      tried = at;
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + o_.request_timeout);
      auto stub = pb::KV::NewStub(endpoints_[at]->channel.current());
      st = (stub.get()->*method)(&ctx, req, resp);
      if (st.ok()) {
        const uint64_t term = resp->header().raft_term();
        seen_term_.store(term);
        if (term != leader_term_.load()) requestLeaderLookup();
        return okStatus();
      }
      if (st.error_code() != grpc::StatusCode::UNAVAILABLE) break;
      endpoints_[at]->channel.renew();
      const size_t next = (at + 1) % endpoints_.size();
      kv_at_.compare_exchange_strong(at, next);  // unless another call moved on already
      at = next;
      requestLeaderLookup();
    }
    return etcdError(what, endpoints_[tried]->target, st);
  }

  // Points KV calls (kv_at_) at the raft leader. A write sent to a follower is forwarded to the
  // leader and answered only once the follower applied it too: two more hops between etcd
  // processes on every apply (and a linearizable read on a follower asks the leader first).
  // Asks the members, starting with the KV endpoint, for their id and the leader's, until the
  // leader's endpoint is known. Best effort: without an answer (no leader, Status refused, an
  // endpoint that is not in the cluster) KV calls stay where they are, which is correct, one
  // hop slower. Blocks on etcd (up to kStatusTimeout per member); takes no store lock.
  void findLeader() const {
    leader_term_.store(seen_term_.load());  // a failed lookup is not repeated within this term
    const size_t n = endpoints_.size();
    const size_t from = kv_at_.load();
    const auto timeout = std::min<std::chrono::milliseconds>(kStatusTimeout, o_.request_timeout);
    uint64_t leader = 0;
    for (size_t i = 0; i < n; ++i) {
      Endpoint& e = *endpoints_[(from + i) % n];
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + timeout);
      pb::StatusResponse s;
      grpc::Status st =
          pb::Maintenance::NewStub(e.channel.current())->Status(&ctx, pb::StatusRequest(), &s);
      if (!st.ok()) {
        // An unreachable member's channel is renewed, as in unary(); a refusal is not.
        if (st.error_code() == grpc::StatusCode::UNAVAILABLE) e.channel.renew();
        TQ_LOG(kDebug, "policy store: etcd %s: status: %s", e.target.c_str(),
               st.error_message().c_str());
        continue;
      }
      e.member_id.store(s.header().member_id());
      if (leader == 0 && s.leader() != 0) {
        leader = s.leader();
        leader_term_.store(s.raftterm());
      }
      for (size_t k = 0; leader != 0 && k < n; ++k) {
        if (endpoints_[k]->member_id.load() != leader) continue;
        if (kv_at_.exchange(k) != k) {
          TQ_LOG(kDebug,
                 "policy store: etcd leader is %s (raft term %" PRIu64 "); KV calls go there",
                 endpoints_[k]->target.c_str(), leader_term_.load());
        }
        return;
      }
    }
  }

  void requestLeaderLookup() const {
    MutexLock lock(leader_mu_);
    find_leader_ = true;
    leader_cv_.notify_one();
  }

  void leaderLoop() {
    pthread_setname_np(pthread_self(), "tq-etcd-leader");
    MutexLock lock(leader_mu_);
    for (;;) {
      leader_cv_.wait(lock.native(), [this]() TQ_REQUIRES(leader_mu_) {
        return leader_stopping_ || find_leader_;
      });
      if (leader_stopping_) return;
      find_leader_ = false;
      lock.unlock();
      findLeader();
      lock.lock();
    }
  }

  Status etcdError(const std::string& what, const std::string& target,
                   const grpc::Status& st) const {
    const std::string where = "etcd " + target + " (of " + joinTargets(o_.endpoints) + ")";
    switch (st.error_code()) {
      case grpc::StatusCode::UNAVAILABLE:
        return unavailable(where + ": unreachable, or without quorum (" + st.error_message() +
                           "); " + what + " is not acknowledged");
      case grpc::StatusCode::DEADLINE_EXCEEDED:
        return unavailable(
            where + ": no answer within " + std::to_string(o_.request_timeout.count()) +
            " ms (etcd has no quorum, or is overloaded); " + what + " is not acknowledged");
      case grpc::StatusCode::RESOURCE_EXHAUSTED:
        return resourceExhausted(where + ": " + st.error_message());
      case grpc::StatusCode::INVALID_ARGUMENT:
        // "etcdserver: request is too large": etcd's --max-request-bytes.
        return resourceExhausted(where + ": " + st.error_message() +
                                 " (raise etcd's --max-request-bytes, docs/deploy.md)");
      case grpc::StatusCode::UNAUTHENTICATED:
      case grpc::StatusCode::PERMISSION_DENIED:
        return permissionDenied(where + ": " + st.error_message());
      default:
        return internalError(where + ": " + what + ": " + st.error_message() + " (grpc code " +
                             std::to_string(static_cast<int>(st.error_code())) + ")");
    }
  }

  Status loadEpoch() {
    TQ_ASSIGN_OR_RETURN(const std::string fresh, newStoreEpoch());
    const pb::TxnRequest txn = createOrReadTxn(epoch_key_, fresh);
    pb::TxnResponse resp;
    TQ_RETURN_IF_ERROR(unary("create or read the store epoch", &pb::KV::Stub::Txn, txn, &resp));
    if (resp.succeeded()) {
      epoch_ = fresh;
      TQ_LOG(kInfo, "policy store %s: new store epoch %s", describe().c_str(), fresh.c_str());
      return okStatus();
    }
    const auto& kvs = resp.responses(0).response_range().kvs();
    std::string e = kvs.empty() ? "" : kvs[0].value();
    if (!isValidStoreEpoch(e)) {
      return dataLoss("etcd key " + epoch_key_ +
                      " is not a store epoch (32 hex digits); restore "
                      "it, or delete it to give the store a new identity");
    }
    epoch_ = e;
    return okStatus();
  }

  // Decodes one record value; kDataLoss naming the key when it is not an intact record of
  // `version`.
  Result<PolicyRecord> decodeKv(const pb::KeyValue& kv, uint64_t version) const {
    if (kv.value().size() > o_.max_record_bytes) {
      return dataLoss("etcd key " + kv.key() + ": " + std::to_string(kv.value().size()) +
                      " bytes, more than the limit of " + std::to_string(o_.max_record_bytes));
    }
    Result<PolicyRecord> rec = decodeRecord(kv.value());
    if (!rec.ok()) return rec.status().withContext("etcd key " + kv.key());
    if (rec->version != version) {
      return dataLoss("etcd key " + kv.key() + ": holds version " + std::to_string(rec->version));
    }
    return rec;
  }

  // A put of versions/N (from a load or the watch): idempotent.
  void applyRecordKvLocked(const pb::KeyValue& kv) TQ_REQUIRES(mu_) {
    auto version = parseDecimal(std::string_view(kv.key()).substr(versions_prefix_.size()));
    if (!version) {
      TQ_LOG(kWarn, "policy store: ignoring unexpected etcd key %s", kv.key().c_str());
      return;
    }
    Result<PolicyRecord> rec = decodeKv(kv, *version);
    if (!rec.ok()) {
      index_.addCorrupt(*version, rec.status().message());
      TQ_LOG(kError, "policy store: version %" PRIu64 " is corrupt and will not be served: %s",
             *version, rec.status().message().c_str());
      return;
    }
    index_.addIntact(std::move(*rec));
  }

  void applyLatestKvLocked(const pb::KeyValue& kv) TQ_REQUIRES(mu_) {
    if (kv.mod_revision() <= latest_rev_) return;
    latest_rev_ = kv.mod_revision();
    if (auto v = parseDecimal(kv.value())) index_.sawVersion(*v);
  }

  // Reads versions/[from_key, end) as of `revision` (0 = now), page by page. Round trips:
  // never under mu_.
  Result<std::vector<pb::KeyValue>> readRange(std::string from_key, int64_t revision) const
      TQ_EXCLUDES(mu_) {
    const std::string end = prefixEnd(versions_prefix_);
    std::vector<pb::KeyValue> out;
    for (;;) {
      pb::RangeRequest req;
      req.set_key(from_key);
      req.set_range_end(end);
      req.set_limit(kRangePage);
      req.set_revision(revision);
      pb::RangeResponse resp;
      TQ_RETURN_IF_ERROR(unary("read policy versions", &pb::KV::Stub::Range, req, &resp));
      if (!resp.more() || resp.kvs().empty()) {
        for (pb::KeyValue& kv : *resp.mutable_kvs()) out.push_back(std::move(kv));
        return out;
      }
      // The next page starts right after this one's last key: taken before the records are
      // moved out (a moved-from key is empty, and a page from "\0" starts over, for ever).
      from_key = resp.kvs(resp.kvs_size() - 1).key() + std::string(1, '\0');
      for (pb::KeyValue& kv : *resp.mutable_kvs()) out.push_back(std::move(kv));
    }
  }

  // Everything under the prefix, consistently as of one revision.
  struct Snapshot {
    int64_t revision = 0;
    std::optional<pb::KeyValue> latest;
    std::vector<pb::KeyValue> records;
  };
  Result<Snapshot> readAll() const TQ_EXCLUDES(mu_) {
    pb::RangeRequest req;
    req.set_key(latest_key_);
    pb::RangeResponse resp;
    TQ_RETURN_IF_ERROR(unary("read the latest policy version", &pb::KV::Stub::Range, req, &resp));
    Snapshot s;
    s.revision = resp.header().revision();
    if (!resp.kvs().empty()) s.latest = resp.kvs(0);
    TQ_ASSIGN_OR_RETURN(s.records, readRange(versions_prefix_, s.revision));
    return s;
  }
  // Replaces what the index holds with `s`; the watch resumes after its revision.
  void installLocked(const Snapshot& s) TQ_REQUIRES(mu_) {
    index_.clear();
    latest_rev_ = 0;
    for (const pb::KeyValue& kv : s.records) applyRecordKvLocked(kv);
    if (s.latest) applyLatestKvLocked(*s.latest);
    watched_rev_ = s.revision;
  }

  // True if anything changed.
  bool applyEventsLocked(const pb::WatchResponse& w) TQ_REQUIRES(mu_) {
    bool changed = false;
    for (const pb::Event& e : w.events()) {
      const pb::KeyValue& kv = e.kv();
      watched_rev_ = std::max(watched_rev_, kv.mod_revision());
      const bool is_version = kv.key().rfind(versions_prefix_, 0) == 0;
      if (e.type() == pb::Event::DELETE) {
        if (!is_version) continue;
        auto v = parseDecimal(std::string_view(kv.key()).substr(versions_prefix_.size()));
        if (v && index_.erase(*v)) changed = true;
        continue;
      }
      if (kv.key() == latest_key_) {
        const int64_t before = latest_rev_;
        applyLatestKvLocked(kv);
        changed |= latest_rev_ != before;
      } else if (is_version) {
        auto v = parseDecimal(std::string_view(kv.key()).substr(versions_prefix_.size()));
        if (v && !index_.holds(*v)) {
          applyRecordKvLocked(kv);
          changed = true;
        }
      }
    }
    return changed;
  }

  void notifyExternal() {
    std::function<void()> fn;
    {
      MutexLock lock(cb_mu_);
      fn = on_external_;
    }
    if (fn) fn();
  }

  void watchLoop() {
    pthread_setname_np(pthread_self(), "tq-etcd-watch");
    bool reload = false;
    for (;;) {
      grpc::ClientContext ctx;
      // A member that lost its leader ends the stream (clientv3's WithRequireLeader), so the
      // watch moves to a member of the majority instead of going silent.
      ctx.AddMetadata("hasleader", "true");
      pb::WatchRequest req;
      bool reloaded = false;
      std::optional<Snapshot> all;
      if (reload) {  // read without mu_, installed under it below
        Result<Snapshot> got = readAll();
        if (got.ok()) {
          all = std::move(*got);
        } else {
          TQ_LOG(kWarn, "policy store: reload after compaction: %s",
                 got.status().message().c_str());
        }
      }
      {
        MutexLock lock(mu_);
        if (stopping_) return;
        if (all) {
          installLocked(*all);
          reload = false;
          reloaded = true;
        }
        watch_ctx_ = &ctx;
        pb::WatchCreateRequest* create = req.mutable_create_request();
        create->set_key(o_.prefix);
        create->set_range_end(prefixEnd(o_.prefix));
        create->set_start_revision(watched_rev_ + 1);
      }
      if (reloaded) notifyExternal();
      Endpoint& at = *endpoints_[watch_at_];
      auto stub = pb::Watch::NewStub(at.channel.current());
      auto stream = stub->Watch(&ctx);
      bool wrote = stream->Write(req);
      pb::WatchResponse resp;
      while (wrote && stream->Read(&resp)) {
        if (resp.compact_revision() > 0 || resp.canceled()) {
          TQ_LOG(kWarn,
                 "policy store: etcd watch cancelled (%s, compacted at %" PRId64 "); reloading",
                 resp.cancel_reason().c_str(), resp.compact_revision());
          reload = true;
          ctx.TryCancel();
          break;
        }
        bool changed;
        {
          MutexLock lock(mu_);
          changed = applyEventsLocked(resp);
        }
        if (changed) notifyExternal();
      }
      stream->WritesDone();
      grpc::Status st = stream->Finish();
      MutexLock lock(mu_);
      watch_ctx_ = nullptr;
      if (stopping_) return;
      TQ_LOG(kDebug, "policy store: etcd watch on %s ended (%s); resuming from revision %" PRId64,
             at.target.c_str(), st.error_message().c_str(), watched_rev_ + 1);
      at.channel.renew();
      watch_at_ = (watch_at_ + 1) % endpoints_.size();
      cv_.wait_for(lock.native(), std::chrono::milliseconds(kWatchRetryMs),
                   [this]() TQ_REQUIRES(mu_) { return stopping_; });
    }
  }

  const EtcdStoreOptions o_;
  const std::string epoch_key_;
  const std::string latest_key_;
  const std::string versions_prefix_;
  std::vector<std::unique_ptr<Endpoint>> endpoints_;  // one per o_.endpoints entry
  // KV calls go to endpoints_[kv_at_]: the raft leader once findLeader() found it, else the
  // next endpoint after one that was unreachable.
  mutable std::atomic<size_t> kv_at_{0};
  mutable std::atomic<uint64_t> seen_term_{0};    // raft term of the latest KV answer
  mutable std::atomic<uint64_t> leader_term_{0};  // raft term of the last leader lookup
  size_t watch_at_ = 0;  // the watch's endpoint (watch thread only; any member serves a watch)
  std::string epoch_;    // set in open(), then constant

  // The leader finder thread runs findLeader() when a KV call asks for it.
  mutable Mutex leader_mu_;
  mutable std::condition_variable leader_cv_;
  mutable bool find_leader_ TQ_GUARDED_BY(leader_mu_) = false;
  bool leader_stopping_ TQ_GUARDED_BY(leader_mu_) = false;
  std::thread leader_finder_;

  std::condition_variable cv_;  // with mu_ (IndexedPolicyStore)
  // mod_revision of <prefix>latest as last seen (0: absent).
  int64_t latest_rev_ TQ_GUARDED_BY(mu_) = 0;
  int64_t watched_rev_ TQ_GUARDED_BY(mu_) = 0;  // everything up to this etcd revision is applied
  bool stopping_ TQ_GUARDED_BY(mu_) = false;
  grpc::ClientContext* watch_ctx_ TQ_GUARDED_BY(mu_) = nullptr;

  Mutex cb_mu_;  // the callback is called without mu_ (it reads the store)
  std::function<void()> on_external_ TQ_GUARDED_BY(cb_mu_);
  std::thread watcher_;
};

}  // namespace

Result<std::shared_ptr<grpc::ChannelCredentials>> etcdCredentials(const EtcdStoreOptions& options) {
  return credentials(options);
}

std::shared_ptr<grpc::Channel> makeEtcdChannel(
    const std::string& target, const std::shared_ptr<grpc::ChannelCredentials>& credentials) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(128 << 20);
  args.SetMaxSendMessageSize(128 << 20);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10'000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5'000);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1'000);
  return grpc::CreateCustomChannel(target, credentials, args);
}

std::string etcdRecordKey(const std::string& prefix, uint64_t version) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%020" PRIu64, version);
  return prefix + "versions/" + buf;
}

Result<std::unique_ptr<PolicyStore>> openEtcdStore(const EtcdStoreOptions& options) {
  if (options.endpoints.empty()) return invalidArgument("etcd store: no endpoints");
  if (options.prefix.empty()) return invalidArgument("etcd store: empty prefix");
  if (options.retain_versions == 0) return invalidArgument("etcd store: retain_versions is 0");
  TQ_ASSIGN_OR_RETURN(auto creds, credentials(options));
  auto store = std::make_unique<EtcdStore>(options, creds);
  TQ_RETURN_IF_ERROR_CTX(store->open(), "open policy store " + store->describe());
  return std::unique_ptr<PolicyStore>(std::move(store));
}

}  // namespace tq::policy
