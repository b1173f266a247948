// Status and Result<T>: error values instead of exceptions, with context added per layer.
//
// A Status is either ok or carries a code and a human-readable message. Each layer that
// propagates an error prepends what it was doing, so the final text reads outermost first:
//   "apply policy v7: replace class 1:12 on dev eth0: RTNETLINK: Invalid argument"
// Thread-safety: values; no shared state.
#pragma once

#include <cerrno>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace tq {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,
  kNotFound,
  kAlreadyExists,
  kFailedPrecondition,
  kOutOfRange,
  kResourceExhausted,
  kPermissionDenied,
  kUnauthenticated,
  kUnavailable,
  kDeadlineExceeded,
  kAborted,
  kUnimplemented,
  kDataLoss,
  kInternal,
};

std::string_view statusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // Returns a copy whose message is "context: message". No-op on ok.
  Status withContext(std::string_view context) const;

  // "INVALID_ARGUMENT: message", or "OK".
  std::string toString() const;

  // Explicitly drops a status that is safe to ignore (documents the decision at call sites).
  void ignore() const {}

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status okStatus() { return Status(); }
inline Status invalidArgument(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status notFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status alreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
inline Status failedPrecondition(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status outOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status resourceExhausted(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}
inline Status permissionDenied(std::string m) {
  return {StatusCode::kPermissionDenied, std::move(m)};
}
inline Status unauthenticated(std::string m) {
  return {StatusCode::kUnauthenticated, std::move(m)};
}
inline Status unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status deadlineExceeded(std::string m) {
  return {StatusCode::kDeadlineExceeded, std::move(m)};
}
inline Status aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
inline Status unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status dataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status internalError(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// "what: <strerror(err)>" with a code derived from errno (ENOENT -> kNotFound, EACCES ->
// kPermissionDenied, EAGAIN/ECONNREFUSED -> kUnavailable, ...).
Status errnoStatus(int err, std::string_view what);
// Same, reading errno now.
inline Status errnoStatus(std::string_view what) { return errnoStatus(errno, what); }

// Holds either a T or a non-ok Status. Constructing from an ok Status is a programming error
// (it is turned into kInternal so it cannot masquerade as a value).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (std::get<Status>(v_).ok()) v_ = internalError("Result constructed from an ok Status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const& {
    static const Status kOkStatus;
    return ok() ? kOkStatus : std::get<Status>(v_);
  }
  Status status() && { return ok() ? Status() : std::get<Status>(std::move(v_)); }

  // Precondition: ok().
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  T valueOr(T fallback) const& { return ok() ? value() : std::move(fallback); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace tq

#define TQ_STATUS_CONCAT_INNER(a, b) a##b
#define TQ_STATUS_CONCAT(a, b) TQ_STATUS_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function if `expr` is not ok.
#define TQ_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::tq::Status tq_status_ = (expr);        \
    if (!tq_status_.ok()) return tq_status_; \
  } while (0)

// Same, adding context ("context: <error>").
#define TQ_RETURN_IF_ERROR_CTX(expr, context)                     \
  do {                                                            \
    ::tq::Status tq_status_ = (expr);                             \
    if (!tq_status_.ok()) return tq_status_.withContext(context); \
  } while (0)

// `TQ_ASSIGN_OR_RETURN(auto x, makeX());` declares x from a Result or returns its Status.
#define TQ_ASSIGN_OR_RETURN(lhs, expr) \
  TQ_ASSIGN_OR_RETURN_IMPL(TQ_STATUS_CONCAT(tq_result_, __LINE__), lhs, expr)
#define TQ_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return std::move(tmp).status(); \
  lhs = std::move(tmp).value()
