// Failed requests: counted per operation, logged at the level their errno calls for, with the
// operation, inode, what was asked (a name, an attribute and value) and the cause; at most 20
// lines per window however many requests fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <iterator>
#include <string>

#include "common/log.h"
#include "core/request_errors.h"
#include "core/xattrs.h"
#include "test_files.h"

namespace {

using fid::LogLevel;
using fid::core::Request;
using fid::core::Xattrs;
using fid::core::failure_log_level;

// The level of a failed set or remove of an attribute, as Xattrs answers it.
LogLevel change_level(int code) { return failure_log_level(Xattrs::answered(fid::Error{code, "why"}).error()); }

TEST(RequestErrors, ExpectedErrnosAreDebugRefusedChangesInfoAndTheRestWarn) {
  EXPECT_EQ(failure_log_level(fid::Error{ENOENT, ""}), LogLevel::debug);
  EXPECT_EQ(failure_log_level(fid::Error{EROFS, ""}), LogLevel::debug);
  EXPECT_EQ(failure_log_level(fid::Error{ENODATA, ""}), LogLevel::debug);
  EXPECT_EQ(failure_log_level(fid::Error{EIO, ""}), LogLevel::warn);
  EXPECT_EQ(failure_log_level(fid::Error{ENOMEM, ""}), LogLevel::warn);
  EXPECT_EQ(failure_log_level(fid::Error{EIO, "", LogLevel::debug}), LogLevel::debug)
      << "the part that logged the cause (the read path, once per file) says so";
  EXPECT_EQ(change_level(EINVAL), LogLevel::info);
  EXPECT_EQ(change_level(ENOTSUP), LogLevel::info);
  EXPECT_EQ(change_level(ENODATA), LogLevel::info);
  EXPECT_EQ(change_level(EPERM), LogLevel::debug) << "ChangeAccess logs it once per user";
  EXPECT_EQ(change_level(EROFS), LogLevel::debug) << "user.other is a write like any";
  EXPECT_EQ(change_level(EIO), LogLevel::warn);
}

TEST(RequestErrors, CountsEveryFailureAndLogsAtMostTwentyLinesAWindow) {
  fid::testutil::TempDir dir;
  const auto log = dir.path() / "fid.log";
  ASSERT_TRUE(fid::log_open(LogLevel::info, fid::LogSink::file, log.string()).ok());
  fid::core::RequestErrors errors;
  errors.failed(Request::setxattr, 42, "user.fidelity.scan_group='x\\x01'",
                Xattrs::answered(fid::Error{EINVAL, "not a level of this store"}).error());
  for (int i = 0; i < 30; ++i) errors.failed(Request::lookup, 7, "missing.jpg", fid::Error{ENOENT, "no such file"});
  for (int i = 0; i < 30; ++i) errors.failed(Request::getattr, 9, "", fid::Error{EIO, "'a' has no attributes"});
  ASSERT_TRUE(fid::log_open(LogLevel::info, fid::LogSink::stderr_).ok());
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
