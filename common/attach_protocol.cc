#include "common/attach_protocol.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <ctime>

#include "common/file_util.h"
#include "common/tenant_shm.h"

namespace tq::attach {
namespace {

constexpr std::string_view kTrafficClassesHeader = "tenantqos-traffic-classes 1";
constexpr int kMaxFds = 2;

template <typename T>
void put(std::string* out, size_t off, T v) {
  std::memcpy(out->data() + off, &v, sizeof(v));
}
template <typename T>
T get(const uint8_t* in, size_t off) {
  T v;
  std::memcpy(&v, in + off, sizeof(v));
  return v;
}
void putName(std::string* out, size_t off, size_t cap, std::string_view s) {
  std::memcpy(out->data() + off, s.data(), std::min(s.size(), cap - 1));
}
// A NUL-terminated string in a fixed field; nullopt when there is no NUL.
std::optional<std::string> getName(const uint8_t* in, size_t off, size_t cap) {
  const auto* p = reinterpret_cast<const char*>(in + off);
  const size_t n = strnlen(p, cap);
  if (n == cap) return std::nullopt;
  return std::string(p, n);
}

}  // namespace

std::string encodeRequest(const Request& r) {
  std::string out(kRequestBytes, '\0');
  put<uint64_t>(&out, 0, kRequestMagic);
  put<uint32_t>(&out, 8, kVersion);
  putName(&out, 16, kNameBytes, r.wanted_tenant);
  return out;
}

Result<Request> parseRequest(const uint8_t* data, size_t size) {
  if (size != kRequestBytes) {
    return invalidArgument("attach request of " + std::to_string(size) + " bytes, not " +
                           std::to_string(kRequestBytes));
  }
  if (get<uint64_t>(data, 0) != kRequestMagic) return invalidArgument("attach request: bad magic");
  if (get<uint32_t>(data, 8) != kVersion) {
    return invalidArgument("attach request: protocol version " +
                           std::to_string(get<uint32_t>(data, 8)) + ", this agent speaks " +
                           std::to_string(kVersion));
  }
  std::optional<std::string> name = getName(data, 16, kNameBytes);
  if (!name || (!name->empty() && !isDns1123Label(*name))) {
    return invalidArgument("attach request: the wanted tenant is not a DNS-1123 label");
  }
  return Request{std::move(*name)};
}

std::string encodeReply(const Reply& r) {
  std::string out(kReplyBytes, '\0');
  put<uint64_t>(&out, 0, kReplyMagic);
  put<uint32_t>(&out, 8, kVersion);
  put<uint32_t>(&out, 12, static_cast<uint32_t>(r.status));
  put<uint32_t>(&out, 16, r.slot);
  put<uint32_t>(&out, 20, r.held ? 0u : kReplyNotHeld);
  putName(&out, 24, kNameBytes, r.tenant);
  putName(&out, 88, kReasonBytes, r.reason);
  return out;
}

Result<Reply> parseReply(const uint8_t* data, size_t size) {
  if (size != kReplyBytes) {
    return invalidArgument("attach reply of " + std::to_string(size) + " bytes, not " +
                           std::to_string(kReplyBytes));
  }
  if (get<uint64_t>(data, 0) != kReplyMagic) return invalidArgument("attach reply: bad magic");
  if (get<uint32_t>(data, 8) != kVersion) {
    return invalidArgument("attach reply: protocol version " +
                           std::to_string(get<uint32_t>(data, 8)));
  }
  const uint32_t status = get<uint32_t>(data, 12);
  if (status > static_cast<uint32_t>(ReplyStatus::kBusy)) {
    return invalidArgument("attach reply: unknown status " + std::to_string(status));
  }
  Reply r;
  r.status = static_cast<ReplyStatus>(status);
  r.slot = get<uint32_t>(data, 16);
  r.held = (get<uint32_t>(data, 20) & kReplyNotHeld) == 0;
  std::optional<std::string> tenant = getName(data, 24, kNameBytes);
  std::optional<std::string> reason = getName(data, 88, kReasonBytes);
  if (!tenant || !reason) return invalidArgument("attach reply: unterminated text");
  if (r.status == ReplyStatus::kAttached && !isDns1123Label(*tenant)) {
    return invalidArgument("attach reply: the tenant is not a DNS-1123 label");
  }
  r.tenant = std::move(*tenant);
  // Printable ASCII only: the reason ends up in logs.
  for (char& c : *reason) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  r.reason = std::move(*reason);
  return r;
}

bool nodeIsGoverned(const std::string& run_dir) {
  struct stat st {};
  if (::stat(run_dir.c_str(), &st) == 0) return S_ISDIR(st.st_mode);
  return errno != ENOENT && errno != ENOTDIR;
}

std::string encodeTrafficClasses(const std::vector<std::pair<int, std::string>>& map) {
  std::string out = std::string(kTrafficClassesHeader) + "\n";
  for (const auto& [tc, tenant] : map) out += std::to_string(tc) + " " + tenant + "\n";
  return out;
}

std::optional<std::string> lookupTrafficClass(std::string_view text, int traffic_class) {
  size_t pos = text.find('\n');
  if (pos == std::string_view::npos || text.substr(0, pos) != kTrafficClassesHeader) {
    return std::nullopt;
  }
  while (pos < text.size()) {
    const size_t start = pos + 1;
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(start, end - start);
    pos = end;
    const size_t sp = line.find(' ');
    if (sp == std::string_view::npos) continue;
    int tc = 0;
    const auto [ptr, ec] = std::from_chars(line.data(), line.data() + sp, tc);
    if (ec != std::errc() || ptr != line.data() + sp || tc != traffic_class) continue;
    const std::string_view tenant = line.substr(sp + 1);
    if (isDns1123Label(tenant)) return std::string(tenant);
  }
  return std::nullopt;
}

std::optional<std::string> tenantForTrafficClass(const std::string& run_dir, int traffic_class) {
  auto text = readFile(trafficClassesPath(run_dir), 64 * 1024);
  if (!text.ok()) return std::nullopt;
  return lookupTrafficClass(*text, traffic_class);
}

Status sendWithFds(int sock, std::string_view data, const std::vector<int>& fds) {
  msghdr msg{};
  iovec iov{const_cast<char*>(data.data()), data.size()};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
  if (!fds.empty()) {
    if (fds.size() > kMaxFds) return invalidArgument("too many fds to send");
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  const ssize_t n = ::sendmsg(sock, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n < 0) return errnoStatus("sendmsg");
  if (static_cast<size_t>(n) != data.size()) {
    return unavailable("sendmsg: " + std::to_string(n) + " of " + std::to_string(data.size()) +
                       " bytes");
  }
  return okStatus();
}

Result<size_t> recvWithFds(int sock, uint8_t* buf, size_t size, std::vector<Fd>* fds) {
  msghdr msg{};
  iovec iov{buf, size};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  const ssize_t n = ::recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return size_t{0};
    return errnoStatus("recvmsg");
  }
  // Take ownership of every fd that arrived, even when the message is then refused.
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd = -1;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      fds->emplace_back(fd);
    }
  }
  if ((msg.msg_flags & MSG_CTRUNC) != 0) return dataLoss("recvmsg: control data truncated");
  if (n == 0) return unavailable("the peer closed the connection");
  return static_cast<size_t>(n);
}

// ---------------------------------------------------------------------------------------------

Result<std::unique_ptr<Attempt>> Attempt::start(const std::string& socket_path,
                                                const std::string& wanted_tenant, uid_t agent_uid) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof(addr.sun_path)) {
    return invalidArgument(socket_path + ": path too long for a Unix socket");
  }
  std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size());
  Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return errnoStatus("socket for " + socket_path);
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    // EAGAIN: the agent's backlog is full; like any other failure, try again later.
    return errnoStatus("connect to " + socket_path);
  }
  ucred peer{};
  socklen_t len = sizeof peer;
  if (::getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &peer, &len) != 0) {
    return errnoStatus("SO_PEERCRED of " + socket_path);
  }
  if (peer.uid != 0 && peer.uid != agent_uid) {
    return permissionDenied(socket_path + " is answered by pid " + std::to_string(peer.pid) +
                            " as uid " + std::to_string(peer.uid) + ", not the agent (uid 0" +
                            (agent_uid != 0 ? " or " + std::to_string(agent_uid) : "") +
                            ", TENANTQOS_AGENT_UID): not trusted");
  }
  Status sent = sendWithFds(fd.get(), encodeRequest({wanted_tenant}), {});
  // kUnavailable (EPIPE, ECONNRESET): the agent answered without reading (kReplyNotHeld) and
  // closed already; its reply is waiting to be read, or poll() reports the close.
  if (!sent.ok() && sent.code() != StatusCode::kUnavailable) {
    return sent.withContext("send the attach request to " + socket_path);
  }
  return std::unique_ptr<Attempt>(new Attempt(socket_path, std::move(fd)));
}

Result<std::optional<Attached>> Attempt::poll(int timeout_ms) {
  if (timeout_ms > 0) {
    pollfd p{fd_.get(), POLLIN, 0};
    ::poll(&p, 1, timeout_ms);
  }
  while (got_ < kReplyBytes) {
    auto n = recvWithFds(fd_.get(), buf_ + got_, kReplyBytes - got_, &fds_);
    if (!n.ok()) return n.status().withContext(path_);
    if (*n == 0) return std::optional<Attached>();
    got_ += *n;
  }
  TQ_ASSIGN_OR_RETURN(Reply r, parseReply(buf_, got_));
  if (r.status != ReplyStatus::kAttached) {
    return permissionDenied(path_ + ": the agent refused: " + r.reason);
  }
  if (fds_.size() != 2) {
    return invalidArgument(path_ + ": the agent sent " + std::to_string(fds_.size()) +
                           " file descriptors, not 2");
  }
  Attached a;
  a.conn = std::move(fd_);
  a.params_fd = std::move(fds_[0]);
  a.shared_fd = std::move(fds_[1]);
  a.slot = r.slot;
  a.tenant = std::move(r.tenant);
  a.held = r.held;
  if (!r.held) a.reason = std::move(r.reason);
  fds_.clear();
  return std::optional<Attached>(std::move(a));
}

Result<Attached> attachWithin(const std::string& socket_path, const std::string& wanted_tenant,
                              int timeout_ms, Clock& clock, uid_t agent_uid) {
  const int64_t deadline_ns = clock.nowNs() + int64_t{timeout_ms} * 1'000'000;
  TQ_ASSIGN_OR_RETURN(auto attempt, Attempt::start(socket_path, wanted_tenant, agent_uid));
  for (;;) {
    const int64_t left_ms = (deadline_ns - clock.nowNs()) / 1'000'000;
    const int slice = static_cast<int>(std::clamp<int64_t>(left_ms, 1, kAttachWaitSliceMs));
    TQ_ASSIGN_OR_RETURN(std::optional<Attached> got, attempt->poll(slice));
    if (got) return std::move(*got);
    if (clock.nowNs() >= deadline_ns) {
      return deadlineExceeded(socket_path + ": no reply in " + std::to_string(timeout_ms) + " ms");
    }
  }
}

}  // namespace tq::attach
