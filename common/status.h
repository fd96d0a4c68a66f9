// Status and Result<T>: how every eraid layer reports an outcome.
//
// A Status is a code plus a message. The code set is small and fixed; callers branch
// on the code, humans read the message. Two questions every caller asks are answered
// directly: retryable() (the same call may succeed later: busy, queue full) and
// data_lost() (something acknowledged earlier can no longer be returned correctly).
//
// No exceptions cross a module boundary: functions that can fail return Status or
// Result<T>, both [[nodiscard]].
//
// Thread-safety: values; safe to copy and pass between threads.
#pragma once

#include <cassert>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace eraid {

enum class StatusCode : uint8_t {
  kOk = 0,
  kInvalidArgument,  // the caller asked for something malformed; never retryable
  kNotFound,
  kIoError,     // a device operation failed
  kNoSpace,     // physical capacity exhausted; nothing was changed
  kCorruption,  // stored bytes failed a check (CRC, magic, version)
  kNotSupported,
  kBusy,      // transient: queue full, resource locked; retry
  kDataLoss,  // acknowledged data cannot be returned
  kAborted,   // the device or array was shut down / failed under the call
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  // An OK status is one null pointer: building, moving and dropping one costs next to
  // nothing, which matters on paths that return one per block (the log engine's).
  Status(const Status& o) : rep_(o.rep_ ? std::make_unique<Rep>(*o.rep_) : nullptr) {}
  Status& operator=(const Status& o) {
    if (this != &o) rep_ = o.rep_ ? std::make_unique<Rep>(*o.rep_) : nullptr;
    return *this;
  }
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string msg) {
    return {StatusCode::kInvalidArgument, std::move(msg)};
  }
  static Status NotFound(std::string msg) { return {StatusCode::kNotFound, std::move(msg)}; }
  static Status IoError(std::string msg) { return {StatusCode::kIoError, std::move(msg)}; }
  static Status NoSpace(std::string msg) { return {StatusCode::kNoSpace, std::move(msg)}; }
  static Status Corruption(std::string msg) { return {StatusCode::kCorruption, std::move(msg)}; }
  static Status NotSupported(std::string msg) {
    return {StatusCode::kNotSupported, std::move(msg)};
  }
  static Status Busy(std::string msg) { return {StatusCode::kBusy, std::move(msg)}; }
  static Status DataLoss(std::string msg) { return {StatusCode::kDataLoss, std::move(msg)}; }
  static Status Aborted(std::string msg) { return {StatusCode::kAborted, std::move(msg)}; }

  bool ok() const { return rep_ == nullptr; }
  StatusCode code() const { return rep_ ? rep_->code : StatusCode::kOk; }
  const std::string& message() const;

  // The same operation may succeed if retried later, with nothing lost meanwhile.
  bool retryable() const { return code() == StatusCode::kBusy; }
  // Data that was acknowledged is gone or wrong; the caller must not pretend otherwise.
  bool data_lost() const { return code() == StatusCode::kDataLoss; }

  // "IoError: read of lba 12 failed" — for logs and CLI messages.
  std::string ToString() const;

  // Returns a copy with `context` prepended to the message ("context: message").
  Status WithContext(std::string_view context) const;

  bool operator==(const Status& o) const { return code() == o.code(); }

 private:
  struct Rep {
    StatusCode code;
    std::string message;
  };
  Status(StatusCode code, std::string msg)
      : rep_(std::make_unique<Rep>(Rep{code, std::move(msg)})) {}

  std::unique_ptr<Rep> rep_;  // null: OK
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT
    assert(!status_.ok() && "Result built from an OK status carries no value");
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }

  // REQUIRES: ok().
  T& value() & {
    assert(ok());
    return *value_;
  }
  const T& value() const& {
    assert(ok());
    return *value_;
  }
  T&& value() && {
    assert(ok());
    return std::move(*value_);
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }

 private:
  Status status_;  // OK iff value_ is set
  std::optional<T> value_;
};

}  // namespace eraid

// Propagates a non-OK Status to the caller.
#define ERAID_RETURN_IF_ERROR(expr)                \
  do {                                             \
    ::eraid::Status eraid_status_ = (expr);        \
    if (!eraid_status_.ok()) return eraid_status_; \
  } while (0)

#define ERAID_CONCAT_INNER(a, b) a##b
#define ERAID_CONCAT(a, b) ERAID_CONCAT_INNER(a, b)
// ERAID_ASSIGN_OR_RETURN(auto x, ResultReturningCall());
#define ERAID_ASSIGN_OR_RETURN(lhs, expr) \
  ERAID_ASSIGN_OR_RETURN_IMPL(ERAID_CONCAT(eraid_result_, __LINE__), lhs, expr)
#define ERAID_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()
