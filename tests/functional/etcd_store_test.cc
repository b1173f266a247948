// The etcd store against a real 3-member etcd on loopback (label `etcd`): the same conformance
// suite as the file and memory stores (tests/unit/policy/store_conformance.h), plus what only a
// replicated store has: losing quorum, and a member killed under a writer.
#include "policy/etcd_store.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "common/file_util.h"
#include "etcd/rpc.grpc.pb.h"
#include "tests/functional/etcd_cluster.h"
#include "tests/functional/test_pki.h"
#include "tests/unit/policy/store_conformance.h"

namespace tq::policy {
namespace {

using namespace std::chrono_literals;
using conformance::testRecord;
using test::EtcdCluster;

// One cluster for the whole binary; every backend gets its own key prefix.
EtcdCluster* g_cluster = nullptr;

class EtcdEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    cluster_ = EtcdCluster::start(3);
    g_cluster = cluster_.get();
  }
  void TearDown() override {
    g_cluster = nullptr;
    cluster_.reset();
  }

 private:
  std::unique_ptr<EtcdCluster> cluster_;
};

std::string freshPrefix() {
  static std::atomic<int> n{0};
  return "/tq-test-" + std::to_string(getpid()) + "-" + std::to_string(n++) + "/";
}

EtcdStoreOptions optionsFor(const std::string& prefix, uint64_t retain = kDefaultRetainVersions) {
  EtcdStoreOptions o;
  o.endpoints = g_cluster->endpoints();
  o.prefix = prefix;
  o.retain_versions = retain;
  o.request_timeout = 3000ms;
  return o;
}

// Writes `value` at `key` with a plain put (a Txn with no compare).
void rawPut(const std::string& key, const std::string& value) {
  auto stub = etcdserverpb::KV::NewStub(
      grpc::CreateChannel(g_cluster->endpoints()[0], grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  etcdserverpb::TxnRequest txn;
  auto* put = txn.add_success()->mutable_request_put();
  put->set_key(key);
  put->set_value(value);
  etcdserverpb::TxnResponse resp;
  ASSERT_TRUE(stub->Txn(&ctx, txn, &resp).ok());
}

class EtcdBackend final : public conformance::StoreBackend {
 public:
  std::unique_ptr<PolicyStore> open(uint64_t retain) override {
    auto s = openEtcdStore(optionsFor(prefix_, retain));
    EXPECT_TRUE(s.ok()) << s.status().toString();
    return s.ok() ? std::move(*s) : nullptr;
  }
  bool durable() const override { return true; }
  bool corrupt(uint64_t version) override {
    std::string bytes = encodeRecord(testRecord(version));
    bytes[bytes.size() - 10] ^= 0x5a;
    rawPut(etcdRecordKey(prefix_, version), bytes);
    return true;
  }
  bool sharedByReplicas() const override { return true; }
  std::string unavailable() const override {
    return g_cluster == nullptr ? "no etcd: " + EtcdCluster::error() : "";
  }

 private:
  const std::string prefix_ = freshPrefix();
};

}  // namespace

namespace conformance {
INSTANTIATE_TEST_SUITE_P(Etcd, StoreConformance,
                         ::testing::Values(BackendFactory{
                             "etcd", [] { return std::make_unique<EtcdBackend>(); }}),
                         [](const auto& info) { return info.param.name; });
}  // namespace conformance

namespace {

TEST(EtcdStore, LosingQuorumFailsUnavailableAndChangesNothing) {
  if (g_cluster == nullptr) GTEST_SKIP() << "no etcd: " << EtcdCluster::error();
  auto opened = openEtcdStore(optionsFor(freshPrefix()));
  ASSERT_TRUE(opened.ok()) << opened.status().toString();
  auto& s = *opened;
  ASSERT_TRUE(s->append(testRecord(1)).ok());
  g_cluster->kill(1);
  g_cluster->kill(2);
  auto r = s->append(testRecord(2));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().toString();
  EXPECT_NE(r.status().message().find("quorum"), std::string::npos) << r.status().message();
  EXPECT_EQ(s->latest()->version, 1u);
  EXPECT_EQ(s->nextVersion(), 2u);
  g_cluster->restart(1);
  g_cluster->restart(2);
  ASSERT_TRUE(g_cluster->waitQuorum(0, 30s));
  // Quorum is back: the same version number commits (the failed attempt was never durable, or
  // it was and the compare tells; either way exactly one version 2 exists).
  Result<PolicyRecord> again = internalError("unset");
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(s->sync().ok() || i < 49);
    again = s->append(testRecord(s->nextVersion()));
    if (again.ok()) break;
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_TRUE(again.ok()) << again.status().toString();
  EXPECT_EQ(s->list().size(), again->version);
}

// The store's network round trips run without its mutex (issue 22 item 4): while an append
// waits for an etcd without quorum (up to request_timeout), latest(), list() and nextVersion()
// keep answering from memory. Before, append() held the mutex across its transaction, so every
// reader (policyd's status, the watch's delivery) waited out the timeout with it.
TEST(EtcdStore, ReadersAreAnsweredWhileAnAppendWaitsForEtcd) {
  if (g_cluster == nullptr) GTEST_SKIP() << "no etcd: " << EtcdCluster::error();
  EtcdStoreOptions o = optionsFor(freshPrefix());
  auto opened = openEtcdStore(o);
  ASSERT_TRUE(opened.ok()) << opened.status().toString();
  auto& s = *opened;
  ASSERT_TRUE(s->append(testRecord(1)).ok());
  g_cluster->kill(1);
  g_cluster->kill(2);
  std::atomic<bool> done{false};
  Result<PolicyRecord> r = internalError("unset");
  const auto t0 = std::chrono::steady_clock::now();
  std::thread writer([&] {
    r = s->append(testRecord(2));
    done = true;
  });
  // The start of the last reader call that also ended while the append was still waiting.
  auto last_start = t0;
  int answered = 0;
  while (!done) {
    const auto t = std::chrono::steady_clock::now();
    const std::optional<PolicyRecord> latest = s->latest();
    const uint64_t next = s->nextVersion();
    const size_t listed = s->list().size();
    if (done) break;
    EXPECT_EQ(latest ? latest->version : 0u, 1u);
    EXPECT_EQ(next, 2u);
    EXPECT_EQ(listed, 1u);
    last_start = t;
    ++answered;
    std::this_thread::sleep_for(1ms);  // the pace of the readers, not a wait for anything
  }
  writer.join();
  ASSERT_FALSE(r.ok()) << "the append committed without quorum";
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().toString();
  EXPECT_GE(last_start - t0, o.request_timeout / 2)
      << answered << " reader calls answered; none began after the first "
      << std::chrono::duration_cast<std::chrono::milliseconds>(last_start - t0).count()
      << " ms of the append's wait";
  g_cluster->restart(1);
  g_cluster->restart(2);
  ASSERT_TRUE(g_cluster->waitQuorum(0, 30s));
}

// Every apply is one transaction, sent to the raft leader (a follower would forward it: two
// more hops per apply); after the leader dies, to the new one.
TEST(EtcdStore, TransactionsGoToTheLeaderAndFollowItAfterAnElection) {
  if (g_cluster == nullptr) GTEST_SKIP() << "no etcd: " << EtcdCluster::error();
  auto opened = openEtcdStore(optionsFor(freshPrefix()));
  ASSERT_TRUE(opened.ok()) << opened.status().toString();
  auto& s = *opened;
  const int leader = g_cluster->leader();
  ASSERT_GE(leader, 0);
  auto served = [] {
    std::vector<int64_t> n;
    for (int m = 0; m < g_cluster->size(); ++m) n.push_back(g_cluster->txnsServed(m));
    return n;
  };
  const std::vector<int64_t> before = served();
  for (uint64_t v = 1; v <= 20; ++v) ASSERT_TRUE(s->append(testRecord(v)).ok()) << v;
  const std::vector<int64_t> after = served();
  for (int m = 0; m < g_cluster->size(); ++m) {
    ASSERT_GE(before[m], 0) << "etcd member " << m << ": no grpc_server_handled_total";
    EXPECT_EQ(after[m] - before[m], m == leader ? 20 : 0) << "etcd member " << m;
  }

  g_cluster->kill(leader);
  int next = -1;
  ASSERT_TRUE(test::pollUntil(
      [&] {
        next = g_cluster->leader();
        return next >= 0;
      },
      30s));
  // The first answer from the new term has the store look the leader up again (in the
  // background): within a few applies, every transaction goes to the new leader.
  EXPECT_TRUE(test::pollUntil(
      [&] {
        const int64_t was = g_cluster->txnsServed(next);
        // Fails while the election settles; that is waited out, not an error here.
        return s->append(testRecord(s->nextVersion())).ok() &&
               g_cluster->txnsServed(next) == was + 1;
      },
      30s))
      << "transactions do not go to the new leader, etcd member " << next;
  g_cluster->restart(leader);
  ASSERT_TRUE(g_cluster->waitQuorum(leader, 30s));
}

// etcd with mutual TLS (--client-cert-auth): the store's files are replaced in place by ones from
// a new CA, and etcd restarts (same data) trusting and presenting that CA only, so the old
// client certificate is refused: the store keeps appending only if it re-read its files.
TEST(EtcdStore, TlsFilesRotateWithoutARestart) {
  const std::string dir = g_cluster->dir() + "/tls-rotation";
  test::TestPki pki(std::string(TQ_SOURCE_DIR) + "/scripts/tq-certs.sh", dir + "/pki");
  ASSERT_TRUE(pki.ok());
  for (const std::string ca : {"ca", "ca2"}) {
    if (ca == "ca2") {
      ASSERT_TRUE(pki.newCa(ca));
    }
    ASSERT_TRUE(pki.issue("etcd-" + ca, "etcd", {}, ca, "--san IP:127.0.0.1,DNS:localhost"));
    ASSERT_TRUE(pki.issue("policyd-" + ca, "policyd", {}, ca));
  }
  const std::string live = dir + "/live";
  ASSERT_EQ(std::system(("mkdir -p " + live).c_str()), 0);
  auto install = [&](const std::string& ca) {
    for (const auto& [from, to] : {std::pair{pki.crt(ca), live + "/ca.crt"},
                                   std::pair{pki.crt("policyd-" + ca), live + "/tls.crt"},
                                   std::pair{pki.key("policyd-" + ca), live + "/tls.key"}}) {
      auto bytes = readFile(from);
      ASSERT_TRUE(bytes.ok());
      ASSERT_TRUE(writeFileAtomic(to, *bytes, 0600).ok());
    }
  };
  const std::string client = "127.0.0.1:" + std::to_string(test::freeLoopbackPort());
  const std::string peer = "http://127.0.0.1:" + std::to_string(test::freeLoopbackPort());
  auto startEtcd = [&](const std::string& ca) {
    return std::make_unique<test::ChildProcess>(
        std::vector<std::string>{test::kEtcdBinary,
                                 "--name",
                                 "tls",
                                 "--data-dir",
                                 dir + "/data",
                                 "--listen-client-urls",
                                 "https://" + client,
                                 "--advertise-client-urls",
                                 "https://" + client,
                                 "--listen-peer-urls",
                                 peer,
                                 "--initial-advertise-peer-urls",
                                 peer,
                                 "--initial-cluster",
                                 "tls=" + peer,
                                 "--cert-file",
                                 pki.crt("etcd-" + ca),
                                 "--key-file",
                                 pki.key("etcd-" + ca),
                                 "--trusted-ca-file",
                                 pki.crt(ca),
                                 "--client-cert-auth",
                                 "--logger",
                                 "zap",
                                 "--log-level",
                                 "warn"},
        dir + "/etcd-" + ca + ".log");
  };
  install("ca");
  auto etcd = startEtcd("ca");
  EtcdStoreOptions o;
  o.endpoints = {client};
  o.prefix = freshPrefix();
  o.request_timeout = 2000ms;
  o.tls.ca_file = live + "/ca.crt";
  o.tls.cert_file = live + "/tls.crt";
  o.tls.key_file = live + "/tls.key";
  std::unique_ptr<PolicyStore> s;
  ASSERT_TRUE(test::pollUntil(
      [&] {
        auto r = openEtcdStore(o);
        if (r.ok()) s = std::move(*r);
        return r.ok();
      },
      30s))
      << test::readWholeFile(dir + "/etcd-ca.log");
  ASSERT_TRUE(s->append(testRecord(1)).ok());

  install("ca2");
  etcd.reset();  // SIGKILL by PID; the data dir stays
  etcd = startEtcd("ca2");
  // The first attempts may fail while etcd starts; none may fail for good.
  EXPECT_TRUE(test::pollUntil([&] { return s->append(testRecord(2)).ok(); }, 30s))
      << "no append over the rotated files; etcd log:\n"
      << test::readWholeFile(dir + "/etcd-ca2.log");
  EXPECT_EQ(s->nextVersion(), 3u);
}

TEST(EtcdStore, UnreachableEtcdIsAClearError) {
  EtcdStoreOptions o;
  o.endpoints = {"127.0.0.1:1"};
  o.request_timeout = 1000ms;
  auto s = openEtcdStore(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(s.status().message().find("127.0.0.1:1"), std::string::npos) << s.status().message();
}

}  // namespace
}  // namespace tq::policy

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new tq::policy::EtcdEnvironment);
  return RUN_ALL_TESTS();
}
