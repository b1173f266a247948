#include "nccl-plugin/perf/rank.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "common/endpoints.h"
#include "common/text.h"
#include "nccl-plugin/perf/report.h"

namespace tq::perf {

void fillPattern(uint8_t* p, uint64_t n, int rank) {
  for (uint64_t i = 0; i < n; ++i) p[i] = patternByte(i, rank);
}
uint64_t countWrongBytes(const uint8_t* p, uint64_t n, int rank) {
  uint64_t wrong = 0;
  for (uint64_t i = 0; i < n; ++i) wrong += p[i] != patternByte(i, rank) ? 1 : 0;
  return wrong;
}

namespace {

void* allocBuffer(uint64_t bytes) {
  void* p = nullptr;
  if (::posix_memalign(&p, 4096, std::max<uint64_t>(bytes, 64)) != 0) return nullptr;
  std::memset(p, 0, std::max<uint64_t>(bytes, 64));
  return p;
}

}  // namespace

Status Rank::idle(bool progressed, bool paced) {
  const int64_t now = nowNs();
  if (progressed) {
    last_progress_ = now;
    idle_spins_ = 0;
    nap_us_ = std::max<int64_t>(nap_us_ / 2, kMinNapUs);  // keep most of the learned pace
    return okStatus();
  }
  if (now - last_progress_ > static_cast<int64_t>(o_.timeout_s * 1e9)) {
    return deadlineExceeded(
        format("no progress for %.1f s (peer stuck or gone; --timeout)", o_.timeout_s));
  }
  if (now >= next_alive_check_ && rv_ != nullptr) {
    next_alive_check_ = now + 100'000'000;
    TQ_RETURN_IF_ERROR(rv_->checkAlive());
  }
  ++idle_spins_;
  switch (o_.poll) {
    case PollMode::kSpin: break;
    case PollMode::kYield: ::sched_yield(); break;
    case PollMode::kSleep:
      // Back off while nothing completes: a few spins, then naps that double from 50 us up to
      // 1 ms and halve on progress, so a steady stream settles near its completion interval.
      // With --window messages queued in the plugin a nap never starves the transfer, and
      // fewer wake-ups leave the cores to the plugin's helper threads.
      if (idle_spins_ >= 16) {
        ::usleep(static_cast<useconds_t>(paced ? kMinNapUs : nap_us_));
        if (!paced) nap_us_ = std::min<int64_t>(nap_us_ * 2, kMaxNapUs);
      }
      break;
  }
  return okStatus();
}

Status Rank::reapSends(int peer, std::vector<void*>& reqs, uint64_t posted, uint64_t* done,
                       uint64_t* tx, bool* progress) {
  while (*done < posted) {
    bool complete = false;
    int got = -1;
    TQ_RETURN_IF_ERROR_CTX(net_->test(reqs[*done % reqs.size()], &complete, &got),
                           format("send to rank %d", peer));
    if (!complete) break;
    *tx += static_cast<uint64_t>(std::max(got, 0));
    ++*done;
    *progress = true;
  }
  return okStatus();
}

void* Rank::buffer(uint64_t bytes) {
  void* b = allocBuffer(bytes);
  if (b != nullptr) buffers_.push_back(b);
  return b;
}

Result<void*> Rank::reg(void* comm, void* data, uint64_t bytes) {
  void* mh = nullptr;
  TQ_RETURN_IF_ERROR(net_->regMr(comm, data, std::max<uint64_t>(bytes, 64), &mh));
  mrs_.emplace_back(comm, mh);
  return mh;
}

Result<double> Rank::maxOverRanks(double v) {
  std::string mine(sizeof v, '\0');
  std::memcpy(mine.data(), &v, sizeof v);
  TQ_ASSIGN_OR_RETURN(auto all, rv_->allGather(mine));
  double m = v;
  for (const std::string& s : all) {
    double x = 0;
    if (s.size() == sizeof x) std::memcpy(&x, s.data(), sizeof x);
    m = std::max(m, x);
  }
  return m;
}

Status Rank::setup(Fd listen) {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  if (!listen.valid()) {
    Result<HostPort> hp = parseHostPort(o_.rendezvous);
    if (!hp.ok()) return hp.status().withContext("--rendezvous");
    if (hp->port == 0) return invalidArgument("--rendezvous " + o_.rendezvous + ": port 0");
    host = hp->host;
    port = hp->port;
  }
  const int64_t timeout_ns = static_cast<int64_t>(o_.timeout_s * 1e9);
  TQ_ASSIGN_OR_RETURN(rv_,
                      Rendezvous::create(rank_, n_, host, port, std::move(listen), timeout_ns));

  char self[4096];
  std::vector<std::string> dirs;
  const ssize_t len = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (len > 0) {
    self[len] = '\0';
    std::string dir(self);
    dir = dir.substr(0, dir.rfind('/'));
    dirs = {dir + "/../lib", dir};
  }
  TQ_ASSIGN_OR_RETURN(net_, NetPlugin::load(o_.plugin, dirs, o_.abi));
  // commId: the same on every rank of this run (like NCCL's commHash).
  TQ_RETURN_IF_ERROR(
      net_->init(0x7471706572660000ull + static_cast<uint64_t>(n_), o_.traffic_class));
  TQ_ASSIGN_OR_RETURN(int ndev, net_->devices());
  if (o_.dev < 0 || o_.dev >= ndev) {
    return invalidArgument(format("--dev %d: the plugin has %d device(s)", o_.dev, ndev));
  }
  TQ_ASSIGN_OR_RETURN(dev_name_, net_->deviceName(o_.dev));

  if (o_.mode == "pingpong") {
    send_to_ = recv_from_ = 1 - rank_;
  } else if (o_.mode == "sendrecv" && o_.unidirectional) {
    if (rank_ % 2 == 0)
      send_to_ = rank_ + 1;
    else
      recv_from_ = rank_ - 1;
  } else if (o_.mode == "alltoall") {
    for (int p = 1; p < n_; ++p) {  // from the next rank on, so no peer is everyone's first
      sends_.push_back(Conn{(rank_ + p) % n_});
      recvs_.push_back(Conn{(rank_ - p + n_) % n_});
    }
  } else if (o_.mode == "incast") {
    if (rank_ == 0) {
      for (int p = 1; p < n_; ++p) recvs_.push_back(Conn{p});
    } else {
      sends_.push_back(Conn{0});
    }
  } else if (n_ > 1) {
    send_to_ = (rank_ + 1) % n_;
    recv_from_ = (rank_ - 1 + n_) % n_;
  }
  if (send_to_ >= 0) sends_.push_back(Conn{send_to_});
  if (recv_from_ >= 0) recvs_.push_back(Conn{recv_from_});
  TQ_RETURN_IF_ERROR(connectPeers());
  if (send_to_ >= 0) send_ = sends_[0].comm;
  if (recv_from_ >= 0) recv_ = recvs_[0].comm;
  return okStatus();
}

Status Rank::connectPeers() {
  // Published blob: per receive connection, the sending peer's rank (4 bytes) and the handle.
  constexpr size_t kRecord = sizeof(int32_t) + sizeof(NetHandle::bytes);
  std::string blob;
  for (Conn& c : recvs_) {
    NetHandle mine{};
    TQ_RETURN_IF_ERROR_CTX(net_->listen(o_.dev, &mine, &c.listen),
                           format("listen for rank %d", c.peer));
    const int32_t peer = c.peer;
    blob.append(reinterpret_cast<const char*>(&peer), sizeof peer);
    blob.append(mine.bytes, sizeof mine.bytes);
  }
  TQ_ASSIGN_OR_RETURN(auto all, rv_->allGather(blob));
  std::vector<NetHandle> handles(sends_.size());
  for (size_t k = 0; k < sends_.size(); ++k) {
    const std::string& theirs = all[static_cast<size_t>(sends_[k].peer)];
    bool found = false;
    for (size_t off = 0; off + kRecord <= theirs.size() && !found; off += kRecord) {
      int32_t to = -1;
      std::memcpy(&to, theirs.data() + off, sizeof to);
      if (to != rank_) continue;
      std::memcpy(handles[k].bytes, theirs.data() + off + sizeof to, sizeof handles[k].bytes);
      found = true;
    }
    if (!found) {
      return internalError(
          format("rank %d published no listen handle for rank %d", sends_[k].peer, rank_));
    }
  }
  last_progress_ = nowNs();
  // Connect and accept polled alternately: blocking in either would deadlock the ring.
  for (;;) {
    bool progress = false, pending = false;
    for (size_t k = 0; k < sends_.size(); ++k) {
      Conn& c = sends_[k];
      if (c.comm != nullptr) continue;
      TQ_RETURN_IF_ERROR_CTX(net_->connect(o_.dev, &handles[k], &c.comm),
                             format("connect to rank %d", c.peer));
      progress |= c.comm != nullptr;
      pending |= c.comm == nullptr;
    }
    for (Conn& c : recvs_) {
      if (c.comm != nullptr) continue;
      TQ_RETURN_IF_ERROR_CTX(net_->accept(c.listen, &c.comm),
                             format("accept from rank %d", c.peer));
      progress |= c.comm != nullptr;
      pending |= c.comm == nullptr;
    }
    if (!pending) break;
    TQ_RETURN_IF_ERROR_CTX(idle(progress), "connecting");
  }
  return rv_->barrier();
}

void Rank::header(const std::string& extra) {
  if (rank_ != 0) return;
  if (o_.json) {
    emitLine(
        format("{\"type\":\"config\",\"mode\":%s,\"plugin\":%s,\"plugin_name\":%s,\"abi\":%d,"
               "\"nranks\":%d,\"dev\":%d,\"dev_name\":%s,\"window\":%d,\"traffic_class\":%d}",
               jsonQuote(o_.mode).c_str(), jsonQuote(net_->path()).c_str(),
               jsonQuote(net_->name()).c_str(), net_->abi(), n_, o_.dev,
               jsonQuote(dev_name_).c_str(), o_.window, o_.traffic_class));
    return;
  }
  emitLine(
      format("# tenantqos-perf %s | plugin %s (%s, ABI v%d) | nranks %d | device %d (%s) | "
             "window %d | trafficClass %d%s",
             o_.mode.c_str(), net_->path().c_str(), net_->name(), net_->abi(), n_, o_.dev,
             dev_name_.c_str(), o_.window, o_.traffic_class, extra.c_str()));
}

Status Rank::waitAll(std::vector<void*>& reqs) {
  for (;;) {
    bool progress = false, all = true;
    for (void*& r : reqs) {
      if (r == nullptr) continue;
      bool done = false;
      TQ_RETURN_IF_ERROR(net_->test(r, &done, nullptr));
      if (done) {
        r = nullptr;
        progress = true;
      } else {
        all = false;
      }
    }
    if (all) return okStatus();
    TQ_RETURN_IF_ERROR(idle(progress));
  }
}

Status Rank::stepEndMarker(void* comm, bool ready, void* buf, void* mh, EndMarker* m,
                           bool* progress, bool* paced) {
  if (ready && !m->sent) {
    TQ_RETURN_IF_ERROR(net_->isend(comm, buf, 0, rank_, mh, &m->req));
    if (m->req == nullptr) {
      *paced = true;
      return okStatus();
    }
    m->sent = true;
    *progress = true;
  }
  if (m->sent && !m->done) {
    bool done = false;
    TQ_RETURN_IF_ERROR(net_->test(m->req, &done, nullptr));
    if (done) {
      m->done = true;
      *progress = true;
    }
  }
  return okStatus();
}

Status Rank::run(Fd listen) {
  TQ_RETURN_IF_ERROR(setup(std::move(listen)));
  if (o_.mode == "allreduce") return o_.duration_s > 0 ? runAllReduceStream() : runAllReduce();
  if (o_.mode == "alltoall" || o_.mode == "incast") return runExchange();
  if (o_.mode == "pingpong") return runPingPong();
  if (o_.duration_s > 0) return runSendRecvDuration();
  return runSendRecvSweep();
}

}  // namespace tq::perf
