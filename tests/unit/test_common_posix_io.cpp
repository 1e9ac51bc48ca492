// common/posix_io.h: pread_loop reads what is asked for and stops only at end of file, and
// pread_exact says when a file ends before; write_loop and pwrite_loop write everything
// (pwrite_loop at its offset); a failure is an Error with the errno and a message
// "<what>: <cause>". write_file_atomically replaces a file whole, and fsync_path names what it
// could not flush.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <string>
#include <vector>

#include "common/fd.h"
#include "common/posix_io.h"
#include "test_files.h"

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

TEST_F(PosixIoTest, PreadExactSaysWhereTheFileEndsBeforeWhatWasAsked) {
  const std::vector<uint8_t> bytes{1, 2, 3, 4};
  ASSERT_TRUE(write_loop(fd_.get(), bytes.data(), bytes.size(), name_).ok());
  std::vector<uint8_t> got(3);
  ASSERT_TRUE(fid::pread_exact(fd_.get(), got.data(), 3, 1, name_).ok());
  EXPECT_EQ(got, (std::vector<uint8_t>{2, 3, 4}));
  fid::Status cut = fid::pread_exact(fd_.get(), got.data(), 3, 2, "the header");
  ASSERT_FALSE(cut.ok());
  EXPECT_EQ(cut.error().code, EIO);
  EXPECT_EQ(cut.error().message, "the header: cut short (2 of 3 bytes at 2)");
}

std::string contents(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

std::span<const uint8_t> bytes_of(std::string_view text) { return {reinterpret_cast<const uint8_t*>(text.data()), text.size()}; }

// The file is replaced whole with its mode; whatever has the temporary's name (a crash's leftover,
// here a symbolic link) is removed, never written through; a failure leaves the old file and no
// temporary behind.
TEST(WriteFileAtomically, ReplacesTheFileWholeAndLeavesNothingBehind) {
  fid::testutil::TempDir dir;
  const auto file = dir.path() / "etag";
  const auto tmp = dir.path() / ("etag.tmp-" + std::to_string(::getpid()));
  ASSERT_TRUE(fid::write_file_atomically(file, bytes_of("first"), 0600).ok());
  EXPECT_EQ(contents(file), "first");
  EXPECT_EQ(std::filesystem::status(file).permissions() & std::filesystem::perms::all, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  const auto target = dir.path() / "elsewhere";
  std::ofstream(target) << "untouched";
  std::filesystem::create_symlink(target, tmp);  // a leftover of this pid's name, and a link at that
  ASSERT_TRUE(fid::write_file_atomically(file, bytes_of("second, longer"), 0644).ok());
  EXPECT_EQ(contents(file), "second, longer");
  EXPECT_EQ(contents(target), "untouched");
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::symlink_status(tmp)));
  // A folder in the file's place: the rename fails, the folder stays, no temporary is left.
  const auto folder = dir.path() / "folder";
  std::filesystem::create_directories(folder / "inside");
  fid::Status failed = fid::write_file_atomically(folder, bytes_of("x"), 0644);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.error().code, EISDIR);
  EXPECT_NE(failed.error().message.find(folder.string() + ": cannot replace"), std::string::npos) << failed.error().message;
  EXPECT_TRUE(std::filesystem::is_directory(folder / "inside"));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 3) << "etag, elsewhere, folder only";
}

TEST(FsyncPath, FlushesFilesAndFoldersAndNamesWhatItCannotOpen) {
  fid::testutil::TempDir dir;
  std::ofstream(dir.path() / "f") << "x";
  EXPECT_TRUE(fid::fsync_path(dir.path() / "f").ok());
  EXPECT_TRUE(fid::fsync_path(dir.path()).ok());
  fid::Status missing = fid::fsync_path(dir.path() / "none");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ENOENT);
  EXPECT_EQ(missing.error().message, (dir.path() / "none").string() + ": cannot open to flush: " + std::strerror(ENOENT));
}

}  // namespace
