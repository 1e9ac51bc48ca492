// The one error type below the command line. Every layer (codec, index, storage, core) reports a
// failure as an Error: an errno value and a one-line message that names what it concerns (a
// file, a record, a setting) and the cause. The FUSE adapter replies with `code`; the command
// line prints `message` and chooses its exit code. Nothing below cli/ knows exit codes.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "common/log_level.h"

namespace fid {

struct Error {
  int code = 0;  // an errno value (EIO, ENOENT, EINVAL, ...), never 0
  std::string message;
  // The level to log it at where it is answered (a FUSE reply); unset: the level its errno has
  // there. A part that logged the cause itself where it happened says debug.
  std::optional<LogLevel> log_level = std::nullopt;
};

// A value, or the Error that prevented it.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}
  Result(Error error) : v_(std::in_place_index<1>, std::move(error)) {}

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  const Error& error() const& { return std::get<1>(v_); }
  Error&& error() && { return std::get<1>(std::move(v_)); }

 private:
  std::variant<T, Error> v_;
};

// Success, or an Error: Result for operations that produce no value.
template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : e_(std::move(error)) {}

  bool ok() const { return !e_; }
  explicit operator bool() const { return ok(); }
  const Error& error() const& { return *e_; }
  Error&& error() && { return std::move(*e_); }

 private:
  std::optional<Error> e_;
};
using Status = Result<void>;

}  // namespace fid
