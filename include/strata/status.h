// Status and StatusOr: the error channel for the environment and user input (files,
// configs, I/O, the OS). Invariants of Strata's own code use STRATA_CHECK instead, which
// aborts with file:line (see check.h). Library code never calls exit().
//
//   STRATA_RETURN_IF_ERROR(tier.Open(dir));           // propagate unchanged
//   if (!s.ok()) return s.WithContext("tensor 'm.3'");  // add what the caller knows
#pragma once

#include <cerrno>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include <fmt/format.h>

namespace strata {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // bad config value, bad command-line flag, bad file content
  kNotFound,
  kAlreadyExists,
  kOutOfRange,
  kResourceExhausted,  // budgets, full disk, memlock limit
  kDataLoss,           // checksum mismatch, truncated file
  kIoError,            // read/write/submit failure with an errno
  kUnavailable,        // a facility the machine does not offer (io_uring, O_DIRECT)
  kFailedPrecondition,
  kInternal,
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "context: message", so a trail reads outermost first, like a stack of "while ..." lines.
  Status WithContext(const std::string& context) const& {
    if (ok()) return *this;
    return Status(code_, context + ": " + message_);
  }
  std::string ToString() const {
    return ok() ? "OK" : fmt::format("{}: {}", StatusCodeName(code_), message_);
  }
  // Explicitly discards a status where ignoring it is the right call (e.g. cleanup paths).
  void IgnoreError() const {}

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "INVALID_ARGUMENT";
    case StatusCode::kNotFound: return "NOT_FOUND";
    case StatusCode::kAlreadyExists: return "ALREADY_EXISTS";
    case StatusCode::kOutOfRange: return "OUT_OF_RANGE";
    case StatusCode::kResourceExhausted: return "RESOURCE_EXHAUSTED";
    case StatusCode::kDataLoss: return "DATA_LOSS";
    case StatusCode::kIoError: return "IO_ERROR";
    case StatusCode::kUnavailable: return "UNAVAILABLE";
    case StatusCode::kFailedPrecondition: return "FAILED_PRECONDITION";
    case StatusCode::kInternal: return "INTERNAL";
  }
  return "UNKNOWN";
}

template <typename... Args>
Status Error(StatusCode code, fmt::format_string<Args...> f, Args&&... args) {
  return Status(code, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status InvalidArgument(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kInvalidArgument, fmt::format(f, std::forward<Args>(args)...));
}
// An OS failure: the message ends with the errno's name and text, e.g. "(errno 28: No space left on device)".
template <typename... Args>
Status ErrnoError(int err, fmt::format_string<Args...> f, Args&&... args) {
  StatusCode code = (err == ENOSPC || err == EFBIG || err == ENOMEM || err == EDQUOT)
                        ? StatusCode::kResourceExhausted
                        : StatusCode::kIoError;
  return Status(code, fmt::format("{} (errno {}: {})", fmt::format(f, std::forward<Args>(args)...), err,
                                  std::strerror(err)));
}

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : v_(std::move(status)) {}  // NOLINT: implicit by design
  StatusOr(T value) : v_(std::move(value)) {}         // NOLINT
  bool ok() const { return std::holds_alternative<T>(v_); }
  Status status() const { return ok() ? Status() : std::get<Status>(v_); }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<Status, T> v_;
};

}  // namespace strata

#define STRATA_CONCAT_INNER(a, b) a##b
#define STRATA_CONCAT(a, b) STRATA_CONCAT_INNER(a, b)

#define STRATA_RETURN_IF_ERROR(expr)               \
  do {                                             \
    ::strata::Status _strata_st = (expr);          \
    if (!_strata_st.ok()) return _strata_st;       \
  } while (0)

#define STRATA_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()

// STRATA_ASSIGN_OR_RETURN(auto x, MakeX());
#define STRATA_ASSIGN_OR_RETURN(lhs, expr) \
  STRATA_ASSIGN_OR_RETURN_IMPL(STRATA_CONCAT(_strata_so_, __LINE__), lhs, expr)
