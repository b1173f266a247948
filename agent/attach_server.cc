#include "agent/attach_server.h"

#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/clock.h"
#include "common/file_util.h"
#include "common/log.h"
#include "common/thread_annotations.h"

namespace tq::agent {
namespace {

constexpr uint64_t kMaxExtraBytes = 4096;  // a peer sending more after its request is closed
constexpr int kAcceptsPerWake = 64;        // per listener per loop turn: others get their turn
constexpr uint32_t kLogsPerSecond = 5;     // bad-input lines per socket per second

// A file's group that does not matter (its mode gives the group nothing): left as the kernel
// made it. Changing a group to one the agent is not in needs CAP_CHOWN, which the agent holds
// for exactly one thing: giving a tenant's directory and socket its unixGroup.
constexpr gid_t kAnyGroup = static_cast<gid_t>(-1);

// chown of `path` (lchown: never through a symlink) to the agent and `group`, unless it has them.
Status own(const std::string& path, const struct stat& st, gid_t group) {
  if (st.st_uid == ::geteuid() && (group == kAnyGroup || st.st_gid == group)) return okStatus();
  if (::lchown(path.c_str(), ::geteuid(), group) == 0) return okStatus();
  const int err = errno;
  return errnoStatus(
      err, "chown " + path +
               (group == kAnyGroup ? std::string() : " to group " + std::to_string(group)) +
               (err == EPERM ? " (giving a tenant's directory its unixGroup needs "
                               "CAP_CHOWN)"
                             : ""));
}

// A directory of the agent's: root-owned, `group`, `mode`, and really a directory (lstat: a
// symlink planted there is refused).
Status ownDir(const std::string& path, gid_t group, mode_t mode) {
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) return errnoStatus("mkdir " + path);
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return errnoStatus("lstat " + path);
  if (!S_ISDIR(st.st_mode)) return failedPrecondition(path + " exists and is not a directory");
  TQ_RETURN_IF_ERROR(own(path, st, group));
  if (::chmod(path.c_str(), mode) != 0) return errnoStatus("chmod " + path);
  return okStatus();
}

std::vector<gid_t> peerGroups(int fd) {
  std::vector<gid_t> groups(64);
  socklen_t len = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &len) != 0) {
    if (errno != ERANGE) return {};
    groups.resize(len / sizeof(gid_t) + 1);
    len = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &len) != 0) return {};
  }
  groups.resize(len / sizeof(gid_t));
  return groups;
}

// The executable `pid` runs now (device and inode of /proc/PID/exe's target); nullopt when it
// cannot be told (the process is gone, or /proc hides it).
std::optional<std::pair<dev_t, ino_t>> imageOf(pid_t pid) {
  struct stat st {};
  if (::stat(("/proc/" + std::to_string(pid) + "/exe").c_str(), &st) != 0) return std::nullopt;
  return std::pair{st.st_dev, st.st_ino};
}

// One directory on the way to the run directory (lstat'ed `st`): see checkTrustedRunDir.
Status checkTrustedComponent(const std::string& path, const struct stat& st, bool last) {
  const uid_t me = ::geteuid();
  if (st.st_uid != 0 && st.st_uid != me) {
    return failedPrecondition(path + " is owned by uid " + std::to_string(st.st_uid) +
                              ", neither root nor the agent: whoever owns it can replace the "
                              "tenant sockets under it");
  }
  if (S_ISLNK(st.st_mode)) return okStatus();  // its target is checked on the real path
  if (!S_ISDIR(st.st_mode)) return failedPrecondition(path + " is not a directory");
  const bool others_write = (st.st_mode & (S_IWGRP | S_IWOTH)) != 0;
  // A sticky directory (/tmp) lets others write but not rename or remove what they do not
  // own, so the next component, checked in turn, cannot be swapped. The run directory itself
  // must not be writable by anyone else at all.
  if (others_write && (last || (st.st_mode & S_ISVTX) == 0)) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return failedPrecondition(path + " (mode " + mode + ") is writable by " +
                              ((st.st_mode & S_IWOTH) ? "every user" : "its group") +
                              ": others could replace the tenant sockets under it");
  }
  return okStatus();
}

}  // namespace

Status checkTrustedRunDir(const std::string& run_dir) {
  std::vector<std::string> paths = {run_dir};
  if (char* real = ::realpath(run_dir.c_str(), nullptr)) {
    paths.emplace_back(real);
    std::free(real);
  } else {
    return errnoStatus("resolve the run directory " + run_dir);
  }
  for (const std::string& path : paths) {
    if (path.empty() || path[0] != '/') {
      return invalidArgument("run directory " + path + ": not an absolute path");
    }
    for (size_t end = 0; end != std::string::npos;) {
      end = path.find('/', end + 1);
      const std::string prefix = end == std::string::npos ? path : path.substr(0, end);
      const bool root = prefix.empty();
      struct stat st {};
      if (::lstat(root ? "/" : prefix.c_str(), &st) != 0) return errnoStatus("lstat " + prefix);
      TQ_RETURN_IF_ERROR(
          checkTrustedComponent(root ? "/" : prefix, st, end == std::string::npos)
              .withContext("run directory " + run_dir + " is not the agent's alone"));
    }
  }
  return okStatus();
}

Result<gid_t> resolveUnixGroup(const std::string& group) {
  gid_t gid = 0;
  const auto [ptr, ec] = std::from_chars(group.data(), group.data() + group.size(), gid);
  if (ec == std::errc() && ptr == group.data() + group.size() && !group.empty()) return gid;
  std::vector<char> buf(16384);
  struct group g {};
  struct group* out = nullptr;
  const int rc = ::getgrnam_r(group.c_str(), &g, buf.data(), buf.size(), &out);
  if (rc != 0) return errnoStatus(rc, "look up unixGroup " + group);
  if (out == nullptr) return notFound("unixGroup " + group + ": no such group on this node");
  return out->gr_gid;
}

Result<std::unique_ptr<AttachServer>> AttachServer::start(Options options, Clock& clock) {
  std::unique_ptr<AttachServer> s(new AttachServer(std::move(options), clock));
  s->wake_fd_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!s->wake_fd_.valid()) return errnoStatus("eventfd");
  TQ_RETURN_IF_ERROR(makeDirs(s->options_.run_dir, 0755));
  TQ_RETURN_IF_ERROR(checkTrustedRunDir(s->options_.run_dir));
  const std::string path = attach::nodeSocketPath(s->options_.run_dir);
  TQ_ASSIGN_OR_RETURN(Fd fd, s->listenAt(path, 0666, kAnyGroup));
  auto l = std::make_shared<Listener>();
  l->fd = std::move(fd);
  l->path = path;
  {
    MutexLock lock(s->mu_);  // (no other thread yet; the analysis wants it, and it is free)
    s->listeners_[""] = std::move(l);
  }
  s->thread_ = std::thread([p = s.get()] { p->run(); });
  s->clock_.subscribe(s.get());
  TQ_LOG(kInfo, "attach: node-wide socket %s (default tenant)", path.c_str());
  return s;
}

AttachServer::~AttachServer() {
  clock_.unsubscribe(this);
  stop_.store(true);
  wake();
  if (thread_.joinable()) thread_.join();
  MutexLock lock(mu_);
  for (auto& c : conns_) {
    if (c->attached) c->shm->releaseSlot(c->slot, c->peer.pid);
  }
  conns_.clear();
  for (auto& [tenant, l] : listeners_) ::unlink(l->path.c_str());
}

Result<Fd> AttachServer::listenAt(const std::string& path, uint32_t mode, gid_t group) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return invalidArgument(path + ": path too long for a Unix socket");
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size());
  Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return errnoStatus("socket for " + path);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return errnoStatus("remove stale " + path);
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    return errnoStatus("bind " + path);
  }
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return errnoStatus("lstat " + path);
  TQ_RETURN_IF_ERROR(own(path, st, group));
  if (::chmod(path.c_str(), mode) != 0) return errnoStatus("chmod " + path);
  if (::listen(fd.get(), 64) != 0) return errnoStatus("listen on " + path);
  return fd;
}

Status AttachServer::serve(const std::string& tenant, std::shared_ptr<TenantShm> shm,
                           std::optional<gid_t> group) {
  if (!isDns1123Label(tenant)) return invalidArgument("tenant " + tenant + ": not a DNS label");
  {
    MutexLock lock(mu_);
    auto it = listeners_.find(tenant);
    if (it != listeners_.end() && it->second->group == group) {
      it->second->shm = std::move(shm);
      return okStatus();
    }
  }
  const std::string dir = attach::tenantDir(options_.run_dir, tenant);
  const gid_t gid = group.value_or(kAnyGroup);  // no group: 0700/0600, root alone
  TQ_RETURN_IF_ERROR(ownDir(attach::tenantsDir(options_.run_dir), kAnyGroup, 0755));
  // The directory closes first (0700), the socket is made, then the group may enter.
  TQ_RETURN_IF_ERROR(ownDir(dir, gid, 0700));
  const std::string path = attach::tenantSocketPath(options_.run_dir, tenant);
  TQ_ASSIGN_OR_RETURN(Fd fd, listenAt(path, group ? 0660 : 0600, gid));
  TQ_RETURN_IF_ERROR(ownDir(dir, gid, group ? 0750 : 0700));
  auto l = std::make_shared<Listener>();
  l->fd = std::move(fd);
  l->tenant = tenant;
  l->path = path;
  l->shm = std::move(shm);
  l->group = group;
  {
    MutexLock lock(mu_);
    auto& slot = listeners_[tenant];
    if (slot) retired_.push_back(std::move(slot));
    slot = std::move(l);
  }
  wake();
  TQ_LOG(kInfo, "attach: tenant %s at %s (%s)", tenant.c_str(), path.c_str(),
         group ? ("group " + std::to_string(*group) + ", 0750").c_str() : "root only, 0700");
  return okStatus();
}

void AttachServer::unserve(const std::string& tenant) {
  std::shared_ptr<Listener> l;
  {
    MutexLock lock(mu_);
    auto it = listeners_.find(tenant);
    if (it == listeners_.end() || tenant.empty()) return;
    l = it->second;
    retired_.push_back(it->second);
    listeners_.erase(it);
  }
  wake();
  ::unlink(l->path.c_str());
  ::rmdir(attach::tenantDir(options_.run_dir, tenant).c_str());
  TQ_LOG(kInfo, "attach: tenant %s no longer served (%s removed)", tenant.c_str(), l->path.c_str());
}

void AttachServer::serveDefault(std::shared_ptr<DefaultTenant> tenant) {
  MutexLock lock(mu_);
  listeners_.at("")->default_tenant = std::move(tenant);
}

std::vector<Attachment> AttachServer::attachments() const {
  MutexLock lock(mu_);
  std::vector<Attachment> out;
  bool gone = false;
  for (const auto& c : conns_) {
    if (!c->attached) continue;
    if (c->image && imageOf(c->peer.pid) != c->image) {
      // Detached now (the slot is free for the next caller's view), closed by the thread.
      c->shm->releaseSlot(c->slot, c->peer.pid);
      c->attached = false;
      c->image_gone = true;
      gone = true;
      continue;
    }
    out.push_back({c->shm->tenant(), c->slot.value_or(shm::kMaxSlots), c->peer});
  }
  if (gone) wake();
  return out;
}

void AttachServer::wake() const {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_.get(), &one, sizeof(one));
}

std::string AttachServer::who(const Conn& c) const {
  const std::string where =
      c.listener->tenant.empty() ? "the node-wide socket" : "tenant " + c.listener->tenant;
  return where + ": pid " + std::to_string(c.peer.pid) + " (uid " + std::to_string(c.peer.uid) +
         ", gid " + std::to_string(c.peer.gid) + ")";
}

void AttachServer::run() {
  pthread_setname_np(pthread_self(), "tq-attach");
  std::vector<pollfd> fds;
  std::vector<std::shared_ptr<Listener>> polled_listeners;
  std::vector<Conn*> polled_conns;
  while (!stop_.load()) {
    int timeout_ms = -1;
    {
      MutexLock lock(mu_);
      retired_.clear();  // not in the last poll set any more
      fds.assign(1, pollfd{wake_fd_.get(), POLLIN, 0});
      polled_listeners.clear();
      polled_conns.clear();
      for (auto& [tenant, l] : listeners_) {
        fds.push_back({l->fd.get(), POLLIN, 0});
        polled_listeners.push_back(l);
      }
      const int64_t now = clock_.nowNs();
      for (auto& c : conns_) {
        fds.push_back({c->fd.get(), POLLIN, 0});
        polled_conns.push_back(c.get());
        if (!c->attached) {
          const int64_t ms = std::max<int64_t>(0, (c->deadline_ns - now) / 1'000'000 + 1);
          timeout_ms =
              timeout_ms < 0 ? static_cast<int>(ms) : std::min(timeout_ms, static_cast<int>(ms));
        }
      }
    }
    ::poll(fds.data(), fds.size(), timeout_ms);
    if (stop_.load()) break;
    uint64_t drained = 0;
    [[maybe_unused]] ssize_t n = ::read(wake_fd_.get(), &drained, sizeof(drained));

    MutexLock lock(mu_);
    const int64_t now = clock_.nowNs();
    for (size_t i = 0; i < polled_listeners.size(); ++i) {
      if (fds[1 + i].revents & POLLIN) acceptFrom(polled_listeners[i], now);
    }
    std::vector<Conn*> done;
    for (size_t i = 0; i < polled_conns.size(); ++i) {
      Conn* c = polled_conns[i];
      const short ev = fds[1 + polled_listeners.size() + i].revents;
      if (c->evicted || c->image_gone) continue;  // closed below
      if (ev != 0) {
        if (!onReadable(c, now)) done.push_back(c);
      } else if (!c->attached && now >= c->deadline_ns) {
        badInput(*c, now,
                 "sent no complete request in " +
                     std::to_string(options_.request_timeout_ns / 1'000'000) + " ms; closed");
        timed_out_++;
        done.push_back(c);
      }
    }
    for (const auto& c : conns_) {
      if (std::find(done.begin(), done.end(), c.get()) != done.end()) continue;
      if (c->evicted) {
        done.push_back(c.get());
      } else if (c->image_gone) {
        logLimited(*c, now, true,
                   "exec'd another program since it attached (/proc/" +
                       std::to_string(c->peer.pid) +
                       "/exe changed): no longer governed, attachment closed");
        done.push_back(c.get());
      }
    }
    for (Conn* c : done) close(c);
  }
}

// mu_ held.
void AttachServer::acceptFrom(const std::shared_ptr<Listener>& l, int64_t now) {
  for (int i = 0; i < kAcceptsPerWake; ++i) {
    Fd fd(::accept4(l->fd.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd.valid()) return;  // EAGAIN, or a connection that went away meanwhile
    auto c = std::make_unique<Conn>();
    ucred cred{};
    socklen_t len = sizeof(cred);
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
      TQ_LOG(kWarn, "attach: SO_PEERCRED on %s: %s; closed", l->path.c_str(), std::strerror(errno));
      continue;
    }
    c->fd = std::move(fd);
    c->listener = l;
    c->peer = {cred.pid, cred.uid, cred.gid};
    c->groups = peerGroups(c->fd.get());
    c->deadline_ns = now + options_.request_timeout_ns;
    if (l->tenant.empty()) {
      if (!admitNodeWide(c.get(), now)) continue;  // answered not held: closes it
      l->per_uid[c->peer.uid]++;
    } else if (l->connections >= options_.max_connections_per_socket) {
      badInput(
          *c, now,
          "refused: " + std::to_string(l->connections) + " connections on this socket already");
      continue;  // closes it; the peer sees EOF and falls back
    }
    l->connections++;
    conns_.push_back(std::move(c));
  }
}

// mu_ held.
bool AttachServer::admitNodeWide(Conn* c, int64_t now) {
  Listener& l = *c->listener;
  const uid_t uid = c->peer.uid;
  const uint32_t mine = l.per_uid.count(uid) != 0 ? l.per_uid.at(uid) : 0;
  if (mine >= options_.max_connections_per_uid) {
    answerNotHeld(c, now,
                  "uid " + std::to_string(uid) + " holds " + std::to_string(mine) +
                      " connections of the node-wide socket, the most one uid may");
    return false;
  }
  if (l.connections < options_.max_connections_per_socket) return true;
  // Full: the uid that holds the most gives one up, if it holds at least two more than this
  // uid (so two uids never take a place from each other in turn).
  uid_t most = uid;
  uint32_t most_n = 0;
  for (const auto& [u, n] : l.per_uid) {
    if (n > most_n) most = u, most_n = n;
  }
  if (most_n < mine + 2) {
    answerNotHeld(c, now,
                  "the node-wide socket holds " + std::to_string(l.connections) +
                      " connections, its bound, and no uid holds more than its share");
    return false;
  }
  // Its connection still waiting for a request, else the one attached last: a long-running
  // process keeps its place.
  Conn* victim = nullptr;
  for (auto& o : conns_) {
    if (o->listener.get() != &l || o->peer.uid != most || o->evicted) continue;
    if (victim == nullptr ||
        (victim->attached && (!o->attached || o->attached_ns > victim->attached_ns))) {
      victim = o.get();
    }
  }
  if (victim == nullptr) return true;  // counted but gone meanwhile: there is room
  victim->evicted = true;
  l.connections--;
  if (--l.per_uid[most] == 0) l.per_uid.erase(most);
  logLimited(*victim, now, true,
             "closed: uid " + std::to_string(most) + " holds " + std::to_string(most_n) +
                 " connections of the full node-wide socket; its place goes to uid " +
                 std::to_string(uid));
  return true;
}

// mu_ held.
void AttachServer::answerNotHeld(Conn* c, int64_t now, const std::string& why) {
  Listener& l = *c->listener;
  if (!l.default_tenant) {
    badInput(*c, now, "refused: " + why);
    return;
  }
  auto shm = l.default_tenant->shardFor(c->peer.uid);
  if (!shm.ok()) {
    badInput(*c, now, "refused: " + why + "; " + shm.status().message());
    return;
  }
  attach::Reply reply;
  reply.status = attach::ReplyStatus::kAttached;
  reply.slot = shm::kMaxSlots;
  reply.held = false;
  reply.tenant = (*shm)->tenant();
  reply.reason = why;
  Status s = attach::sendWithFds(c->fd.get(), attach::encodeReply(reply),
                                 {(*shm)->paramsFd(), (*shm)->sharedFd()});
  replies_++;
  logLimited(*c, now, true,
             "attached to tenant " + reply.tenant + " without a slot and not held (" + why + ")" +
                 (s.ok() ? "" : ": " + s.message()));
}

// mu_ held. False: close the connection.
bool AttachServer::onReadable(Conn* c, int64_t now) {
  std::vector<Fd> junk;  // fds a peer sends us are closed, never used
  if (c->attached) {
    uint8_t scratch[256];
    auto n = attach::recvWithFds(c->fd.get(), scratch, sizeof(scratch), &junk);
    if (!n.ok()) return false;  // closed (the process exited) or broken
    if (*n == 0) return true;
    c->extra_bytes += *n;
    if (c->extra_bytes > kMaxExtraBytes || !junk.empty()) {
      badInput(*c, now,
               "sent " + std::to_string(c->extra_bytes) + " bytes" +
                   (junk.empty() ? "" : " and file descriptors") +
                   " after attaching; closed (its slot is released)");
      return false;
    }
    return true;
  }
  auto n = attach::recvWithFds(c->fd.get(), c->buf + c->got, sizeof(c->buf) - c->got, &junk);
  if (!n.ok()) {
    TQ_LOG(kDebug, "attach: %s: %s before its request", who(*c).c_str(),
           n.status().message().c_str());
    return false;
  }
  if (!junk.empty()) {
    refuse(c, now, attach::ReplyStatus::kBadRequest, "sent file descriptors");
    return false;
  }
  c->got += *n;
  if (c->got < sizeof(c->buf)) return true;
  return onRequest(c, now);
}

// mu_ held.
bool AttachServer::onRequest(Conn* c, int64_t now) {
  auto req = attach::parseRequest(c->buf, c->got);
  if (!req.ok()) {
    refuse(c, now, attach::ReplyStatus::kBadRequest, req.status().message());
    return false;
  }
  Listener& l = *c->listener;
  std::shared_ptr<TenantShm> shm = l.shm;
  if (l.tenant.empty() && l.default_tenant) {
    auto got = l.default_tenant->shardFor(c->peer.uid);
    if (!got.ok()) {
      refuse(c, now, attach::ReplyStatus::kBusy, got.status().message());
      return false;
    }
    shm = std::move(got).value();
  }
  if (!shm) {
    refuse(c, now, attach::ReplyStatus::kBusy, "the agent has no policy for this socket yet");
    return false;
  }
  if (l.group && c->peer.uid != 0 && c->peer.gid != *l.group &&
      std::find(c->groups.begin(), c->groups.end(), *l.group) == c->groups.end()) {
    refuse(c, now, attach::ReplyStatus::kDenied,
           "not in tenant " + l.tenant + "'s group " + std::to_string(*l.group));
    return false;
  }
  c->shm = std::move(shm);
  c->slot = c->shm->acquireSlot(c->peer);
  attach::Reply reply;
  reply.status = attach::ReplyStatus::kAttached;
  reply.slot = c->slot.value_or(shm::kMaxSlots);
  reply.tenant = c->shm->tenant();
  Status s = attach::sendWithFds(c->fd.get(), attach::encodeReply(reply),
                                 {c->shm->paramsFd(), c->shm->sharedFd()});
  if (!s.ok()) {
    c->shm->releaseSlot(c->slot, c->peer.pid);
    TQ_LOG(kWarn, "attach: %s: reply: %s; closed", who(*c).c_str(), s.message().c_str());
    return false;
  }
  c->attached = true;
  replies_++;
  c->attached_ns = now;
  c->image = imageOf(c->peer.pid);
  const std::string& wanted = req->wanted_tenant;
  const std::string slot =
      c->slot ? "slot " + std::to_string(*c->slot)
              : "no slot (all " + std::to_string(shm::kMaxSlots) +
                    " taken: it paces with the shared bucket, its usage is not counted)";
  if (!wanted.empty() && wanted != reply.tenant) {
    logLimited(*c, now, true,
               "asked for tenant " + wanted + "; attached to tenant " + reply.tenant +
                   " (the socket it could reach decides), " + slot);
  } else {
    logLimited(*c, now, !c->slot, "attached to tenant " + reply.tenant + ", " + slot);
  }
  return true;
}

// mu_ held.
void AttachServer::refuse(Conn* c, int64_t now, attach::ReplyStatus status,
                          const std::string& why) {
  badInput(*c, now, "refused: " + why);
  attach::Reply reply;
  reply.status = status;
  reply.reason = why;
  attach::sendWithFds(c->fd.get(), attach::encodeReply(reply), {}).ignore();
  replies_++;
}

// mu_ held. Logged naming the socket's tenant, the peer's pid, uid and gid, and
// what was wrong; at most kLogsPerSecond lines per socket per second, so a tenant cannot flood
// the log (the rest are counted in one line per second).
void AttachServer::badInput(const Conn& c, int64_t now, const std::string& what) {
  logLimited(c, now, true, what);
}

// mu_ held.
void AttachServer::logLimited(const Conn& c, int64_t now, bool warn, const std::string& what) {
  Listener& l = *c.listener;
  if (now - l.log_window_ns >= 1'000'000'000) {
    if (l.suppressed != 0) {
      TQ_LOG(kWarn, "attach: %s: %llu more lines in the last second, not logged",
             l.tenant.empty() ? "the node-wide socket" : ("tenant " + l.tenant).c_str(),
             static_cast<unsigned long long>(l.suppressed));
    }
    l.log_window_ns = now;
    l.logged = 0;
    l.suppressed = 0;
  }
  if (l.logged >= kLogsPerSecond) {
    l.suppressed++;
    return;
  }
  l.logged++;
  if (warn) {
    TQ_LOG(kWarn, "attach: %s %s", who(c).c_str(), what.c_str());
  } else {
    TQ_LOG(kInfo, "attach: %s %s", who(c).c_str(), what.c_str());
  }
}

// mu_ held.
void AttachServer::close(Conn* c) {
  if (c->attached) {
    c->shm->releaseSlot(c->slot, c->peer.pid);
    TQ_LOG(kDebug, "attach: %s detached from tenant %s", who(*c).c_str(), c->shm->tenant().c_str());
  }
  if (!c->evicted) {  // an evicted one was uncounted when it was chosen
    Listener& l = *c->listener;
    l.connections--;
    if (l.tenant.empty()) {
      auto it = l.per_uid.find(c->peer.uid);
      if (it != l.per_uid.end() && --it->second == 0) l.per_uid.erase(it);
    }
  }
  auto it = std::find_if(conns_.begin(), conns_.end(),
                         [&](const std::unique_ptr<Conn>& p) { return p.get() == c; });
  if (it != conns_.end()) conns_.erase(it);
}

}  // namespace tq::agent
