#include "tc/netlink.h"

#include <arpa/inet.h>
#include <linux/netlink.h>
#include <linux/pkt_sched.h>
#include <netlink/cache.h>
#include <netlink/errno.h>
#include <netlink/netlink.h>
#include <netlink/route/class.h>
#include <netlink/route/classifier.h>
#include <netlink/route/cls/u32.h>
#include <netlink/route/link.h>
#include <netlink/route/qdisc.h>
#include <netlink/route/qdisc/htb.h>
#include <netlink/route/tc.h>
#include <netlink/socket.h>
#include <sys/socket.h>

#include <cstring>
#include <optional>

#include "tc/netns.h"

#ifndef SOL_NETLINK
#define SOL_NETLINK 270
#endif

namespace tq::tc {

void NlSockDeleter::operator()(nl_sock* p) const noexcept { nl_socket_free(p); }
void NlCacheDeleter::operator()(nl_cache* p) const noexcept { nl_cache_free(p); }
void RtnlQdiscDeleter::operator()(rtnl_qdisc* p) const noexcept { rtnl_qdisc_put(p); }
void RtnlClassDeleter::operator()(rtnl_class* p) const noexcept { rtnl_class_put(p); }
void RtnlClsDeleter::operator()(rtnl_cls* p) const noexcept { rtnl_cls_put(p); }

bool burstEquivalent(uint32_t a, uint32_t b, uint64_t rate) {
  uint64_t diff = a > b ? a - b : b - a;
  // libnl truncates the bucket time to whole µs when writing and again when reading.
  return diff <= rate * 4 / 1'000'000 + 8;
}

namespace {

// What the kernel said in its last NLMSG_ERROR: errno and the extended-ack text (if any).
struct KernelAck {
  int error = 0;  // positive errno
  std::string message;
};

// libnl (3.7) calls this for every NLMSG_ERROR with a non-zero error and would otherwise map
// the errno to its own code, dropping the extended ack. `e` points into the received message,
// right after its nlmsghdr, so the attributes that follow can be read here.
int onNetlinkError(sockaddr_nl* /*who*/, nlmsgerr* e, void* arg) {
  auto* ack = static_cast<KernelAck*>(arg);
  ack->error = e->error < 0 ? -e->error : e->error;
  ack->message.clear();
  const auto* hdr =
      reinterpret_cast<const nlmsghdr*>(reinterpret_cast<const char*>(e) - NLMSG_HDRLEN);
  if (!(hdr->nlmsg_flags & NLM_F_ACK_TLVS)) return NL_STOP;
  size_t payload = hdr->nlmsg_len > NLMSG_HDRLEN ? hdr->nlmsg_len - NLMSG_HDRLEN : 0;
  size_t off = sizeof(nlmsgerr);
  if (!(hdr->nlmsg_flags & NLM_F_CAPPED)) off += e->msg.nlmsg_len - sizeof(nlmsghdr);
  off = NLMSG_ALIGN(off);
  const char* base = reinterpret_cast<const char*>(e);
  while (off + sizeof(nlattr) <= payload) {
    const auto* a = reinterpret_cast<const nlattr*>(base + off);
    if (a->nla_len < sizeof(nlattr) || off + a->nla_len > payload) break;
    if ((a->nla_type & NLA_TYPE_MASK) == NLMSGERR_ATTR_MSG) {
      const char* text = base + off + NLA_HDRLEN;
      size_t n = a->nla_len - NLA_HDRLEN;
      ack->message.assign(text, strnlen(text, n));
      while (!ack->message.empty() && (ack->message.back() == '\n' || ack->message.back() == ' '))
        ack->message.pop_back();
    }
    off += NLA_ALIGN(a->nla_len);
  }
  return NL_STOP;
}

class LibnlTcNetlink final : public TcNetlink {
 public:
  Status open() {
    sock_.reset(nl_socket_alloc());
    if (!sock_) return resourceExhausted("nl_socket_alloc failed");
    int rc = nl_connect(sock_.get(), NETLINK_ROUTE);
    if (rc < 0) return libnlError(rc, "connect rtnetlink socket");
    int one = 1;
    int fd = nl_socket_get_fd(sock_.get());
    // Best effort: without extended acks errors just lack the kernel's sentence.
    (void)setsockopt(fd, SOL_NETLINK, NETLINK_EXT_ACK, &one, sizeof one);
    (void)setsockopt(fd, SOL_NETLINK, NETLINK_CAP_ACK, &one, sizeof one);
    rc = nl_socket_modify_err_cb(sock_.get(), NL_CB_CUSTOM, onNetlinkError, &ack_);
    if (rc < 0) return libnlError(rc, "install netlink error callback");
    return okStatus();
  }

  Result<int> linkIndex(std::string_view device) override {
    TQ_ASSIGN_OR_RETURN(RtnlLinkPtr link, getLink(device));
    return rtnl_link_get_ifindex(link.get());
  }

  Result<uint32_t> linkMtu(std::string_view device) override {
    TQ_ASSIGN_OR_RETURN(RtnlLinkPtr link, getLink(device));
    return static_cast<uint32_t>(rtnl_link_get_mtu(link.get()));
  }

  Result<std::vector<QdiscInfo>> qdiscs(int ifindex) override {
    nl_cache* raw = nullptr;
    int rc = request([&] { return rtnl_qdisc_alloc_cache(sock_.get(), &raw); });
    if (rc < 0) return libnlError(rc, "dump qdiscs");
    NlCachePtr cache(raw);
    std::vector<QdiscInfo> out;
    for (nl_object* o = nl_cache_get_first(raw); o; o = nl_cache_get_next(o)) {
      auto* q = reinterpret_cast<rtnl_qdisc*>(o);
      if (rtnl_tc_get_ifindex(TC_CAST(q)) != ifindex) continue;
      QdiscInfo qi;
      qi.handle = rtnl_tc_get_handle(TC_CAST(q));
      qi.parent = rtnl_tc_get_parent(TC_CAST(q));
      const char* kind = rtnl_tc_get_kind(TC_CAST(q));
      qi.kind = kind ? kind : "";
      if (qi.kind == "htb") {
        qi.htb.handle = qi.handle;
        qi.htb.r2q = rtnl_htb_get_rate2quantum(q);
        // The kernel only uses the minor (TC_H_MAKE(major of qdisc, defcls)).
        qi.htb.default_minor = static_cast<uint16_t>(rtnl_htb_get_defcls(q) & 0xffff);
      }
      out.push_back(std::move(qi));
    }
    return out;
  }

  Result<std::vector<ClassInfo>> classes(int ifindex) override {
    nl_cache* raw = nullptr;
    int rc = request([&] { return rtnl_class_alloc_cache(sock_.get(), ifindex, &raw); });
    if (rc < 0) return libnlError(rc, "dump classes");
    NlCachePtr cache(raw);
    std::vector<ClassInfo> out;
    for (nl_object* o = nl_cache_get_first(raw); o; o = nl_cache_get_next(o)) {
      auto* c = reinterpret_cast<rtnl_class*>(o);
      rtnl_tc* tc = TC_CAST(c);
      ClassInfo ci;
      const char* kind = rtnl_tc_get_kind(tc);
      ci.kind = kind ? kind : "";
      ci.htb.classid = rtnl_tc_get_handle(tc);
      ci.htb.parent = rtnl_tc_get_parent(tc);
      if (ci.htb.parent == TC_H_ROOT) ci.htb.parent = makeHandle(handleMajor(ci.htb.classid), 0);
      if (ci.kind == "htb") {
        uint64_t v = 0;
        if (rtnl_htb_get_rate64(c, &v) == 0) ci.htb.rate = v;
        if (rtnl_htb_get_ceil64(c, &v) == 0) ci.htb.ceil = v;
        ci.htb.burst = rtnl_htb_get_rbuffer(c);
        ci.htb.cburst = rtnl_htb_get_cbuffer(c);
        ci.htb.quantum = rtnl_htb_get_quantum(c);
        ci.htb.prio = rtnl_htb_get_prio(c);
        int level = rtnl_htb_get_level(c);
        ci.level = level > 0 ? static_cast<uint32_t>(level) : 0;
      }
      ci.stats.bytes = rtnl_tc_get_stat(tc, RTNL_TC_BYTES);
      ci.stats.packets = rtnl_tc_get_stat(tc, RTNL_TC_PACKETS);
      ci.stats.drops = rtnl_tc_get_stat(tc, RTNL_TC_DROPS);
      ci.stats.overlimits = rtnl_tc_get_stat(tc, RTNL_TC_OVERLIMITS);
      out.push_back(std::move(ci));
    }
    return out;
  }

  Result<std::vector<FilterInfo>> filters(int ifindex, uint32_t parent) override {
    nl_cache* raw = nullptr;
    int rc = request([&] { return rtnl_cls_alloc_cache(sock_.get(), ifindex, parent, &raw); });
    if (rc < 0) return libnlError(rc, "dump filters of " + formatHandle(parent));
    NlCachePtr cache(raw);
    std::vector<FilterInfo> out;
    for (nl_object* o = nl_cache_get_first(raw); o; o = nl_cache_get_next(o)) {
      auto* f = reinterpret_cast<rtnl_cls*>(o);
      FilterInfo fi;
      fi.parent = parent;
      const char* kind = rtnl_tc_get_kind(TC_CAST(f));
      fi.kind = kind ? kind : "";
      fi.u32.pref = rtnl_cls_get_prio(f);
      fi.u32.protocol = rtnl_cls_get_protocol(f);
      fi.u32.handle = rtnl_tc_get_handle(TC_CAST(f));
      if (fi.kind == "u32") {
        fi.u32_table = u32Node(fi.u32.handle) == 0;
        uint32_t classid = 0;
        if (rtnl_u32_get_classid(f, &classid) == 0) fi.u32.classid = classid;
        for (int i = 0; i < 256; ++i) {
          uint32_t val = 0, mask = 0;
          int off = 0, offmask = 0;
          if (rtnl_u32_get_key(f, static_cast<uint8_t>(i), &val, &mask, &off, &offmask) < 0) break;
          fi.u32.keys.push_back(U32Key{ntohl(val), ntohl(mask), off, offmask});
        }
      }
      out.push_back(std::move(fi));
    }
    return out;
  }

  Status createRoot(int ifindex, const HtbRoot& root) override {
    RtnlQdiscPtr q(rtnl_qdisc_alloc());
    if (!q) return resourceExhausted("rtnl_qdisc_alloc failed");
    rtnl_tc* tc = TC_CAST(q.get());
    rtnl_tc_set_ifindex(tc, ifindex);
    rtnl_tc_set_parent(tc, TC_H_ROOT);
    rtnl_tc_set_handle(tc, root.handle);
    TQ_RETURN_IF_ERROR(setKind(tc, "htb"));
    rtnl_htb_set_defcls(q.get(), root.default_minor);
    rtnl_htb_set_rate2quantum(q.get(), root.r2q);
    return write([&] { return rtnl_qdisc_add(sock_.get(), q.get(), NLM_F_CREATE | NLM_F_EXCL); });
  }

  Status deleteRoot(int ifindex, uint32_t handle) override {
    RtnlQdiscPtr q(rtnl_qdisc_alloc());
    if (!q) return resourceExhausted("rtnl_qdisc_alloc failed");
    rtnl_tc* tc = TC_CAST(q.get());
    rtnl_tc_set_ifindex(tc, ifindex);
    rtnl_tc_set_parent(tc, TC_H_ROOT);
    rtnl_tc_set_handle(tc, handle);
    return write([&] { return rtnl_qdisc_delete(sock_.get(), q.get()); });
  }

  Status createClass(int ifindex, const HtbClass& cls) override {
    return writeClass(ifindex, cls, NLM_F_CREATE | NLM_F_EXCL);
  }
  Status changeClass(int ifindex, const HtbClass& cls) override {
    return writeClass(ifindex, cls, 0);
  }

  Status deleteClass(int ifindex, uint32_t classid) override {
    RtnlClassPtr c(rtnl_class_alloc());
    if (!c) return resourceExhausted("rtnl_class_alloc failed");
    rtnl_tc_set_ifindex(TC_CAST(c.get()), ifindex);
    rtnl_tc_set_handle(TC_CAST(c.get()), classid);
    return write([&] { return rtnl_class_delete(sock_.get(), c.get()); });
  }

  Status createFilter(int ifindex, uint32_t parent, const U32Filter& filter) override {
    TQ_ASSIGN_OR_RETURN(RtnlClsPtr f, buildFilter(ifindex, parent, filter));
    return write([&] { return rtnl_cls_add(sock_.get(), f.get(), NLM_F_CREATE | NLM_F_EXCL); });
  }

  Status changeFilter(int ifindex, uint32_t parent, const U32Filter& filter) override {
    TQ_ASSIGN_OR_RETURN(RtnlClsPtr f, buildFilter(ifindex, parent, filter));
    // NLM_F_REPLACE without NLM_F_CREATE: the kernel changes an existing filter or says ENOENT.
    return write([&] { return rtnl_cls_change(sock_.get(), f.get(), 0); });
  }

  Status deleteFilter(int ifindex, uint32_t parent, const FilterRef& ref) override {
    RtnlClsPtr f(rtnl_cls_alloc());
    if (!f) return resourceExhausted("rtnl_cls_alloc failed");
    rtnl_tc* tc = TC_CAST(f.get());
    rtnl_tc_set_ifindex(tc, ifindex);
    rtnl_tc_set_parent(tc, parent);
    rtnl_tc_set_handle(tc, ref.handle);
    if (!ref.kind.empty()) TQ_RETURN_IF_ERROR(setKind(tc, ref.kind));
    rtnl_cls_set_prio(f.get(), ref.pref);
    rtnl_cls_set_protocol(f.get(), ref.protocol);
    return write([&] { return rtnl_cls_delete(sock_.get(), f.get(), 0); });
  }

 private:
  struct RtnlLinkDeleter {
    void operator()(rtnl_link* p) const noexcept { rtnl_link_put(p); }
  };
  using RtnlLinkPtr = std::unique_ptr<rtnl_link, RtnlLinkDeleter>;

  Result<RtnlLinkPtr> getLink(std::string_view device) {
    rtnl_link* link = nullptr;
    std::string name(device);
    int rc = request([&] { return rtnl_link_get_kernel(sock_.get(), 0, name.c_str(), &link); });
    if (rc < 0) {
      if (ack_.error == ENODEV || rc == -NLE_OBJ_NOTFOUND || rc == -NLE_NODEV)
        return notFound("no such device \"" + name + "\"");
      return libnlError(rc, "look up device \"" + name + "\"");
    }
    return RtnlLinkPtr(link);
  }

  // Runs one libnl request with a fresh capture of the kernel's answer.
  template <typename F>
  int request(F&& f) {
    ack_ = KernelAck{};
    return f();
  }

  template <typename F>
  Status write(F&& f) {
    int rc = request(std::forward<F>(f));
    return rc < 0 ? libnlError(rc, "") : okStatus();
  }

  // "Invalid input data or parameter (EINVAL); kernel: <extended ack>", with a code from errno.
  Status libnlError(int rc, std::string_view what) const {
    std::string m(what);
    if (!m.empty()) m += ": ";
    m += nl_geterror(rc);
    StatusCode code = StatusCode::kInternal;
    if (ack_.error != 0) {
      const char* name = strerrorname_np(ack_.error);
      m += std::string(" (") + (name ? name : std::to_string(ack_.error).c_str()) + ")";
      code = errnoStatus(ack_.error, "").code();
    } else if (rc == -NLE_PERM) {
      code = StatusCode::kPermissionDenied;
    } else if (rc == -NLE_OBJ_NOTFOUND || rc == -NLE_NODEV) {
      code = StatusCode::kNotFound;
    }
    if (!ack_.message.empty()) m += "; kernel: " + ack_.message;
    return Status(code, std::move(m));
  }

  static Status setKind(rtnl_tc* tc, const std::string& kind) {
    int rc = rtnl_tc_set_kind(tc, kind.c_str());
    if (rc < 0) return internalError("libnl cannot set kind \"" + kind + "\": " + nl_geterror(rc));
    return okStatus();
  }

  Status writeClass(int ifindex, const HtbClass& cls, int flags) {
    RtnlClassPtr c(rtnl_class_alloc());
    if (!c) return resourceExhausted("rtnl_class_alloc failed");
    rtnl_tc* tc = TC_CAST(c.get());
    rtnl_tc_set_ifindex(tc, ifindex);
    rtnl_tc_set_parent(tc, cls.parent);
    rtnl_tc_set_handle(tc, cls.classid);
    TQ_RETURN_IF_ERROR(setKind(tc, "htb"));
    rtnl_htb_set_rate64(c.get(), cls.rate);
    rtnl_htb_set_ceil64(c.get(), cls.ceil);
    rtnl_htb_set_rbuffer(c.get(), cls.burst);
    rtnl_htb_set_cbuffer(c.get(), cls.cburst);
    rtnl_htb_set_quantum(c.get(), cls.quantum);
    rtnl_htb_set_prio(c.get(), cls.prio);
    return write([&] { return rtnl_class_add(sock_.get(), c.get(), flags); });
  }

  Result<RtnlClsPtr> buildFilter(int ifindex, uint32_t parent, const U32Filter& filter) {
    RtnlClsPtr f(rtnl_cls_alloc());
    if (!f) return resourceExhausted("rtnl_cls_alloc failed");
    rtnl_tc* tc = TC_CAST(f.get());
    rtnl_tc_set_ifindex(tc, ifindex);
    rtnl_tc_set_parent(tc, parent);
    rtnl_tc_set_handle(tc, filter.handle);
    TQ_RETURN_IF_ERROR(setKind(tc, "u32"));
    rtnl_cls_set_prio(f.get(), filter.pref);
    rtnl_cls_set_protocol(f.get(), filter.protocol);
    for (const U32Key& k : filter.keys) {
      int rc = rtnl_u32_add_key(f.get(), htonl(k.value), htonl(k.mask), k.offset, k.offmask);
      if (rc < 0) return internalError(std::string("libnl cannot add u32 key: ") + nl_geterror(rc));
    }
    rtnl_u32_set_classid(f.get(), filter.classid);
    rtnl_u32_set_cls_terminal(f.get());
    return f;
  }

  NlSockPtr sock_;
  KernelAck ack_;
};

}  // namespace

Result<std::unique_ptr<TcNetlink>> openTcNetlink(const NetlinkOptions& options) {
  auto nl = std::make_unique<LibnlTcNetlink>();
  if (options.netns.empty()) {
    TQ_RETURN_IF_ERROR(nl->open());
  } else {
    TQ_ASSIGN_OR_RETURN(ScopedNetns inside, ScopedNetns::enter(options.netns));
    TQ_RETURN_IF_ERROR_CTX(nl->open(), "in network namespace " + options.netns);
  }
  return std::unique_ptr<TcNetlink>(std::move(nl));
}

}  // namespace tq::tc
