// The S3 path end to end against a real Ceph RADOS Gateway on 127.0.0.1 (scripts/s3-server.sh,
// booted once for this suite; skipped without radosgw or the aws command): a packed store
// uploaded with awscli opens through open_remote_store (SigV4-signed GET and HEADs, path
// style), its ranges and prefixes read back exactly; a wrong secret is "access denied" naming
// where the credentials came from and never the secret; a missing bucket is named.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <latch>
#include <sstream>

#include "net/url.h"
#include "storage/remote_store.h"
#include "test_result.h"
#include "test_store_fixture.h"

using fid::testutil::value_or_throw;

namespace {

const std::filesystem::path kServerDir = "/tmp/fid-unit-s3-" + std::to_string(::getpid());

bool on_path(const char* tool) {
  return std::system((std::string("command -v ") + tool + " >/dev/null 2>&1").c_str()) == 0;
}

class S3SourceTest : public fid::testutil::PackedStore {
 public:
  static void SetUpTestSuite() {
    if (!on_path("radosgw") || !on_path("aws")) {
      skip_ = "needs radosgw (Ceph) and the aws command";
      return;
    }
    const std::string start = std::string(FIDELITYFS_SOURCE_DIR) + "/scripts/s3-server.sh start " + kServerDir.string() +
                              " >/dev/null 2>" + kServerDir.string() + ".log";
    if (std::system(start.c_str()) != 0) {
      failed_ = "scripts/s3-server.sh did not start (see " + kServerDir.string() + ".log)";
      return;
    }
    started_ = true;
    std::ifstream env(kServerDir / "env");
    std::string line;
    while (std::getline(env, line)) {  // "export NAME=VALUE"
      const size_t eq = line.find('=');
      if (line.rfind("export ", 0) != 0 || eq == std::string::npos) continue;
      ::setenv(line.substr(7, eq - 7).c_str(), line.substr(eq + 1).c_str(), 1);
    }
  }
  static void TearDownTestSuite() {
    if (started_) (void)std::system((std::string(FIDELITYFS_SOURCE_DIR) + "/scripts/s3-server.sh stop " + kServerDir.string() + " 2>/dev/null").c_str());
    std::filesystem::remove(kServerDir.string() + ".log");
    for (const char* v : {"AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"}) ::unsetenv(v);
  }

 protected:
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    if (!failed_.empty()) FAIL() << failed_;  // installed but broken: a failure, not a skip
    PackedStore::SetUp();
    opts_.index_cache = (cache_.path() / "index-cache").string();
  }
  static int aws(const std::string& args) {
    return std::system(("aws --endpoint-url \"$AWS_ENDPOINT_URL\" " + args + " >/dev/null 2>&1").c_str());
  }
  fid::Result<fid::storage::RemoteStore> open(const std::string& url) {
    return fid::storage::open_remote_store(value_or_throw(fid::net::parse_store_url(url)), opts_);
  }

  static inline std::string skip_;
  static inline std::string failed_;
  static inline bool started_ = false;
  fid::testutil::TempDir cache_;
  fid::storage::StoreOptions opts_;
};

TEST_F(S3SourceTest, UploadedStoreReadsBackAndBadCredentialsOrBucketsAreNamed) {
  ASSERT_EQ(aws("s3 mb s3://fid-unit"), 0);
  ASSERT_EQ(aws("s3 cp --recursive " + path().string() + " s3://fid-unit/sets/one"), 0);

  auto remote = value_or_throw(open("s3://fid-unit/sets/one"));
  ASSERT_EQ(remote.store->files().size(), store().files().size());
  // Every piece of every file in one batch, then every record's prefix.
  std::vector<std::vector<uint8_t>> got;
  std::vector<fid::storage::RangeRead> batch;
  for (const auto& f : store().files()) got.emplace_back(store().pieces(f).back().size);
  size_t k = 0;
  for (const auto& f : store().files()) batch.push_back({f.record, store().pieces(f).back().offset, got[k++], {}});
  remote.source->read_ranges(batch);
  k = 0;
  for (const auto& f : store().files()) {
    ASSERT_TRUE(batch[k].status.ok()) << batch[k].status.error().message;
    EXPECT_EQ(got[k], raw_piece(f, f.piece_count - 1));
    ++k;
  }
  for (const auto& r : store().records()) {
    std::vector<uint8_t> buf(r.size + 4096);
    ASSERT_TRUE(remote.source->read_prefix(r.id, r.size, buf.data()).ok());
    std::ifstream in(path() / r.path, std::ios::binary);
    const std::vector<uint8_t> want{std::istreambuf_iterator<char>(in), {}};
    EXPECT_TRUE(std::equal(want.begin(), want.end(), buf.begin())) << r.path;
  }

  // A wrong secret: access denied, credentials from the environment, the secret never shown.
  const std::string secret = std::getenv("AWS_SECRET_ACCESS_KEY");
  ::setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret-0123456789", 1);
  auto denied = open("s3://fid-unit/sets/one");
  ::setenv("AWS_SECRET_ACCESS_KEY", secret.c_str(), 1);
  ASSERT_FALSE(denied);
  EXPECT_EQ(denied.error().code, EACCES);
  EXPECT_NE(denied.error().message.find("s3://fid-unit/sets/one: access denied (HTTP 403"), std::string::npos)
      << denied.error().message;
  EXPECT_NE(denied.error().message.find("from environment"), std::string::npos) << denied.error().message;
  EXPECT_EQ(denied.error().message.find("wrong-secret"), std::string::npos);
  EXPECT_EQ(denied.error().message.find(secret), std::string::npos);

  auto no_bucket = open("s3://fid-no-such-bucket/x");
  ASSERT_FALSE(no_bucket);
  EXPECT_NE(no_bucket.error().message.find("no bucket named 'fid-no-such-bucket'"), std::string::npos)
      << no_bucket.error().message;

  auto no_store = open("s3://fid-unit/sets/two");
  ASSERT_FALSE(no_store);
  EXPECT_NE(no_store.error().message.find("not a fidelityfs store"), std::string::npos) << no_store.error().message;
}

}  // namespace
