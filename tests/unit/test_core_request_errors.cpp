// Failed requests: counted per operation, logged at the level their errno calls for, with the
// operation, inode, what was asked (a name, an attribute and value) and the cause; at most 20
// lines per window however many requests fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <iterator>
#include <string>

#include "core/log.h"
#include "core/request_errors.h"
#include "test_files.h"

namespace {

using fid::config::LogLevel;
using fid::core::Request;
using fid::core::failure_log_level;

TEST(RequestErrors, ExpectedErrnosAreDebugRefusedChangesInfoAndTheRestWarn) {
  EXPECT_EQ(failure_log_level(Request::lookup, ENOENT), LogLevel::debug);
  EXPECT_EQ(failure_log_level(Request::unlink, EROFS), LogLevel::debug);
  EXPECT_EQ(failure_log_level(Request::getxattr, ENODATA), LogLevel::debug);
  EXPECT_EQ(failure_log_level(Request::getattr, EIO), LogLevel::warn);
  EXPECT_EQ(failure_log_level(Request::lookup, ENOMEM), LogLevel::warn);
  EXPECT_EQ(failure_log_level(Request::read, EIO), LogLevel::debug) << "the read path logs it, once per file";
  EXPECT_EQ(failure_log_level(Request::setxattr, EINVAL), LogLevel::info);
  EXPECT_EQ(failure_log_level(Request::setxattr, ENOTSUP), LogLevel::info);
  EXPECT_EQ(failure_log_level(Request::removexattr, ENODATA), LogLevel::info);
  EXPECT_EQ(failure_log_level(Request::setxattr, EPERM), LogLevel::debug) << "ChangeAccess logs it once per user";
  EXPECT_EQ(failure_log_level(Request::setxattr, EROFS), LogLevel::debug) << "user.other is a write like any";
  EXPECT_EQ(failure_log_level(Request::setxattr, EIO), LogLevel::warn);
}

TEST(RequestErrors, CountsEveryFailureAndLogsAtMostTwentyLinesAWindow) {
  fid::testutil::TempDir dir;
  const auto log = dir.path() / "fid.log";
  ASSERT_TRUE(fid::core::log_open(LogLevel::info, fid::core::LogSink::file, log.string()).ok());
  fid::core::RequestErrors errors;
  errors.failed(Request::setxattr, 42, "user.fidelity.scan_group='x\\x01'", fid::Error{EINVAL, "not a level of this store"});
  for (int i = 0; i < 30; ++i) errors.failed(Request::lookup, 7, "missing.jpg", fid::Error{ENOENT, "no such file"});
  for (int i = 0; i < 30; ++i) errors.failed(Request::getattr, 9, "", fid::Error{EIO, "'a' has no attributes"});
  ASSERT_TRUE(fid::core::log_open(LogLevel::info, fid::core::LogSink::stderr_).ok());
  EXPECT_EQ(errors.count(Request::setxattr), 1u);
  EXPECT_EQ(errors.count(Request::lookup), 30u);
  EXPECT_EQ(errors.count(Request::getattr), 30u);
  EXPECT_EQ(errors.count(Request::read), 0u);
  std::ifstream in(log);
  const std::string text{std::istreambuf_iterator<char>(in), {}};
  EXPECT_NE(text.find("info: setxattr inode 42 user.fidelity.scan_group='x\\x01': not a level of this store (EINVAL)\n"),
            std::string::npos) << text;
  EXPECT_EQ(text.find("lookup"), std::string::npos) << "ENOENT is for debug logs";
  EXPECT_NE(text.find("warn: getattr inode 9: 'a' has no attributes (EIO)\n"), std::string::npos) << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 20) << "one setxattr line, then 19 of the 30 getattr lines";
}

}  // namespace
