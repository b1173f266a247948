// The ib transport's data path (ib_comm.cc) driven by a fake device behind tq::ib::Verbs: a send
// and a receive comm connected to each other in this process, where RDMA WRITEs are memcpys that
// land at once. Covers the protocol logic (CTS ring wrap, multi-receive matching by tag, chunked
// pacing, failed work completions); the real kernel path is proven by the Soft-RoCE suite
// (tests/rxe/plugin_ib_rxe_test.cc).
#include "nccl-plugin/ib/ib_comm.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "common/clock.h"

namespace tq::plugin::ib {
namespace {

// One fake RDMA device. Verbs tables hold plain function pointers, so the fake in use is a
// global (`current`); the tests run on one thread, the device's event thread only polls the
// context's async_fd (-1: never ready). Remote writes check the rkey and its range, so a wrong
// address or key fails the work request (IBV_WC_REM_ACCESS_ERR) as the hardware would.
class FakeRdma {
 public:
  struct Qp {
    ibv_qp qp{};  // first: the ibv_qp* the comm holds is this object
    uint32_t dest = 0;
    std::deque<uint64_t> recvs;
  };
  struct Cq {
    ibv_cq cq{};
    std::deque<ibv_wc> wcs;
  };
  struct Posted {
    uint32_t qp_num = 0;
    ibv_wr_opcode opcode{};
    uint64_t bytes = 0;
    uint32_t imm = 0;  // host order
  };

  static inline FakeRdma* current = nullptr;

  FakeRdma() {
    std::snprintf(dev_.name, sizeof dev_.name, "fake0");
    list_[0] = &dev_;
    ctx_.device = &dev_;
    ctx_.async_fd = -1;
    pd_.context = &ctx_;
    current = this;
  }
  ~FakeRdma() { current = nullptr; }

  static tq::ib::VerbsFunctions functions();

  // The next send work request posted on QP `qp_num` completes with `status` and moves nothing.
  void failNextSend(uint32_t qp_num, ibv_wc_status status) { fail_ = {qp_num, status}; }
  std::vector<Posted> postedBy(uint32_t qp_num) const {
    std::vector<Posted> v;
    for (const Posted& p : posted_) {
      if (p.qp_num == qp_num) v.push_back(p);
    }
    return v;
  }

 private:
  int postSend(ibv_qp* q, ibv_send_wr* wr);
  bool remoteRange(uint32_t rkey, uint64_t addr, uint64_t len) const {
    if (len == 0) return true;  // a zero-byte write checks no key (the immediate alone)
    auto it = mrs_.find(rkey);
    if (it == mrs_.end()) return false;
    const auto start = reinterpret_cast<uintptr_t>(it->second->addr);
    return addr >= start && addr + len <= start + it->second->length;
  }

  ibv_device dev_{};
  ibv_device* list_[2] = {};
  ibv_context ctx_{};
  ibv_pd pd_{};
  uint32_t next_num_ = 0x11;
  std::map<uint32_t, std::unique_ptr<Qp>> qps_;
  std::vector<std::unique_ptr<Cq>> cqs_;
  std::map<uint32_t, std::unique_ptr<ibv_mr>> mrs_;  // by rkey (== lkey)
  std::vector<Posted> posted_;
  std::optional<std::pair<uint32_t, ibv_wc_status>> fail_;
};

int FakeRdma::postSend(ibv_qp* q, ibv_send_wr* wr) {
  Qp* self = reinterpret_cast<Qp*>(q);
  auto* send_cq = reinterpret_cast<Cq*>(q->send_cq);
  for (; wr != nullptr; wr = wr->next) {
    uint64_t len = 0;
    for (int i = 0; i < wr->num_sge; ++i) len += wr->sg_list[i].length;
    posted_.push_back({q->qp_num, wr->opcode, len, ntohl(wr->imm_data)});
    ibv_wc_status status = IBV_WC_SUCCESS;
    if (fail_ && fail_->first == q->qp_num) {
      status = fail_->second;
      fail_.reset();
    } else if (!remoteRange(wr->wr.rdma.rkey, wr->wr.rdma.remote_addr, len)) {
      status = IBV_WC_REM_ACCESS_ERR;
    } else {
      uint64_t off = 0;
      for (int i = 0; i < wr->num_sge; ++i) {
        const ibv_sge& s = wr->sg_list[i];
        auto* remote = reinterpret_cast<uint8_t*>(wr->wr.rdma.remote_addr + off);
        auto* local = reinterpret_cast<uint8_t*>(s.addr);
        if (wr->opcode == IBV_WR_RDMA_READ) {
          std::memcpy(local, remote, s.length);
        } else {
          std::memcpy(remote, local, s.length);
        }
        off += s.length;
      }
      if (wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
        Qp* peer = qps_.at(self->dest).get();
        if (peer->recvs.empty()) {
          status = IBV_WC_RNR_RETRY_EXC_ERR;
        } else {
          ibv_wc rwc{};
          rwc.wr_id = peer->recvs.front();
          peer->recvs.pop_front();
          rwc.status = IBV_WC_SUCCESS;
          rwc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
          rwc.wc_flags = IBV_WC_WITH_IMM;
          rwc.imm_data = wr->imm_data;
          rwc.byte_len = static_cast<uint32_t>(len);
          rwc.qp_num = peer->qp.qp_num;
          reinterpret_cast<Cq*>(peer->qp.recv_cq)->wcs.push_back(rwc);
        }
      }
    }
    if ((wr->send_flags & IBV_SEND_SIGNALED) != 0 || status != IBV_WC_SUCCESS) {
      ibv_wc wc{};
      wc.wr_id = wr->wr_id;
      wc.status = status;
      wc.opcode = wr->opcode == IBV_WR_RDMA_READ ? IBV_WC_RDMA_READ : IBV_WC_RDMA_WRITE;
      wc.qp_num = q->qp_num;
      send_cq->wcs.push_back(wc);
    }
  }
  return 0;
}

tq::ib::VerbsFunctions FakeRdma::functions() {
  tq::ib::VerbsFunctions f;
  f.get_device_list = [](int* n) {
    *n = 1;
    return current->list_;
  };
  f.free_device_list = [](ibv_device**) {};
  f.get_device_name = [](ibv_device* d) -> const char* { return d->name; };
  f.open_device = [](ibv_device*) { return &current->ctx_; };
  f.close_device = [](ibv_context*) { return 0; };
  f.query_device = [](ibv_context*, ibv_device_attr* a) {
    *a = {};
    return 0;
  };
  f.query_port = [](ibv_context*, uint8_t, _compat_ibv_port_attr*) { return 0; };
  f.query_gid = [](ibv_context*, uint8_t, int, ibv_gid* g) {
    *g = {};
    return 0;
  };
  f.alloc_pd = [](ibv_context*) { return &current->pd_; };
  f.dealloc_pd = [](ibv_pd*) { return 0; };
  f.reg_mr = [](ibv_pd* pd, void* addr, size_t length, int) {
    auto mr = std::make_unique<ibv_mr>();
    *mr = {};
    mr->context = pd->context;
    mr->pd = pd;
    mr->addr = addr;
    mr->length = length;
    mr->lkey = mr->rkey = current->next_num_++;
    ibv_mr* raw = mr.get();
    current->mrs_[raw->rkey] = std::move(mr);
    return raw;
  };
  f.dereg_mr = [](ibv_mr* mr) { return current->mrs_.erase(mr->rkey) == 1 ? 0 : EINVAL; };
  f.create_cq = [](ibv_context* ctx, int cqe, void*, ibv_comp_channel*, int) {
    auto cq = std::make_unique<Cq>();
    cq->cq.context = ctx;
    cq->cq.cqe = cqe;
    current->cqs_.push_back(std::move(cq));
    return &current->cqs_.back()->cq;
  };
  f.destroy_cq = [](ibv_cq*) { return 0; };
  f.create_qp = [](ibv_pd* pd, ibv_qp_init_attr* init) {
    auto qp = std::make_unique<Qp>();
    qp->qp.context = pd->context;
    qp->qp.pd = pd;
    qp->qp.send_cq = init->send_cq;
    qp->qp.recv_cq = init->recv_cq;
    qp->qp.qp_type = init->qp_type;
    qp->qp.qp_num = current->next_num_++;
    ibv_qp* raw = &qp->qp;
    current->qps_[raw->qp_num] = std::move(qp);
    return raw;
  };
  f.modify_qp = [](ibv_qp* qp, ibv_qp_attr* attr, int mask) {
    if ((mask & IBV_QP_DEST_QPN) != 0) reinterpret_cast<Qp*>(qp)->dest = attr->dest_qp_num;
    if ((mask & IBV_QP_STATE) != 0) qp->state = attr->qp_state;
    return 0;
  };
  f.query_qp = [](ibv_qp*, ibv_qp_attr* a, int, ibv_qp_init_attr* i) {
    *a = {};
    *i = {};
    return 0;
  };
  f.destroy_qp = [](ibv_qp* qp) { return current->qps_.erase(qp->qp_num) == 1 ? 0 : EINVAL; };
  f.get_async_event = [](ibv_context*, ibv_async_event*) { return -1; };
  f.ack_async_event = [](ibv_async_event*) {};
  f.wc_status_str = [](ibv_wc_status s) -> const char* {
    return s == IBV_WC_RETRY_EXC_ERR ? "transport retry counter exceeded" : "fake status";
  };
  f.event_type_str = [](ibv_event_type) -> const char* { return "fake event"; };
  f.post_send = [](ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr**) {
    return current->postSend(qp, wr);
  };
  f.post_recv = [](ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr**) {
    for (; wr != nullptr; wr = wr->next) reinterpret_cast<Qp*>(qp)->recvs.push_back(wr->wr_id);
    return 0;
  };
  f.poll_cq = [](ibv_cq* cq, int n, ibv_wc* wc) {
    auto* c = reinterpret_cast<Cq*>(cq);
    int i = 0;
    for (; i < n && !c->wcs.empty(); ++i) {
      wc[i] = c->wcs.front();
      c->wcs.pop_front();
    }
    return i;
  };
  return f;
}

// Grants what the test put in the bucket; records what it was asked.
class FakeAdmission final : public Admission {
 public:
  bool tryAdmit(uint64_t bytes, uint64_t pending) override {
    last_pending = pending;
    if (bytes > tokens) return false;
    tokens -= bytes;
    return true;
  }
  int64_t waitNs(uint64_t) const override { return 0; }
  void giveBack(uint64_t bytes) override {
    tokens += bytes;
    given_back += bytes;
  }
  void peerWait(int64_t) override {}
  uint64_t chunkBytes() const override { return chunk; }
  uint64_t rateBytesPerSecond() const override { return 0; }
  uint64_t tokens = 0;
  uint64_t chunk = 4096;
  uint64_t last_pending = 0;
  uint64_t given_back = 0;
};

// Hands out one FakeAdmission (the ib comms admit from NCCL's thread only).
class FakePacing final : public Pacing {
 public:
  explicit FakePacing(FakeAdmission* a) : a_(a) {}
  Admission* newAdmission() override { return a_; }

 private:
  FakeAdmission* a_;
};

class IbCommFakeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto v = tq::ib::Verbs::fromFunctions(FakeRdma::functions(), "fake libibverbs");
    ASSERT_TRUE(v.ok()) << v.status().toString();
    verbs_ = std::move(*v);
    auto d = IbDevice::open(*verbs_, "fake0");
    ASSERT_TRUE(d.ok()) << d.status().toString();
    port_.name = "fake0";
    port_.mtu_bytes = 4096;
    auto gid = tq::ib::parseGid("::ffff:10.77.0.1");  // RoCE v2: connecting needs a GID
    ASSERT_TRUE(gid.ok());
    port_.gid = *gid;
    port_.dev = *d;
  }

  void connect(int nqps) {
    auto s = makeResources(port_, ConnSide::kSend, nqps);
    ASSERT_TRUE(s.ok()) << s.status().toString();
    auto r = makeResources(port_, ConnSide::kRecv, nqps);
    ASSERT_TRUE(r.ok()) << r.status().toString();
    const IbEndpointInfo se = (*s)->local();
    const IbEndpointInfo re = (*r)->local();
    Status cs = connectResources(s->get(), re, 0, 0, cfg_);
    ASSERT_TRUE(cs.ok()) << cs.toString();
    Status cr = connectResources(r->get(), se, 0, 0, cfg_);
    ASSERT_TRUE(cr.ok()) << cr.toString();
    IbHello hello;
    hello.ep = se;
    hello.cts_addr = reinterpret_cast<uintptr_t>((*s)->ring.ptr);
    hello.cts_rkey = (*s)->ring.mr->rkey;
    IbReply reply;
    reply.ep = re;
    reply.sizes_addr = reinterpret_cast<uintptr_t>((*r)->ring.ptr);
    reply.sizes_rkey = (*r)->ring.mr->rkey;
    send_qp_ = (*s)->qps[0]->qp_num;
    recv_qp_ = (*r)->qps[0]->qp_num;
    send_ = std::make_unique<IbSendComm>(std::move(*s), reply, Fd(), "peer", cfg_, clock_);
    recv_ = std::make_unique<IbRecvComm>(std::move(*r), hello, TrafficQos{}, Fd(), "peer", cfg_,
                                         clock_);
  }

  Request* irecv(std::vector<std::vector<uint8_t>>& bufs, const std::vector<int>& tags) {
    void* data[kMaxRecvs];
    size_t sizes[kMaxRecvs];
    for (size_t i = 0; i < bufs.size(); ++i) {
      data[i] = bufs[i].data();
      sizes[i] = bufs[i].size();
    }
    Request* r = nullptr;
    Status s = recv_->irecv(static_cast<int>(bufs.size()), data, sizes, tags.data(), nullptr, &r);
    EXPECT_TRUE(s.ok()) << s.toString();
    return r;
  }
  Request* isend(std::vector<uint8_t>& buf, int tag) {
    Request* r = nullptr;
    Status s = send_->isend(buf.data(), buf.size(), tag, nullptr, &r);
    EXPECT_TRUE(s.ok()) << s.toString();
    return r;
  }
  // Tests `r` until done (the fake completes at once: a few rounds at most).
  std::vector<size_t> finish(Request* r) {
    std::vector<size_t> sizes(kMaxRecvs, 0);
    bool done = false;
    for (int i = 0; i < 8 && !done; ++i) {
      Status s = r->test(&done, sizes.data());
      EXPECT_TRUE(s.ok()) << s.toString();
      if (!s.ok()) break;
    }
    EXPECT_TRUE(done);
    return sizes;
  }
  static std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
    std::vector<uint8_t> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7);
    return v;
  }

  FakeRdma fake_;
  std::unique_ptr<tq::ib::Verbs> verbs_;
  IbPort port_;
  IbCommConfig cfg_;
  FakeClock clock_;
  uint32_t send_qp_ = 0;
  uint32_t recv_qp_ = 0;
  std::unique_ptr<IbSendComm> send_;
  std::unique_ptr<IbRecvComm> recv_;
};

// Three times round the CTS ring, each time with every slot posted before the first send: each
// message must land in its own receive, in order, whatever slot % kCtsSlots it uses.
TEST_F(IbCommFakeTest, CtsRingWrapsKeepingEachMessageInItsReceive) {
  ASSERT_NO_FATAL_FAILURE(connect(2));
  for (int round = 0; round < 3; ++round) {
    std::vector<std::vector<std::vector<uint8_t>>> bufs(kCtsSlots);
    std::vector<Request*> recvs;
    for (int i = 0; i < kCtsSlots; ++i) {
      bufs[i].push_back(std::vector<uint8_t>(256, 0));
      Request* r = irecv(bufs[i], {i});
      ASSERT_NE(r, nullptr) << "round " << round << " receive " << i;
      recvs.push_back(r);
    }
    std::vector<std::vector<uint8_t>> msgs;
    for (int i = 0; i < kCtsSlots; ++i) {
      msgs.push_back(pattern(static_cast<size_t>(1 + (i * 37 + round) % 256), uint8_t(i + round)));
    }
    for (int i = 0; i < kCtsSlots; ++i) {
      Request* s = isend(msgs[i], i);
      ASSERT_NE(s, nullptr) << "round " << round << " send " << i;
      EXPECT_EQ(finish(s)[0], msgs[i].size());
    }
    for (int i = 0; i < kCtsSlots; ++i) {
      const std::vector<size_t> got = finish(recvs[i]);
      ASSERT_EQ(got[0], msgs[i].size()) << "round " << round << " receive " << i;
      EXPECT_EQ(0, std::memcmp(bufs[i][0].data(), msgs[i].data(), msgs[i].size()))
          << "round " << round << " receive " << i;
    }
  }
  std::vector<uint8_t> one(8);
  EXPECT_EQ(isend(one, 0), nullptr);  // no receive posted: no clear-to-send, no request
}

// A receive of three buffers takes the sends by tag whatever their order; a send with a tag the
// slot does not hold waits (no request) instead of taking a buffer.
TEST_F(IbCommFakeTest, MultiRecvMatchesSendsByTag) {
  ASSERT_NO_FATAL_FAILURE(connect(1));
  std::vector<std::vector<uint8_t>> bufs = {std::vector<uint8_t>(100), std::vector<uint8_t>(200),
                                            std::vector<uint8_t>(300)};
  Request* r = irecv(bufs, {7, 8, 9});
  ASSERT_NE(r, nullptr);
  std::vector<uint8_t> m9 = pattern(250, 9), m7 = pattern(50, 7), m8;
  std::vector<uint8_t> other = pattern(10, 1);
  EXPECT_EQ(isend(other, 5), nullptr);
  Request* s9 = isend(m9, 9);
  ASSERT_NE(s9, nullptr);
  Request* s7 = isend(m7, 7);
  ASSERT_NE(s7, nullptr);
  EXPECT_TRUE(fake_.postedBy(send_qp_).empty());  // nothing moves before the slot is matched
  Request* s8 = isend(m8, 8);
  ASSERT_NE(s8, nullptr);
  finish(s9);
  finish(s7);
  finish(s8);
  const std::vector<size_t> got = finish(r);
  EXPECT_EQ(got[0], 50u);
  EXPECT_EQ(got[1], 0u);
  EXPECT_EQ(got[2], 250u);
  EXPECT_EQ(0, std::memcmp(bufs[0].data(), m7.data(), m7.size()));
  EXPECT_EQ(0, std::memcmp(bufs[2].data(), m9.data(), m9.size()));
}

// Ingress pacing: a receive's clear-to-send goes out only when the rx bucket has the posted
// bytes; irecv still returns the request (NCCL tests it), the sender has no clear-to-send and
// waits (no request), and test() progress sends it once the tokens are there, in order.
TEST_F(IbCommFakeTest, ClearToSendWaitsForTheReceiveBucket) {
  ASSERT_NO_FATAL_FAILURE(connect(1));
  FakeAdmission rx;
  FakePacing pacing(&rx);
  recv_->setPacing(&pacing);
  std::vector<std::vector<uint8_t>> a = {std::vector<uint8_t>(8192)};
  std::vector<std::vector<uint8_t>> b = {std::vector<uint8_t>(4096)};
  Request* ra = irecv(a, {0});
  ASSERT_NE(ra, nullptr) << "never a NULL request for want of tokens";
  Request* rb = irecv(b, {0});
  ASSERT_NE(rb, nullptr);
  EXPECT_TRUE(fake_.postedBy(recv_qp_).empty()) << "no clear-to-send without tokens";
  EXPECT_EQ(rx.last_pending, 8192u + 4096u) << "both receives wait: the ingress backlog";
  std::vector<uint8_t> m1 = pattern(8000, 1), m2 = pattern(4000, 2);
  EXPECT_EQ(isend(m1, 0), nullptr) << "the sender waits for its clear-to-send";
  rx.tokens = 4096;  // enough for the second receive, not the first: order is kept
  bool done = false;
  size_t sizes[kMaxRecvs] = {};
  ASSERT_TRUE(ra->test(&done, sizes).ok());
  EXPECT_TRUE(fake_.postedBy(recv_qp_).empty()) << "the older receive goes first";
  rx.tokens = 8192 + 4096;
  ASSERT_TRUE(ra->test(&done, sizes).ok());
  EXPECT_EQ(fake_.postedBy(recv_qp_).size(), 2u) << "both clear-to-send entries went out";
  Request* s1 = isend(m1, 0);
  ASSERT_NE(s1, nullptr);
  finish(s1);
  EXPECT_EQ(finish(ra)[0], 8000u);
  // The charge was the posted 8192 bytes; the 192 that did not come are given back.
  EXPECT_EQ(rx.given_back, 192u);
  Request* s2 = isend(m2, 0);
  ASSERT_NE(s2, nullptr);
  finish(s2);
  EXPECT_EQ(finish(rb)[0], 4000u);
  EXPECT_EQ(rx.given_back, 192u + 96u);
  EXPECT_EQ(0, std::memcmp(a[0].data(), m1.data(), m1.size()));
}

// A peer that writes without a clear-to-send, or more than one allowed, fails the connection
// with a clear error (nothing else: the receive reports it, the comm refuses further work).
TEST_F(IbCommFakeTest, APeerThatSendsWithoutOrBeyondItsClearToSendFailsTheConnection) {
  for (bool beyond : {false, true}) {
    ASSERT_NO_FATAL_FAILURE(connect(1));
    FakeAdmission rx;
    rx.tokens = beyond ? 1 << 20 : 0;
    FakePacing pacing(&rx);
    recv_->setPacing(&pacing);
    std::vector<std::vector<uint8_t>> a = {std::vector<uint8_t>(4096)};
    Request* r = irecv(a, {0});
    ASSERT_NE(r, nullptr);
    // A hostile sender posts a completing write of its own, bypassing the clear-to-send ring.
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.imm_data = htonl(beyond ? 5000u : 100u);
    wr.send_flags = IBV_SEND_SIGNALED;
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(verbs_->postSend(ibQpsOf(send_.get())[0], &wr, &bad), 0);
    bool done = false;
    size_t sizes[kMaxRecvs] = {};
    Status st = r->test(&done, sizes);
    ASSERT_FALSE(st.ok()) << (beyond ? "beyond" : "without");
    EXPECT_NE(
        st.message().find(beyond ? "its clear-to-send allowed" : "clear-to-send had not been sent"),
        std::string::npos)
        << st.message();
    std::vector<std::vector<uint8_t>> more = {std::vector<uint8_t>(64)};
    void* d[1] = {more[0].data()};
    size_t sz[1] = {64};
    Request* again = nullptr;
    EXPECT_FALSE(recv_->irecv(1, d, sz, nullptr, nullptr, &again).ok()) << "the comm failed";
    send_.reset();
    recv_.reset();
  }
}

// Each chunk is admitted before it is posted, at most chunkBytes() long; a refused chunk waits
// for tokens (test() posts it later) and the last one carries the size as immediate.
TEST_F(IbCommFakeTest, ChunksArePostedOnlyAsTheBucketAdmitsThem) {
  ASSERT_NO_FATAL_FAILURE(connect(1));
  FakeAdmission adm;
  FakePacing pacing(&adm);
  send_->setPacing(&pacing);
  std::vector<std::vector<uint8_t>> bufs = {std::vector<uint8_t>(32768)};
  Request* r = irecv(bufs, {0});
  ASSERT_NE(r, nullptr);
  std::vector<uint8_t> msg = pattern(20000, 3);
  EXPECT_EQ(isend(msg, 0), nullptr);  // no tokens: no request, nothing posted
  EXPECT_TRUE(fake_.postedBy(send_qp_).empty());
  EXPECT_EQ(adm.last_pending, 20000u);  // the whole message waits: the backlog the agent sees
  adm.tokens = 4096;
  Request* s = isend(msg, 0);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(adm.last_pending, 20000u - 4096u);  // the second chunk was refused
  bool done = false;
  size_t size = 0;
  ASSERT_TRUE(s->test(&done, &size).ok());
  EXPECT_FALSE(done);
  ASSERT_EQ(fake_.postedBy(send_qp_).size(), 1u);
  adm.tokens = 8192;
  ASSERT_TRUE(s->test(&done, &size).ok());
  EXPECT_FALSE(done);
  EXPECT_EQ(fake_.postedBy(send_qp_).size(), 3u);
  adm.tokens = 1 << 20;
  finish(s);
  const std::vector<FakeRdma::Posted> posted = fake_.postedBy(send_qp_);
  ASSERT_EQ(posted.size(), 5u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(posted[i].opcode, IBV_WR_RDMA_WRITE) << i;
    EXPECT_EQ(posted[i].bytes, 4096u) << i;
  }
  EXPECT_EQ(posted[4].opcode, IBV_WR_RDMA_WRITE_WITH_IMM);
  EXPECT_EQ(posted[4].bytes, 20000u - 4 * 4096u);
  EXPECT_EQ(posted[4].imm, 20000u);
  EXPECT_EQ(finish(r)[0], 20000u);
  EXPECT_EQ(0, std::memcmp(bufs[0].data(), msg.data(), msg.size()));
}

// A failed work completion fails the comm with the QPs, the work request and the status text,
// and every later call returns that error.
TEST_F(IbCommFakeTest, FailedSendCompletionFailsTheCommWithWhatAndWhy) {
  ASSERT_NO_FATAL_FAILURE(connect(1));
  std::vector<std::vector<uint8_t>> bufs = {std::vector<uint8_t>(64)};
  Request* r = irecv(bufs, {0});
  ASSERT_NE(r, nullptr);
  fake_.failNextSend(send_qp_, IBV_WC_RETRY_EXC_ERR);
  std::vector<uint8_t> msg = pattern(64, 1);
  Request* s = isend(msg, 0);
  ASSERT_NE(s, nullptr);
  bool done = false;
  size_t size = 0;
  Status st = s->test(&done, &size);
  ASSERT_FALSE(st.ok());
  EXPECT_FALSE(done);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  for (const char* want : {"fake0 QP", "RDMA WRITE_WITH_IMM of message 0",
                           "transport retry counter exceeded", "peer"}) {
    EXPECT_NE(st.message().find(want), std::string::npos) << want << " in " << st.message();
  }
  Request* again = nullptr;
  Status later = send_->isend(msg.data(), msg.size(), 0, nullptr, &again);
  EXPECT_EQ(later.code(), StatusCode::kUnavailable);
  EXPECT_EQ(again, nullptr);
}

// The receiver's clear-to-send write failing fails its receive with the slot named.
TEST_F(IbCommFakeTest, FailedClearToSendFailsTheReceive) {
  ASSERT_NO_FATAL_FAILURE(connect(1));
  fake_.failNextSend(recv_qp_, IBV_WC_REM_ACCESS_ERR);
  std::vector<std::vector<uint8_t>> bufs = {std::vector<uint8_t>(64)};
  Request* r = irecv(bufs, {0});
  ASSERT_NE(r, nullptr);
  bool done = false;
  size_t sizes[kMaxRecvs] = {};
  Status st = r->test(&done, sizes);
  ASSERT_FALSE(st.ok());
  EXPECT_FALSE(done);
  EXPECT_NE(st.message().find("clear-to-send RDMA WRITE (slot 0)"), std::string::npos)
      << st.message();
}

}  // namespace
}  // namespace tq::plugin::ib
