// The socket transport in one process on loopback: connection setup in any interleaving,
// marking of every socket on both ends, and bad peers (garbage, wrong magic or version,
// truncated or missing handshakes) failing connect/accept with a message within the deadline.
// Deadlines run on a FakeClock, so no test waits for them.
#include "nccl-plugin/socket/socket_transport.h"
#include "common/thread_annotations.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <mutex>
#include <random>
#include <set>

#include "common/clock.h"
#include "nccl-plugin/oob/tcp.h"
#include "nccl-plugin/socket/socket_comm.h"
#include "nccl-plugin/socket/wire.h"

namespace tq::plugin::socket {
namespace {

constexpr int kSocks = 2;
// Paced streams' windows (TENANTQOS_SOCKET_WINDOW_US) in every test of this file.
constexpr int64_t kWindowNs = 4'000'000;
constexpr int64_t kTimeoutNs = 1'000'000'000;

struct Handle {
  uint8_t b[kHandleBytes] = {};
};

bool before(std::chrono::steady_clock::time_point t) {
  return std::chrono::steady_clock::now() < t;
}
std::chrono::steady_clock::time_point in(int ms) {
  return std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
}

class SocketTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto devs = oob::findInterfaces("lo", "");
    ASSERT_TRUE(devs.ok()) << devs.status().toString();
    SocketTransportConfig cfg;
    cfg.nsocks = kSocks;
    cfg.inline_max = 1024;
    cfg.min_chunk = 4096;
    cfg.handshake_timeout_ns = kTimeoutNs;
    cfg.window_ns = kWindowNs;
    cfg.window_rtt = window_rtt_;
    t_ = std::make_unique<SocketTransport>(std::move(devs).value(), cfg, clock_);
  }

  TrafficQos qos(int dscp, std::optional<uint32_t> prio, const std::string& tenant) {
    TrafficQos q;
    q.dscp = dscp;
    q.priority = prio;
    q.tenant = tenant;
    return q;
  }

  std::unique_ptr<ListenComm> listen(Handle* h, const TrafficQos& q = {}) {
    std::unique_ptr<ListenComm> lc;
    Status s = t_->listen(0, q, h->b, &lc);
    EXPECT_TRUE(s.ok()) << s.toString();
    return lc;
  }

  void pair(const TrafficQos& sq, const TrafficQos& rq, std::unique_ptr<SendComm>* send,
            std::unique_ptr<RecvComm>* recv, std::unique_ptr<ListenComm>* lc, Handle* h) {
    *lc = listen(h, rq);
    completePair(lc->get(), *h, sq, send, recv);
  }

  // Polls connect and accept (whichever is not done yet) until both ends exist, for 5 s.
  void completePair(ListenComm* lc, Handle h, const TrafficQos& sq, std::unique_ptr<SendComm>* send,
                    std::unique_ptr<RecvComm>* recv) {
    auto until = in(5000);
    while ((*send == nullptr || *recv == nullptr) && before(until)) {
      if (*send == nullptr) {
        ASSERT_TRUE(t_->connect(0, sq, h.b, send).ok());
      }
      if (*recv == nullptr) {
        ASSERT_TRUE(t_->accept(lc, recv).ok());
      }
    }
    ASSERT_NE(*send, nullptr);
    ASSERT_NE(*recv, nullptr);
  }

  // Sends `msg` over the pair and returns what arrived.
  std::string roundTrip(SendComm* s, RecvComm* r, const std::string& msg, size_t cap = 1 << 20) {
    std::string buf(cap, '\0');
    void* data[1] = {buf.data()};
    size_t sizes[1] = {cap};
    int tags[1] = {0};
    Request* rr = nullptr;
    Request* sr = nullptr;
    EXPECT_TRUE(r->irecv(1, data, sizes, tags, nullptr, &rr).ok());
    EXPECT_TRUE(s->isend(const_cast<char*>(msg.data()), msg.size(), 0, nullptr, &sr).ok());
    bool sd = false, rd = false;
    size_t got = 0, sent = 0;
    auto until = in(5000);
    while ((!sd || !rd) && before(until)) {
      if (!sd) {
        EXPECT_TRUE(sr->test(&sd, &sent).ok());
      }
      if (!rd) {
        EXPECT_TRUE(rr->test(&rd, &got).ok());
      }
    }
    EXPECT_TRUE(sd && rd);
    return buf.substr(0, got);
  }

  // A raw TCP client of a listener (the "bad peer").
  int rawConnect(const Handle& h) {
    auto info = parseHandle(h.b, kHandleBytes);
    EXPECT_TRUE(info.ok());
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    EXPECT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&info->addr.storage), info->addr.len),
              0);
    return fd;
  }

  Hello helloFor(const Handle& h, int index) {
    auto info = parseHandle(h.b, kHandleBytes);
    Hello hello;
    hello.index = index;
    hello.nsocks = info->nsocks;
    hello.nonce = info->nonce;
    hello.conn_id = 99;
    hello.min_chunk = 4096;
    hello.tenant = "raw";
    return hello;
  }

  // Polls accept until it fails (returns the error) or 2 s pass.
  Status acceptUntilError(ListenComm* lc, int fake_advance_after = -1) {
    std::unique_ptr<RecvComm> r;
    auto until = in(2000);
    for (int i = 0; before(until); ++i) {
      if (i == fake_advance_after) clock_.advanceNs(kTimeoutNs + 1);
      Status s = t_->accept(lc, &r);
      if (!s.ok()) return s;
      EXPECT_EQ(r, nullptr) << "a bad peer was accepted";
      ::usleep(1000);
    }
    return okStatus();
  }

  Status connectUntilError(Handle* h, int fake_advance_after = -1) {
    std::unique_ptr<SendComm> s;
    auto until = in(2000);
    for (int i = 0; before(until); ++i) {
      if (i == fake_advance_after) clock_.advanceNs(kTimeoutNs + 1);
      Status st = t_->connect(0, {}, h->b, &s);
      if (!st.ok()) return st;
      EXPECT_EQ(s, nullptr) << "connected to a bad peer";
      ::usleep(1000);
    }
    return okStatus();
  }

  FakeClock clock_;
  bool window_rtt_ = false;  // TENANTQOS_SOCKET_WINDOW_RTT of the transport SetUp makes
  std::unique_ptr<SocketTransport> t_;
};

TEST_F(SocketTransportTest, PropertiesFilledInOnePlace) {
  DeviceProperties p;
  ASSERT_TRUE(t_->properties(0, &p).ok());
  EXPECT_STREQ(p.name, "lo");
  EXPECT_EQ(p.ptr_support, NCCL_PTR_HOST);
  EXPECT_EQ(p.max_recvs, 1);
  EXPECT_EQ(p.max_multi_request_size, 1);
  EXPECT_GT(p.max_p2p_bytes, 0u);
  EXPECT_FALSE(t_->properties(1, &p).ok());
}

TEST_F(SocketTransportTest, AcceptPolledLongBeforeConnect) {
  Handle h;
  auto lc = listen(&h);
  std::unique_ptr<RecvComm> r;
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(t_->accept(lc.get(), &r).ok());
    ASSERT_EQ(r, nullptr);
  }
  std::unique_ptr<SendComm> s;
  completePair(lc.get(), h, {}, &s, &r);
  if (HasFatalFailure()) return;
  EXPECT_EQ(roundTrip(s.get(), r.get(), "hello"), "hello");
}

TEST_F(SocketTransportTest, ConnectWaitsForAcceptWithoutBlocking) {
  Handle h;
  auto lc = listen(&h);
  std::unique_ptr<SendComm> s;
  for (int i = 0; i < 200; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(t_->connect(0, {}, h.b, &s).ok());
    ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(100));
    ASSERT_EQ(s, nullptr) << "connect completed before the peer accepted";
    ::usleep(500);
  }
  std::unique_ptr<RecvComm> r;
  auto until = in(5000);
  while ((s == nullptr || r == nullptr) && before(until)) {
    if (r == nullptr) {
      ASSERT_TRUE(t_->accept(lc.get(), &r).ok());
    }
    if (s == nullptr) {
      ASSERT_TRUE(t_->connect(0, {}, h.b, &s).ok());
    }
  }
  ASSERT_TRUE(s && r);
  EXPECT_EQ(roundTrip(s.get(), r.get(), std::string(100000, 'x')), std::string(100000, 'x'));
}

TEST_F(SocketTransportTest, SeveralConnectorsInterleavedOnOneListener) {
  Handle h;
  auto lc = listen(&h);
  constexpr int kN = 3;
  Handle copies[kN] = {h, h, h};  // each connector polls its own copy of the handle
  std::unique_ptr<SendComm> s[kN];
  std::vector<std::unique_ptr<RecvComm>> rs;
  auto until = in(5000);
  int round = 0;
  while (before(until)) {
    bool all = rs.size() == kN;
    for (int i = kN - 1; i >= 0; --i) {
      if (s[i] == nullptr && round >= i * 3) {
        ASSERT_TRUE(t_->connect(0, {}, copies[i].b, &s[i]).ok());
      }
      all = all && s[i] != nullptr;
    }
    if (all) break;
    std::unique_ptr<RecvComm> r;
    if (round % 2 == 0) {
      ASSERT_TRUE(t_->accept(lc.get(), &r).ok());
    }
    if (r) rs.push_back(std::move(r));
    ++round;
  }
  ASSERT_EQ(rs.size(), static_cast<size_t>(kN));
  // Which receive comm belongs to which connector is not known in advance: match by content.
  std::set<std::string> got;
  for (int i = 0; i < kN; ++i) {
    const std::string msg = "connector-" + std::to_string(i);
    Request* sr = nullptr;
    ASSERT_TRUE(s[i]->isend(const_cast<char*>(msg.data()), msg.size(), 0, nullptr, &sr).ok());
    bool d = false;
    size_t n;
    while (!d) ASSERT_TRUE(sr->test(&d, &n).ok());
  }
  for (auto& r : rs) {
    std::string buf(64, '\0');
    void* data[1] = {buf.data()};
    size_t sizes[1] = {64};
    int tags[1] = {0};
    Request* rr = nullptr;
    ASSERT_TRUE(r->irecv(1, data, sizes, tags, nullptr, &rr).ok());
    bool d = false;
    size_t n = 0;
    auto u = in(5000);
    while (!d && before(u)) ASSERT_TRUE(rr->test(&d, &n).ok());
    got.insert(buf.substr(0, n));
  }
  EXPECT_EQ(got, (std::set<std::string>{"connector-0", "connector-1", "connector-2"}));
}

// Every TCP socket of this process connected to or from `port`.
std::vector<int> socketsOnPort(uint16_t port) {
  std::vector<int> out;
  DIR* d = ::opendir("/proc/self/fd");
  while (dirent* e = ::readdir(d)) {
    const int fd = std::atoi(e->d_name);
    if (e->d_name[0] == '.' || fd == ::dirfd(d)) continue;
    int type = 0;
    socklen_t len = sizeof type;
    if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) continue;
    sockaddr_storage local{}, peer{};
    socklen_t ll = sizeof local, pl = sizeof peer;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) != 0) continue;
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0) continue;  // listeners
    const uint16_t lp = ntohs(reinterpret_cast<sockaddr_in&>(local).sin_port);
    const uint16_t pp = ntohs(reinterpret_cast<sockaddr_in&>(peer).sin_port);
    if (lp == port || pp == port) out.push_back(fd);
  }
  ::closedir(d);
  return out;
}

TEST_F(SocketTransportTest, EverySocketOfBothEndsCarriesTheSendersMarking) {
  std::unique_ptr<SendComm> s;
  std::unique_ptr<RecvComm> r;
  std::unique_ptr<ListenComm> lc;
  Handle h;
  // The listener's own tenant has another DSCP: the receiver must adopt the sender's.
  pair(qos(10, 2, "team-a"), qos(20, 3, "team-b"), &s, &r, &lc, &h);
  const auto sfds = socketFdsOf(s.get());
  const auto rfds = socketFdsOf(r.get());
  ASSERT_EQ(sfds.size(), static_cast<size_t>(kSocks + 1));
  ASSERT_EQ(rfds.size(), static_cast<size_t>(kSocks + 1));
  for (int fd : sfds) {
    auto m = oob::readMarking(fd);
    ASSERT_TRUE(m.ok());
    EXPECT_EQ(m->tos, 10 << 2) << "send fd " << fd;
    EXPECT_EQ(m->priority, 2);
  }
  for (int fd : rfds) {
    auto m = oob::readMarking(fd);
    ASSERT_TRUE(m.ok());
    EXPECT_EQ(m->tos, 10 << 2) << "receive fd " << fd;
    EXPECT_EQ(m->priority, 2);
  }
  EXPECT_EQ(r->peerQos().tenant, "team-a");
  EXPECT_EQ(r->peerQos().dscp, 10);
  // The same, found from the outside: every socket of this process on the listener's port.
  auto info = parseHandle(h.b, kHandleBytes);
  ASSERT_TRUE(info.ok());
  const auto found = socketsOnPort(info->addr.port());
  EXPECT_EQ(found.size(), static_cast<size_t>(2 * (kSocks + 1)));
  for (int fd : found) {
    auto m = oob::readMarking(fd);
    ASSERT_TRUE(m.ok());
    EXPECT_EQ(m->tos, 10 << 2) << "fd " << fd;
  }
  EXPECT_EQ(roundTrip(s.get(), r.get(), "marked"), "marked");
}

TEST_F(SocketTransportTest, AcceptRejectsGarbageAtOnce) {
  Handle h;
  auto lc = listen(&h);
  const int fd = rawConnect(h);
  const std::string junk(kHelloBytes, 'B');
  ASSERT_EQ(::send(fd, junk.data(), junk.size(), 0), static_cast<ssize_t>(junk.size()));
  Status s = acceptUntilError(lc.get());
  ASSERT_FALSE(s.ok()) << "garbage was not rejected";
  EXPECT_NE(s.message().find("bad magic"), std::string::npos) << s.message();
  ::close(fd);
}

TEST_F(SocketTransportTest, AcceptRejectsAnotherVersionAndTellsThePeer) {
  Handle h;
  auto lc = listen(&h);
  const int fd = rawConnect(h);
  Hello hello = helloFor(h, kSocks);
  hello.version = 2;
  uint8_t buf[kHelloBytes];
  encodeHello(hello, buf);
  ASSERT_EQ(::send(fd, buf, sizeof buf, 0), static_cast<ssize_t>(sizeof buf));
  Status s = acceptUntilError(lc.get());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("protocol version 2"), std::string::npos) << s.message();
  uint8_t ack[kAckBytes];
  ASSERT_EQ(::recv(fd, ack, sizeof ack, MSG_WAITALL), static_cast<ssize_t>(sizeof ack));
  auto a = parseAck(ack, sizeof ack);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->status, AckStatus::kBadVersion);
  EXPECT_NE(a->reason.find("version 2"), std::string::npos) << a->reason;
  ::close(fd);
}

TEST_F(SocketTransportTest, AcceptRejectsAHandshakeForAnotherListener) {
  Handle h;
  auto lc = listen(&h);
  const int fd = rawConnect(h);
  Hello hello = helloFor(h, 0);
  hello.nonce ^= 1;
  uint8_t buf[kHelloBytes];
  encodeHello(hello, buf);
  ASSERT_EQ(::send(fd, buf, sizeof buf, 0), static_cast<ssize_t>(sizeof buf));
  Status s = acceptUntilError(lc.get());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("another listener"), std::string::npos) << s.message();
  ::close(fd);
}

TEST_F(SocketTransportTest, AcceptFailsOnATruncatedHandshakeAtTheDeadline) {
  Handle h;
  auto lc = listen(&h);
  const int fd = rawConnect(h);
  uint8_t buf[kHelloBytes];
  encodeHello(helloFor(h, 0), buf);
  ASSERT_EQ(::send(fd, buf, 60, 0), 60);
  Status s = acceptUntilError(lc.get(), /*fake_advance_after=*/20);
  ASSERT_FALSE(s.ok()) << "no failure after the deadline";
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("received 60 of 128 bytes"), std::string::npos) << s.message();
  ::close(fd);
}

TEST_F(SocketTransportTest, AcceptFailsWhenThePeerSendsNothing) {
  Handle h;
  auto lc = listen(&h);
  const int fd = rawConnect(h);
  Status s = acceptUntilError(lc.get(), 20);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("received 0 of 128 bytes"), std::string::npos) << s.message();
  ::close(fd);
}

TEST_F(SocketTransportTest, AcceptFailsWhenThePeerClosesMidHandshake) {
  Handle h;
  auto lc = listen(&h);
  const int fd = rawConnect(h);
  ASSERT_EQ(::send(fd, "TQHE", 4, 0), 4);
  ::close(fd);
  Status s = acceptUntilError(lc.get());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("closed the connection after 4 of 128"), std::string::npos)
      << s.message();
}

TEST_F(SocketTransportTest, AcceptFailsWhenStreamsOfAConnectionAreMissing) {
  Handle h;
  auto lc = listen(&h);
  const int fd = rawConnect(h);
  uint8_t buf[kHelloBytes];
  encodeHello(helloFor(h, 0), buf);
  ASSERT_EQ(::send(fd, buf, sizeof buf, 0), static_cast<ssize_t>(sizeof buf));
  Status s = acceptUntilError(lc.get(), 20);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("1 of 3 streams"), std::string::npos) << s.message();
  ::close(fd);
}

TEST_F(SocketTransportTest, ListenerStillAcceptsAGoodPeerAfterABadOne) {
  Handle h;
  auto lc = listen(&h);
  const int fd = rawConnect(h);
  ASSERT_EQ(::send(fd, std::string(kHelloBytes, 'Z').data(), kHelloBytes, 0),
            static_cast<ssize_t>(kHelloBytes));
  ASSERT_FALSE(acceptUntilError(lc.get()).ok());
  ::close(fd);
  std::unique_ptr<SendComm> s;
  std::unique_ptr<RecvComm> r;
  completePair(lc.get(), h, {}, &s, &r);
  if (HasFatalFailure()) return;
  EXPECT_EQ(roundTrip(s.get(), r.get(), "after"), "after");
}

// A fake listener for connect tests: a raw listening socket and a handle naming it.
class FakeListener {
 public:
  explicit FakeListener(int nsocks) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(fd_, 64), 0);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    HandleInfo info;
    std::memcpy(&info.addr.storage, &a, sizeof a);
    info.addr.len = sizeof a;
    info.nsocks = nsocks;
    info.nonce = 1234;
    encodeHandle(info, handle.b);
  }
  ~FakeListener() {
    for (int fd : accepted_) ::close(fd);
    ::close(fd_);
  }
  void acceptAll() {
    for (;;) {
      const int fd = ::accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK);
      if (fd < 0) return;
      accepted_.push_back(fd);
    }
  }
  void sendToAll(const void* data, size_t n) {
    for (int fd : accepted_) (void)::send(fd, data, n, MSG_NOSIGNAL);
  }
  void closeAll() {
    for (int fd : accepted_) ::close(fd);
    accepted_.clear();
  }
  Handle handle;

 private:
  int fd_;
  std::vector<int> accepted_;
};

TEST_F(SocketTransportTest, ConnectFailsWithoutAReplyAtTheDeadline) {
  FakeListener fake(kSocks);
  Status s = connectUntilError(&fake.handle, 20);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("no handshake reply"), std::string::npos) << s.message();
}

TEST_F(SocketTransportTest, ConnectRejectsAGarbageReply) {
  FakeListener fake(kSocks);
  std::unique_ptr<SendComm> sc;
  ASSERT_TRUE(t_->connect(0, {}, fake.handle.b, &sc).ok());
  auto until = in(2000);
  Status s;
  while (s.ok() && before(until)) {
    fake.acceptAll();
    const std::string junk(kAckBytes, 'J');
    fake.sendToAll(junk.data(), junk.size());
    s = t_->connect(0, {}, fake.handle.b, &sc);
    ::usleep(1000);
  }
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("bad magic"), std::string::npos) << s.message();
}

TEST_F(SocketTransportTest, ConnectFailsWhenThePeerHangsUp) {
  FakeListener fake(kSocks);
  std::unique_ptr<SendComm> sc;
  auto until = in(2000);
  Status s;
  while (s.ok() && before(until)) {
    s = t_->connect(0, {}, fake.handle.b, &sc);
    fake.acceptAll();
    fake.closeAll();
    ::usleep(1000);
  }
  ASSERT_FALSE(s.ok()) << "connect to a peer that hangs up neither failed nor timed out";
}

TEST_F(SocketTransportTest, ConnectToAClosedPortFailsAtTheDeadline) {
  Handle h;
  { auto lc = listen(&h); }  // closed: connections are refused
  Status s = connectUntilError(&h, 20);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("TCP connections not established"), std::string::npos) << s.message();
}

TEST_F(SocketTransportTest, ConnectRejectsGarbageHandles) {
  std::mt19937 rng(7);
  for (int i = 0; i < 1000; ++i) {
    Handle h;
    for (auto& b : h.b) b = static_cast<uint8_t>(rng());
    std::unique_ptr<SendComm> s;
    Status st = t_->connect(0, {}, h.b, &s);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  }
}

TEST_F(SocketTransportTest, TheRejectedConnectorLearnsWhy) {
  Handle h;
  auto lc = listen(&h);
  Handle wrong = h;
  // Same address, different nonce (e.g. a stale handle of an earlier listener on this port).
  auto info = parseHandle(h.b, kHandleBytes);
  info->nonce ^= 0xff;
  encodeHandle(*info, wrong.b);
  std::unique_ptr<SendComm> s;
  std::unique_ptr<RecvComm> r;
  Status cs, as;
  auto until = in(3000);
  while (cs.ok() && before(until)) {
    cs = t_->connect(0, {}, wrong.b, &s);
    Status a = t_->accept(lc.get(), &r);
    if (!a.ok()) as = a;
    ::usleep(500);
  }
  ASSERT_FALSE(as.ok());
  ASSERT_FALSE(cs.ok());
  EXPECT_NE(cs.message().find("rejected the connection"), std::string::npos) << cs.message();
  EXPECT_NE(cs.message().find("another listener"), std::string::npos) << cs.message();
}

TEST_F(SocketTransportTest, ManyMessagesInFlightStayInOrder) {
  std::unique_ptr<SendComm> s;
  std::unique_ptr<RecvComm> r;
  std::unique_ptr<ListenComm> lc;
  Handle h;
  pair({}, {}, &s, &r, &lc, &h);
  constexpr int kN = 32;
  std::vector<std::string> out(kN), in_(kN);
  Request* sr[kN];
  Request* rr[kN];
  for (int i = 0; i < kN; ++i) {
    out[i] = std::string(static_cast<size_t>(i) * 3001 + (i % 2 ? 0 : 50000),
                         static_cast<char>('a' + i % 26));
    in_[i].assign(200000, '\0');
    void* d[1] = {in_[i].data()};
    size_t sz[1] = {in_[i].size()};
    int tag = 0;
    ASSERT_TRUE(r->irecv(1, d, sz, &tag, nullptr, &rr[i]).ok());
  }
  for (int i = 0; i < kN; ++i) {
    ASSERT_TRUE(s->isend(out[i].data(), out[i].size(), 0, nullptr, &sr[i]).ok());
  }
  Request* extra = nullptr;
  Status refused = s->isend(out[0].data(), 1, 0, nullptr, &extra);
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition) << refused.toString();
  bool sd[kN] = {}, rd[kN] = {};
  size_t got[kN] = {};
  int left = 2 * kN;
  auto until = in(10000);
  while (left > 0 && before(until)) {
    for (int i = 0; i < kN; ++i) {
      size_t n;
      if (!sd[i]) {
        ASSERT_TRUE(sr[i]->test(&sd[i], &n).ok());
        left -= sd[i] ? 1 : 0;
      }
      if (!rd[i]) {
        ASSERT_TRUE(rr[i]->test(&rd[i], &got[i]).ok());
        left -= rd[i] ? 1 : 0;
      }
    }
  }
  ASSERT_EQ(left, 0);
  for (int i = 0; i < kN; ++i) {
    ASSERT_EQ(got[i], out[i].size()) << i;
    EXPECT_EQ(in_[i].substr(0, got[i]), out[i]) << i;
  }
}

// A bucket the test fills by hand (thread-safe: the comm's helpers admit from their threads).
class HandAdmission final : public Admission {
 public:
  bool tryAdmit(uint64_t bytes, uint64_t pending) override {
    MutexLock lock(mu_);
    last_pending = pending;
    largest = std::max(largest, bytes);
    if (bytes > tokens) return false;
    tokens -= bytes;
    admitted += bytes;
    return true;
  }
  int64_t waitNs(uint64_t) const override { return wait_ns.load(); }
  void giveBack(uint64_t) override {}
  void peerWait(int64_t ns) override { peer_wait_ns += ns; }
  uint64_t chunkBytes() const override { return chunk; }
  uint64_t rateBytesPerSecond() const override { return rate.load(); }
  void add(uint64_t n) {
    MutexLock lock(mu_);
    tokens += n;
  }
  uint64_t admittedBytes() {
    MutexLock lock(mu_);
    return admitted;
  }
  uint64_t largestAdmission() {
    MutexLock lock(mu_);
    return largest;
  }
  std::atomic<uint64_t> chunk{8192};
  std::atomic<int64_t> wait_ns{1'000'000};  // what waitNs says (INT64_MAX: a rate of 0)
  std::atomic<int64_t> peer_wait_ns{0};
  std::atomic<uint64_t> rate{1};  // bytes/s, for the streams' windows
  uint64_t last_pending = 0;

 private:
  Mutex mu_;
  uint64_t tokens TQ_GUARDED_BY(mu_) = 0;
  uint64_t admitted TQ_GUARDED_BY(mu_) = 0;
  uint64_t largest TQ_GUARDED_BY(mu_) = 0;
};

// Every admitter of a comm shares one hand-filled bucket.
class HandPacing final : public Pacing {
 public:
  explicit HandPacing(HandAdmission* a) : a_(a) {}
  Admission* newAdmission() override {
    ++made;
    return a_;
  }
  int made = 0;

 private:
  HandAdmission* a_;
};

class SocketPacingTest : public SocketTransportTest {
 protected:
  void SetUp() override {
    SocketTransportTest::SetUp();
    pair({}, {}, &send_, &recv_, &lc_, &h_);
    ASSERT_TRUE(send_->pacesItself());
    ASSERT_TRUE(recv_->pacesItself());
  }
  Request* post(std::string* buf) {
    void* d[1] = {buf->data()};
    size_t sz[1] = {buf->size()};
    int tag = 0;
    Request* r = nullptr;
    EXPECT_TRUE(recv_->irecv(1, d, sz, &tag, nullptr, &r).ok());
    return r;
  }
  // A paced receiver (a hand-filled bucket) of a 160 MiB message from an unpaced sender that
  // stays backlogged while the test gives the reader tokens (paceReader).
  struct Backlog {
    HandAdmission rx;
    HandPacing pacing{&rx};
    std::vector<int> fds;  // the receiver's data streams
    std::string msg = std::string(160 << 20, 'b');
    std::string buf = std::string(160 << 20, '\0');
    Request* sr = nullptr;
    Request* rr = nullptr;
    bool sd = false, rd = false;
  };
  // `rate`: bytes/s, what the receiver's streams' windows are sized for.
  void startBacklog(Backlog* b, uint64_t rate) {
    b->rx.rate = rate;
    recv_->setPacing(&b->pacing);
    b->fds = socketFdsOf(recv_.get());
    b->fds.pop_back();  // the control stream
    b->rr = post(&b->buf);
    ASSERT_TRUE(send_->isend(b->msg.data(), b->msg.size(), 0, nullptr, &b->sr).ok());
  }
  // Gives the reader tokens at `rate` (bytes/s) in 1 ms steps for `total_ms` while polling both
  // requests, and calls `each_ms(ms)` after each step.
  void paceReader(Backlog* b, uint64_t rate, int total_ms,
                  const std::function<void(int)>& each_ms) {
    size_t n = 0;
    const auto start = std::chrono::steady_clock::now();
    for (int ms = 1; ms <= total_ms; ++ms) {
      b->rx.add(rate / 1000);
      while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(ms)) {
        if (!b->sd) {
          EXPECT_TRUE(b->sr->test(&b->sd, &n).ok());
        }
        if (!b->rd) {
          EXPECT_TRUE(b->rr->test(&b->rd, &n).ok());
        }
        ::usleep(200);
      }
      each_ms(ms);
    }
  }
  // Opens the bucket and checks that the whole message arrives intact.
  void finishBacklog(Backlog* b) {
    b->rx.add(1ull << 40);
    EXPECT_TRUE(drive(b->sr, b->rr, 20000, &b->sd, &b->rd));
    EXPECT_TRUE(b->buf == b->msg);
  }
  // Polls both requests for `ms`; true when both completed.
  bool drive(Request* sr, Request* rr, int ms, bool* sd, bool* rd) {
    size_t n = 0;
    auto until = in(ms);
    while ((!*sd || !*rd) && before(until)) {
      if (!*sd) {
        EXPECT_TRUE(sr->test(sd, &n).ok());
      }
      if (!*rd) {
        EXPECT_TRUE(rr->test(rd, &n).ok());
      }
    }
    return *sd && *rd;
  }
  Handle h_;
  std::unique_ptr<SendComm> send_;
  std::unique_ptr<RecvComm> recv_;
  std::unique_ptr<ListenComm> lc_;
};

// The receiving helper reads a striped message no faster than its rx bucket admits, in
// chunks; the message completes only when the bucket has let all of it in.
TEST_F(SocketPacingTest, AReceiverReadsNoFasterThanItsBucket) {
  HandAdmission rx;
  HandPacing rx_pacing(&rx);
  recv_->setPacing(&rx_pacing);
  EXPECT_GE(rx_pacing.made, 2) << "the caller and every helper have their own admitter";
  const std::string msg(300'000, 'r');
  std::string buf(300'000, '\0');
  Request* rr = post(&buf);
  Request* sr = nullptr;
  ASSERT_TRUE(send_->isend(const_cast<char*>(msg.data()), msg.size(), 0, nullptr, &sr).ok());
  ASSERT_NE(sr, nullptr);
  bool sd = false, rd = false;
  rx.add(100'000);
  EXPECT_FALSE(drive(sr, rr, 300, &sd, &rd));
  EXPECT_FALSE(rd) << "100000 of 300000 bytes admitted: the receive cannot be complete";
  EXPECT_LE(rx.admittedBytes(), 100'000u);
  EXPECT_LE(rx.largestAdmission(), 8192u) << "one chunk at a time";
  rx.add(200'000);
  EXPECT_TRUE(drive(sr, rr, 5000, &sd, &rd));
  EXPECT_EQ(buf, msg);
  EXPECT_EQ(rx.admittedBytes(), 300'000u);
}

// A helper refused by a bucket whose rate is 0 ("never", the allocation of a tenant without a
// guarantee that looked idle for one agent period) looks again within a millisecond, so the
// rate the agent raises a period later is used at once; no one wakes it when tokens appear.
// Before, it slept the poll timeout (1 s): the testbed's noisy receives stalled 0.1-1 s at a time.
TEST_F(SocketPacingTest, AHelperRefusedAtRateZeroSeesARaisedRateWithinMilliseconds) {
  HandAdmission rx;
  rx.wait_ns = std::numeric_limits<int64_t>::max();
  HandPacing rx_pacing(&rx);
  recv_->setPacing(&rx_pacing);
  const std::string msg(100'000, 'z');
  std::string buf(100'000, '\0');
  Request* rr = post(&buf);
  Request* sr = nullptr;
  ASSERT_TRUE(send_->isend(const_cast<char*>(msg.data()), msg.size(), 0, nullptr, &sr).ok());
  bool sd = false, rd = false;
  EXPECT_FALSE(drive(sr, rr, 50, &sd, &rd)) << "no tokens at all";
  rx.add(100'000);  // the raised rate: tokens, and no wake-up
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(drive(sr, rr, 5000, &sd, &rd));
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - start);
  EXPECT_LT(waited.count(), 250) << "the helper slept on a wait computed at a rate of 0";
  EXPECT_EQ(buf, msg);
}

// An inline message (here up to 1 KiB) waits in the control stream until the rx bucket has it.
TEST_F(SocketPacingTest, AnInlineReceiveWaitsForItsTokens) {
  HandAdmission rx;
  HandPacing rx_pacing(&rx);
  recv_->setPacing(&rx_pacing);
  const std::string msg(1000, 'i');
  std::string buf(1000, '\0');
  Request* rr = post(&buf);
  Request* sr = nullptr;
  ASSERT_TRUE(send_->isend(const_cast<char*>(msg.data()), msg.size(), 0, nullptr, &sr).ok());
  bool sd = false, rd = false;
  EXPECT_FALSE(drive(sr, rr, 200, &sd, &rd));
  EXPECT_TRUE(sd) << "the sender is done once the kernel has it";
  EXPECT_FALSE(rd);
  rx.add(1000);
  EXPECT_TRUE(drive(sr, rr, 5000, &sd, &rd));
  EXPECT_EQ(buf, msg);
}

// The sender admits an inline message whole in isend (refused: no request, NCCL retries) and a
// striped one chunk by chunk in its helper; an inline-sized message larger than a paced chunk
// is striped (an admission larger than the bucket's depth would need the bucket full).
TEST_F(SocketPacingTest, ASenderAdmitsInlineWholeAndStripesInChunks) {
  HandAdmission tx;
  tx.chunk = 512;  // smaller than the 1 KiB inline limit
  HandPacing tx_pacing(&tx);
  send_->setPacing(&tx_pacing);
  const std::string small(400, 's');
  Request* sr = nullptr;
  ASSERT_TRUE(send_->isend(const_cast<char*>(small.data()), small.size(), 0, nullptr, &sr).ok());
  EXPECT_EQ(sr, nullptr) << "no tokens: no request";
  EXPECT_EQ(tx.last_pending, 400u);
  tx.add(400);
  EXPECT_EQ(roundTrip(send_.get(), recv_.get(), small), small);
  const std::string mid(900, 'm');  // inline-sized, but more than one chunk: striped
  Request* mr = nullptr;
  std::string buf(900, '\0');
  Request* rr = post(&buf);
  ASSERT_TRUE(send_->isend(const_cast<char*>(mid.data()), mid.size(), 0, nullptr, &mr).ok());
  ASSERT_NE(mr, nullptr) << "a striped message gets its request; its helper waits for tokens";
  bool sd = false, rd = false;
  EXPECT_FALSE(drive(mr, rr, 200, &sd, &rd));
  tx.add(900);
  EXPECT_TRUE(drive(mr, rr, 5000, &sd, &rd));
  EXPECT_EQ(buf, mid);
  EXPECT_LE(tx.largestAdmission(), 512u);
}

// A sender held by its receiver (the receiver's bucket empty, its TCP window closed) reports
// the time it waited for the window: the receiver's pacing, not demand at the sender.
TEST_F(SocketPacingTest, ASenderHeldByItsReceiverReportsPeerWait) {
  HandAdmission tx, rx;
  tx.chunk = 0;  // unpaced sends (admitted whole, to be counted)
  tx.add(1ull << 40);
  HandPacing tx_pacing(&tx), rx_pacing(&rx);
  send_->setPacing(&tx_pacing);
  recv_->setPacing(&rx_pacing);
  const std::string big(32 << 20, 'w');
  std::string buf(32 << 20, '\0');
  Request* rr = post(&buf);
  Request* sr = nullptr;
  ASSERT_TRUE(send_->isend(const_cast<char*>(big.data()), big.size(), 0, nullptr, &sr).ok());
  bool sd = false, rd = false;
  size_t n = 0;
  auto until = in(10000);
  while (tx.peer_wait_ns.load() == 0 && before(until)) {
    EXPECT_TRUE(sr->test(&sd, &n).ok());
    EXPECT_TRUE(rr->test(&rd, &n).ok());
    ::usleep(1000);
  }
  EXPECT_GT(tx.peer_wait_ns.load(), 0) << "the sender waited for the receiver's window";
  EXPECT_FALSE(sd) << "32 MiB cannot all be in the kernel's buffers";
  rx.add(1ull << 40);
  EXPECT_TRUE(drive(sr, rr, 10000, &sd, &rd));
  EXPECT_EQ(buf, big);
}

// The window rule: an even share of rate x time per paced stream, within [min, max].
TEST(PacedWindowTest, IsAnEvenShareOfRateTimesTimeWithAFloor) {
  // 75 MB/s (600 Mbit/s) x 2 ms over 4 streams: 37,500 bytes each.
  EXPECT_EQ(pacedWindowBytes(75'000'000, 2'000'000, 4, 8192, 1448), 37'500u);
  // 32 streams of a 350 Mbit/s tenant would get 2.7 KB each: 8 segments.
  EXPECT_EQ(pacedWindowBytes(43'750'000, 2'000'000, 32, 8192, 1448), 8 * 1448u);
  EXPECT_EQ(pacedWindowBytes(43'750'000, 2'000'000, 32, 65536, 1448), 65536u) << "the minimum";
  EXPECT_EQ(pacedWindowBytes(0, 2'000'000, 4, 8192, 1448), 8 * 1448u) << "a rate of 0: the floor";
  EXPECT_EQ(pacedWindowBytes(75'000'000, 2'000'000, 0, 8192, 1448), 150'000u) << "no count: 1";
  EXPECT_EQ(pacedWindowBytes(UINT64_MAX, 1'000'000'000, 1, 8192, 1448), kMaxStreamWindowBytes);
  EXPECT_EQ(pacedWindowBytes(1, 1, 1, UINT64_MAX, UINT64_MAX), kMaxStreamWindowBytes);
}

// The round trip a receive window covers: the measured one, bounded by the minimum plus the
// configured time (the queue it follows) and by kMaxWindowRttNs; nothing without a sample.
TEST(PacedWindowTest, RoundTripIsTheMeasuredOneBoundedByTheMinimumPlusTheConfiguredTime) {
  constexpr int64_t kMs = 1'000'000;
  EXPECT_EQ(windowRttNs({}, 4 * kMs), 0) << "no sample yet: the configured time alone";
  EXPECT_EQ(windowRttNs({0, 50'000}, 4 * kMs), 0) << "only the handshake's: no sample yet";
  EXPECT_EQ(windowRttNs({300'000, 50'000}, 4 * kMs), 300'000) << "a path without queue";
  // The spine's 4 ms queue on a 50 us path: all of it is covered.
  EXPECT_EQ(windowRttNs({4'050'000, 50'000}, 4 * kMs), 4'050'000);
  // 9 ms measured (a paced or idle sender's late echoes, or a queue the window itself built):
  // the minimum plus the configured time, not the sample.
  EXPECT_EQ(windowRttNs({9 * kMs, 50'000}, 4 * kMs), 4'050'000);
  EXPECT_EQ(windowRttNs({2 * kMs, 0}, 4 * kMs), 2 * kMs) << "no minimum: the sample is the floor";
  EXPECT_EQ(windowRttNs({1 * kMs, 3 * kMs}, 4 * kMs), 1 * kMs) << "a minimum above the sample";
  EXPECT_EQ(windowRttNs({9 * kMs, 50'000}, 0), 50'000) << "no configured time: the minimum";
  // A hostile peer (a handshake answered after 5 s, echoes 10 s late): at most kMaxWindowRttNs.
  EXPECT_EQ(windowRttNs({10'000 * kMs, 5'000 * kMs}, 4 * kMs), kMaxWindowRttNs);
  EXPECT_EQ(windowRttNs({INT64_MAX, INT64_MAX}, INT64_MAX), kMaxWindowRttNs);
  EXPECT_EQ(windowRttNs({INT64_MAX, 50'000}, INT64_MAX), kMaxWindowRttNs);
  // The window it gives: 75 MB/s x (4 ms + 4.05 ms) over 4 streams, 150,937 bytes each, and
  // within kMaxStreamWindowBytes whatever the rate.
  EXPECT_EQ(pacedWindowBytes(75'000'000, 4 * kMs + windowRttNs({9 * kMs, 50'000}, 4 * kMs), 4, 8192,
                             1448),
            150'937u);
  EXPECT_EQ(pacedWindowBytes(UINT64_MAX, 4 * kMs + kMaxWindowRttNs, 1, 8192, 1448),
            kMaxStreamWindowBytes);
}

// A data stream's segment size.
uint64_t mssOf(int fd) {
  int mss = 0;
  socklen_t len = sizeof mss;
  EXPECT_EQ(::getsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &mss, &len), 0) << std::strerror(errno);
  return static_cast<uint64_t>(std::max(mss, 1));
}

// Bytes waiting in a socket's receive queue (SIOCINQ) / not yet sent from its send queue
// (SIOCOUTQNSD).
uint64_t queued(int fd, unsigned long what) {
  int n = 0;
  EXPECT_EQ(::ioctl(fd, what, &n), 0) << std::strerror(errno);
  return static_cast<uint64_t>(std::max(n, 0));
}

// A paced receiver's streams hold no more than their window while the sender is backlogged
// (unpaced, a 160 MiB message) and the reader drains at its bucket's rate: what the kernel
// takes in (what a meter on the wire counts) follows the pacing within the window. Without
// windows the kernel's autotuning lets each stream's buffer grow to MBs, which a window of the
// wire then counts on top of the rate (the testbed's received cap conformance 1.02-1.22).
TEST_F(SocketPacingTest, APacedReceiversStreamsHoldNoMoreThanTheirWindow) {
  constexpr uint64_t kRate = 200'000'000;  // bytes/s the test's bucket refills at
  Backlog b;
  ASSERT_NO_FATAL_FAILURE(startBacklog(&b, kRate));
  const std::vector<int>& fds = b.fds;
  const SocketTransportConfig cfg;
  const uint64_t window =
      pacedWindowBytes(kRate, kWindowNs, pacedStreamCount(false), cfg.window_min, mssOf(fds[0]));
  uint64_t most = 0;
  // Tokens at kRate in 1 ms steps for 600 ms; the first 100 ms let the window take effect over
  // what the connection advertised before (a TCP window never retracts its right edge).
  paceReader(&b, kRate, 600, [&](int ms) {
    if (ms > 100) {
      for (int fd : fds) most = std::max(most, queued(fd, SIOCINQ));
    }
  });
  ASSERT_FALSE(b.rd) << "the sender must stay backlogged for the whole test";
  EXPECT_GT(b.rx.admittedBytes(), kRate / 20) << "the reader drained its streams";
  EXPECT_GT(most, 0u) << "the sender was backlogged: something must have been waiting";
  // The advertised window is rounded to the window scale's unit (<= 1 KiB on loopback).
  EXPECT_LE(most, window + 2048) << "a stream's buffer held more than its window of " << window;
  finishBacklog(&b);
}

// A paced sender whose receiver does not read keeps at most its window unsent in each stream
// (TCP_NOTSENT_LOWAT), not a send buffer of MBs that would leave at the wire's speed once the
// receiver opens up.
TEST_F(SocketPacingTest, APacedSendersStreamsKeepAtMostTheirWindowUnsent) {
  constexpr uint64_t kRate = 50'000'000;
  HandAdmission tx, rx;
  tx.rate = kRate;
  tx.add(1ull << 40);  // the sender's bucket never refuses; the receiver admits nothing
  HandPacing tx_pacing(&tx), rx_pacing(&rx);
  send_->setPacing(&tx_pacing);
  recv_->setPacing(&rx_pacing);
  auto fds = socketFdsOf(send_.get());
  fds.pop_back();
  const SocketTransportConfig cfg;
  const uint64_t window =
      pacedWindowBytes(kRate, kWindowNs, pacedStreamCount(true), cfg.window_min, mssOf(fds[0]));
  const std::string msg(64 << 20, 's');
  std::string buf(64 << 20, '\0');
  Request* rr = post(&buf);
  Request* sr = nullptr;
  ASSERT_TRUE(send_->isend(const_cast<char*>(msg.data()), msg.size(), 0, nullptr, &sr).ok());
  bool sd = false, rd = false;
  size_t n = 0;
  uint64_t most = 0;
  auto until = in(300);
  while (before(until)) {
    if (!sd) {
      EXPECT_TRUE(sr->test(&sd, &n).ok());
    }
    if (!rd) {
      EXPECT_TRUE(rr->test(&rd, &n).ok());
    }
    for (int fd : fds) most = std::max(most, queued(fd, SIOCOUTQNSD));
    ::usleep(1000);
  }
  EXPECT_GT(most, 0u) << "the sender was held by its receiver";
  // One write may cross the mark by what the helper had admitted (a chunk, 8 KiB here) plus
  // one segment's worth of the kernel's rounding.
  EXPECT_LE(most, window + 8192 + 64 * 1024) << "unsent bytes above the window of " << window;
  rx.add(1ull << 40);
  EXPECT_TRUE(drive(sr, rr, 20000, &sd, &rd));
  EXPECT_TRUE(buf == msg);
}

// The receive buffer a stream's window was last sized to (SO_RCVBUF reports the kernel's
// doubled value: the window as set, rounded down to even).
uint64_t receiveBufferOf(int fd) {
  int v = 0;
  socklen_t len = sizeof v;
  EXPECT_EQ(::getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, &len), 0) << std::strerror(errno);
  return static_cast<uint64_t>(std::max(v, 0));
}

uint64_t readSysctl(const char* name) {
  std::ifstream in(std::string("/proc/sys/") + name);
  uint64_t v = 0;
  in >> v;
  return v > 0 ? v : UINT64_MAX / 4;
}

class SocketRttWindowTest : public SocketPacingTest {
 protected:
  SocketRttWindowTest() { window_rtt_ = true; }
};

// TENANTQOS_SOCKET_WINDOW_RTT: a paced receiver's streams are sized to their share of the rate x
// (the configured time + their round trip), the round trip re-read as the (injected) clock
// moves, bounded by the minimum plus the configured time; what waits in a stream stays within
// its window, and the reader still drains at its rate.
TEST_F(SocketRttWindowTest, APacedReceiversWindowsCoverTheirRoundTripWithinTheBound) {
  constexpr uint64_t kRate = 200'000'000;
  Backlog b;
  ASSERT_NO_FATAL_FAILURE(startBacklog(&b, kRate));
  const std::vector<int>& fds = b.fds;
  const SocketTransportConfig cfg;
  const int count = pacedStreamCount(false);
  const uint64_t fixed = pacedWindowBytes(kRate, kWindowNs, count, cfg.window_min, mssOf(fds[0]));
  uint64_t most = 0, largest_buffer = 0, smallest_buffer = UINT64_MAX;
  paceReader(&b, kRate, 400, [&](int ms) {
    clock_.advanceNs(1'000'000);  // the helpers re-read round trips every 20 ms of this clock
    if (ms > 100) {
      for (int fd : fds) {
        most = std::max(most, queued(fd, SIOCINQ));
        smallest_buffer = std::min(smallest_buffer, receiveBufferOf(fd));
      }
    }
    // Every window set over the run: one set early (the first samples count the time since
    // the handshake, up to the bound) still holds data in a stream the reader has not reached.
    for (int fd : fds) largest_buffer = std::max(largest_buffer, receiveBufferOf(fd));
  });
  ASSERT_FALSE(b.rd) << "the sender must stay backlogged for the whole test";
  EXPECT_GT(b.rx.admittedBytes(), kRate / 20) << "the reader drained its streams";
  EXPECT_GT(most, 0u) << "the sender was backlogged: something must have been waiting";
  int64_t min_rtt_ns = 0, rtt_ns = 0;
  for (int fd : fds) {
    const StreamRtt r = receivingStreamRtt(fd);
    min_rtt_ns = std::max(min_rtt_ns, r.min_rtt_ns);
    rtt_ns = std::max(rtt_ns, r.rtt_ns);
  }
  const uint64_t bound =
      pacedWindowBytes(kRate, 2 * kWindowNs + min_rtt_ns, count, cfg.window_min, mssOf(fds[0]));
  // SO_RCVBUF reads back the window as set rounded down to even, or twice net.core.rmem_max
  // where that is smaller (Debian's default 212992: 425,984 bytes).
  const uint64_t capped = std::min<uint64_t>(bound, 2 * readSysctl("net/core/rmem_max"));
  EXPECT_GE(smallest_buffer + 2, std::min(fixed, capped)) << "below the configured time's window";
  EXPECT_LE(largest_buffer, capped + 2) << "above the bound of rate x (2 x time + minimum RTT)";
  // The advertised window is rounded to the window scale's unit (<= 1 KiB on loopback).
  EXPECT_LE(most, largest_buffer + 2048) << "a stream held more than its largest window";
  GTEST_LOG_(INFO) << "windows " << smallest_buffer << ".." << largest_buffer << " bytes (fixed "
                   << fixed << ", bound " << bound << "), receive-side round trip " << rtt_ns
                   << " ns, minimum " << min_rtt_ns << " ns";
  finishBacklog(&b);
}

}  // namespace
}  // namespace tq::plugin::socket
