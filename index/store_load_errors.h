// The loader's failures (store_load*.cpp only): a failing SQLite call or a corrupt index throws a
// StoreError inside the loader; Store::open and Store::open_index return it as an Error with the
// same message, so it never leaves the loader.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

#include "common/error.h"

namespace fid::index {

class StoreError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The value of a SQLite call, or its Error thrown as a StoreError.
template <class T>
T must(Result<T> r) {
  if (!r) throw StoreError(r.error().message);
  return std::move(r).value();
}

inline StoreError corrupt_index(const std::string& ip, const std::string& what) {
  return StoreError(fmt::format("{}: corrupt index: {}", ip, what));
}

}  // namespace fid::index
