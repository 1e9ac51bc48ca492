// common/posix_io.h: pread_loop reads what is asked for and stops only at end of file;
// write_loop and pwrite_loop write everything (pwrite_loop at its offset); a failure is an
// Error with the errno and a message "<what>: <cause>".
#include <gtest/gtest.h>

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "common/fd.h"
#include "common/posix_io.h"

using fid::Fd;
using fid::pread_loop;
using fid::pwrite_loop;
using fid::write_loop;

namespace {

class PosixIoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fd_ = Fd(::mkstemp(name_.data()));
    ASSERT_GE(fd_.get(), 0);
  }
  void TearDown() override { ::unlink(name_.c_str()); }

  std::string name_ = (::testing::TempDir() + "posix_io.XXXXXX");
  Fd fd_;
};

TEST_F(PosixIoTest, WritesThenReadsEverythingAndStopsAtEndOfFile) {
  std::vector<uint8_t> bytes(300000);
  std::iota(bytes.begin(), bytes.end(), uint8_t{0});
  ASSERT_TRUE(write_loop(fd_.get(), bytes.data(), bytes.size(), name_).ok());
  std::vector<uint8_t> got(bytes.size());
  fid::Result<uint64_t> n = pread_loop(fd_.get(), got.data(), got.size(), 0, name_);
  ASSERT_TRUE(n.ok()) << n.error().message;
  EXPECT_EQ(*n, bytes.size());
  EXPECT_EQ(got, bytes);
  n = pread_loop(fd_.get(), got.data(), got.size(), 1000, name_);  // runs past the end
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, bytes.size() - 1000);
  n = pread_loop(fd_.get(), got.data(), 10, bytes.size() + 5, name_);  // starts past the end
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);
}

TEST_F(PosixIoTest, PwriteLoopWritesAtItsOffset) {
  const std::vector<uint8_t> head{1, 2, 3}, tail{7, 8};
  ASSERT_TRUE(pwrite_loop(fd_.get(), tail.data(), tail.size(), 10, name_).ok());
  ASSERT_TRUE(pwrite_loop(fd_.get(), head.data(), head.size(), 0, name_).ok());
  std::vector<uint8_t> got(20);
  fid::Result<uint64_t> n = pread_loop(fd_.get(), got.data(), got.size(), 0, name_);
  ASSERT_TRUE(n.ok());
  ASSERT_EQ(*n, 12u);
  EXPECT_EQ(got[0], 1);
  EXPECT_EQ(got[2], 3);
  EXPECT_EQ(got[5], 0);  // the hole
  EXPECT_EQ(got[10], 7);
  EXPECT_EQ(got[11], 8);
}

TEST_F(PosixIoTest, FailuresCarryTheErrnoAndNameWhatFailed) {
  const Fd read_only(::open(name_.c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_GE(read_only.get(), 0);
  const uint8_t byte = 1;
  fid::Status w = write_loop(read_only.get(), &byte, 1, "the file");
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().code, EBADF);
  EXPECT_EQ(w.error().message, std::string("the file: ") + std::strerror(EBADF));
  w = pwrite_loop(read_only.get(), &byte, 1, 0, "the file");
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().code, EBADF);

  const Fd write_only(::open(name_.c_str(), O_WRONLY | O_CLOEXEC));
  ASSERT_GE(write_only.get(), 0);
  uint8_t got = 0;
  fid::Result<uint64_t> n = pread_loop(write_only.get(), &got, 1, 0, "records/000001.rec");
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.error().code, EBADF);
  EXPECT_EQ(n.error().message, std::string("records/000001.rec: ") + std::strerror(EBADF));
}

}  // namespace
