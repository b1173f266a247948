// Functional tests of tenantqos-policyd and tenantqosctl: the real binaries as child processes,
// listening on 127.0.0.1 port 0, talked to over gRPC (C++ here; Python in policyd_python_test.py).
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <thread>

#include "common/thread_annotations.h"
#include "policy/file_store.h"
#include "policy/policy_file.h"
#include "proto/allocate_codec.h"
#include "proto/snapshot_codec.h"
#include "tenantqos/v1/policy.grpc.pb.h"
#include "tests/functional/subprocess.h"
#include "tests/functional/test_pki.h"

namespace tq::test {
namespace {

namespace v1 = tenantqos::v1;
using namespace std::chrono_literals;

const std::string kPolicyd = TQ_POLICYD_BIN;
const std::string kCtl = TQ_CTL_BIN;
const std::string kExample = std::string(TQ_SOURCE_DIR) + "/examples/policy.yaml";
const std::string kCertScript = std::string(TQ_SOURCE_DIR) + "/scripts/tq-certs.sh";

std::string examplePolicy() { return readWholeFile(kExample); }

// The example with tenant-a's limit changed: a distinct valid policy per value (41..100 Gbps).
std::string policyWithLimit(int gbps) {
  std::string s = examplePolicy();
  s.replace(s.find("limit: 60Gbps"), 13, "limit: " + std::to_string(gbps) + "Gbps");
  return s;
}

class Watcher {
 public:
  // `deflated`: asks for deflated snapshots (WatchPolicyRequest.accept_deflated) and keeps
  // them as they came (last()).
  Watcher(std::shared_ptr<grpc::Channel> channel, uint64_t known_version,
          std::string node = "test-node", bool deflated = false) {
    ctx_.set_deadline(std::chrono::system_clock::now() +
                      120s);  // bounds the test even if it goes wrong
    thread_ = std::thread([this, channel, known_version, node, deflated] {
      auto stub = v1::PolicyService::NewStub(channel);
      v1::WatchPolicyRequest req;
      req.set_node(node);
      req.set_known_version(known_version);
      req.set_accept_deflated(deflated);
      auto reader = stub->WatchPolicy(&ctx_, req);
      started_ = true;
      v1::PolicySnapshot s;
      while (reader->Read(&s)) {
        MutexLock lock(mu_);
        versions_.push_back(s.version());
        last_ = s;
      }
      grpc::Status st = reader->Finish();
      MutexLock lock(mu_);
      status_ = st;
      done_ = true;
    });
  }
  ~Watcher() {
    pollUntil([&] { return started_.load(); }, 10s);
    ctx_.TryCancel();
    thread_.join();
  }
  std::vector<uint64_t> versions() {
    MutexLock lock(mu_);
    return versions_;
  }
  v1::PolicySnapshot last() {
    MutexLock lock(mu_);
    return last_;
  }
  bool waitForVersion(uint64_t v, std::chrono::milliseconds timeout = 10s) {
    return pollUntil(
        [&] {
          MutexLock lock(mu_);
          return !versions_.empty() && versions_.back() >= v;
        },
        timeout);
  }
  bool waitDone(std::chrono::milliseconds timeout) {
    return pollUntil(
        [&] {
          MutexLock lock(mu_);
          return done_;
        },
        timeout);
  }
  grpc::Status status() {
    MutexLock lock(mu_);
    return status_;
  }

 private:
  grpc::ClientContext ctx_;
  std::thread thread_;
  std::atomic<bool> started_{false};
  Mutex mu_;
  std::vector<uint64_t> versions_ TQ_GUARDED_BY(mu_);
  v1::PolicySnapshot last_ TQ_GUARDED_BY(mu_);
  grpc::Status status_ TQ_GUARDED_BY(mu_);
  bool done_ TQ_GUARDED_BY(mu_) = false;
};

class PolicydTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = "/tmp/tqpol-" + std::to_string(getpid()) + "-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    data_ = dir_ + "/data";
    log_ = dir_ + "/policyd.log";
    pki_ = std::make_unique<TestPki>(kCertScript, dir_ + "/pki", std::vector<std::string>{"node1"});
    ASSERT_TRUE(pki_->ok()) << "scripts/tq-certs.sh failed";
  }
  void TearDown() override {
    proc_.reset();
    if (HasFailure()) std::cerr << "--- policyd log:\n" << readWholeFile(log_) << "---\n";
    ASSERT_EQ(system(("rm -rf " + dir_).c_str()), 0);
  }

  // Starts policyd on 127.0.0.1:0 with mutual TLS (certificate "policyd", unless `extra` has
  // --insecure or --tls-cert) and returns the port it bound.
  int start(const std::vector<std::string>& extra = {}) {
    const std::string port_file = dir_ + "/port" + std::to_string(++starts_);
    std::vector<std::string> argv = {kPolicyd, "--listen",    "127.0.0.1:0", "--data-dir",
                                     data_,    "--port-file", port_file};
    argv.insert(argv.end(), extra.begin(), extra.end());
    if (std::find(extra.begin(), extra.end(), "--insecure") == extra.end() &&
        std::find(extra.begin(), extra.end(), "--tls-cert") == extra.end()) {
      for (const std::string& f : pki_->flags("policyd")) argv.push_back(f);
    }
    proc_ = std::make_unique<ChildProcess>(argv, log_);
    bool up =
        pollUntil([&] { return !readWholeFile(port_file).empty() || !proc_->running(); }, 15s);
    EXPECT_TRUE(up) << "policyd did not write its port file";
    port_ = std::atoi(readWholeFile(port_file).c_str());
    EXPECT_GT(port_, 0);
    // Scripts parse this line.
    EXPECT_NE(readWholeFile(log_).find("listening on 127.0.0.1:" + std::to_string(port_)),
              std::string::npos);
    return port_;
  }

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  // A channel presenting certificate `cert` ("admin", "viewer", "agent-node1", ...; "" =
  // plaintext); `own_connection` gives it a TCP connection of its own (not shared with others).
  std::shared_ptr<grpc::Channel> channel(bool own_connection = false,
                                         const std::string& cert = "admin") {
    return channelWith(cert.empty() ? grpc::InsecureChannelCredentials() : pki_->credentials(cert),
                       own_connection);
  }
  std::shared_ptr<grpc::Channel> channelWith(std::shared_ptr<grpc::ChannelCredentials> creds,
                                             bool own_connection = true) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(16 << 20);
    if (own_connection) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    return grpc::CreateCustomChannel(address(), std::move(creds), args);
  }
  std::unique_ptr<v1::PolicyService::Stub> stub(const std::string& cert = "admin") {
    return v1::PolicyService::NewStub(channel(false, cert));
  }

  grpc::Status apply(const std::string& yaml, v1::ApplyPolicyResponse* resp = nullptr,
                     std::optional<uint64_t> expected = std::nullopt, bool dry_run = false) {
    v1::ApplyPolicyRequest req;
    req.set_policy_yaml(yaml);
    req.set_source_name("p.yaml");
    req.set_dry_run(dry_run);
    if (expected) req.set_expected_version(*expected);
    v1::ApplyPolicyResponse local;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    return stub()->ApplyPolicy(&ctx, req, resp ? resp : &local);
  }

  grpc::Status get(uint64_t version, v1::PolicySnapshot* out) {
    v1::GetPolicyRequest req;
    req.set_version(version);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    return stub()->GetPolicy(&ctx, req, out);
  }

  v1::ListVersionsResponse list() {
    v1::ListVersionsResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    EXPECT_TRUE(stub()->ListVersions(&ctx, v1::ListVersionsRequest(), &resp).ok());
    return resp;
  }

  // Raw bytes to a method (for garbage and hand-encoded standard services).
  grpc::Status rawCall(const std::string& method, const std::string& bytes,
                       std::string* response = nullptr) {
    grpc::GenericStub generic(channel());
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    grpc::Slice slice(bytes);
    grpc::ByteBuffer req(&slice, 1), resp;
    std::promise<grpc::Status> done;
    generic.UnaryCall(&ctx, method, grpc::StubOptions(), &req, &resp,
                      [&](grpc::Status s) { done.set_value(s); });
    grpc::Status s = done.get_future().get();
    if (s.ok() && response != nullptr) {
      std::vector<grpc::Slice> slices;
      (void)resp.Dump(&slices);
      response->clear();
      for (auto& sl : slices)
        response->append(reinterpret_cast<const char*>(sl.begin()), sl.size());
    }
    return s;
  }

  // tenantqosctl with certificate `cert` (from the environment, like a user's shell).
  ProcessResult ctl(const std::vector<std::string>& args, const std::string& input = "",
                    const std::string& cert = "admin") {
    std::vector<std::string> argv = {kCtl};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<std::string> env = pki_->env(cert);
    env.push_back("TENANTQOS_SERVER=" + address());
    return runProcess(argv, env, input, 30s);
  }

  std::string writeFile(const std::string& name, const std::string& content) {
    std::string p = dir_ + "/" + name;
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }

  std::string dir_, data_, log_;
  std::unique_ptr<TestPki> pki_;
  std::unique_ptr<ChildProcess> proc_;
  int port_ = 0;
  int starts_ = 0;
};

TEST_F(PolicydTest, ApplyGetAndAWatcherReceivesTheVersion) {
  start();
  v1::PolicySnapshot snap;
  EXPECT_EQ(get(0, &snap).error_code(), grpc::StatusCode::NOT_FOUND);
  Watcher w(channel(true), 0);
  v1::ApplyPolicyResponse resp;
  ASSERT_TRUE(apply(examplePolicy(), &resp).ok());
  EXPECT_EQ(resp.version(), 1u);
  EXPECT_TRUE(resp.changed());
  ASSERT_EQ(resp.diff_size(), 2);
  EXPECT_EQ(resp.diff(0).tenant(), "tenant-a");
  EXPECT_EQ(resp.diff(0).kind(), v1::TenantChange::ADDED);

  ASSERT_TRUE(get(0, &snap).ok());
  EXPECT_EQ(snap.version(), 1u);
  EXPECT_EQ(snap.source_yaml(), examplePolicy());
  ASSERT_EQ(snap.policy().tenants_size(), 2);
  EXPECT_EQ(snap.policy().tenants(0).guarantee_bytes_per_second(), 5'000'000'000u);
  EXPECT_NE(snap.checksum(), 0u);

  ASSERT_TRUE(w.waitForVersion(1));
  EXPECT_EQ(w.versions(), std::vector<uint64_t>{1});
  EXPECT_EQ(w.last().policy().SerializeAsString(), snap.policy().SerializeAsString());
  EXPECT_TRUE(w.last().source_yaml().empty());  // watch snapshots stay small
  EXPECT_TRUE(w.last().deflated().empty()) << "a watcher that did not ask gets plain snapshots";

  // One that asks gets the same snapshot deflated (proto/snapshot_codec.h).
  Watcher z(channel(), 0, "test-node-z", /*deflated=*/true);
  ASSERT_TRUE(z.waitForVersion(1));
  const v1::PolicySnapshot packed = z.last();
  EXPECT_FALSE(packed.deflated().empty());
  EXPECT_FALSE(packed.has_policy());
  EXPECT_EQ(packed.version(), 1u);
  auto inflated = proto::inflateSnapshot(packed);
  ASSERT_TRUE(inflated.ok()) << inflated.status().message();
  EXPECT_EQ(inflated->SerializeAsString(), w.last().SerializeAsString());

  ASSERT_TRUE(apply(policyWithLimit(70)).ok());
  ASSERT_TRUE(w.waitForVersion(2));
  EXPECT_EQ(w.versions(), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(w.last().policy().tenants(0).limit_bytes_per_second(), 8'750'000'000u);

  // A watcher that knows the latest gets nothing until the next version; one that knows an
  // older version gets the latest at once.
  Watcher current(channel(), 2), behind(channel(), 1);
  ASSERT_TRUE(behind.waitForVersion(2));
  ASSERT_TRUE(apply(policyWithLimit(75)).ok());
  ASSERT_TRUE(current.waitForVersion(3));
  EXPECT_EQ(current.versions(), std::vector<uint64_t>{3});
  ASSERT_TRUE(behind.waitForVersion(3));
  EXPECT_EQ(behind.versions(), (std::vector<uint64_t>{2, 3}));
}

TEST_F(PolicydTest, ABadFileIsRejectedAndNothingChanges) {
  start();
  ASSERT_TRUE(apply(examplePolicy()).ok());
  Watcher w(channel(), 0);
  ASSERT_TRUE(w.waitForVersion(1));
  v1::PolicySnapshot before;
  ASSERT_TRUE(get(0, &before).ok());

  std::string bad = policyWithLimit(30);               // limit < guarantee (line 37)
  bad.replace(bad.find("dscp: 18"), 8, "dscp: 99");    // out of range
  bad.replace(bad.find("weight: 2"), 9, "wieght: 2");  // typo
  grpc::Status s = apply(bad);
  ASSERT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("3 errors in policy:"), std::string::npos) << s.error_message();
  EXPECT_NE(s.error_message().find("tenants[0].limit: must be >= guarantee"), std::string::npos)
      << s.error_message();
  EXPECT_NE(s.error_message().find("tenants[1].dscp: must be between 0 and 63, got 99"),
            std::string::npos);
  EXPECT_NE(s.error_message().find("did you mean \"weight\"?"), std::string::npos);
  for (const std::string& junk :
       {std::string("limit: [oops\n"), std::string("{{{"), std::string("")}) {
    EXPECT_EQ(apply(junk).error_code(), grpc::StatusCode::INVALID_ARGUMENT) << junk;
  }

  v1::PolicySnapshot after;
  ASSERT_TRUE(get(0, &after).ok());
  EXPECT_EQ(after.SerializeAsString(), before.SerializeAsString());  // version and content
  EXPECT_EQ(list().versions_size(), 1);
  // Nothing was published either: the next message is the next good version.
  ASSERT_TRUE(apply(policyWithLimit(70)).ok());
  ASSERT_TRUE(w.waitForVersion(2));
  EXPECT_EQ(w.versions(), (std::vector<uint64_t>{1, 2}));
}

TEST_F(PolicydTest, StaleExpectedVersionFailsWithFailedPrecondition) {
  start();
  ASSERT_TRUE(apply(examplePolicy(), nullptr, 0).ok());
  ASSERT_TRUE(apply(policyWithLimit(70), nullptr, 1).ok());
  grpc::Status s = apply(policyWithLimit(80), nullptr, 1);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("the latest version is 2"), std::string::npos)
      << s.error_message();
  v1::PolicySnapshot snap;
  ASSERT_TRUE(get(0, &snap).ok());
  EXPECT_EQ(snap.version(), 2u);
  // Identical content stores nothing; a dry run stores nothing.
  v1::ApplyPolicyResponse same, dry;
  ASSERT_TRUE(apply(policyWithLimit(70), &same).ok());
  EXPECT_FALSE(same.changed());
  EXPECT_EQ(same.version(), 2u);
  ASSERT_TRUE(apply(policyWithLimit(90), &dry, std::nullopt, true).ok());
  EXPECT_TRUE(dry.dry_run());
  EXPECT_EQ(dry.version(), 3u);
  EXPECT_EQ(list().versions_size(), 2);
}

TEST_F(PolicydTest, Kill9AndRestartServeTheSameVersionAndHistory) {
  start();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(apply(policyWithLimit(61 + i)).ok());
  v1::PolicySnapshot before;
  ASSERT_TRUE(get(0, &before).ok());
  v1::ListVersionsResponse history_before = list();
  proc_->signal(SIGKILL);
  ASSERT_TRUE(proc_->wait(10s).has_value());
  start();
  v1::PolicySnapshot after;
  ASSERT_TRUE(get(0, &after).ok());
  EXPECT_EQ(after.version(), 3u);
  EXPECT_EQ(after.SerializeAsString(), before.SerializeAsString());
  EXPECT_EQ(list().SerializeAsString(), history_before.SerializeAsString());
  // And it continues the sequence.
  v1::ApplyPolicyResponse resp;
  ASSERT_TRUE(apply(policyWithLimit(80), &resp).ok());
  EXPECT_EQ(resp.version(), 4u);
}

TEST_F(PolicydTest, CorruptLatestRecordRefusesToStartUnlessServeNewestIntact) {
  start({"--metrics", "127.0.0.1:0"});
  ASSERT_TRUE(apply(policyWithLimit(61)).ok());
  ASSERT_TRUE(apply(policyWithLimit(62)).ok());
  proc_->signal(SIGTERM);
  ASSERT_TRUE(proc_->wait(10s).has_value());
  std::string rec = data_ + "/versions/" + tq::policy::recordFileName(2);
  std::string bytes = readWholeFile(rec);
  bytes[bytes.size() / 2] ^= 0x40;
  std::ofstream(rec, std::ios::binary | std::ios::trunc) << bytes;
  // Agents may enforce version 2 already: serving 1 as the latest would be silent. Refused,
  // naming the file and the way out.
  std::vector<std::string> argv = {kPolicyd, "--listen", "127.0.0.1:0", "--data-dir", data_};
  for (const std::string& f : pki_->flags("policyd")) argv.push_back(f);
  auto refused = runProcess(argv, {}, "", 20s);
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_NE(refused.err.find(rec), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("--serve-newest-intact"), std::string::npos) << refused.err;

  start({"--metrics", "127.0.0.1:0", "--serve-newest-intact"});
  EXPECT_NE(readWholeFile(log_).find("version 2 is corrupt"), std::string::npos);
  v1::PolicySnapshot snap;
  ASSERT_TRUE(get(0, &snap).ok());
  EXPECT_EQ(snap.version(), 1u);
  auto versions = list();
  ASSERT_EQ(versions.versions_size(), 2);
  EXPECT_FALSE(versions.versions(0).intact());
  EXPECT_NE(versions.versions(0).problem().find("checksum"), std::string::npos);
  EXPECT_EQ(get(2, &snap).error_code(), grpc::StatusCode::DATA_LOSS);
  // Health: the process serves, the store's health service says it is degraded.
  std::string health;
  const std::string store_service = "tenantqos.v1.PolicyStore";
  ASSERT_TRUE(rawCall("/grpc.health.v1.Health/Check",
                      std::string("\x0a") + static_cast<char>(store_service.size()) + store_service,
                      &health)
                  .ok());
  EXPECT_EQ(health, std::string("\x08\x02", 2)) << "want NOT_SERVING";
  // The metrics say so.
  std::string log = readWholeFile(log_);
  size_t at = log.rfind("metrics on http://127.0.0.1:");
  ASSERT_NE(at, std::string::npos);
  int mport = std::atoi(log.c_str() + at + std::strlen("metrics on http://127.0.0.1:"));
  auto scrape = runProcess(
      {"/usr/bin/curl", "-sf", "http://127.0.0.1:" + std::to_string(mport) + "/metrics"});
  ASSERT_EQ(scrape.exit_code, 0) << scrape.err;
  EXPECT_NE(scrape.out.find("tenantqos_policyd_store_corrupt_records 1"), std::string::npos)
      << scrape.out;
  EXPECT_NE(scrape.out.find("tenantqos_policyd_store_newest_corrupt_version 2"), std::string::npos);
  EXPECT_NE(scrape.out.find("tenantqos_policyd_policy_version 1"), std::string::npos);
  // Version numbers move on past the corrupt one.
  v1::ApplyPolicyResponse resp;
  ASSERT_TRUE(apply(policyWithLimit(70), &resp).ok());
  EXPECT_EQ(resp.version(), 3u);
}

// The store epoch: on every snapshot; a watcher of another store gets this store's latest
// whatever it holds; a watcher holding a newer version of this store gets the (older) latest,
// so that it reports it, and policyd counts it.
TEST_F(PolicydTest, StoreEpochOnSnapshotsAndWatchersOfAnotherStore) {
  start({"--metrics", "127.0.0.1:0"});
  ASSERT_TRUE(apply(policyWithLimit(61)).ok());
  v1::PolicySnapshot snap;
  ASSERT_TRUE(get(0, &snap).ok());
  const std::string epoch = snap.store_epoch();
  ASSERT_EQ(epoch.size(), 32u);
  EXPECT_EQ(readWholeFile(data_ + "/store-epoch"), epoch + "\n");

  auto watch = [&](uint64_t known, const std::string& known_epoch) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 5s);
    v1::WatchPolicyRequest req;
    req.set_node("n");
    req.set_known_version(known);
    req.set_known_store_epoch(known_epoch);
    auto reader = stub()->WatchPolicy(&ctx, req);
    v1::PolicySnapshot s;
    bool got = reader->Read(&s);
    ctx.TryCancel();
    reader->Finish();
    return got ? s.version() : 0;
  };
  EXPECT_EQ(watch(9, std::string(32, 'b')), 1u);  // another store: its latest
  EXPECT_EQ(watch(9, epoch), 1u);                 // same store, ahead of it: reported
  EXPECT_EQ(watch(0, ""), 1u);

  // A lost data dir re-applied from v1 is a new store with a new epoch.
  proc_->signal(SIGTERM);
  ASSERT_TRUE(proc_->wait(10s).has_value());
  ASSERT_EQ(system(("rm -rf " + data_).c_str()), 0);
  start();
  ASSERT_TRUE(apply(policyWithLimit(62)).ok());
  ASSERT_TRUE(get(0, &snap).ok());
  EXPECT_EQ(snap.version(), 1u);
  EXPECT_NE(snap.store_epoch(), epoch);
}

// 100 watchers, 20 versions applied back to back: every watcher sees strictly increasing
// versions (skipping some if it lagged, never going back) and ends on the latest.
TEST_F(PolicydTest, HundredWatchersSeeTwentyRapidVersionsInOrder) {
  start({"--max-streams-per-identity", "100"});  // all watchers are "admin" here
  ASSERT_TRUE(apply(policyWithLimit(41)).ok());
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int i = 0; i < 10; ++i) channels.push_back(channel(true));
  std::vector<std::unique_ptr<Watcher>> watchers;
  for (int i = 0; i < 100; ++i) watchers.push_back(std::make_unique<Watcher>(channels[i % 10], 0));
  for (auto& w : watchers) ASSERT_TRUE(w->waitForVersion(1, 20s));
  for (int v = 2; v <= 20; ++v) ASSERT_TRUE(apply(policyWithLimit(40 + v)).ok());
  size_t complete = 0;
  for (auto& w : watchers) {
    ASSERT_TRUE(w->waitForVersion(20, 30s)) << "a watcher never reached version 20";
    std::vector<uint64_t> seen = w->versions();
    EXPECT_EQ(seen.front(), 1u);
    EXPECT_EQ(seen.back(), 20u);
    for (size_t i = 1; i < seen.size(); ++i) ASSERT_LT(seen[i - 1], seen[i]) << "out of order";
    EXPECT_EQ(w->last().policy().tenants(0).limit_bytes_per_second(), 60'000'000'000u / 8);
    complete += seen.size() == 20;
  }
  std::cout << "[ info ] " << complete << " of 100 watchers received all 20 versions; the rest "
            << "skipped intermediate ones\n";
}

TEST_F(PolicydTest, OversizedAndGarbageMessagesGetCleanStatuses) {
  start();
  ASSERT_TRUE(apply(examplePolicy()).ok());
  // Over the 8 MiB receive limit.
  EXPECT_EQ(apply(std::string(9 << 20, '#')).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  // Within the message limit but over the 4 MiB policy limit.
  grpc::Status big = apply(std::string(5 << 20, '#'));
  EXPECT_EQ(big.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(big.error_message().find("more than the limit of 4194304 bytes"), std::string::npos);
  // Bytes that are not a protobuf message.
  static const char kGarbage[] = "\xff\xff\xff\xff\x0f garbage \x00\x01";
  const std::string garbage(kGarbage, sizeof kGarbage - 1);
  for (const char* method :
       {"ApplyPolicy", "GetPolicy", "Rollback", "ReportUsage", "WatchPolicy"}) {
    grpc::Status s = rawCall(std::string("/tenantqos.v1.PolicyService/") + method, garbage);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << method << ": " << s.error_message();
    EXPECT_NE(s.error_message().find("not a valid tenantqos.v1."), std::string::npos)
        << s.error_message();
  }
  EXPECT_EQ(rawCall("/tenantqos.v1.PolicyService/NoSuchMethod", "").error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
  // Still serving.
  v1::PolicySnapshot snap;
  ASSERT_TRUE(get(0, &snap).ok());
  EXPECT_EQ(snap.version(), 1u);
}

TEST_F(PolicydTest, HealthReflectionAndUsage) {
  start();
  // grpc.health.v1.Health/Check with an empty request -> HealthCheckResponse{status: SERVING}.
  std::string resp;
  ASSERT_TRUE(rawCall("/grpc.health.v1.Health/Check", "", &resp).ok());
  EXPECT_EQ(resp, std::string("\x08\x01", 2));
  // Reflection (v1alpha): list_services (field 7, empty string) on the bidi stream.
  {
    grpc::GenericStub generic(channel());
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    grpc::CompletionQueue cq;
    auto call = generic.PrepareCall(
        &ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
    void* tag;
    bool ok;
    call->StartCall(reinterpret_cast<void*>(1));
    ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
    grpc::Slice slice(std::string("\x3a\x00", 2));
    grpc::ByteBuffer req(&slice, 1), out;
    call->Write(req, reinterpret_cast<void*>(2));
    ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
    call->Read(&out, reinterpret_cast<void*>(3));
    ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
    std::vector<grpc::Slice> slices;
    (void)out.Dump(&slices);
    std::string bytes;
    for (auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    EXPECT_NE(bytes.find("tenantqos.v1.PolicyService"), std::string::npos);
    EXPECT_NE(bytes.find("grpc.health.v1.Health"), std::string::npos);
    ctx.TryCancel();
    grpc::Status st;
    call->Finish(&st, reinterpret_cast<void*>(4));
    while (cq.Next(&tag, &ok) && tag != reinterpret_cast<void*>(4)) {
    }
    cq.Shutdown();
    while (cq.Next(&tag, &ok)) {
    }
  }
  // ReportUsage / GetUsage: latest report per node.
  for (int n = 1; n <= 2; ++n) {
    v1::ReportUsageRequest r;
    r.set_node("node" + std::to_string(n));
    r.set_policy_version(1);
    auto* t = r.add_tenants();
    t->set_tenant("tenant-a");
    t->set_transmit_bytes_total(1000 * n);
    t->set_transmit_rate_bytes_per_second(5'000'000'000);
    v1::ReportUsageResponse rr;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub()->ReportUsage(&ctx, r, &rr).ok());
  }
  v1::GetUsageResponse u;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub()->GetUsage(&ctx, v1::GetUsageRequest(), &u).ok());
  ASSERT_EQ(u.nodes_size(), 2);
  ASSERT_EQ(u.tenants_size(), 1);
  EXPECT_EQ(u.tenants(0).transmit_bytes_total(), 3000u);
  EXPECT_GT(u.nodes(0).last_report_unix_ms(), 0);
  auto top = ctl({"top"});
  EXPECT_EQ(top.exit_code, 0) << top.err;
  EXPECT_NE(top.out.find("node1"), std::string::npos) << top.out;
  EXPECT_NE(top.out.find("40Gbps"), std::string::npos) << top.out;
  EXPECT_NE(top.out.find("TOTAL"), std::string::npos) << top.out;
}

TEST_F(PolicydTest, CtlCommandsOutputsAndExitCodes) {
  start();
  const std::string good = kExample;
  std::string bad_text = examplePolicy();
  bad_text.replace(bad_text.find("dscp: 18"), 8, "dscp: 64");
  bad_text.replace(bad_text.find("limit: 40Gbps"), 13, "limit: 10Gbps");
  const std::string bad = writeFile("bad.yaml", bad_text);

  // validate: offline, every error on stderr with FILE:LINE:COL.
  auto v = runProcess({kCtl, "--server", "127.0.0.1:1", "validate", good});
  EXPECT_EQ(v.exit_code, 0) << v.err;
  EXPECT_NE(v.out.find("valid (1 link, 2 tenants)"), std::string::npos) << v.out;
  v = ctl({"validate", bad});
  EXPECT_EQ(v.exit_code, 1);
  EXPECT_NE(v.err.find(bad + ":41:12: tenants[1].limit: must be >= guarantee"), std::string::npos)
      << v.err;
  EXPECT_NE(v.err.find(bad + ":44:11: tenants[1].dscp: must be between 0 and 63, got 64"),
            std::string::npos)
      << v.err;
  EXPECT_NE(v.err.find("invalid (2 errors)"), std::string::npos) << v.err;
  // validate -o json: the validated policy for scripts, rates in bytes/s; invalid stays exit 1.
  v = ctl({"validate", good, "-o", "json"});
  EXPECT_EQ(v.exit_code, 0) << v.err;
  EXPECT_NE(v.out.find("\"capacityBytesPerSecond\": 12500000000"), std::string::npos) << v.out;
  EXPECT_NE(v.out.find("\"guaranteeBytesPerSecond\": 5000000000"), std::string::npos) << v.out;
  EXPECT_EQ(ctl({"validate", bad, "-o", "json"}).exit_code, 1);
  EXPECT_EQ(ctl({"validate", good, "-o", "yaml"}).exit_code, 2);

  // apply: diff and version; then unchanged; invalid; stale.
  auto a = ctl({"apply", "-f", good});
  EXPECT_EQ(a.exit_code, 0) << a.err;
  EXPECT_NE(
      a.out.find("+ tenant tenant-a: added (link fabric, guarantee 40Gbps, limit 60Gbps, weight 2"),
      std::string::npos)
      << a.out;
  EXPECT_NE(a.out.find("applied: version 1"), std::string::npos) << a.out;
  a = ctl({"apply", "-f", good});
  EXPECT_EQ(a.exit_code, 0);
  EXPECT_NE(a.out.find("no change: the policy equals version 1"), std::string::npos) << a.out;
  a = ctl({"apply", "-f", bad});
  EXPECT_EQ(a.exit_code, 1);
  EXPECT_NE(a.err.find("INVALID_ARGUMENT"), std::string::npos) << a.err;
  EXPECT_NE(a.err.find(bad + ":44:11: tenants[1].dscp"), std::string::npos) << a.err;
  const std::string p70 = writeFile("p70.yaml", policyWithLimit(70));
  a = ctl({"apply", "-f", p70, "--dry-run"});
  EXPECT_EQ(a.exit_code, 0);
  EXPECT_NE(a.out.find("~ tenant tenant-a: changed\n    limit: 60Gbps -> 70Gbps"),
            std::string::npos)
      << a.out;
  EXPECT_NE(a.out.find("dry run: would become version 2 (nothing stored)"), std::string::npos)
      << a.out;
  a = ctl({"apply", "-f", p70, "--expected-version", "0"});
  EXPECT_EQ(a.exit_code, 1);
  EXPECT_NE(a.err.find("FAILED_PRECONDITION"), std::string::npos) << a.err;
  a = ctl({"apply", "--expected-version=1", "-f", p70});
  EXPECT_EQ(a.exit_code, 0) << a.err;
  EXPECT_NE(a.out.find("applied: version 2"), std::string::npos) << a.out;
  a = ctl({"apply", "-f", "-"}, policyWithLimit(71));  // stdin
  EXPECT_EQ(a.exit_code, 0) << a.err;
  a = ctl({"apply", "-f", dir_ + "/missing.yaml"});
  EXPECT_EQ(a.exit_code, 1);
  EXPECT_NE(a.err.find("missing.yaml"), std::string::npos);

  // get: YAML re-applies as "no change"; JSON has integer bytes/s.
  auto g = ctl({"get"});
  EXPECT_EQ(g.exit_code, 0) << g.err;
  EXPECT_EQ(g.out.rfind("# tenantqos policy version 3, applied ", 0), 0u) << g.out;
  auto reparsed = tq::policy::parsePolicyYaml(g.out, "get");
  EXPECT_TRUE(reparsed.ok());
  a = ctl({"apply", "-f", "-"}, g.out);
  EXPECT_NE(a.out.find("no change"), std::string::npos) << a.out;
  g = ctl({"get", "-o", "json", "--version", "1"});
  EXPECT_EQ(g.exit_code, 0) << g.err;
  EXPECT_NE(g.out.find("\"version\": 1,"), std::string::npos) << g.out;
  EXPECT_NE(g.out.find("\"guaranteeBytesPerSecond\": 5000000000"), std::string::npos) << g.out;
  EXPECT_EQ(ctl({"get", "--version", "99"}).exit_code, 1);

  // history and rollback.
  auto h = ctl({"history"});
  EXPECT_EQ(h.exit_code, 0);
  EXPECT_NE(h.out.find("VERSION"), std::string::npos);
  EXPECT_NE(h.out.find("latest"), std::string::npos) << h.out;
  auto r = ctl({"rollback", "1"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("rolled back: version 4"), std::string::npos) << r.out;
  h = ctl({"history"});
  EXPECT_NE(h.out.find("rollback of 1"), std::string::npos) << h.out;
  EXPECT_EQ(ctl({"rollback", "42"}).exit_code, 1);

  // Usage errors: 2.
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{},
                                             {"bogus"},
                                             {"apply"},
                                             {"apply", "-f"},
                                             {"get", "-o", "xml"},
                                             {"get", "--nope"},
                                             {"rollback"},
                                             {"rollback", "x"},
                                             {"validate"},
                                             {"history", "extra"},
                                             {"--timeout", "-1", "get"}}) {
    auto u = ctl(args);
    EXPECT_EQ(u.exit_code, 2) << ::testing::PrintToString(args) << ": " << u.err;
    EXPECT_NE(u.err.find("Usage: tenantqosctl"), std::string::npos);
  }
  // Help: 0, per command.
  for (const char* c : {"apply", "get", "history", "rollback", "validate", "top"}) {
    auto hp = ctl({c, "--help"});
    EXPECT_EQ(hp.exit_code, 0);
    EXPECT_NE(hp.out.find(std::string("Usage: tenantqosctl ") + c), std::string::npos) << hp.out;
  }
  EXPECT_EQ(ctl({"--help"}).exit_code, 0);

  // Unreachable: 3, naming the address; a bound-but-not-listening port refuses connections.
  int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(s, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  socklen_t len = sizeof sa;
  getsockname(s, reinterpret_cast<sockaddr*>(&sa), &len);
  const std::string dead = "127.0.0.1:" + std::to_string(ntohs(sa.sin_port));
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"get"}, {"history"}, {"top"}, {"rollback", "1"}, {"apply", "-f", good}}) {
    std::vector<std::string> argv = {kCtl};
    argv.insert(argv.end(), args.begin(), args.end());
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::string> env = pki_->env("admin");
    env.push_back("TENANTQOS_SERVER=" + dead);
    auto u = runProcess(argv, env);
    EXPECT_EQ(u.exit_code, 3) << u.err;
    EXPECT_NE(u.err.find("cannot reach tenantqos-policyd at " + dead), std::string::npos) << u.err;
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  }
  // --server wins over the environment.
  std::vector<std::string> env = pki_->env("admin");
  env.push_back("TENANTQOS_SERVER=" + dead);
  auto w = runProcess({kCtl, "--server", address(), "get"}, env);
  EXPECT_EQ(w.exit_code, 0) << w.err;
  close(s);
}

// `tenantqosctl render` against files computed by hand (tests/functional/testdata/; "@SOURCE@"
// stands for the provenance line, which names the file or the server and version).
//
// examples/policy.yaml: link fabric 100 Gbit/s; tenant-a guarantee 40G, limit 60G, SL 1,
// DSCP 26; tenant-b guarantee 20G, limit 40G, SL 2, DSCP 18 ("G" = Gbit/s).
// example_fabric_eth2.dcb: groups ranked by guarantee: a, b -> TC 1, TC 2. ETS share =
//   ceil(100 * guarantee / capacity): a 40, b 20; TC 0 (traffic of no tenant) gets the rest,
//   100 - 60 = 40; unused TCs 3-7 get 0. Max rate = the class's limit when below the link:
//   TC 1 60Gbit, TC 2 40Gbit; TC 0 is never capped (0bit = no cap). DSCP -> priority = the
//   tenant's TC: 18:2, 26:1.
// example_fabric.opensm (defaults: 8 data VLs, MTU 4096): the same classes as VLs 0-2; SL 1 ->
//   VL 1, SL 2 -> VL 2, every other SL -> VL 0. VL arbitration: a VL sends share-% packets per
//   table round (VL0 40, VL1 40, VL2 20); one 4096-byte packet = 4096 / 64 = 64 credits; an entry
//   holds at most floor(255 / 64) = 3 packets = 192 credits. Passes over VLs 0..2, each entry
//   taking min(packets left, 3):
//     passes 1-6: 0:192 1:192 2:192  (18 packets each; VL2 has 2 left, VL0 and VL1 22)
//     pass 7:     0:192 1:192 2:128  (VL2 done; VL0 and VL1 19 left)
//     passes 8-13: 0:192 1:192       (1 left each);  pass 14: 0:64 1:64
//   35 entries (OpenSM takes at most 64). qos-levels: DEFAULT (SL 0), then tenants in rank order.
// example_fabric_2vls_mtu2048.opensm.conf (--max-vls 2 --mtu 2048 --part options): one tenant VL
//   for two SL groups, so both share VL 1 (SL 1 and 2 -> VL 1; "[shared: out of VLs]"), with
//   guarantee 40 + 20 = 60G, share 60; VL 0 gets 40. One 2048-byte packet = 32 credits, an entry
//   at most floor(255 / 32) = 7 packets = 224 credits. VL0 40 = 5 * 7 + 5, VL1 60 = 8 * 7 + 4:
//     passes 1-5: 0:224 1:224;  pass 6: 0:160 1:224;  passes 7-8: 1:224;  pass 9: 1:128
//   15 entries.
std::string expectedRender(const std::string& name, const std::string& source) {
  std::string s = readWholeFile(std::string(TQ_SOURCE_DIR) + "/tests/functional/testdata/" + name);
  EXPECT_FALSE(s.empty()) << name;
  const size_t at = s.find("@SOURCE@");
  EXPECT_NE(at, std::string::npos) << name;
  if (at != std::string::npos) s.replace(at, 8, source);
  return s;
}

const std::vector<std::string> kRenderDcb = {"render", "dcb",      "--link",
                                             "fabric", "--device", "eth2"};
const std::vector<std::string> kRenderOpenSm = {"render", "opensm", "--link", "fabric"};
const std::vector<std::string> kRenderOpenSm2Vls = {
    "render", "opensm", "--link=fabric", "--max-vls", "2", "--mtu", "2048", "--part", "options"};

std::vector<std::string> plus(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST_F(PolicydTest, RenderFromFileAndFromServerMatchesHandCheckedFiles) {
  // From a file: offline (the --server address is never contacted).
  auto offline = [&](const std::vector<std::string>& args) {
    return runProcess(plus(plus({kCtl, "--server", "127.0.0.1:1"}, args), {"-f", kExample}));
  };
  const std::string from_file = "file " + kExample;
  auto r = offline(kRenderDcb);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, expectedRender("example_fabric_eth2.dcb", from_file));
  // The script is valid sh (dcb itself needs a DCB-capable NIC, which this host has not).
  const std::string script = writeFile("qos.sh", r.out);
  EXPECT_EQ(runProcess({"/bin/sh", "-n", script}).exit_code, 0);
  r = offline(kRenderOpenSm);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, expectedRender("example_fabric.opensm", from_file));
  r = offline(kRenderOpenSm2Vls);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, expectedRender("example_fabric_2vls_mtu2048.opensm.conf", from_file));
  // --part qos-policy: the qos-levels section alone, exactly as part 2 of the full output.
  r = offline(plus(kRenderOpenSm, {"--part", "qos-policy"}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const std::string full = expectedRender("example_fabric.opensm", from_file);
  const std::string levels = full.substr(full.find("# tenantqos: OpenSM QoS levels"));
  EXPECT_TRUE(r.out.size() >= levels.size() &&
              r.out.compare(r.out.size() - levels.size(), levels.size(), levels) == 0)
      << r.out;
  EXPECT_EQ(r.out.find("qos_vlarb_low"), std::string::npos);
  r = ctl(plus(kRenderDcb, {"-f", "-"}), examplePolicy());  // stdin
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, expectedRender("example_fabric_eth2.dcb", "file <stdin>"));

  // From the server: the latest version, then an older one by number.
  start();
  ASSERT_EQ(ctl({"apply", "-f", kExample}).exit_code, 0);
  const std::string v1 = "tenantqos-policyd at " + address() + ", version 1";
  r = ctl(kRenderDcb);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, expectedRender("example_fabric_eth2.dcb", v1));
  r = ctl(kRenderOpenSm);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, expectedRender("example_fabric.opensm", v1));
  r = ctl(kRenderOpenSm2Vls);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, expectedRender("example_fabric_2vls_mtu2048.opensm.conf", v1));
  // Version 2 raises tenant-a's limit to 70G: only TC 1's max rate changes.
  ASSERT_EQ(ctl({"apply", "-f", writeFile("p70.yaml", policyWithLimit(70))}).exit_code, 0);
  r = ctl(kRenderDcb);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("# Policy: tenantqos-policyd at " + address() + ", version 2\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("tc-maxrate 0:0bit 1:70Gbit 2:40Gbit 3:0bit"), std::string::npos) << r.out;
  r = ctl(plus(kRenderDcb, {"--version", "1"}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, expectedRender("example_fabric_eth2.dcb", v1));
}

TEST_F(PolicydTest, RenderErrorsAndExitCodes) {
  // Invalid file: every error, exactly as `validate` prints them; nothing on stdout.
  std::string bad_text = examplePolicy();
  bad_text.replace(bad_text.find("dscp: 18"), 8, "dscp: 64");
  const std::string bad = writeFile("bad.yaml", bad_text);
  auto v = runProcess({kCtl, "validate", bad});
  ASSERT_EQ(v.exit_code, 1);
  for (const auto& args : {kRenderDcb, kRenderOpenSm}) {
    auto r = runProcess(plus(plus({kCtl}, args), {"-f", bad}));
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_EQ(r.err, v.err);
    EXPECT_NE(r.err.find(bad + ":44:11: tenants[1].dscp: must be between 0 and 63, got 64"),
              std::string::npos)
        << r.err;
    EXPECT_EQ(r.out, "");
    r = runProcess(plus(plus({kCtl}, args), {"-f", dir_ + "/missing.yaml"}));
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("missing.yaml"), std::string::npos) << r.err;
    // Unknown link.
    std::vector<std::string> other = args;
    other[3] = "nope";
    r = runProcess(plus(plus({kCtl}, other), {"-f", kExample}));
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find(": link \"nope\" is not in the policy (its links: fabric)"),
              std::string::npos)
        << r.err;
    EXPECT_EQ(r.out, "");
  }

  // Server: no policy yet -> 1 (NOT_FOUND); unknown link -> 1; unknown version -> 1.
  start();
  auto r = ctl(kRenderDcb);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("NOT_FOUND"), std::string::npos) << r.err;
  ASSERT_EQ(ctl({"apply", "-f", kExample}).exit_code, 0);
  r = ctl({"render", "opensm", "--link", "storage"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("link \"storage\" is not in the policy (its links: fabric)"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(ctl(plus(kRenderDcb, {"--version", "9"})).exit_code, 1);

  // Usage errors: 2, with the command's help.
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"render"},
           {"render", "tc", "--link", "fabric"},
           {"render", "dcb", "opensm", "--link", "fabric"},
           {"render", "dcb", "--device", "eth2"},
           {"render", "dcb", "--link", "fabric"},
           {"render", "dcb", "--link", "fabric", "--device", "eth2;reboot"},
           {"render", "dcb", "--link", "fabric", "--device", "eth2", "--mtu", "4096"},
           {"render", "opensm", "--link", "fabric", "--device", "eth2"},
           {"render", "opensm", "--link", "fabric", "--max-vls", "16"},
           {"render", "opensm", "--link", "fabric", "--max-vls", "0"},
           {"render", "opensm", "--link", "fabric", "--mtu", "1500"},
           {"render", "opensm", "--link", "fabric", "--part", "all"},
           {"render", "opensm", "--link", "fabric", "-f", kExample, "--version", "1"},
           {"render", "opensm", "--link", "fabric", "--version", "x"},
           {"render", "opensm", "--link", "fabric", "--dry-run"}}) {
    auto u = ctl(args);
    EXPECT_EQ(u.exit_code, 2) << ::testing::PrintToString(args) << ": " << u.err;
    EXPECT_NE(u.err.find("Usage: tenantqosctl render"), std::string::npos) << u.err;
  }
  auto h = ctl({"render", "--help"});
  EXPECT_EQ(h.exit_code, 0);
  EXPECT_NE(h.out.find("Usage: tenantqosctl render dcb"), std::string::npos) << h.out;
  EXPECT_NE(ctl({"--help"}).out.find("render dcb|opensm"), std::string::npos);

  // Unreachable server: 3, naming the address; with -f the server is not needed.
  proc_.reset();
  r = ctl(kRenderOpenSm);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("cannot reach tenantqos-policyd at " + address()), std::string::npos)
      << r.err;
  EXPECT_EQ(ctl(plus(kRenderOpenSm, {"-f", kExample})).exit_code, 0);
}

TEST_F(PolicydTest, SigtermClosesWatchStreamsAndExitsZeroPromptly) {
  start();
  ASSERT_TRUE(apply(examplePolicy()).ok());
  Watcher w(channel(), 0);
  ASSERT_TRUE(w.waitForVersion(1));
  auto t0 = std::chrono::steady_clock::now();
  proc_->signal(SIGTERM);
  auto status = proc_->wait(10s);
  ASSERT_TRUE(status.has_value()) << "policyd did not exit after SIGTERM";
  EXPECT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  ASSERT_TRUE(w.waitDone(5s));
  EXPECT_EQ(w.status().error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(w.status().error_message().find("shutting down"), std::string::npos)
      << w.status().error_message();
  EXPECT_NE(readWholeFile(log_).find("tenantqos-policyd stopped"), std::string::npos);
}

TEST_F(PolicydTest, StartupFailuresAreClear) {
  // Data dir is a regular file.
  std::string file = writeFile("not-a-dir", "x");
  auto r = runProcess({kPolicyd, "--listen", "127.0.0.1:0", "--data-dir", file, "--insecure"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("data directory " + file + " exists and is not a directory"),
            std::string::npos)
      << r.err;
  // Data dir cannot be created (even root cannot mkdir under /proc).
  r = runProcess(
      {kPolicyd, "--listen", "127.0.0.1:0", "--data-dir", "/proc/self/tqpol-data", "--insecure"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("/proc/self/tqpol-data"), std::string::npos) << r.err;
  // Port already taken by another policyd.
  start();
  r = runProcess({kPolicyd, "--listen", address(), "--data-dir", dir_ + "/data2", "--insecure"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("cannot listen on " + address()), std::string::npos) << r.err;
  // Usage errors.
  EXPECT_EQ(runProcess({kPolicyd, "--bogus"}).exit_code, 2);
  EXPECT_EQ(runProcess({kPolicyd, "--log-level", "loud"}).exit_code, 2);
  EXPECT_EQ(runProcess({kPolicyd, "--listen", "nocolon"}).exit_code, 2);
  // No TLS and no --insecure; a key that is not the certificate's; an unreadable file.
  r = runProcess({kPolicyd, "--listen", "127.0.0.1:0", "--data-dir", dir_ + "/d3"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("mutual TLS needs --tls-ca, --tls-cert and --tls-key (or --insecure"),
            std::string::npos)
      << r.err;
  r = runProcess({kPolicyd, "--listen", "127.0.0.1:0", "--data-dir", dir_ + "/d3", "--tls-ca",
                  pki_->crt("ca"), "--tls-cert", pki_->crt("policyd"), "--tls-key",
                  pki_->key("admin")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--tls-key " + pki_->key("admin") + " is not the key of --tls-cert"),
            std::string::npos)
      << r.err;
  r = runProcess({kPolicyd, "--listen", "127.0.0.1:0", "--data-dir", dir_ + "/d3", "--tls-ca",
                  dir_ + "/nope.crt", "--tls-cert", pki_->crt("policyd"), "--tls-key",
                  pki_->key("policyd")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--tls-ca: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("nope.crt"), std::string::npos) << r.err;
  // An etcd that does not answer: tried again once a second for --etcd-wait, then exit 1 with
  // the last error (a closed loopback port: each attempt is refused at once).
  const std::string no_etcd = "127.0.0.1:1";
  const std::vector<std::string> etcd_argv = {
      kPolicyd,     "--listen", "127.0.0.1:0", "--data-dir",       dir_ + "/d4",
      "--insecure", "--store",  "etcd",        "--etcd-endpoints", no_etcd};
  auto with = [](std::vector<std::string> v, std::vector<std::string> more) {
    v.insert(v.end(), more.begin(), more.end());
    return v;
  };
  r = runProcess(with(etcd_argv, {"--etcd-wait", "2"}), {}, "", 30s);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("trying again (attempt 2"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("cannot start"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(no_etcd), std::string::npos) << r.err;
  r = runProcess(with(etcd_argv, {"--etcd-wait", "0"}), {}, "", 30s);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err.find("trying again"), std::string::npos) << r.err;
  EXPECT_EQ(runProcess(with(etcd_argv, {"--etcd-wait", "-1"})).exit_code, 2);
  auto help = runProcess({kPolicyd, "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("--data-dir DIR"), std::string::npos);
}

TEST_F(PolicydTest, MetricsEndpointPassesPromtool) {
  start({"--metrics", "127.0.0.1:0"});
  ASSERT_TRUE(apply(examplePolicy()).ok());
  Watcher w(channel(), 0);
  ASSERT_TRUE(w.waitForVersion(1));
  std::string log = readWholeFile(log_);
  size_t at = log.rfind("metrics on http://127.0.0.1:");
  ASSERT_NE(at, std::string::npos) << log;
  int mport = std::atoi(log.c_str() + at + std::strlen("metrics on http://127.0.0.1:"));
  auto scrape = runProcess(
      {"/usr/bin/curl", "-sf", "http://127.0.0.1:" + std::to_string(mport) + "/metrics"});
  ASSERT_EQ(scrape.exit_code, 0) << scrape.err;
  EXPECT_NE(scrape.out.find("tenantqos_policyd_policy_version 1"), std::string::npos) << scrape.out;
  EXPECT_NE(scrape.out.find("tenantqos_policyd_watchers 1"), std::string::npos) << scrape.out;
  EXPECT_NE(scrape.out.find("tenantqos_policyd_applies_total{op=\"apply\",result=\"applied\"} 1"),
            std::string::npos);
  if (access("/usr/bin/promtool", X_OK) == 0) {
    auto check = runProcess({"/usr/bin/promtool", "check", "metrics"}, {}, scrape.out);
    EXPECT_EQ(check.exit_code, 0) << check.out
                                  << check.err;  // 0 = clean, 3 = lint, 1 = parse error
  }
}

// ---------------------------------------------------------------------------------------------
// Mutual TLS and roles, with real certificates made by scripts/tq-certs.sh.

namespace tls {

grpc::Status reportUsage(v1::PolicyService::Stub& stub, const std::string& node,
                         const std::string& error = "") {
  v1::ReportUsageRequest r;
  r.set_node(node);
  r.set_policy_version(1);
  r.add_tenants()->set_tenant("tenant-a");
  if (!error.empty()) r.add_errors(error);
  v1::ReportUsageResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 10s);
  return stub.ReportUsage(&ctx, r, &resp);
}

grpc::Status getPolicy(v1::PolicyService::Stub& stub) {
  v1::PolicySnapshot snap;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 5s);
  return stub.GetPolicy(&ctx, v1::GetPolicyRequest(), &snap);
}

// Credentials that present `cert` without our helper's own checks (which refuse an expired
// certificate before it is ever sent): what a hostile or misconfigured client could do.
std::shared_ptr<grpc::ChannelCredentials> rawSsl(const TestPki& pki, const std::string& cert,
                                                 bool with_cert = true) {
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = readWholeFile(pki.crt("ca"));
  if (with_cert) {
    o.pem_cert_chain = readWholeFile(pki.crt(cert));
    o.pem_private_key = readWholeFile(pki.key(cert));
  }
  return grpc::SslCredentials(o);
}

}  // namespace tls

TEST_F(PolicydTest, ClientsWithoutAValidCertificateAreRefused) {
  start();
  ASSERT_TRUE(apply(examplePolicy()).ok());  // admin: fine
  auto refused = [&](std::shared_ptr<grpc::ChannelCredentials> creds, const char* what) {
    auto s = v1::PolicyService::NewStub(channelWith(std::move(creds)));
    grpc::Status st = tls::getPolicy(*s);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << what << ": " << st.error_message();
  };
  refused(grpc::InsecureChannelCredentials(), "plaintext");
  refused(tls::rawSsl(*pki_, "", /*with_cert=*/false), "TLS without a client certificate");
  ASSERT_TRUE(pki_->issue("expired", "old-admin", {"tenantqos:admins"}, "ca", "--days -1"));
  refused(tls::rawSsl(*pki_, "expired"), "expired certificate");
  ASSERT_TRUE(pki_->newCa("evil-ca"));
  ASSERT_TRUE(pki_->issue("evil-admin", "admin", {"tenantqos:admins"}, "evil-ca"));
  refused(tls::rawSsl(*pki_, "evil-admin"), "certificate of another CA");
  // tenantqosctl says why, and refuses to send an expired certificate at all.
  auto r = ctl({"history"}, "", "evil-admin");
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_NE(r.err.find("TLS handshake failed"), std::string::npos) << r.err;
  r = ctl({"history"}, "", "expired");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--tls-cert " + pki_->crt("expired") + " has expired"), std::string::npos)
      << r.err;
  r = runProcess({kCtl, "--server", address(), "history"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("mutual TLS needs --tls-ca"), std::string::npos) << r.err;
}

TEST_F(PolicydTest, RolesComeFromTheCertificate) {
  start();
  ASSERT_TRUE(pki_->issue("agent-node2", "node2", {"tenantqos:agents"}));
  ASSERT_TRUE(pki_->issue("nobody", "mallory", {"acme"}));
  ASSERT_TRUE(apply(examplePolicy()).ok());
  // Viewer: reads, history, usage; no apply, rollback, watch or report.
  auto viewer = stub("viewer");
  EXPECT_TRUE(tls::getPolicy(*viewer).ok());
  auto a = ctl({"apply", "-f", kExample}, "", "viewer");
  EXPECT_EQ(a.exit_code, 1);
  EXPECT_NE(a.err.find("PERMISSION_DENIED"), std::string::npos) << a.err;
  EXPECT_NE(a.err.find("ApplyPolicy: viewer (groups tenantqos:viewers) lacks the role "
                       "tenantqos:admins"),
            std::string::npos)
      << a.err;
  EXPECT_EQ(ctl({"rollback", "1"}, "", "viewer").exit_code, 1);
  EXPECT_EQ(ctl({"history"}, "", "viewer").exit_code, 0);
  EXPECT_EQ(ctl({"top"}, "", "viewer").exit_code, 0);
  EXPECT_EQ(tls::reportUsage(*viewer, "viewer").error_code(), grpc::StatusCode::PERMISSION_DENIED);
  // Agent node1: watch, and report for node1 only; no apply, no reads.
  auto agent = stub("agent-node1");
  EXPECT_TRUE(tls::reportUsage(*agent, "node1").ok());
  grpc::Status other = tls::reportUsage(*agent, "node2");
  EXPECT_EQ(other.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(other.error_message().find("may report usage only for node \"node1\", not for "
                                       "\"node2\""),
            std::string::npos)
      << other.error_message();
  EXPECT_TRUE(tls::reportUsage(*stub("agent-node2"), "node2").ok());
  EXPECT_EQ(tls::getPolicy(*agent).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  a = ctl({"apply", "-f", kExample}, "", "agent-node1");
  EXPECT_EQ(a.exit_code, 1);
  EXPECT_NE(a.err.find("node1 (groups tenantqos:agents) lacks the role tenantqos:admins"),
            std::string::npos)
      << a.err;
  {
    Watcher w(channel(true, "agent-node1"), 0, "node1");
    EXPECT_TRUE(w.waitForVersion(1));
    Watcher refused(channel(true, "viewer"), 0);
    ASSERT_TRUE(refused.waitDone(10s));
    EXPECT_EQ(refused.status().error_code(), grpc::StatusCode::PERMISSION_DENIED);
  }
  // No role at all.
  grpc::Status none = tls::getPolicy(*stub("nobody"));
  EXPECT_EQ(none.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(none.error_message().find("mallory (groups acme) lacks the role tenantqos:admins or "
                                      "tenantqos:viewers"),
            std::string::npos)
      << none.error_message();
  // Refusals are logged with the identity.
  EXPECT_NE(readWholeFile(log_).find("refused: ApplyPolicy: viewer"), std::string::npos);
}

TEST_F(PolicydTest, HistoryRecordsTheVerifiedIdentityNeverTheClientsString) {
  start();
  // A raw request with the issue's forged applied_by (newline, ANSI colour, a fake row).
  v1::ApplyPolicyRequest req;
  req.set_policy_yaml(examplePolicy());
  req.set_source_name("team\x1b[31m.yaml");
  const std::string forged = "ceo\n9 2099-01-01 \x1b[31msecurity@corp";
  req.GetReflection()->SetString(&req, req.GetDescriptor()->FindFieldByName("applied_by"), forged);
  v1::ApplyPolicyResponse resp;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub()->ApplyPolicy(&ctx, req, &resp).ok());
  ASSERT_EQ(ctl({"rollback", "1"}).exit_code, 0);  // a no-op rollback stores nothing
  ASSERT_EQ(ctl({"apply", "-f", writeFile("p70.yaml", policyWithLimit(70))}).exit_code, 0);
  auto versions = list();
  ASSERT_EQ(versions.versions_size(), 2);
  for (const auto& v : versions.versions()) {
    EXPECT_EQ(v.applied_by(), "admin");
    EXPECT_EQ(std::vector<std::string>(v.applied_by_groups().begin(), v.applied_by_groups().end()),
              std::vector<std::string>{"tenantqos:admins"});
  }
  EXPECT_EQ(versions.versions(0).diff_summary(), "tenants ~tenant-a");
  EXPECT_EQ(versions.versions(1).diff_summary(), "tenants +tenant-a +tenant-b; links +fabric");
  EXPECT_EQ(versions.versions(1).source_name(), "team\x1b[31m.yaml");
  auto h = ctl({"history"});
  ASSERT_EQ(h.exit_code, 0) << h.err;
  EXPECT_EQ(h.out.find('\x1b'), std::string::npos) << h.out;  // escaped: nothing colours
  EXPECT_NE(h.out.find("team\\x1b[31m.yaml"), std::string::npos) << h.out;
  EXPECT_EQ(h.out.find("security@corp"), std::string::npos) << h.out;
  EXPECT_EQ(std::count(h.out.begin(), h.out.end(), '\n'), 3) << h.out;  // header + 2 rows
  // The audit log: the same records, one JSON line each, oldest first.
  std::string audit = readWholeFile(data_ + "/audit.jsonl");
  EXPECT_EQ(std::count(audit.begin(), audit.end(), '\n'), 2) << audit;
  EXPECT_NE(audit.find("\"version\":1,\"identity\":\"admin\",\"groups\":[\"tenantqos:admins\"],"
                       "\"source\":\"team\\u001b[31m.yaml\""),
            std::string::npos)
      << audit;
  EXPECT_NE(audit.find("\"version\":2,\"identity\":\"admin\""), std::string::npos) << audit;
  // A node's error text cannot forge lines in `top` either.
  ASSERT_TRUE(tls::reportUsage(*stub("agent-node1"), "node1", "tc failed\n\x1b[2Jfake").ok());
  auto top = ctl({"top"});
  EXPECT_EQ(top.exit_code, 0) << top.err;
  EXPECT_NE(top.out.find("node1: tc failed\\x0a\\x1b[2Jfake"), std::string::npos) << top.out;
}

TEST_F(PolicydTest, CertificatesRotateWhileClientsStayConnected) {
  // policyd reads its files from paths we replace (like cert-manager's secret volume).
  const std::string live = dir_ + "/live";
  ASSERT_EQ(system(("mkdir -p " + live + " && cp " + pki_->crt("ca") + " " + pki_->crt("policyd") +
                    " " + pki_->key("policyd") + " " + live)
                       .c_str()),
            0);
  start({"--tls-ca", live + "/ca.crt", "--tls-cert", live + "/policyd.crt", "--tls-key",
         live + "/policyd.key"});
  ASSERT_TRUE(apply(examplePolicy()).ok());
  Watcher w(channel(true), 0);
  ASSERT_TRUE(w.waitForVersion(1));

  // A new CA; the server's certificate and trusted CAs move to it (old CA still trusted).
  ASSERT_TRUE(pki_->newCa("ca2"));
  ASSERT_TRUE(
      pki_->issue("policyd2", "tenantqos-policyd", {}, "ca2", "--san IP:127.0.0.1,DNS:localhost"));
  ASSERT_TRUE(pki_->issue("admin2", "admin2", {"tenantqos:admins"}, "ca2"));
  auto replace = [&](const std::string& from, const std::string& to) {
    ASSERT_EQ(system(("cp " + from + " " + to + ".tmp && mv " + to + ".tmp " + to).c_str()), 0);
  };
  ASSERT_EQ(system(("cat " + pki_->crt("ca") + " " + pki_->crt("ca2") + " > " + live +
                    "/bundle.tmp && mv " + live + "/bundle.tmp " + live + "/ca.crt")
                       .c_str()),
            0);
  replace(pki_->key("policyd2"), live + "/policyd.key");
  replace(pki_->crt("policyd2"), live + "/policyd.crt");
  // A client of the new CA gets in once policyd has reloaded (every 2 s), without a restart.
  auto admin2 = v1::PolicyService::NewStub(
      channelWith(pki_->credentials("admin2", "ca2"), /*own_connection=*/true));
  EXPECT_TRUE(pollUntil([&] { return tls::getPolicy(*admin2).ok(); }, 15s))
      << "the rotated certificate was never served";
  // The stream opened before the rotation is still up and still receives new versions.
  v1::ApplyPolicyResponse r;
  v1::ApplyPolicyRequest req;
  req.set_policy_yaml(policyWithLimit(70));
  grpc::ClientContext ctx;
  ASSERT_TRUE(admin2->ApplyPolicy(&ctx, req, &r).ok());
  ASSERT_TRUE(w.waitForVersion(2)) << "the watch stream did not survive the rotation";
  EXPECT_EQ(w.versions(), (std::vector<uint64_t>{1, 2}));
  EXPECT_TRUE(proc_->running());
}

TEST_F(PolicydTest, ServerOfAnotherCaIsRefusedByItsClients) {
  ASSERT_TRUE(pki_->newCa("rogue-ca"));
  ASSERT_TRUE(pki_->issue("rogue", "tenantqos-policyd", {}, "rogue-ca",
                          "--san IP:127.0.0.1,DNS:localhost"));
  start({"--tls-ca", pki_->crt("ca"), "--tls-cert", pki_->crt("rogue"), "--tls-key",
         pki_->key("rogue")});
  EXPECT_EQ(tls::getPolicy(*stub()).error_code(), grpc::StatusCode::UNAVAILABLE);
  Watcher w(channel(true, "agent-node1"), 0, "node1");
  ASSERT_TRUE(w.waitDone(15s));
  EXPECT_EQ(w.status().error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(w.versions().empty());
  EXPECT_EQ(ctl({"get"}).exit_code, 3);
}

TEST_F(PolicydTest, InsecureIsExplicitLoggedAndEveryCallerAnAdmin) {
  start({"--insecure"});
  EXPECT_NE(readWholeFile(log_).find("WARN"), std::string::npos);
  EXPECT_NE(readWholeFile(log_).find("WITHOUT authentication"), std::string::npos);
  auto r = runProcess({kCtl, "--server", address(), "--insecure", "apply", "-f", kExample});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = runProcess({kCtl, "--server", address(), "history"}, {"TENANTQOS_INSECURE=1"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("insecure:127.0.0.1"), std::string::npos) << r.out;
  // A TLS client cannot talk to a plaintext server.
  EXPECT_EQ(ctl({"get"}).exit_code, 3);
}

TEST_F(PolicydTest, WatchStreamsAreLimitedPerIdentity) {
  start({"--max-streams-per-identity", "2"});
  ASSERT_TRUE(apply(examplePolicy()).ok());
  Watcher a(channel(true, "agent-node1"), 0, "node1"), b(channel(true, "agent-node1"), 0, "node1");
  ASSERT_TRUE(a.waitForVersion(1));
  ASSERT_TRUE(b.waitForVersion(1));
  Watcher c(channel(true, "agent-node1"), 0, "node1");
  ASSERT_TRUE(c.waitDone(10s));
  EXPECT_EQ(c.status().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(c.status().error_message().find("node1 already has 2 watch streams open"),
            std::string::npos)
      << c.status().error_message();
  Watcher other(channel(true, "admin"), 0);  // another identity is not affected
  EXPECT_TRUE(other.waitForVersion(1));
}

TEST_F(PolicydTest, UsageOfSilentNodesExpiresAndTopPagesThroughEveryNode) {
  start({"--usage-expiry", "2"});
  auto admin = stub();
  // 6 nodes x 4096 tenants: more than one GetUsage page (20000 entries).
  for (int n = 0; n < 6; ++n) {
    v1::ReportUsageRequest r;
    r.set_node("big" + std::to_string(n));
    for (int t = 0; t < 4096; ++t) r.add_tenants()->set_tenant("t" + std::to_string(t));
    v1::ReportUsageResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(admin->ReportUsage(&ctx, r, &resp).ok());
  }
  v1::GetUsageResponse page;
  grpc::ClientContext ctx;
  ASSERT_TRUE(admin->GetUsage(&ctx, v1::GetUsageRequest(), &page).ok());
  EXPECT_EQ(page.total_nodes(), 6u);
  EXPECT_EQ(page.nodes_size(), 4);
  EXPECT_EQ(page.next_page_token(), "big3");
  auto top = ctl({"top"});
  ASSERT_EQ(top.exit_code, 0) << top.err;
  EXPECT_NE(top.out.find("6 nodes reporting"), std::string::npos) << top.out.substr(0, 200);
  EXPECT_NE(top.out.find("big5"), std::string::npos);
  // Nobody reports any more: after --usage-expiry the view is empty.
  EXPECT_TRUE(pollUntil(
      [&] {
        v1::GetUsageResponse u;
        grpc::ClientContext c;
        return admin->GetUsage(&c, v1::GetUsageRequest(), &u).ok() && u.nodes_size() == 0;
      },
      10s));
}

// The cluster allocator's stream (docs/fabric.md) over mutual TLS: an agent streams its node's
// demand and gets its own node's caps; a report for another node, or of a tenant the node does
// not host, ends the stream PERMISSION_DENIED with a line in the audit log; a viewer is refused.
TEST_F(PolicydTest, AllocateStreamsEachAgentItsOwnCapsAndRefusesOthersWithAnAuditLine) {
  start({"--allocator-period", "20"});
  ASSERT_TRUE(pki_->issue("agent-node-1", "node-1", {"tenantqos:agents"}));
  ASSERT_TRUE(pki_->issue("agent-node-3", "node-3", {"tenantqos:agents"}));
  ASSERT_TRUE(
      apply(readWholeFile(std::string(TQ_SOURCE_DIR) + "/examples/fabric-policy.yaml")).ok());
  EXPECT_TRUE(pollUntil(
      [&] { return readWholeFile(log_).find("allocator: active") != std::string::npos; }, 10s));
  struct Stream {
    grpc::ClientContext ctx;
    std::unique_ptr<v1::PolicyService::Stub> stub;
    std::unique_ptr<grpc::ClientReaderWriter<v1::DemandReport, v1::NodeCaps>> rw;
  };
  auto open = [&](const std::string& cert) {
    auto s = std::make_unique<Stream>();
    s->ctx.set_deadline(std::chrono::system_clock::now() + 30s);
    s->stub = v1::PolicyService::NewStub(channel(true, cert));
    s->rw = s->stub->Allocate(&s->ctx);
    return s;
  };
  auto report = [](const std::string& node, const std::string& tenant, uint64_t bytes) {
    v1::DemandReport r;
    r.set_node(node);
    r.set_policy_version(1);
    v1::LinkDemand* d = r.add_demands();
    d->set_tenant(tenant);
    d->set_link("leaf-uplink");
    d->set_transmit_bytes_per_second(bytes);
    d->set_receive_bytes_per_second(bytes);
    r.add_addresses(node == "node-1" ? "10.0.0.1" : "10.0.0.3");
    r.set_sequence(1);
    return r;
  };
  // The first message of a round that used the node's report (NodeCaps.demand_sequence echoes
  // it): a round may run between the stream's attach and its first report, and its message has
  // no caps yet. Bounded by the stream's 30 s deadline.
  auto capsAfterReport = [](Stream& s, v1::NodeCaps* caps) {
    while (s.rw->Read(caps)) {
      if (caps->demand_sequence() >= 1) return true;
    }
    return false;
  };
  auto n1 = open("agent-node-1");
  auto n3 = open("agent-node-3");
  // node-3 first, and node-1 only once a round has used node-3's report: node-1's first caps
  // then come from a round that knew node-3's address (its peers below).
  v1::NodeCaps c1, c3;
  ASSERT_TRUE(n3->rw->Write(report("node-3", "tenant-b", 1'000'000'000)));
  ASSERT_TRUE(capsAfterReport(*n3, &c3));
  ASSERT_TRUE(n1->rw->Write(report("node-1", "tenant-a", 1'250'000'000)));  // 10 Gbit/s
  ASSERT_TRUE(capsAfterReport(*n1, &c1));
  EXPECT_EQ(c1.node(), "node-1");
  ASSERT_EQ(c1.caps_size(), 1);
  EXPECT_EQ(c1.caps(0).tenant(), "tenant-a");
  EXPECT_EQ(c1.caps(0).group(), "leaf-1");
  // Its demand plus the rest of tenant-a's guarantee there (40 Gbit/s): alone on leaf-1.
  EXPECT_EQ(c1.caps(0).transmit_cap_bytes_per_second(), 5'000'000'000u);
  EXPECT_GT(c1.term(), 0u);
  EXPECT_EQ(c1.hold_ms(), 3000u);
  ASSERT_EQ(c3.caps_size(), 1);
  EXPECT_EQ(c3.caps(0).tenant(), "tenant-b");  // node-3's own, never node-1's
  // node-1 and node-3 share pod-1: each learns the other's address there.
  ASSERT_TRUE(c1.has_peers());
  ASSERT_EQ(c1.peers_size(), 2);
  EXPECT_EQ(c1.peers(1).group(), "pod-1");
  ASSERT_EQ(c1.peers(1).addresses_size(), 1);
  EXPECT_EQ(c1.peers(1).addresses(0), "10.0.0.3");

  // node-1's agent reports for node-3: refused, its stream ends.
  ASSERT_TRUE(n1->rw->Write(report("node-3", "tenant-b", UINT64_MAX)));
  v1::NodeCaps ignored;
  while (n1->rw->Read(&ignored)) {
  }
  grpc::Status st = n1->rw->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
  EXPECT_NE(st.error_message().find("may report demand only for node \"node-1\", not for "
                                    "\"node-3\""),
            std::string::npos)
      << st.error_message();
  // node-3's agent claims a tenant the policy does not have.
  ASSERT_TRUE(n3->rw->Write(report("node-3", "tenant-zz", 1)));
  while (n3->rw->Read(&ignored)) {
  }
  st = n3->rw->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
  EXPECT_NE(st.error_message().find("which it does not host"), std::string::npos);
  const std::string audit = readWholeFile(data_ + "/audit.jsonl");
  EXPECT_NE(audit.find("\"action\":\"refused\",\"method\":\"Allocate\",\"identity\":\"node-1\""),
            std::string::npos)
      << audit;
  EXPECT_NE(audit.find("\"identity\":\"node-3\""), std::string::npos) << audit;
  // A viewer may not stream at all.
  auto viewer = open("viewer");
  viewer->rw->Write(report("node-1", "tenant-a", 1));
  while (viewer->rw->Read(&ignored)) {
  }
  EXPECT_EQ(viewer->rw->Finish().error_code(), grpc::StatusCode::PERMISSION_DENIED);
}

// Compact streams (docs/fabric.md): an agent that reads compact caps gets keys and deltas once
// policyd said it reads compact reports; its key-only deltas move its caps; a key never named
// ends the stream INVALID_ARGUMENT, a delta for another node PERMISSION_DENIED.
TEST_F(PolicydTest, AllocateCompactStreamsCarryKeysAndDeltasAndRefuseGarbageKeys) {
  start({"--allocator-period", "20"});
  ASSERT_TRUE(pki_->issue("agent-node-1", "node-1", {"tenantqos:agents"}));
  ASSERT_TRUE(
      apply(readWholeFile(std::string(TQ_SOURCE_DIR) + "/examples/fabric-policy.yaml")).ok());
  EXPECT_TRUE(pollUntil(
      [&] { return readWholeFile(log_).find("allocator: active") != std::string::npos; }, 10s));
  auto whole = [](uint64_t bytes) {
    v1::DemandReport r;
    r.set_node("node-1");
    r.set_policy_version(1);
    v1::LinkDemand* d = r.add_demands();
    d->set_tenant("tenant-a");
    d->set_link("leaf-uplink");
    d->set_transmit_bytes_per_second(bytes);
    d->set_receive_bytes_per_second(bytes);
    r.add_addresses("10.0.0.1");
    return r;
  };
  auto stub = v1::PolicyService::NewStub(channel(true, "agent-node-1"));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 30s);
  auto rw = stub->Allocate(&ctx);
  proto::DemandEncoder enc({});
  proto::CapsDecoder dec(100);
  int64_t t = 0;
  auto write = [&](uint64_t bytes) {
    t += 1'000'000'000;  // past the refresh: always a message
    auto msg = enc.encode(whole(bytes), t);
    return msg && rw->Write(*msg);
  };
  // Reads caps until their tx cap passes `ok` (the round after the report), decoded. The
  // stream's first message is kept: a round may have sent other caps before the one matching
  // (an early round on the report's edge, then the period's), and only the first is whole.
  std::optional<v1::NodeCaps> first_caps;
  auto capsUntil = [&](const std::function<bool(uint64_t)>& ok, v1::NodeCaps* wire) {
    for (int i = 0; i < 200; ++i) {
      if (!rw->Read(wire)) return false;
      if (!first_caps) first_caps = *wire;
      Result<v1::NodeCaps> c = dec.decode(*wire);
      EXPECT_TRUE(c.ok()) << c.status().message();
      if (!c.ok()) return false;
      if (c->node() == "node-1" && c->caps_size() == 1 && c->caps(0).tenant() == "tenant-a" &&
          ok(c->caps(0).transmit_cap_bytes_per_second())) {
        return true;
      }
    }
    return false;
  };
  v1::NodeCaps wire;
  ASSERT_TRUE(write(1'250'000'000));
  ASSERT_TRUE(capsUntil([](uint64_t c) { return c == 5'000'000'000u; }, &wire));  // as above
  ASSERT_TRUE(first_caps.has_value());
  EXPECT_TRUE(first_caps->compact_reports());
  EXPECT_FALSE(first_caps->delta());  // the stream's first caps: whole, with names
  for (const v1::LinkCap& c : first_caps->caps()) EXPECT_FALSE(c.tenant().empty());
  // policyd drops a report closer than 20 ms to the node's last one (its flood bound): the
  // next message (a later round's, at most a keepalive away) comes after that.
  const uint64_t used = wire.round();
  do {
    ASSERT_TRUE(rw->Read(&wire));
    ASSERT_TRUE(dec.decode(wire).ok());
  } while (wire.round() <= used);
  enc.setPeerCompact();
  // 50 Gbit/s, above its 40 guaranteed and under its 60 limit: a delta of the key alone.
  ASSERT_TRUE(write(6'250'000'000));
  ASSERT_TRUE(capsUntil([](uint64_t c) { return c > 5'000'000'000u; }, &wire));
  EXPECT_TRUE(wire.delta());
  ASSERT_EQ(wire.caps_size(), 1);
  EXPECT_TRUE(wire.caps(0).tenant().empty());  // by key
  EXPECT_NE(wire.caps(0).key(), 0u);
  EXPECT_TRUE(wire.node().empty());

  // A key never named on the stream.
  v1::DemandReport garbage;
  garbage.set_delta(true);
  garbage.set_policy_version(1);
  garbage.add_demands()->set_key(77);
  ASSERT_TRUE(rw->Write(garbage));
  while (rw->Read(&wire)) {
  }
  grpc::Status st = rw->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_NE(st.error_message().find("key 77 was never named"), std::string::npos)
      << st.error_message();

  // A delta that names another node is checked as any report: refused, audited.
  grpc::ClientContext ctx2;
  ctx2.set_deadline(std::chrono::system_clock::now() + 30s);
  auto rw2 = stub->Allocate(&ctx2);
  proto::DemandEncoder enc2({});
  auto first = enc2.encode(whole(1'000'000'000), 0);
  ASSERT_TRUE(first && rw2->Write(*first));
  ASSERT_TRUE(rw2->Read(&wire));
  v1::DemandReport other;
  other.set_delta(true);
  other.set_node("node-3");
  other.set_policy_version(1);
  ASSERT_TRUE(rw2->Write(other));
  while (rw2->Read(&wire)) {
  }
  st = rw2->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
}

}  // namespace
}  // namespace tq::test
