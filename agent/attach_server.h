// The agent's side of attaching (protocol and paths: common/attach_protocol.h): one listening
// Unix socket per tenant, in a root-owned directory whose group is the tenant's Unix group, and
// the node-wide socket of the default tenant. A process's tenant is the socket it could reach:
// the directory's permissions (or what a pod mounts) decide, then SO_PEERCRED/SO_PEERGROUPS are
// checked against the tenant's group. An accepted process gets its tenant's two memfds
// (SCM_RIGHTS) and a slot; the connection stays open and the slot is released when it closes.
//
// Every byte a peer sends is hostile: a fixed-size request read without blocking, a deadline for
// it, a cap on connections per socket, data after the request closes the connection. Every
// refusal is logged with the tenant, the peer's pid/uid/gid and what was wrong.
//
// The node-wide socket is every uid's (0666), so one uid must not be able to crowd out the
// others (issue 23 item 6): each uid attaches to a memory of its own (DefaultTenant's shard), at
// most max_connections_per_uid connections of one uid are held, and when the socket holds
// max_connections_per_socket a newcomer takes the place of a connection of the uid that holds
// the most, if that uid holds at least two more than the newcomer's. A connection beyond those
// bounds is still answered, with its uid's memory and no slot, and closed at once
// (attach::kReplyNotHeld): the refusal falls on the uid that holds too much, and its process
// paces within its uid's share of the default tenant, never at a rate of its own.
//
// Threads: one thread (tq-attach) runs a poll() loop and is the only one that accepts, reads,
// writes and closes sockets. serve/unserve/serveDefault/attachments are thread-safe (the
// reconcile thread calls them); they change the tables under a mutex and wake the thread.
// Time (the request deadline, the log limit's window) follows the injected Clock; a FakeClock
// that moves wakes the loop, so a test closes a silent peer by moving the clock, not by waiting.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "agent/default_tenant.h"
#include "common/attach_protocol.h"
#include "common/clock.h"
#include "common/fd.h"
#include "common/status.h"
#include "common/tenant_shm.h"
#include "common/thread_annotations.h"

namespace tq::agent {

// A policy's unixGroup (a numeric gid or a group name) on this node.
Result<gid_t> resolveUnixGroup(const std::string& group);

// kFailedPrecondition unless `run_dir` and every directory above it (as written and after
// resolving symlinks) is owned by root or the agent's uid and writable by no one else (a
// parent may be writable by others when sticky, as /tmp is). Whoever could rename an entry on
// that path could swap tenants/ and answer on a tenant's socket.
Status checkTrustedRunDir(const std::string& run_dir);

class AttachServer final : private ClockListener {
 public:
  struct Options {
    std::string run_dir;
    uint32_t max_connections_per_socket = 128;   // beyond: refused at once (node-wide: above)
    uint32_t max_connections_per_uid = 64;       // node-wide socket, one uid (= its slots)
    int64_t request_timeout_ns = 1'000'000'000;  // a peer that sends no request is closed
  };
  // Creates <run_dir>/agent.sock (0666) and starts the thread; refuses a run directory that is
  // not the agent's alone (checkTrustedRunDir). Processes that connect to it
  // before serveDefault() are refused ("no policy yet").
  static Result<std::unique_ptr<AttachServer>> start(Options options, Clock& clock = realClock());
  ~AttachServer();  // stops the thread, closes every connection, removes the sockets
  AttachServer(const AttachServer&) = delete;
  AttachServer& operator=(const AttachServer&) = delete;

  // Serves `tenant` at <run>/tenants/<tenant>/agent.sock: directory root:group 0750 (root:root
  // 0700 without a group), socket 0660/0600. Again with another shm or group: updates them
  // (the directory's group and mode too); connections already attached keep theirs.
  Status serve(const std::string& tenant, std::shared_ptr<TenantShm> shm,
               std::optional<gid_t> group);
  // Stops serving `tenant`: its socket and directory go; attached processes stay attached until
  // they close (they see the tenant's `deleted` flag).
  void unserve(const std::string& tenant);
  // The tenant the node-wide socket attaches to: each uid to its own shard of it.
  void serveDefault(std::shared_ptr<DefaultTenant> tenant);

  // Every attached process, its pid in the agent's pid namespace (thread-safe; the reconciler
  // publishes them so the ungoverned-QP scan tells governed from ungoverned processes). Checked
  // on every call: a process that exec'd another program since it attached (its
  // /proc/PID/exe is another file) is left out, and its connection is closed (slot released).
  std::vector<Attachment> attachments() const;

  // Replies sent so far (attached, not held or refused), and connections closed for want of a
  // complete request in time: what a test waits on instead of a sleep.
  uint64_t repliesSent() const { return replies_.load(); }
  uint64_t timedOut() const { return timed_out_.load(); }

 private:
  struct Listener {
    Fd fd;
    std::string tenant;  // empty: the node-wide socket
    std::string path;
    std::shared_ptr<TenantShm> shm;                 // a tenant socket's
    std::shared_ptr<DefaultTenant> default_tenant;  // the node-wide socket's
    std::optional<gid_t> group;
    uint32_t connections = 0;
    std::map<uid_t, uint32_t> per_uid;  // the node-wide socket's connections by uid
    int64_t log_window_ns = 0;          // bad-input log limit (badInput)
    uint32_t logged = 0;
    uint64_t suppressed = 0;
  };
  struct Conn {
    Fd fd;
    std::shared_ptr<Listener> listener;
    std::shared_ptr<TenantShm> shm;  // once attached
    PeerIdentity peer;
    std::vector<gid_t> groups;
    bool attached = false;
    std::optional<uint32_t> slot;
    int64_t attached_ns = 0;
    int64_t deadline_ns = 0;
    bool evicted = false;  // to be closed: its place went to another uid's connection
    uint8_t buf[attach::kRequestBytes] = {};
    size_t got = 0;
    uint64_t extra_bytes = 0;  // sent after the request
    // The program the process ran when it attached (/proc/PID/exe's device and inode): an
    // attachment belongs to that image; one that exec'd another program is not governed.
    std::optional<std::pair<dev_t, ino_t>> image;
    bool image_gone = false;  // seen by attachments(); the thread closes the connection
  };

  AttachServer(Options options, Clock& clock) : options_(std::move(options)), clock_(clock) {}
  void onClockMoved() override { wake(); }
  Result<Fd> listenAt(const std::string& path, uint32_t mode, gid_t group);
  void run();
  void acceptFrom(const std::shared_ptr<Listener>& l, int64_t now) TQ_REQUIRES(mu_);
  // The node-wide socket's bounds for a new connection of c's uid (above): true to hold it
  // (another uid's connection may have been evicted for it), false when it was answered not
  // held and is to be closed.
  bool admitNodeWide(Conn* c, int64_t now) TQ_REQUIRES(mu_);
  // Answers c with its uid's memory, no slot, kReplyNotHeld (`why`), without reading its request.
  void answerNotHeld(Conn* c, int64_t now, const std::string& why) TQ_REQUIRES(mu_);
  // Returns false when the connection is done (to be closed).
  bool onRequest(Conn* c, int64_t now) TQ_REQUIRES(mu_);
  bool onReadable(Conn* c, int64_t now) TQ_REQUIRES(mu_);
  void refuse(Conn* c, int64_t now, attach::ReplyStatus status, const std::string& why)
      TQ_REQUIRES(mu_);
  void badInput(const Conn& c, int64_t now, const std::string& what) TQ_REQUIRES(mu_);
  void logLimited(const Conn& c, int64_t now, bool warn, const std::string& what) TQ_REQUIRES(mu_);
  void close(Conn* c) TQ_REQUIRES(mu_);
  std::string who(const Conn& c) const;
  void wake() const;

  const Options options_;
  Clock& clock_;
  std::atomic<uint64_t> replies_{0};
  std::atomic<uint64_t> timed_out_{0};
  Fd wake_fd_;  // eventfd
  std::thread thread_;
  std::atomic<bool> stop_{false};

  mutable Mutex mu_;
  std::map<std::string, std::shared_ptr<Listener>> listeners_
      TQ_GUARDED_BY(mu_);  // by tenant; "" = node-wide
  std::vector<std::unique_ptr<Conn>> conns_ TQ_GUARDED_BY(mu_);
  // Listeners that unserve() retired: released by the thread once it is past its poll(), so an
  // fd number in flight there is never closed (and reused) underneath it.
  std::vector<std::shared_ptr<Listener>> retired_ TQ_GUARDED_BY(mu_);
};

}  // namespace tq::agent
