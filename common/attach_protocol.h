// How a process attaches to its tenant on a node: the agent <-> plugin socket protocol.
//
// Paths under the run directory (common/node_contract.h, default /run/tenantqos):
//   tenants/<tenant>/agent.sock  one per tenant; the directory is root-owned, group = the
//                                tenant's Unix group (policy `unixGroup`), mode 0750 (0700 and
//                                group root without one), so what the kernel lets a process
//                                reach decides its tenant. On Kubernetes a pod mounts only its
//                                tenant's directory.
//   agent.sock                   node-wide (0666): the default tenant, for every process.
//   traffic-classes              0644, which tenant lists which NCCL trafficClass (a hint for
//                                choosing the socket to try, never an identity).
//
// Exchange (SOCK_STREAM, one request, one reply, then the connection stays open for the life of
// the process: the agent releases the process's slot when it closes):
//   process -> agent  AttachRequest (80 bytes): magic, version, the tenant it wanted (for the
//                     agent's log only: the socket decides).
//   agent -> process  AttachReply (208 bytes) + SCM_RIGHTS [params memfd, shared memfd] when
//                     accepted; the tenant it was attached to, its slot (kMaxSlots: none free),
//                     or why it was refused. kReplyNotHeld: attached, but the agent closes the
//                     connection at once (the node-wide socket's bound on a uid's, or on all,
//                     connections): the process paces with the memory it was given, without a
//                     slot, and asks again later; `reason` says why.
// Both sides parse the other's bytes as hostile: fixed sizes, magic, version, NUL-terminated
// names, bounded waits; the parsers are fuzzed (common_shm_fuzz).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/node_contract.h"

#include "common/fd.h"
#include "common/status.h"

namespace tq::attach {

inline constexpr uint64_t kRequestMagic = 0x5251544154515154ULL;  // "TQQTATQR"
inline constexpr uint64_t kReplyMagic = 0x5052544154515154ULL;    // "TQQTATRP"
inline constexpr uint32_t kVersion = 1;
inline constexpr size_t kRequestBytes = 80;
inline constexpr size_t kReplyBytes = 208;
inline constexpr size_t kNameBytes = 64;
inline constexpr size_t kReasonBytes = 120;

enum class ReplyStatus : uint32_t { kAttached = 0, kDenied = 1, kBadRequest = 2, kBusy = 3 };
// Reply flags (offset 20; a version 1 reply from an older agent has 0 there).
inline constexpr uint32_t kReplyNotHeld = 1u << 0;

struct Request {
  std::string wanted_tenant;  // may be empty or not a tenant at all
};
struct Reply {
  ReplyStatus status = ReplyStatus::kAttached;
  uint32_t slot = 0;
  bool held = true;  // false: kReplyNotHeld
  std::string tenant;
  std::string reason;  // why not attached (or not held)
};

std::string encodeRequest(const Request& r);
Result<Request> parseRequest(const uint8_t* data, size_t size);
std::string encodeReply(const Reply& r);
Result<Reply> parseReply(const uint8_t* data, size_t size);

// A node is governed (an agent runs or ran there) unless its run directory certainly does not
// exist (ENOENT, ENOTDIR): one this process may not look into (EACCES) is a governed node it is
// not trusted on, so the process fails closed.
bool nodeIsGoverned(const std::string& run_dir);

// traffic-classes: line 1 "tenantqos-traffic-classes 1", then "<trafficClass> <tenant>" lines.
std::string encodeTrafficClasses(const std::vector<std::pair<int, std::string>>& map);
// The tenant listed for `traffic_class` in such a text; nullopt when none or malformed.
std::optional<std::string> lookupTrafficClass(std::string_view text, int traffic_class);
// The same over the run directory's file (at most 64 KiB read).
std::optional<std::string> tenantForTrafficClass(const std::string& run_dir, int traffic_class);

// Sends `data` with `fds` attached (SCM_RIGHTS), MSG_NOSIGNAL | MSG_DONTWAIT: all or an error.
Status sendWithFds(int sock, std::string_view data, const std::vector<int>& fds);
// One recvmsg (MSG_DONTWAIT | MSG_CMSG_CLOEXEC) into buf; received fds are appended to *fds
// (owned). 0 bytes: nothing yet (EAGAIN); kUnavailable: the peer closed.
Result<size_t> recvWithFds(int sock, uint8_t* buf, size_t size, std::vector<Fd>* fds);

// What an accepted attachment gives the process.
struct Attached {
  Fd conn;  // keep open for the life of the attachment
  Fd params_fd;
  Fd shared_fd;
  uint32_t slot = 0;
  std::string tenant;
  // False: the agent does not keep this connection (kReplyNotHeld; `conn` is closed by the agent,
  // `reason` says why): the memory is the process's to pace with, without a slot.
  bool held = true;
  std::string reason;
};

// One attempt at attaching through one socket, driven without ever blocking: start() connects
// (non-blocking; a Unix socket connects at once or fails) and sends the request; poll() checks
// for the reply, waiting at most `timeout_ms` (0: not at all). An agent that answers and closes
// before reading the request (kReplyNotHeld) is fine: the reply is read all the same.
//
// Who answers is checked before anything it sends is trusted: the socket's listener must be uid
// 0 or `agent_uid` (SO_PEERCRED), else kPermissionDenied. A run directory whose sockets someone
// else could replace would otherwise hand this process that someone's memfds and rates.
class Attempt {
 public:
  static Result<std::unique_ptr<Attempt>> start(const std::string& socket_path,
                                                const std::string& wanted_tenant,
                                                uid_t agent_uid = 0);
  // nullopt: no complete reply yet. An error: refused (the reply's reason), closed, garbage.
  Result<std::optional<Attached>> poll(int timeout_ms);
  const std::string& path() const { return path_; }

 private:
  Attempt(std::string path, Fd fd) : path_(std::move(path)), fd_(std::move(fd)) {}
  std::string path_;
  Fd fd_;
  uint8_t buf_[kReplyBytes] = {};
  size_t got_ = 0;
  std::vector<Fd> fds_;
};

// start() then poll() until a reply or `timeout_ms` on `clock` (at init/connect time only: it
// waits). It waits for the reply in slices of at most kAttachWaitSliceMs, reading the clock
// between them, so a FakeClock moved past the deadline ends the wait.
inline constexpr int kAttachWaitSliceMs = 10;
Result<Attached> attachWithin(const std::string& socket_path, const std::string& wanted_tenant,
                              int timeout_ms, Clock& clock, uid_t agent_uid = 0);

}  // namespace tq::attach
