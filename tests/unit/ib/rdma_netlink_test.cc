// ib/rdma_netlink.h: the request bytes, the reply parser against kernel-shaped replies (built by
// the encoder below from the layout in the header), hostile input (every truncation, random
// mutations, lengths that lie), and NetlinkQpSource over a fake kernel transport.
#include "ib/rdma_netlink.h"

#include <gtest/gtest.h>
#include <linux/netlink.h>
#include <rdma/rdma_netlink.h>

#include <cstring>
#include <deque>
#include <map>
#include <random>

namespace tq::ib {
namespace {

using Bytes = std::vector<uint8_t>;

constexpr uint16_t kDevType = RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_GET);
constexpr uint16_t kQpType = RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_RES_QP_GET);

// ---- a netlink encoder, as the kernel lays messages out (4-byte alignment, padding zeroed) ----
void pad(Bytes* b) {
  while (b->size() % 4 != 0) b->push_back(0);
}
Bytes attr(uint16_t type, const Bytes& payload) {
  Bytes b(4);
  const uint16_t len = static_cast<uint16_t>(4 + payload.size());
  std::memcpy(b.data(), &len, 2);
  std::memcpy(b.data() + 2, &type, 2);
  b.insert(b.end(), payload.begin(), payload.end());
  pad(&b);
  return b;
}
Bytes u32(uint16_t type, uint32_t v) {
  Bytes p(4);
  std::memcpy(p.data(), &v, 4);
  return attr(type, p);
}
Bytes u8(uint16_t type, uint8_t v) { return attr(type, Bytes{v}); }
Bytes str(uint16_t type, const std::string& s) {
  Bytes p(s.begin(), s.end());
  p.push_back(0);
  return attr(type, p);
}
Bytes cat(std::initializer_list<Bytes> parts) {
  Bytes b;
  for (const Bytes& p : parts) b.insert(b.end(), p.begin(), p.end());
  return b;
}
Bytes nest(uint16_t type, std::initializer_list<Bytes> children) {
  return attr(type, cat(children));
}
Bytes msg(uint16_t type, uint32_t seq, const Bytes& payload, uint16_t flags = NLM_F_MULTI) {
  nlmsghdr h{};
  h.nlmsg_len = static_cast<uint32_t>(NLMSG_HDRLEN + payload.size());
  h.nlmsg_type = type;
  h.nlmsg_flags = flags;
  h.nlmsg_seq = seq;
  h.nlmsg_pid = 4242;
  Bytes b(NLMSG_HDRLEN, 0);
  std::memcpy(b.data(), &h, sizeof h);
  b.insert(b.end(), payload.begin(), payload.end());
  pad(&b);
  return b;
}
Bytes done(uint32_t seq, int32_t err = 0) {
  Bytes p(4);
  std::memcpy(p.data(), &err, 4);
  return msg(NLMSG_DONE, seq, p);
}
Bytes error(uint32_t seq, int32_t err) {
  Bytes p(4 + NLMSG_HDRLEN, 0);
  std::memcpy(p.data(), &err, 4);
  return msg(NLMSG_ERROR, seq, p, 0);
}
Bytes deviceMsg(uint32_t seq, uint32_t index, const std::string& name) {
  return msg(kDevType, seq,
             cat({u32(RDMA_NLDEV_ATTR_DEV_INDEX, index), str(RDMA_NLDEV_ATTR_DEV_NAME, name),
                  u32(RDMA_NLDEV_ATTR_PORT_INDEX, 1), str(RDMA_NLDEV_ATTR_FW_VERSION, "1.0")}));
}
Bytes userQp(uint32_t port, uint32_t qpn, uint32_t pid, uint8_t type = 2, uint8_t state = 3) {
  return nest(RDMA_NLDEV_ATTR_RES_QP_ENTRY,
              {u32(RDMA_NLDEV_ATTR_PORT_INDEX, port), u32(RDMA_NLDEV_ATTR_RES_LQPN, qpn),
               u32(RDMA_NLDEV_ATTR_RES_RQPN, qpn + 1), u32(RDMA_NLDEV_ATTR_RES_PDN, 3),
               u32(RDMA_NLDEV_ATTR_RES_PID, pid), u8(RDMA_NLDEV_ATTR_RES_TYPE, type),
               u8(RDMA_NLDEV_ATTR_RES_STATE, state)});
}
Bytes kernelQp(uint32_t qpn, const std::string& owner) {
  return nest(RDMA_NLDEV_ATTR_RES_QP_ENTRY,
              {u32(RDMA_NLDEV_ATTR_PORT_INDEX, 1), u32(RDMA_NLDEV_ATTR_RES_LQPN, qpn),
               u8(RDMA_NLDEV_ATTR_RES_TYPE, 4), u8(RDMA_NLDEV_ATTR_RES_STATE, 3),
               str(RDMA_NLDEV_ATTR_RES_KERN_NAME, owner)});
}
Bytes qpMsg(uint32_t seq, uint32_t index, const std::string& name, const Bytes& entries) {
  return msg(kQpType, seq,
             cat({u32(RDMA_NLDEV_ATTR_DEV_INDEX, index), str(RDMA_NLDEV_ATTR_DEV_NAME, name),
                  attr(RDMA_NLDEV_ATTR_RES_QP, entries)}));
}

// ---- requests ----

TEST(RdmaNetlinkRequestTest, DeviceDumpIsABareNldevGetWithDumpFlags) {
  const Bytes r = rdma_nl::deviceDumpRequest(7);
  ASSERT_EQ(r.size(), NLMSG_HDRLEN);
  nlmsghdr h;
  std::memcpy(&h, r.data(), sizeof h);
  EXPECT_EQ(h.nlmsg_len, NLMSG_HDRLEN);
  EXPECT_EQ(h.nlmsg_type, (RDMA_NL_NLDEV << 10) + RDMA_NLDEV_CMD_GET);
  EXPECT_EQ(h.nlmsg_flags, NLM_F_REQUEST | NLM_F_DUMP);
  EXPECT_EQ(h.nlmsg_seq, 7u);
  EXPECT_EQ(h.nlmsg_pid, 0u);
}

TEST(RdmaNetlinkRequestTest, QpDumpCarriesTheDeviceIndex) {
  const Bytes r = rdma_nl::qpDumpRequest(9, 3);
  ASSERT_EQ(r.size(), NLMSG_HDRLEN + 8);
  nlmsghdr h;
  std::memcpy(&h, r.data(), sizeof h);
  EXPECT_EQ(h.nlmsg_len, r.size());
  EXPECT_EQ(h.nlmsg_type, (RDMA_NL_NLDEV << 10) + RDMA_NLDEV_CMD_RES_QP_GET);
  EXPECT_EQ(h.nlmsg_flags, NLM_F_REQUEST | NLM_F_DUMP);
  EXPECT_EQ(Bytes(r.begin() + NLMSG_HDRLEN, r.end()), u32(RDMA_NLDEV_ATTR_DEV_INDEX, 3));
}

// ---- replies ----

TEST(RdmaNetlinkParseTest, DevicesAcrossDatagramsUntilDone) {
  std::vector<RdmaDevice> devs;
  auto r = rdma_nl::parseDeviceReply(cat({deviceMsg(5, 0, "mlx5_0"), deviceMsg(5, 2, "rxe0")}), 5,
                                     &devs);
  ASSERT_TRUE(r.ok()) << r.status().toString();
  EXPECT_FALSE(*r);
  r = rdma_nl::parseDeviceReply(done(5), 5, &devs);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(*r);
  EXPECT_EQ(devs, (std::vector<RdmaDevice>{{0, "mlx5_0"}, {2, "rxe0"}}));
}

TEST(RdmaNetlinkParseTest, UserKernelAndOwnerlessQps) {
  const Bytes ownerless = nest(RDMA_NLDEV_ATTR_RES_QP_ENTRY, {u32(RDMA_NLDEV_ATTR_RES_LQPN, 40),
                                                              u8(RDMA_NLDEV_ATTR_RES_TYPE, 2)});
  std::vector<RdmaQp> qps;
  auto r = rdma_nl::parseQpReply(
      cat({qpMsg(8, 2, "rxe0", cat({kernelQp(1, "ib_core"), userQp(1, 17, 4321), ownerless})),
           done(8)}),
      8, 100, &qps);
  ASSERT_TRUE(r.ok()) << r.status().toString();
  EXPECT_TRUE(*r);
  ASSERT_EQ(qps.size(), 3u);
  EXPECT_EQ(qps[0].device, "rxe0");
  EXPECT_EQ(qps[0].device_index, 2u);
  EXPECT_TRUE(qps[0].kernel());
  EXPECT_EQ(qps[0].kernel_owner, "ib_core");
  EXPECT_EQ(qps[0].pid, std::nullopt);
  EXPECT_EQ(qps[0].type, 4);
  EXPECT_FALSE(qps[1].kernel());
  EXPECT_EQ(qps[1].pid, 4321);
  EXPECT_EQ(qps[1].qpn, 17u);
  EXPECT_EQ(qps[1].port, 1u);
  EXPECT_EQ(qps[1].type, 2);
  EXPECT_EQ(qps[1].state, 3);
  EXPECT_EQ(qps[2].pid, std::nullopt);  // owner not visible in our pid namespace
  EXPECT_EQ(qps[2].port, 0u);           // not bound yet
  EXPECT_FALSE(qps[2].kernel());
}

TEST(RdmaNetlinkParseTest, NestedFlagUnknownAttributesAndOtherSequencesAreTolerated) {
  Bytes table = attr(RDMA_NLDEV_ATTR_RES_QP | NLA_F_NESTED,
                     cat({userQp(1, 5, 10), u32(RDMA_NLDEV_ATTR_MAX + 7, 1)}));
  Bytes m = msg(kQpType, 3,
                cat({u32(RDMA_NLDEV_ATTR_DEV_INDEX, 1), str(RDMA_NLDEV_ATTR_DEV_NAME, "mlx5_1"),
                     u32(RDMA_NLDEV_ATTR_MAX + 3, 9), table}));
  std::vector<RdmaQp> qps;
  // A late reply of dump 2 (even one that failed) is skipped, as is a NOOP.
  auto r = rdma_nl::parseQpReply(
      cat({error(2, -EBUSY), qpMsg(2, 1, "mlx5_1", userQp(1, 99, 1)), msg(NLMSG_NOOP, 3, {}), m}),
      3, 100, &qps);
  ASSERT_TRUE(r.ok()) << r.status().toString();
  EXPECT_FALSE(*r);
  ASSERT_EQ(qps.size(), 1u);
  EXPECT_EQ(qps[0].qpn, 5u);
  EXPECT_EQ(qps[0].device, "mlx5_1");
}

TEST(RdmaNetlinkParseTest, NamesAreCutAndMadePrintable) {
  std::vector<RdmaDevice> devs;
  auto r = rdma_nl::parseDeviceReply(
      msg(kDevType, 1,
          cat({u32(RDMA_NLDEV_ATTR_DEV_INDEX, 1),
               attr(RDMA_NLDEV_ATTR_DEV_NAME, Bytes{'a', '\n', 0xff, '"', 'b'})})),  // no NUL
      1, &devs);
  ASSERT_TRUE(r.ok()) << r.status().toString();
  ASSERT_EQ(devs.size(), 1u);
  EXPECT_EQ(devs[0].name, "a??\"b");
  devs.clear();
  ASSERT_TRUE(rdma_nl::parseDeviceReply(deviceMsg(1, 1, std::string(300, 'x')), 1, &devs).ok());
  EXPECT_EQ(devs[0].name.size(), rdma_nl::kMaxNameBytes);
}

TEST(RdmaNetlinkParseTest, KernelErrorsKeepTheirErrno) {
  std::vector<RdmaQp> qps;
  auto r = rdma_nl::parseQpReply(error(4, -EINVAL), 4, 10, &qps);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("Invalid argument"), std::string::npos)
      << r.status().message();
  r = rdma_nl::parseQpReply(done(4, -ENOMEM), 4, 10, &qps);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("dump failed"), std::string::npos);
  // An acknowledgement is not an error.
  r = rdma_nl::parseQpReply(cat({error(4, 0), done(4)}), 4, 10, &qps);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(*r);
}

TEST(RdmaNetlinkParseTest, MalformedMessagesAreErrorsNamingTheProblem) {
  std::vector<RdmaQp> qps;
  struct Case {
    const char* name;
    Bytes datagram;
    const char* expect;
  };
  Bytes bad_index = msg(kQpType, 1, cat({attr(RDMA_NLDEV_ATTR_DEV_INDEX, Bytes{1, 2})}));
  Bytes no_qpn =
      qpMsg(1, 0, "d", nest(RDMA_NLDEV_ATTR_RES_QP_ENTRY, {u32(RDMA_NLDEV_ATTR_RES_PID, 5)}));
  Bytes zero_len_attr = msg(kQpType, 1, Bytes{0, 0, 1, 0, 0, 0, 0, 0});
  Bytes long_len = deviceMsg(1, 0, "x");
  long_len[0] = 0xff;  // nlmsg_len past the datagram
  const Case cases[] = {
      {"wrong type", deviceMsg(1, 0, "x"), "unexpected message type"},
      {"bad index", bad_index, "DEV_INDEX has 2 payload byte(s)"},
      {"no qpn", no_qpn, "without RES_LQPN"},
      {"zero-length attribute", zero_len_attr, "has length 0"},
      {"message past datagram", long_len, "message length 255"},
      {"short header", Bytes{1, 2, 3}, "into a message header"},
      {"short error", msg(NLMSG_ERROR, 1, Bytes{1}), "NLMSG_ERROR with a 1-byte payload"},
  };
  for (const Case& c : cases) {
    auto r = rdma_nl::parseQpReply(c.datagram, 1, 10, &qps);
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos)
        << c.name << ": " << r.status().message();
  }
  EXPECT_TRUE(qps.empty());
}

TEST(RdmaNetlinkParseTest, AtMostMaxQpsAreTaken) {
  std::vector<RdmaQp> qps;
  auto r = rdma_nl::parseQpReply(
      qpMsg(1, 0, "d", cat({userQp(1, 1, 1), userQp(1, 2, 1), userQp(1, 3, 1)})), 1, 2, &qps);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(qps.size(), 2u);
}

// Every prefix and 20000 random mutations of a valid reply: never a crash or an out-of-bounds
// read (run under ASan/UBSan in the sanitizer build), never more entries than bytes allow.
TEST(RdmaNetlinkParseTest, HostileBytesNeverCrash) {
  const Bytes good = cat(
      {qpMsg(1, 2, "rxe0", cat({kernelQp(1, "ib_core"), userQp(1, 17, 4321), userQp(0, 18, 4322)})),
       deviceMsg(1, 3, "mlx5_0"), done(1)});
  for (size_t n = 0; n <= good.size(); ++n) {
    std::vector<RdmaQp> qps;
    std::vector<RdmaDevice> devs;
    (void)rdma_nl::parseQpReply(std::span<const uint8_t>(good.data(), n), 1, 1000, &qps);
    (void)rdma_nl::parseDeviceReply(std::span<const uint8_t>(good.data(), n), 1, &devs);
  }
  std::mt19937 rng(12);
  for (int i = 0; i < 20000; ++i) {
    Bytes b = good;
    const int flips = 1 + static_cast<int>(rng() % 8);
    for (int f = 0; f < flips; ++f) b[rng() % b.size()] = static_cast<uint8_t>(rng());
    if (rng() % 4 == 0) b.resize(rng() % b.size());
    std::vector<RdmaQp> qps;
    std::vector<RdmaDevice> devs;
    (void)rdma_nl::parseQpReply(b, 1, 1000, &qps);
    (void)rdma_nl::parseDeviceReply(b, 1, &devs);
    // An entry needs at least a nest header and an LQPN attribute (12 bytes).
    EXPECT_LE(qps.size(), b.size() / 12);
    for (const RdmaQp& q : qps) EXPECT_LE(q.device.size(), rdma_nl::kMaxNameBytes);
  }
}

// ---- NetlinkQpSource over a fake kernel ----

// Answers the two dump requests from a device table, with injectable faults. Each transport the
// opener hands out shares it.
struct FakeKernel {
  struct Device {
    std::string name;
    std::vector<Bytes> entries;
    int refuse = 0;  // answer NLMSG_ERROR(-refuse)
  };
  std::map<uint32_t, Device> devices;
  size_t entries_per_datagram = 2;
  bool never_done = false;  // NOOPs forever
  bool silent = false;      // receive times out
  FakeClock* clock = nullptr;
  int64_t ns_per_receive = 0;
  int opens = 0;
  std::deque<Bytes> queue;

  void answer(const Bytes& req) {
    nlmsghdr h;
    std::memcpy(&h, req.data(), sizeof h);
    if (h.nlmsg_type == kDevType) {
      Bytes d;
      for (const auto& [index, dev] : devices) {
        d = cat({d, deviceMsg(h.nlmsg_seq, index, dev.name)});
      }
      queue.push_back(d);
      queue.push_back(done(h.nlmsg_seq));
      return;
    }
    uint32_t index;
    std::memcpy(&index, req.data() + NLMSG_HDRLEN + 4, 4);
    auto it = devices.find(index);
    if (it == devices.end() || it->second.refuse != 0) {
      queue.push_back(error(h.nlmsg_seq, it == devices.end() ? -EINVAL : -it->second.refuse));
      return;
    }
    const auto& e = it->second.entries;
    for (size_t i = 0; i < e.size(); i += entries_per_datagram) {
      Bytes table;
      for (size_t j = i; j < std::min(e.size(), i + entries_per_datagram); ++j) {
        table = cat({table, e[j]});
      }
      queue.push_back(qpMsg(h.nlmsg_seq, index, it->second.name, table));
    }
    if (!never_done) queue.push_back(done(h.nlmsg_seq));
  }
};

class FakeTransport final : public NetlinkTransport {
 public:
  explicit FakeTransport(FakeKernel* k) : k_(k) {}
  Status send(std::span<const uint8_t> m) override {
    k_->answer(Bytes(m.begin(), m.end()));
    return okStatus();
  }
  Result<Bytes> receive() override {
    if (k_->clock != nullptr) k_->clock->advanceNs(k_->ns_per_receive);
    if (k_->silent) return deadlineExceeded("fake: no reply");
    if (k_->queue.empty()) {
      if (k_->never_done) return msg(NLMSG_NOOP, 0, {});
      return deadlineExceeded("fake: nothing queued");
    }
    Bytes b = k_->queue.front();
    k_->queue.pop_front();
    return b;
  }

 private:
  FakeKernel* k_;
};

class NetlinkQpSourceTest : public ::testing::Test {
 protected:
  NetlinkQpSource source(NetlinkQpSourceOptions o = {}) {
    kernel_.clock = &clock_;
    return NetlinkQpSource(
        [this]() -> Result<std::unique_ptr<NetlinkTransport>> {
          kernel_.opens++;
          kernel_.queue.clear();  // a fresh socket holds nothing
          return std::unique_ptr<NetlinkTransport>(std::make_unique<FakeTransport>(&kernel_));
        },
        clock_, o);
  }
  FakeClock clock_;
  FakeKernel kernel_;
};

TEST_F(NetlinkQpSourceTest, ListsEveryDevicesQpsOverSeveralDatagrams) {
  kernel_.devices[0] = {"mlx5_0",
                        {kernelQp(0, "ib_core"), kernelQp(1, "ib_core"), userQp(1, 100, 7),
                         userQp(1, 101, 7), userQp(1, 102, 8)}};
  kernel_.devices[4] = {"rxe0", {}};  // no QPs: the kernel sends DONE only
  kernel_.devices[5] = {"rxe1", {userQp(1, 17, 9)}};
  auto src = source();
  auto l = src.listQps();
  ASSERT_TRUE(l.ok()) << l.status().toString();
  EXPECT_TRUE(l->device_errors.empty());
  EXPECT_FALSE(l->truncated);
  EXPECT_EQ(l->devices, (std::vector<RdmaDevice>{{0, "mlx5_0"}, {4, "rxe0"}, {5, "rxe1"}}));
  ASSERT_EQ(l->qps.size(), 6u);
  EXPECT_EQ(l->qps[4].qpn, 102u);
  EXPECT_EQ(l->qps[4].pid, 8);
  EXPECT_EQ(l->qps[5].device, "rxe1");
  EXPECT_EQ(kernel_.opens, 1);
  // A second listing opens a fresh socket.
  ASSERT_TRUE(src.listQps().ok());
  EXPECT_EQ(kernel_.opens, 2);
}

TEST_F(NetlinkQpSourceTest, AFailingDeviceIsReportedAndTheOthersListed) {
  kernel_.devices[0] = {"mlx5_0", {userQp(1, 1, 7)}, ENODEV};
  kernel_.devices[1] = {"mlx5_1", {userQp(1, 2, 7)}};
  auto src = source();
  auto l = src.listQps();
  ASSERT_TRUE(l.ok()) << l.status().toString();
  ASSERT_EQ(l->device_errors.size(), 1u);
  EXPECT_NE(l->device_errors[0].find("mlx5_0 (index 0)"), std::string::npos);
  EXPECT_NE(l->device_errors[0].find("No such device"), std::string::npos) << l->device_errors[0];
  ASSERT_EQ(l->qps.size(), 1u);
  EXPECT_EQ(l->qps[0].device, "mlx5_1");
  EXPECT_EQ(kernel_.opens, 2);  // reopened after the failed dump
}

TEST_F(NetlinkQpSourceTest, ADeviceWhoseDumpBreaksHalfWayContributesNothing) {
  Bytes broken = userQp(1, 3, 7);
  broken[0] = 2;  // nla_len 2: malformed
  kernel_.devices[0] = {"mlx5_0", {userQp(1, 1, 7), userQp(1, 2, 7), broken}};
  auto l = source().listQps();
  ASSERT_TRUE(l.ok());
  EXPECT_TRUE(l->qps.empty());
  ASSERT_EQ(l->device_errors.size(), 1u);
}

TEST_F(NetlinkQpSourceTest, NoDeviceListIsAnError) {
  kernel_.silent = true;
  auto l = source().listQps();
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), StatusCode::kDeadlineExceeded);
}

TEST_F(NetlinkQpSourceTest, ADumpWithoutEndIsBoundedByDatagramsAndTime) {
  kernel_.devices[0] = {"mlx5_0", {userQp(1, 1, 7)}};
  kernel_.never_done = true;
  NetlinkQpSourceOptions o;
  o.max_datagrams_per_dump = 50;
  auto l = source(o).listQps();
  ASSERT_TRUE(l.ok()) << l.status().toString();
  ASSERT_EQ(l->device_errors.size(), 1u);
  EXPECT_NE(l->device_errors[0].find("after 50 datagrams"), std::string::npos)
      << l->device_errors[0];

  kernel_.ns_per_receive = 100'000'000;  // 0.1 s per datagram, 1 s deadline
  o.max_datagrams_per_dump = 1'000'000;
  o.deadline_ns = 1'000'000'000;
  l = source(o).listQps();
  ASSERT_TRUE(l.ok()) << l.status().toString();
  ASSERT_EQ(l->device_errors.size(), 1u);
  EXPECT_NE(l->device_errors[0].find("longer than 1000 ms"), std::string::npos)
      << l->device_errors[0];
}

TEST_F(NetlinkQpSourceTest, TooManyQpsTruncateTheListing) {
  kernel_.devices[0] = {"mlx5_0", {userQp(1, 1, 7), userQp(1, 2, 7), userQp(1, 3, 7)}};
  kernel_.devices[1] = {"mlx5_1", {userQp(1, 4, 7)}};
  NetlinkQpSourceOptions o;
  o.max_qps = 2;
  auto l = source(o).listQps();
  ASSERT_TRUE(l.ok());
  EXPECT_TRUE(l->truncated);
  EXPECT_EQ(l->qps.size(), 2u);
}

// The real socket: on a kernel without RDMA (ib_core not loaded, as on the development
// machines) it says so; with RDMA, a listing works (the rxe VM test uses it through the agent).
TEST(RdmaNetlinkSocketTest, OpensOrSaysWhyNot) {
  auto t = openRdmaNetlink(200);
  if (!t.ok()) {
    EXPECT_EQ(t.status().code(), StatusCode::kUnavailable) << t.status().toString();
    EXPECT_NE(t.status().message().find("NETLINK_RDMA"), std::string::npos);
    return;
  }
  FakeClock clock;
  NetlinkQpSource src([] { return openRdmaNetlink(200); }, clock);
  auto l = src.listQps();
  ASSERT_TRUE(l.ok()) << l.status().toString();
}

}  // namespace
}  // namespace tq::ib
