// fid::Result in tests: the value of a call that must succeed. A failure throws, which ends the
// test as failed with the error's message (gtest reports the exception), so a test goes no
// further on a value it does not have.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

#include "common/error.h"

namespace fid::testutil {

template <typename T>
T value_or_throw(Result<T> result) {
  if (!result) {
    const Error& e = result.error();
    throw std::runtime_error("unexpected error (errno " + std::to_string(e.code) + "): " + e.message);
  }
  return std::move(result).value();
}

}  // namespace fid::testutil
