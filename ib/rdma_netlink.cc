#include "ib/rdma_netlink.h"

#include <linux/netlink.h>
#include <rdma/rdma_netlink.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <cerrno>
#include <cstring>

#include "common/fd.h"

namespace tq::ib {
namespace rdma_nl {
namespace {

constexpr uint16_t kDeviceGetType = RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_GET);
constexpr uint16_t kQpGetType = RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_RES_QP_GET);
// The attribute type without the nested / byte-order flag bits.
constexpr uint16_t kAttrTypeMask = static_cast<uint16_t>(~(NLA_F_NESTED | NLA_F_NET_BYTEORDER));

size_t align4(size_t n) { return (n + 3) & ~size_t{3}; }

template <typename T>
T load(std::span<const uint8_t> bytes) {
  T v;
  std::memcpy(&v, bytes.data(), sizeof v);
  return v;
}

std::vector<uint8_t> request(uint16_t type, uint32_t seq, std::span<const uint8_t> attrs) {
  nlmsghdr h{};
  h.nlmsg_len = static_cast<uint32_t>(NLMSG_HDRLEN + attrs.size());
  h.nlmsg_type = type;
  h.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  h.nlmsg_seq = seq;
  std::vector<uint8_t> out(NLMSG_HDRLEN + attrs.size(), 0);
  std::memcpy(out.data(), &h, sizeof h);
  if (!attrs.empty()) std::memcpy(out.data() + NLMSG_HDRLEN, attrs.data(), attrs.size());
  return out;
}

// Calls on_attr(type, payload) for each attribute of `attrs`; stops with an error at the first
// attribute whose length does not fit.
template <typename OnAttr>
Status forEachAttr(std::span<const uint8_t> attrs, const char* where, const OnAttr& on_attr) {
  size_t off = 0;
  while (off < attrs.size()) {
    const size_t left = attrs.size() - off;
    if (left < NLA_HDRLEN) {
      return dataLoss(std::string(where) + ": " + std::to_string(left) +
                      " trailing byte(s), shorter than an attribute header");
    }
    const auto a = load<nlattr>(attrs.subspan(off));
    if (a.nla_len < NLA_HDRLEN || a.nla_len > left) {
      return dataLoss(std::string(where) + ": attribute type " +
                      std::to_string(a.nla_type & kAttrTypeMask) + " has length " +
                      std::to_string(a.nla_len) + " with " + std::to_string(left) +
                      " byte(s) left");
    }
    TQ_RETURN_IF_ERROR(on_attr(a.nla_type & kAttrTypeMask,
                               attrs.subspan(off + NLA_HDRLEN, a.nla_len - NLA_HDRLEN)));
    off += std::min(left, align4(a.nla_len));
  }
  return okStatus();
}

std::optional<uint32_t> u32Of(std::span<const uint8_t> p) {
  if (p.size() != sizeof(uint32_t)) return std::nullopt;
  return load<uint32_t>(p);
}
std::optional<uint8_t> u8Of(std::span<const uint8_t> p) {
  if (p.empty()) return std::nullopt;
  return p[0];
}
// Up to the first NUL (the kernel always sends one), at most kMaxNameBytes, bytes outside
// printable ASCII replaced by '?': the names end up in log lines and metric labels.
std::string stringOf(std::span<const uint8_t> p) {
  std::string s;
  for (size_t i = 0; i < p.size() && p[i] != 0 && s.size() < kMaxNameBytes; ++i) {
    s.push_back(p[i] >= 0x20 && p[i] < 0x7f ? static_cast<char>(p[i]) : '?');
  }
  return s;
}

Status badAttr(const char* where, const char* attr, size_t len) {
  return dataLoss(std::string(where) + ": " + attr + " has " + std::to_string(len) +
                  " payload byte(s)");
}

// Walks the netlink messages of one datagram (see parseDeviceReply for the contract), calling
// on_message(payload) for each message of `expected_type` and sequence `seq`.
template <typename OnMessage>
Result<bool> walkReply(std::span<const uint8_t> datagram, uint32_t seq, uint16_t expected_type,
                       const char* what, const OnMessage& on_message) {
  size_t off = 0;
  bool done = false;
  while (off < datagram.size()) {
    const size_t left = datagram.size() - off;
    if (left < NLMSG_HDRLEN) {
      return dataLoss(std::string(what) + ": datagram ends " + std::to_string(left) +
                      " byte(s) into a message header");
    }
    const auto h = load<nlmsghdr>(datagram.subspan(off));
    if (h.nlmsg_len < NLMSG_HDRLEN || h.nlmsg_len > left) {
      return dataLoss(std::string(what) + ": message length " + std::to_string(h.nlmsg_len) +
                      " at offset " + std::to_string(off) + " of a " +
                      std::to_string(datagram.size()) + "-byte datagram");
    }
    const auto payload = datagram.subspan(off + NLMSG_HDRLEN, h.nlmsg_len - NLMSG_HDRLEN);
    off += std::min(left, align4(h.nlmsg_len));
    if (h.nlmsg_seq != seq || done) continue;  // another dump's leftovers
    switch (h.nlmsg_type) {
      case NLMSG_NOOP: continue;
      case NLMSG_ERROR: {
        if (payload.size() < sizeof(int32_t)) {
          return dataLoss(std::string(what) + ": NLMSG_ERROR with a " +
                          std::to_string(payload.size()) + "-byte payload");
        }
        const auto err = load<int32_t>(payload);
        if (err == 0) continue;  // an acknowledgement
        if (err > 0 || err < -4095) {
          return dataLoss(std::string(what) + ": NLMSG_ERROR with error code " +
                          std::to_string(err));
        }
        return errnoStatus(-err, std::string(what) + ": kernel refused");
      }
      case NLMSG_DONE:
        if (payload.size() >= sizeof(int32_t)) {
          const auto err = load<int32_t>(payload);
          if (err < 0 && err >= -4095) {
            return errnoStatus(-err, std::string(what) + ": dump failed");
          }
        }
        done = true;
        continue;
      default:
        if (h.nlmsg_type != expected_type) {
          return dataLoss(std::string(what) + ": unexpected message type " +
                          std::to_string(h.nlmsg_type) + " (expected " +
                          std::to_string(expected_type) + ")");
        }
        TQ_RETURN_IF_ERROR(on_message(payload));
    }
  }
  return done;
}

}  // namespace

std::vector<uint8_t> deviceDumpRequest(uint32_t seq) { return request(kDeviceGetType, seq, {}); }

std::vector<uint8_t> qpDumpRequest(uint32_t seq, uint32_t device_index) {
  uint8_t attr[NLA_HDRLEN + sizeof(uint32_t)];
  const nlattr a{static_cast<uint16_t>(sizeof attr), RDMA_NLDEV_ATTR_DEV_INDEX};
  std::memcpy(attr, &a, sizeof a);
  std::memcpy(attr + NLA_HDRLEN, &device_index, sizeof device_index);
  return request(kQpGetType, seq, attr);
}

Result<bool> parseDeviceReply(std::span<const uint8_t> datagram, uint32_t seq,
                              std::vector<RdmaDevice>* out) {
  constexpr const char* kWhat = "RDMA netlink device dump";
  return walkReply(datagram, seq, kDeviceGetType, kWhat, [&](std::span<const uint8_t> attrs) {
    std::optional<uint32_t> index;
    std::string name;
    TQ_RETURN_IF_ERROR(forEachAttr(attrs, kWhat, [&](uint16_t type, std::span<const uint8_t> p) {
      if (type == RDMA_NLDEV_ATTR_DEV_INDEX) {
        index = u32Of(p);
        if (!index) return badAttr(kWhat, "DEV_INDEX", p.size());
      } else if (type == RDMA_NLDEV_ATTR_DEV_NAME) {
        name = stringOf(p);
      }
      return okStatus();
    }));
    if (!index || name.empty()) {
      return dataLoss(std::string(kWhat) + ": a device message without " +
                      (index ? "a name" : "an index"));
    }
    out->push_back({*index, std::move(name)});
    return okStatus();
  });
}

Result<bool> parseQpReply(std::span<const uint8_t> datagram, uint32_t seq, size_t max_qps,
                          std::vector<RdmaQp>* out) {
  constexpr const char* kWhat = "RDMA netlink QP dump";
  return walkReply(datagram, seq, kQpGetType, kWhat, [&](std::span<const uint8_t> attrs) {
    std::optional<uint32_t> dev_index;
    std::string dev_name;
    std::span<const uint8_t> table;
    bool have_table = false;
    TQ_RETURN_IF_ERROR(forEachAttr(attrs, kWhat, [&](uint16_t type, std::span<const uint8_t> p) {
      if (type == RDMA_NLDEV_ATTR_DEV_INDEX) {
        dev_index = u32Of(p);
        if (!dev_index) return badAttr(kWhat, "DEV_INDEX", p.size());
      } else if (type == RDMA_NLDEV_ATTR_DEV_NAME) {
        dev_name = stringOf(p);
      } else if (type == RDMA_NLDEV_ATTR_RES_QP) {
        table = p;
        have_table = true;
      }
      return okStatus();
    }));
    if (!dev_index) return dataLoss(std::string(kWhat) + ": a message without DEV_INDEX");
    if (!have_table) return okStatus();  // a device without QPs
    return forEachAttr(table, kWhat, [&](uint16_t type, std::span<const uint8_t> entry) {
      if (type != RDMA_NLDEV_ATTR_RES_QP_ENTRY) return okStatus();
      if (out->size() >= max_qps) {
        return resourceExhausted(std::string(kWhat) + ": more than " + std::to_string(max_qps) +
                                 " QPs");
      }
      RdmaQp qp;
      qp.device_index = *dev_index;
      qp.device = dev_name;
      bool have_qpn = false;
      TQ_RETURN_IF_ERROR(forEachAttr(entry, kWhat, [&](uint16_t t, std::span<const uint8_t> p) {
        switch (t) {
          case RDMA_NLDEV_ATTR_PORT_INDEX: {
            auto v = u32Of(p);
            if (!v) return badAttr(kWhat, "PORT_INDEX", p.size());
            qp.port = *v;
            break;
          }
          case RDMA_NLDEV_ATTR_RES_LQPN: {
            auto v = u32Of(p);
            if (!v) return badAttr(kWhat, "RES_LQPN", p.size());
            qp.qpn = *v;
            have_qpn = true;
            break;
          }
          case RDMA_NLDEV_ATTR_RES_PID: {
            auto v = u32Of(p);
            if (!v) return badAttr(kWhat, "RES_PID", p.size());
            // pid_t is positive; 0 or a value past INT32_MAX is no process.
            if (*v != 0 && *v <= 0x7fffffffu) qp.pid = static_cast<int32_t>(*v);
            break;
          }
          case RDMA_NLDEV_ATTR_RES_KERN_NAME:
            qp.kernel_owner = stringOf(p);
            if (qp.kernel_owner.empty()) qp.kernel_owner = "?";
            break;
          case RDMA_NLDEV_ATTR_RES_TYPE: {
            auto v = u8Of(p);
            if (!v) return badAttr(kWhat, "RES_TYPE", p.size());
            qp.type = *v;
            break;
          }
          case RDMA_NLDEV_ATTR_RES_STATE: {
            auto v = u8Of(p);
            if (!v) return badAttr(kWhat, "RES_STATE", p.size());
            qp.state = *v;
            break;
          }
          default: break;
        }
        return okStatus();
      }));
      if (!have_qpn) return dataLoss(std::string(kWhat) + ": a QP entry without RES_LQPN");
      if (qp.kernel()) qp.pid.reset();  // the kernel never sends both; trust neither half
      out->push_back(std::move(qp));
      return okStatus();
    });
  });
}

}  // namespace rdma_nl

namespace {

class RdmaNetlinkSocket final : public NetlinkTransport {
 public:
  explicit RdmaNetlinkSocket(Fd fd) : fd_(std::move(fd)) {}

  Status send(std::span<const uint8_t> message) override {
    sockaddr_nl kernel{};
    kernel.nl_family = AF_NETLINK;
    const ssize_t n = ::sendto(fd_.get(), message.data(), message.size(), 0,
                               reinterpret_cast<const sockaddr*>(&kernel), sizeof kernel);
    if (n < 0) return errnoStatus("RDMA netlink: send");
    if (static_cast<size_t>(n) != message.size()) {
      return unavailable("RDMA netlink: short send of " + std::to_string(n) + " bytes");
    }
    return okStatus();
  }

  Result<std::vector<uint8_t>> receive() override {
    // Dump datagrams are at most a few pages (the kernel sizes dump skbs at up to 32 KiB);
    // a bigger one is reported as truncated rather than parsed in part.
    std::vector<uint8_t> buf(64 * 1024);
    for (;;) {
      sockaddr_nl from{};
      socklen_t from_len = sizeof from;
      const ssize_t n = ::recvfrom(fd_.get(), buf.data(), buf.size(), MSG_TRUNC,
                                   reinterpret_cast<sockaddr*>(&from), &from_len);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
          return deadlineExceeded("RDMA netlink: no reply within the receive timeout");
        }
        return errnoStatus("RDMA netlink: receive");
      }
      if (from.nl_pid != 0) continue;  // not from the kernel
      if (static_cast<size_t>(n) > buf.size()) {
        return dataLoss("RDMA netlink: a " + std::to_string(n) + "-byte datagram exceeds the " +
                        std::to_string(buf.size()) + "-byte buffer");
      }
      buf.resize(static_cast<size_t>(n));
      return buf;
    }
  }

 private:
  Fd fd_;
};

}  // namespace

Result<std::unique_ptr<NetlinkTransport>> openRdmaNetlink(int timeout_ms) {
  Fd fd(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_RDMA));
  if (!fd.valid()) {
    const int err = errno;
    if (err == EPROTONOSUPPORT) {
      return unavailable("RDMA netlink: the kernel has no NETLINK_RDMA (ib_core not loaded)");
    }
    return errnoStatus(err, "RDMA netlink: socket");
  }
  timeval tv{};
  tv.tv_sec = timeout_ms / 1000;
  tv.tv_usec = (timeout_ms % 1000) * 1000;
  if (::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0) {
    return errnoStatus("RDMA netlink: SO_RCVTIMEO");
  }
  sockaddr_nl self{};
  self.nl_family = AF_NETLINK;  // nl_pid 0: the kernel assigns the port id
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&self), sizeof self) != 0) {
    return errnoStatus("RDMA netlink: bind");
  }
  return std::unique_ptr<NetlinkTransport>(std::make_unique<RdmaNetlinkSocket>(std::move(fd)));
}

NetlinkQpSource::NetlinkQpSource(NetlinkOpener open, Clock& clock, NetlinkQpSourceOptions options)
    : open_(std::move(open)), clock_(clock), options_(options) {}

template <typename Parse>
Status NetlinkQpSource::dump(std::span<const uint8_t> request, uint32_t seq, int64_t deadline,
                             const Parse& parse) {
  if (!transport_) {
    TQ_ASSIGN_OR_RETURN(transport_, open_());
  }
  Status s = dumpOn(*transport_, request, seq, deadline, parse);
  if (!s.ok()) transport_.reset();  // it may still hold the rest of the failed dump
  return s;
}

template <typename Parse>
Status NetlinkQpSource::dumpOn(NetlinkTransport& transport, std::span<const uint8_t> request,
                               uint32_t seq, int64_t deadline, const Parse& parse) {
  TQ_RETURN_IF_ERROR(transport.send(request));
  for (size_t i = 0; i < options_.max_datagrams_per_dump; ++i) {
    if (clock_.nowNs() > deadline) {
      return deadlineExceeded("RDMA netlink: the listing took longer than " +
                              std::to_string(options_.deadline_ns / 1'000'000) + " ms");
    }
    TQ_ASSIGN_OR_RETURN(std::vector<uint8_t> datagram, transport.receive());
    TQ_ASSIGN_OR_RETURN(bool done, parse(std::span<const uint8_t>(datagram), seq));
    if (done) return okStatus();
  }
  return resourceExhausted("RDMA netlink: no end of dump after " +
                           std::to_string(options_.max_datagrams_per_dump) + " datagrams");
}

Result<QpListing> NetlinkQpSource::listQps() {
  const int64_t deadline = clock_.nowNs() + options_.deadline_ns;
  std::vector<RdmaDevice> devices;
  const uint32_t dev_seq = ++seq_;
  TQ_RETURN_IF_ERROR(
      dump(rdma_nl::deviceDumpRequest(dev_seq), dev_seq, deadline,
           [&](std::span<const uint8_t> d, uint32_t s) -> Result<bool> {
             TQ_ASSIGN_OR_RETURN(bool done, rdma_nl::parseDeviceReply(d, s, &devices));
             if (devices.size() > options_.max_devices) {
               return resourceExhausted("RDMA netlink: more than " +
                                        std::to_string(options_.max_devices) + " devices");
             }
             return done;
           }));
  QpListing out;
  out.devices = devices;
  for (const RdmaDevice& dev : devices) {
    const uint32_t seq = ++seq_;
    const size_t before = out.qps.size();
    Status s = dump(rdma_nl::qpDumpRequest(seq, dev.index), seq, deadline,
                    [&](std::span<const uint8_t> d, uint32_t sq) {
                      return rdma_nl::parseQpReply(d, sq, options_.max_qps, &out.qps);
                    });
    if (s.code() == StatusCode::kResourceExhausted && out.qps.size() >= options_.max_qps) {
      out.truncated = true;
      break;
    }
    if (!s.ok()) {
      out.qps.resize(before);  // a device's QPs are all there or none are
      out.device_errors.push_back(dev.name + " (index " + std::to_string(dev.index) +
                                  "): " + s.message());
      if (s.code() == StatusCode::kDeadlineExceeded) break;
    }
  }
  transport_.reset();
  return out;
}

}  // namespace tq::ib
