// core/status.h — the one error model of HiQCache.
//
// Every fallible operation that crosses a module boundary returns a `Status`
// (no value) or a `Result<T>` (a value or a Status). Errors carry a code that a
// caller can branch on and a message written for the person reading it: it names
// the file, field or flag at fault and what was expected. Programmer errors
// (broken invariants) use HIQ_CHECK from core/check.h instead.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "core/check.h"

namespace hiq {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // the caller's input is malformed (a flag, a config field, a shape)
  kNotFound,            // a named file, preset or entity does not exist
  kOutOfRange,          // a value is well-formed but outside what is supported
  kResourceExhausted,   // a tier, pool or budget is full
  kFailedPrecondition,  // the system is not in a state that allows the call
  kUnavailable,         // a device or service is absent (e.g. no GPU)
  kDataLoss,            // stored data is corrupt or truncated
  kInternal,            // a bug or an unexpected failure of a dependency
};

std::string_view status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return {}; }

  bool is_ok() const { return code_ == StatusCode::kOk; }
  explicit operator bool() const { return is_ok(); }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "INVALID_ARGUMENT: config.json: field 'head_dim' must be ..." (or "OK").
  std::string to_string() const;

  // Returns a copy with `context` prepended to the message ("context: message").
  Status with_context(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string msg) { return {StatusCode::kInvalidArgument, std::move(msg)}; }
inline Status not_found(std::string msg) { return {StatusCode::kNotFound, std::move(msg)}; }
inline Status out_of_range(std::string msg) { return {StatusCode::kOutOfRange, std::move(msg)}; }
inline Status resource_exhausted(std::string msg) { return {StatusCode::kResourceExhausted, std::move(msg)}; }
inline Status failed_precondition(std::string msg) { return {StatusCode::kFailedPrecondition, std::move(msg)}; }
inline Status unavailable(std::string msg) { return {StatusCode::kUnavailable, std::move(msg)}; }
inline Status data_loss(std::string msg) { return {StatusCode::kDataLoss, std::move(msg)}; }
inline Status internal_error(std::string msg) { return {StatusCode::kInternal, std::move(msg)}; }

// A value of type T or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : state_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    HIQ_CHECK_MSG(!std::get<Status>(state_).is_ok(), "a Result built from a Status must hold an error");
  }

  bool is_ok() const { return std::holds_alternative<T>(state_); }
  explicit operator bool() const { return is_ok(); }

  // The error; Status::ok() when a value is held.
  Status status() const { return is_ok() ? Status::ok() : std::get<Status>(state_); }

  T& value() & { return std::get<T>(state_); }
  const T& value() const& { return std::get<T>(state_); }
  T&& value() && { return std::get<T>(std::move(state_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> state_;
};

}  // namespace hiq

// Propagates a non-OK Status (or the Status of a failed Result) to the caller.
#define HIQ_RETURN_IF_ERROR(expr)                      \
  do {                                                 \
    if (auto hiq_status_ = (expr); !hiq_status_.is_ok()) \
      return ::hiq::internal_status_of(hiq_status_);   \
  } while (0)

#define HIQ_CONCAT_INNER_(a, b) a##b
#define HIQ_CONCAT_(a, b) HIQ_CONCAT_INNER_(a, b)

// `HIQ_ASSIGN_OR_RETURN(auto x, make_x());` declares x from a Result or returns its error.
#define HIQ_ASSIGN_OR_RETURN(decl, expr) \
  HIQ_ASSIGN_OR_RETURN_IMPL_(HIQ_CONCAT_(hiq_result_, __LINE__), decl, expr)
#define HIQ_ASSIGN_OR_RETURN_IMPL_(tmp, decl, expr) \
  auto tmp = (expr);                                \
  if (!tmp.is_ok()) return tmp.status();            \
  decl = std::move(tmp).value()

namespace hiq {
inline Status internal_status_of(const Status& s) { return s; }
template <typename T>
Status internal_status_of(const Result<T>& r) { return r.status(); }
}  // namespace hiq
