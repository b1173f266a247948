#include "common/status.h"

#include <sys/resource.h>

#include <cstring>

namespace tq {

std::string_view statusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "INVALID_ARGUMENT";
    case StatusCode::kNotFound: return "NOT_FOUND";
    case StatusCode::kAlreadyExists: return "ALREADY_EXISTS";
    case StatusCode::kFailedPrecondition: return "FAILED_PRECONDITION";
    case StatusCode::kOutOfRange: return "OUT_OF_RANGE";
    case StatusCode::kResourceExhausted: return "RESOURCE_EXHAUSTED";
    case StatusCode::kPermissionDenied: return "PERMISSION_DENIED";
    case StatusCode::kUnauthenticated: return "UNAUTHENTICATED";
    case StatusCode::kUnavailable: return "UNAVAILABLE";
    case StatusCode::kDeadlineExceeded: return "DEADLINE_EXCEEDED";
    case StatusCode::kAborted: return "ABORTED";
    case StatusCode::kUnimplemented: return "UNIMPLEMENTED";
    case StatusCode::kDataLoss: return "DATA_LOSS";
    case StatusCode::kInternal: return "INTERNAL";
  }
  return "UNKNOWN";
}

Status Status::withContext(std::string_view context) const {
  if (ok() || context.empty()) return *this;
  std::string m;
  m.reserve(context.size() + 2 + message_.size());
  m.append(context).append(": ").append(message_);
  return Status(code_, std::move(m));
}

std::string Status::toString() const {
  if (ok()) return "OK";
  std::string s(statusCodeName(code_));
  s.append(": ").append(message_);
  return s;
}

Status errnoStatus(int err, std::string_view what) {
  StatusCode code;
  switch (err) {
    case ENOENT:
    case ENODEV:
    case ESRCH:
    case ENXIO: code = StatusCode::kNotFound; break;
    case EEXIST: code = StatusCode::kAlreadyExists; break;
    case EACCES:
    case EPERM:
    case EROFS: code = StatusCode::kPermissionDenied; break;
    case EINVAL:
    case ENAMETOOLONG:
    case EBADF: code = StatusCode::kInvalidArgument; break;
    case EAGAIN:
    case ECONNREFUSED:
    case ECONNRESET:
    case EPIPE:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case ENETDOWN:
    case EBUSY: code = StatusCode::kUnavailable; break;
    case ETIMEDOUT: code = StatusCode::kDeadlineExceeded; break;
    case ENOSPC:
    case ENOMEM:
    case EMFILE:
    case ENFILE:
    case EDQUOT: code = StatusCode::kResourceExhausted; break;
    case EOPNOTSUPP:
    case ENOSYS: code = StatusCode::kUnimplemented; break;
    default: code = StatusCode::kInternal; break;
  }
  char buf[128];
  // GNU strerror_r returns a pointer that may or may not be buf.
  const char* text = strerror_r(err, buf, sizeof buf);
  std::string m(what);
  m.append(": ").append(text);
  if (err == EMFILE) {
    // The real cause, wherever the fd ran out (a socket, a tenant file, a netlink request).
    rlimit rl{};
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
      m.append(" (this process has used all of its ")
          .append(std::to_string(rl.rlim_cur))
          .append(" file descriptors, RLIMIT_NOFILE; raise LimitNOFILE / ulimit -n)");
    }
  }
  return Status(code, std::move(m));
}

}  // namespace tq
