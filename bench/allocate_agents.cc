#include "bench/allocate_agents.h"

#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <random>
#include <sstream>

#include "tenantqos/v1/policy.grpc.pb.h"

extern char** environ;

namespace tq::bench {
namespace {

namespace v1 = tenantqos::v1;

int64_t wallNowNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string nodeAddress(size_t i) {
  return "10." + std::to_string(i >> 16 & 255) + "." + std::to_string(i >> 8 & 255) + "." +
         std::to_string(i & 255);
}

}  // namespace

std::string agentNodeName(size_t i) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "gpu-node-%06zu", i);
  return buf;
}

std::string leafUplinksYaml(const std::vector<std::string>& nodes, size_t leaf_size,
                            const std::string& name, const std::string& capacity) {
  std::string y = "sharedLinks:\n  - name: " + name + "\n    capacity: " + capacity +
                  "\n    headroom: 5%\n    groups:\n";
  leaf_size = std::max<size_t>(1, leaf_size);
  for (size_t g = 0; g * leaf_size < nodes.size(); ++g) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "leaf-%03zu", g);
    y += std::string("      - name: ") + buf + "\n        nodes: [";
    for (size_t i = g * leaf_size; i < std::min(nodes.size(), (g + 1) * leaf_size); ++i) {
      y += (i == g * leaf_size ? "" : ", ") + nodes[i];
    }
    y += "]\n";
  }
  return y;
}

Status issueAgentCerts(const std::string& dir, const std::vector<std::string>& nodes, int jobs) {
  jobs = std::max(1, jobs);
  std::deque<std::pair<pid_t, std::string>> running;  // oldest first: pid, node
  auto reapOne = [&]() -> Status {
    int status = 0;
    const auto [pid, node] = running.front();
    running.pop_front();
    if (waitpid(pid, &status, 0) < 0) return errnoStatus("waitpid for openssl");
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      return internalError("openssl could not issue the agent certificate of " + node + " in " +
                           dir + " (wait status " + std::to_string(status) + ")");
    }
    chmod((dir + "/agent-" + node + ".key").c_str(), 0600);
    return okStatus();
  };
  for (const std::string& node : nodes) {
    while (running.size() >= static_cast<size_t>(jobs)) {
      Status st = reapOne();
      if (!st.ok()) return st;
    }
    const std::string base = dir + "/agent-" + node;
    std::vector<std::string> argv = {"openssl",
                                     "req",
                                     "-x509",
                                     "-newkey",
                                     "ec",
                                     "-pkeyopt",
                                     "ec_paramgen_curve:P-256",
                                     "-nodes",
                                     "-keyout",
                                     base + ".key",
                                     "-out",
                                     base + ".crt",
                                     "-subj",
                                     "/O=tenantqos:agents/CN=" + node,
                                     "-CA",
                                     dir + "/ca.crt",
                                     "-CAkey",
                                     dir + "/ca.key",
                                     "-days",
                                     "30",
                                     "-addext",
                                     "basicConstraints=critical,CA:FALSE",
                                     "-addext",
                                     "keyUsage=critical,digitalSignature",
                                     "-addext",
                                     "extendedKeyUsage=serverAuth,clientAuth"};
    std::vector<char*> cargv;
    for (std::string& s : argv) cargv.push_back(s.data());
    cargv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid = -1;
    const int rc = posix_spawnp(&pid, "openssl", &fa, nullptr, cargv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) return errnoStatus(rc, "starting openssl for the agent certificate of " + node);
    running.emplace_back(pid, node);
  }
  while (!running.empty()) {
    Status st = reapOne();
    if (!st.ok()) return st;
  }
  return okStatus();
}

// One agent's stream. A read is always outstanding; one write at a time, the newest report
// waiting behind it (an older waiting one is replaced, as a real agent's would be). A hold keeps
// OnDone from running while a write may still be started (released once the stream ended and no
// write is in flight).
class AllocateAgents::Agent final : public grpc::ClientBidiReactor<v1::DemandReport, v1::NodeCaps> {
 public:
  Agent(AllocateAgents* owner, size_t id, const std::shared_ptr<grpc::Channel>& channel)
      : owner_(owner), id_(id), stub_(v1::PolicyService::NewStub(channel)) {}

  void start(v1::DemandReport first) {
    stub_->async()->Allocate(&ctx_, this);
    AddHold();
    StartRead(&in_);
    {
      MutexLock lock(mu_);
      writing_ = true;
      out_ = std::move(first);
    }
    StartWrite(&out_);
    StartCall();
  }

  void write(v1::DemandReport r) {
    MutexLock lock(mu_);
    if (ended_) return;
    if (writing_) {
      pending_ = std::move(r);
      has_pending_ = true;
      return;
    }
    writing_ = true;
    out_ = std::move(r);
    lock.unlock();
    StartWrite(&out_);
  }

  void OnWriteDone(bool ok) override {
    MutexLock lock(mu_);
    if (ok && !ended_ && has_pending_) {
      has_pending_ = false;
      out_ = std::move(pending_);
      lock.unlock();
      StartWrite(&out_);
      return;
    }
    writing_ = false;
    const bool release = ended_ && !released_;
    released_ |= release;
    lock.unlock();
    if (release) RemoveHold();
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      MutexLock lock(mu_);
      ended_ = true;
      const bool release = !writing_ && !released_;
      released_ |= release;
      lock.unlock();
      if (release) RemoveHold();
      return;
    }
    owner_->received(id_,
                     {in_.round(), in_.computed_at_unix_ms(), wallNowNs(), in_.demand_sequence()});
    StartRead(&in_);
  }

  void OnDone(const grpc::Status& s) override {
    MutexLock lock(mu_);
    done_ = true;
    status_ = s;
    cv_.notify_all();
  }

  // Whether the stream ended; its status in *s.
  bool done(grpc::Status* s) {
    MutexLock lock(mu_);
    if (done_ && s != nullptr) *s = status_;
    return done_;
  }

  void cancelAndWait() {
    ctx_.TryCancel();
    MutexLock lock(mu_);
    cv_.wait_for(lock.native(), std::chrono::seconds(10), [&]() TQ_REQUIRES(mu_) { return done_; });
  }

 private:
  AllocateAgents* const owner_;
  const size_t id_;
  std::unique_ptr<v1::PolicyService::Stub> stub_;
  grpc::ClientContext ctx_;
  v1::NodeCaps in_;  // the read in flight (reactor only)
  Mutex mu_;
  std::condition_variable cv_;
  // The write in flight: written under mu_ only while no write is, untouched while writing_.
  v1::DemandReport out_;
  v1::DemandReport pending_ TQ_GUARDED_BY(mu_);
  bool has_pending_ TQ_GUARDED_BY(mu_) = false;
  bool writing_ TQ_GUARDED_BY(mu_) = false;
  bool ended_ TQ_GUARDED_BY(mu_) = false;     // the read failed: the stream is over
  bool released_ TQ_GUARDED_BY(mu_) = false;  // the hold was removed
  bool done_ TQ_GUARDED_BY(mu_) = false;
  grpc::Status status_ TQ_GUARDED_BY(mu_);
};

AllocateAgents::AllocateAgents(Options options, std::vector<Node> nodes)
    : options_(std::move(options)), nodes_(std::move(nodes)) {}

AllocateAgents::~AllocateAgents() { close(); }

void AllocateAgents::writeReport(size_t id, uint64_t sequence, uint64_t demand) {
  const Node& n = nodes_[id];
  v1::DemandReport r;
  r.set_node(n.name);
  r.set_policy_version(options_.policy_version);
  r.set_sequence(sequence);
  r.set_compact_caps(true);  // caps as policyd sends them to current agents (deltas, keys)
  r.add_addresses(nodeAddress(id));
  for (const std::string& t : n.tenants) {
    v1::LinkDemand* d = r.add_demands();
    d->set_tenant(t);
    d->set_link(options_.link);
    d->set_transmit_bytes_per_second(demand);
    d->set_receive_bytes_per_second(demand);
  }
  reports_sent_.fetch_add(1);
  agents_[id]->write(std::move(r));
}

Status AllocateAgents::open(uint64_t demand, std::chrono::milliseconds timeout) {
  const std::string ca = readFile(options_.pki_dir + "/ca.crt");
  {
    MutexLock lock(mu_);
    held_sequence_.assign(nodes_.size(), 0);
    receipts_.assign(nodes_.size(), {});
  }
  sequence_ = 1;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const std::string base = options_.pki_dir + "/agent-" + nodes_[i].name;
    grpc::SslCredentialsOptions tls;
    tls.pem_root_certs = ca;
    tls.pem_private_key = readFile(base + ".key");
    tls.pem_cert_chain = readFile(base + ".crt");
    if (ca.empty() || tls.pem_private_key.empty() || tls.pem_cert_chain.empty()) {
      return failedPrecondition("bench agent " + nodes_[i].name + ": cannot read " + base +
                                ".{crt,key} or " + options_.pki_dir + "/ca.crt");
    }
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a TCP connection per agent
    auto channel = grpc::CreateCustomChannel(options_.address, grpc::SslCredentials(tls), args);
    agents_.push_back(std::make_unique<Agent>(this, i, channel));
    v1::DemandReport first;
    first.set_node(nodes_[i].name);
    first.set_policy_version(options_.policy_version);
    first.set_sequence(sequence_);
    first.set_compact_caps(true);
    first.add_addresses(nodeAddress(i));
    for (const std::string& t : nodes_[i].tenants) {
      v1::LinkDemand* d = first.add_demands();
      d->set_tenant(t);
      d->set_link(options_.link);
      d->set_transmit_bytes_per_second(demand);
      d->set_receive_bytes_per_second(demand);
    }
    reports_sent_.fetch_add(1);
    agents_.back()->start(std::move(first));
  }
  if (waitAll(sequence_, timeout)) return okStatus();
  std::string why;
  if (streamsEnded(&why) > 0) return unavailable("an Allocate stream ended: " + why);
  MutexLock lock(mu_);
  return deadlineExceeded(std::to_string(below_target_) + " of " + std::to_string(nodes_.size()) +
                          " bench agents hold no caps after " + std::to_string(timeout.count()) +
                          " ms");
}

uint64_t AllocateAgents::reportAll(const std::function<uint64_t(size_t)>& demand) {
  ++sequence_;
  for (size_t i = 0; i < agents_.size(); ++i) writeReport(i, sequence_, demand(i));
  return sequence_;
}

void AllocateAgents::received(size_t id, const CapsReceipt& r) {
  caps_received_.fetch_add(1);
  MutexLock lock(mu_);
  receipts_[id].push_back(r);
  uint64_t& held = held_sequence_[id];
  if (r.demand_sequence <= held) return;
  if (held < target_ && r.demand_sequence >= target_ && --below_target_ == 0) cv_.notify_all();
  held = r.demand_sequence;
}

bool AllocateAgents::waitAll(uint64_t sequence, std::chrono::milliseconds timeout) {
  MutexLock lock(mu_);
  target_ = sequence;
  below_target_ = static_cast<size_t>(std::count_if(held_sequence_.begin(), held_sequence_.end(),
                                                    [&](uint64_t h) { return h < sequence; }));
  return cv_.wait_for(lock.native(), timeout,
                      [&]() TQ_REQUIRES(mu_) { return below_target_ == 0; });
}

std::vector<std::vector<CapsReceipt>> AllocateAgents::takeReceipts() {
  MutexLock lock(mu_);
  std::vector<std::vector<CapsReceipt>> out(receipts_.size());
  out.swap(receipts_);
  return out;
}

size_t AllocateAgents::streamsEnded(std::string* first_error) const {
  size_t n = 0;
  for (const auto& a : agents_) {
    grpc::Status s;
    if (a->done(&s)) {
      if (n++ == 0 && first_error != nullptr) {
        *first_error = "code " + std::to_string(s.error_code()) + ": " + s.error_message();
      }
    }
  }
  return n;
}

void AllocateAgents::startLoad(double hz, uint64_t demand) {
  stopLoad();
  load_stop_ = false;
  load_ = std::thread([this, hz, demand] {
    // Ten slices per period, a tenth of the nodes each: reports arrive spread over the period,
    // as independent agents' would.
    constexpr size_t kSlices = 10;
    const auto period = std::chrono::nanoseconds(static_cast<int64_t>(1e9 / hz));
    std::mt19937_64 rng(1);
    std::uniform_real_distribution<double> jitter(0.8, 1.2);
    auto next = std::chrono::steady_clock::now();
    uint64_t sequence = sequence_;
    while (!load_stop_.load()) {
      ++sequence;
      for (size_t s = 0; s < kSlices && !load_stop_.load(); ++s) {
        for (size_t i = s; i < agents_.size(); i += kSlices) {
          writeReport(i, sequence,
                      static_cast<uint64_t>(static_cast<double>(demand) * jitter(rng)));
        }
        next += period / kSlices;
        std::this_thread::sleep_until(next);  // the load's pace, not a wait for an outcome
      }
      // Behind by more than a period (the machine is busy): skip ahead rather than burst.
      const auto now = std::chrono::steady_clock::now();
      if (now - next > period) next = now;
    }
    sequence_ = sequence;
  });
}

void AllocateAgents::stopLoad() {
  if (!load_.joinable()) return;
  load_stop_ = true;
  load_.join();
  MutexLock lock(mu_);
  for (auto& r : receipts_) r.clear();  // the load's receipts are not measured
}

void AllocateAgents::close() {
  stopLoad();
  for (auto& a : agents_) a->cancelAndWait();
  agents_.clear();
}

}  // namespace tq::bench
