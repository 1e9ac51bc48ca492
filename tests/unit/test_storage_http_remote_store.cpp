// open_remote_store over plain HTTP against nginx on 127.0.0.1 (the store in a sub-folder of
// what it serves): the index is fetched once and then revalidated (304) from the 0700 index
// cache, the identity is the index's hash, the source reads the records; a missing index, a
// missing or short record and an unreachable endpoint are errors that say so.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <fmt/format.h>
#include <xxhash.h>

#include <fstream>

#include "net/url.h"
#include "nginx_server.h"
#include "storage/open_store.h"
#include "storage/remote_store.h"
#include "test_result.h"
#include "test_store_fixture.h"

using fid::net::HttpOptions;
using fid::storage::StoreOptions;
using fid::testutil::NginxServer;
using fid::testutil::value_or_throw;

namespace {

class RemoteStoreTest : public fid::testutil::PackedStore {
 protected:
  void SetUp() override {
    if (!NginxServer::available()) GTEST_SKIP() << "no nginx at " << NginxServer::kBinary;
    PackedStore::SetUp();
    server_ = std::make_unique<NginxServer>(dir_.path());  // the store is at /store
    opts_.index_cache = (cache_.path() / "index-cache").string();
    http_.retry.max_attempts = 3;
    http_.retry.base = http_.retry.cap = std::chrono::milliseconds(5);
  }
  fid::Result<fid::storage::RemoteStore> open(const std::string& suffix = "/store") {
    auto url = value_or_throw(fid::net::parse_store_url(server_->url() + suffix));
    return fid::storage::open_remote_store(url, opts_, http_);
  }
  std::string message_of_failed_open(const std::string& suffix = "/store") {
    auto r = open(suffix);
    return r ? std::string("(opened)") : r.error().message;
  }
  static std::string file_text(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }

  std::unique_ptr<NginxServer> server_;
  fid::testutil::TempDir cache_;
  StoreOptions opts_;
  HttpOptions http_;
};

TEST_F(RemoteStoreTest, OpensReadsAndRevalidatesTheCachedIndex) {
  auto remote = value_or_throw(open());
  EXPECT_EQ(remote.store->files().size(), store().files().size());
  EXPECT_EQ(remote.store->location(), server_->url() + "/store");
  const std::string index = file_text(path() / "index.sqlite");
  EXPECT_EQ(remote.identity, fmt::format("{:016x}", XXH3_64bits(index.data(), index.size())));
  EXPECT_EQ(file_text(remote.index_file), index);
  struct stat st {};
  ASSERT_EQ(::stat(opts_.index_cache.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);

  const auto& f = jpeg_with(3);
  std::vector<uint8_t> got(remote.store->pieces(f)[1].size);
  std::vector<fid::storage::RangeRead> batch{{f.record, remote.store->pieces(f)[1].offset, got, {}}};
  remote.source->read_ranges(batch);
  ASSERT_TRUE(batch[0].status.ok()) << batch[0].status.error().message;
  EXPECT_EQ(got, raw_piece(f, 1));

  // A second open asks with If-None-Match and reuses the copy.
  auto again = value_or_throw(open());
  EXPECT_EQ(again.index_file, remote.index_file);
  EXPECT_EQ(again.identity, remote.identity);
  const std::string log = server_->read_access_log();
  EXPECT_NE(log.find("\"GET /store/index.sqlite HTTP/1.1\" 200"), std::string::npos) << log;
  EXPECT_NE(log.find("\"GET /store/index.sqlite HTTP/1.1\" 304"), std::string::npos) << log;
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(opts_.index_cache)) {
    EXPECT_EQ(e.path().string().find("partial"), std::string::npos) << e.path();
    ++files;
  }
  EXPECT_EQ(files, 2u);  // the index and its ETag
}

TEST_F(RemoteStoreTest, OpenStoreTakesAnHttpUrl) {
  auto opened = value_or_throw(fid::storage::open_store(server_->url() + "/store", opts_));
  EXPECT_EQ(opened.store->records().size(), store().records().size());
  EXPECT_EQ(opened.identity.size(), 16u);
  EXPECT_NE(opened.source->describe().find("remote"), std::string::npos);
}

TEST_F(RemoteStoreTest, MissingAndShortRecordsRefuseTheOpen) {
  const std::string missing = store().records()[0].path, shorter = store().records()[1].path;
  std::filesystem::remove(path() / missing);
  std::filesystem::resize_file(path() / shorter, 100);
  const std::string m = message_of_failed_open();
  EXPECT_NE(m.find(fmt::format("2 of {} records missing or short", store().records().size())), std::string::npos) << m;
  EXPECT_NE(m.find(missing + " (missing)"), std::string::npos) << m;
  EXPECT_NE(m.find(shorter + " (100 bytes, the index says"), std::string::npos) << m;
}

// A server that sends an index without end (or a huge one) fills no disk: the download stops at
// max_index_bytes, the open fails naming the index, and no partial copy is left.
TEST_F(RemoteStoreTest, AnIndexLargerThanTheLimitIsRefusedWhileItDownloads) {
  opts_.max_index_bytes = 1000;
  auto r = open();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, EFBIG);
  EXPECT_NE(r.error().message.find("index.sqlite is larger than 1000 bytes"), std::string::npos) << r.error().message;
  for (const auto& e : std::filesystem::directory_iterator(opts_.index_cache))
    EXPECT_EQ(e.path().string().find("partial"), std::string::npos) << e.path();
}

TEST_F(RemoteStoreTest, NoIndexIsNotAStore) {
  EXPECT_EQ(message_of_failed_open("/elsewhere"),
            server_->url() + "/elsewhere: not a fidelityfs store: no index.sqlite (upload the records first and "
                             "index.sqlite last)");
  auto r = open("/elsewhere");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ENOENT);
}

TEST_F(RemoteStoreTest, AnUnreachableEndpointIsNamed) {
  const std::string url = server_->url();
  server_->stop();
  const std::string m = message_of_failed_open();
  EXPECT_NE(m.find(url + "/store: cannot reach the endpoint " + url + ": "), std::string::npos) << m;
  EXPECT_NE(m.find("after 3 attempts"), std::string::npos) << m;
}

}  // namespace
