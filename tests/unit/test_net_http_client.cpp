// HttpClient and HttpRecordSource against a real nginx on 127.0.0.1: ranges and prefix parts
// give the exact bytes, many ranges at once, a missing object names its URL, a body larger
// than its buffer never overflows it, a stopped server fails with EIO after the configured
// retries in bounded time (the signer runs for every attempt), the client works in a forked
// child, and destroying it cancels what is left.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <latch>
#include <random>
#include <vector>

#include "net/http_client.h"
#include "nginx_server.h"
#include "storage/http_record_source.h"
#include "test_store_fixture.h"

using fid::net::HttpClient;
using fid::net::HttpOptions;
using fid::storage::HttpRecordSource;
using fid::net::HttpRequest;
using fid::net::HttpResult;
using fid::storage::PrefixRead;
using fid::storage::RangeRead;
using fid::net::RemoteLocation;
using fid::testutil::NginxServer;

namespace {

// Small retry settings: a test that must exhaust them ends in well under a second.
HttpOptions quick_options() {
  HttpOptions o;
  o.retry.max_attempts = 4;
  o.retry.base = std::chrono::milliseconds(5);
  o.retry.cap = std::chrono::milliseconds(20);
  o.retry.budget = std::chrono::milliseconds(5000);
  o.connect_timeout = std::chrono::milliseconds(1000);
  o.stall_timeout = std::chrono::seconds(2);
  return o;
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

class HttpClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!NginxServer::available()) GTEST_SKIP() << "no nginx at " << NginxServer::kBinary;
    data_ = random_bytes(3 << 20, 7);
    std::ofstream(dir_.path() / "blob.bin", std::ios::binary)
        .write(reinterpret_cast<const char*>(data_.data()), static_cast<std::streamsize>(data_.size()));
    server_ = std::make_unique<NginxServer>(dir_.path());
  }
  HttpRequest range_request(uint64_t offset, std::span<uint8_t> dst) const {
    HttpRequest r;
    r.url = server_->url() + "/blob.bin";
    r.ranged = true;
    r.offset = offset;
    r.dst = dst;
    return r;
  }

  fid::testutil::TempDir dir_;
  std::vector<uint8_t> data_;
  std::unique_ptr<NginxServer> server_;
};

TEST_F(HttpClientTest, ManyConcurrentRangesGiveTheExactBytes) {
  fid::storage::SourceCounters counters;
  HttpOptions o = quick_options();
  o.max_in_flight = 16;  // fewer than the requests: the rest queue
  o.counters = &counters;
  HttpClient client(o);
  constexpr size_t kRanges = 300;
  std::mt19937 rng(1);
  std::vector<std::pair<uint64_t, std::vector<uint8_t>>> ranges;
  for (size_t k = 0; k < kRanges; ++k) {
    const uint64_t len = 1 + rng() % 70000;
    const uint64_t off = rng() % (data_.size() - len);
    ranges.emplace_back(off, std::vector<uint8_t>(len, 0xEE));
  }
  std::vector<fid::Status> status(kRanges);
  std::latch all(kRanges);
  for (size_t k = 0; k < kRanges; ++k) {
    HttpRequest r = range_request(ranges[k].first, ranges[k].second);
    r.done = [&, k](fid::Status s, const HttpResult&) {
      status[k] = std::move(s);
      all.count_down();
    };
    client.submit(std::move(r));
  }
  all.wait();
  uint64_t bytes = 0;
  for (size_t k = 0; k < kRanges; ++k) {
    ASSERT_TRUE(status[k].ok()) << status[k].error().message;
    const auto& [off, got] = ranges[k];
    ASSERT_TRUE(std::equal(got.begin(), got.end(), data_.begin() + static_cast<std::ptrdiff_t>(off))) << k;
    bytes += got.size();
  }
  EXPECT_EQ(counters.requests.load(), kRanges);
  EXPECT_EQ(counters.retries.load(), 0u);
  EXPECT_EQ(counters.bytes.load(), bytes);
}

TEST_F(HttpClientTest, MissingObjectFailsAtOnceNamingTheUrl) {
  HttpClient client(quick_options());
  std::vector<uint8_t> buf(10);
  HttpRequest r = range_request(0, buf);
  r.url = server_->url() + "/nope.rec?X-Amz-Signature=secret";
  auto [s, res] = client.perform(std::move(r));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, ENOENT);
  EXPECT_EQ(res.status, 404);
  EXPECT_EQ(res.attempts, 1u);  // not retried
  EXPECT_EQ(s.error().message, server_->url() + "/nope.rec: HTTP 404");  // no query (secrets) in messages
}

TEST_F(HttpClientTest, HeadGivesLengthAndEtag) {
  HttpClient client(quick_options());
  HttpRequest r;
  r.method = HttpRequest::Method::head;
  r.url = server_->url() + "/blob.bin";
  auto [s, res] = client.perform(std::move(r));
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(res.content_length, data_.size());
  EXPECT_FALSE(res.etag.empty());
  EXPECT_EQ(res.body_bytes, 0u);
}

TEST_F(HttpClientTest, ABodyLargerThanItsBufferIsAnErrorNotAnOverflow) {
  HttpClient client(quick_options());
  std::vector<uint8_t> buf(4096 + 64, 0x5A);  // the last 64 bytes are a guard
  HttpRequest r;
  r.url = server_->url() + "/blob.bin";  // whole object (3 MiB) into 4 KiB
  r.dst = std::span<uint8_t>(buf).first(4096);
  auto [s, res] = client.perform(std::move(r));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, EIO);
  EXPECT_NE(s.error().message.find("larger than"), std::string::npos) << s.error().message;
  for (size_t k = 4096; k < buf.size(); ++k) ASSERT_EQ(buf[k], 0x5A);
  EXPECT_EQ(res.attempts, 1u);
}

TEST_F(HttpClientTest, ARangePastTheEndOfTheObjectFails) {
  HttpClient client(quick_options());
  std::vector<uint8_t> buf(100);
  auto [s, res] = client.perform(range_request(data_.size() - 10, buf));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, EIO);
  EXPECT_NE(s.error().message.find("the object ends at byte"), std::string::npos) << s.error().message;
  auto [s2, res2] = client.perform(range_request(data_.size() + 10, buf));
  ASSERT_FALSE(s2.ok());
  EXPECT_EQ(res2.status, 416);
}

TEST_F(HttpClientTest, AStoppedServerFailsWithEioAfterTheRetriesAndSignsEveryAttempt) {
  fid::storage::SourceCounters counters;
  HttpOptions o = quick_options();
  o.counters = &counters;
  HttpClient client(o);
  std::vector<uint8_t> buf(1000);
  auto [ok, first] = client.perform(range_request(0, buf));  // a kept-alive connection now exists
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  server_->stop();
  std::atomic<int> signed_attempts{0};
  HttpRequest r = range_request(5000, buf);
  r.sign = [&] {
    ++signed_attempts;
    return fid::net::Headers{{"Authorization", "AWS4-HMAC-SHA256 secret-signature"}};
  };
  const auto t0 = std::chrono::steady_clock::now();
  auto [s, res] = client.perform(std::move(r));
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, EIO);
  EXPECT_NE(s.error().message.find(server_->url() + "/blob.bin: "), std::string::npos) << s.error().message;
  EXPECT_NE(s.error().message.find("after 4 attempts"), std::string::npos) << s.error().message;
  EXPECT_EQ(s.error().message.find("secret"), std::string::npos) << s.error().message;
  EXPECT_EQ(res.attempts, 4u);
  EXPECT_EQ(signed_attempts.load(), 4);
  EXPECT_EQ(counters.retries.load(), 3u);
  EXPECT_LT(took, std::chrono::seconds(5));
}

TEST_F(HttpClientTest, ARequestThatCannotBeSignedFailsWithTheSignersErrorUnretried) {
  HttpClient client(quick_options());
  std::vector<uint8_t> buf(100);
  int attempts = 0;
  HttpRequest r = range_request(0, buf);
  r.sign = [&]() -> fid::Result<fid::net::Headers> {
    ++attempts;
    return fid::Error{EIO, "cannot sign the request: OpenSSL HMAC-SHA256 failed"};
  };
  auto [s, res] = client.perform(std::move(r));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code, EIO);
  EXPECT_NE(s.error().message.find("cannot sign the request: OpenSSL HMAC-SHA256 failed"), std::string::npos)
      << s.error().message;
  EXPECT_EQ(attempts, 1);
  auto [again, second] = client.perform(range_request(0, buf));  // the client goes on serving
  EXPECT_TRUE(again.ok()) << again.error().message;
}

TEST_F(HttpClientTest, AClientMadeBeforeForkWorksInTheChild) {
  HttpClient client(quick_options());
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::vector<uint8_t> buf(4096);
    auto [s, res] = client.perform(range_request(12345, buf));
    const bool same = s.ok() && std::equal(buf.begin(), buf.end(), data_.begin() + 12345);
    ::_exit(same ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST_F(HttpClientTest, DestroyingTheClientCancelsWhatIsLeft) {
  server_->stop();
  std::vector<uint8_t> buf(10);
  fid::Status status;
  std::latch finished(1);
  {
    HttpOptions o = quick_options();
    o.retry.base = o.retry.cap = std::chrono::milliseconds(60000);  // waits for its retry forever
    o.retry.budget = std::chrono::milliseconds(600000);
    HttpClient client(o);
    HttpRequest r = range_request(0, buf);
    r.done = [&](fid::Status s, const HttpResult&) {
      status = std::move(s);
      finished.count_down();
    };
    client.submit(std::move(r));
  }
  finished.wait();
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.error().code, ECANCELED);
}

// HttpRecordSource over the packed test store served by nginx.
class HttpSourceTest : public fid::testutil::PackedStore {
 protected:
  void SetUp() override {
    if (!NginxServer::available()) GTEST_SKIP() << "no nginx at " << NginxServer::kBinary;
    PackedStore::SetUp();
    server_ = std::make_unique<NginxServer>(path());
  }
  RemoteLocation location() const {
    RemoteLocation w;
    w.text = server_->url();
    w.origin = server_->url();
    w.host_header = "127.0.0.1:" + std::to_string(server_->port());
    return w;
  }
  std::vector<uint8_t> record_bytes(uint32_t r) const {
    std::ifstream in(path() / store().records()[r].path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }
  std::unique_ptr<NginxServer> server_;
};

TEST_F(HttpSourceTest, EveryPieceOfEveryFileInOneBatch) {
  HttpRecordSource src(store(), location(), quick_options());
  std::vector<std::vector<uint8_t>> got;
  std::vector<std::pair<const fid::index::File*, uint32_t>> which;
  for (const auto& f : store().files())
    for (uint32_t i = 0; i < f.piece_count; ++i) {
      which.emplace_back(&f, i);
      got.emplace_back(store().pieces(f)[i].size, 0xAA);
    }
  std::vector<RangeRead> batch;
  for (size_t k = 0; k < which.size(); ++k)
    batch.push_back({which[k].first->record, store().pieces(*which[k].first)[which[k].second].offset, got[k], {}});
  src.read_ranges(batch);
  for (size_t k = 0; k < which.size(); ++k) {
    ASSERT_TRUE(batch[k].status.ok()) << batch[k].status.error().message;
    EXPECT_EQ(got[k], raw_piece(*which[k].first, which[k].second)) << k;
  }
  EXPECT_EQ(src.counters().requests.load(), which.size());  // one request per range
}

TEST_F(HttpSourceTest, PrefixesInPartsGiveTheRecordBytes) {
  constexpr uint64_t kPart = 3000;  // 16 KiB records: five parts each
  HttpRecordSource src(store(), location(), quick_options(), kPart);
  std::vector<std::vector<uint8_t>> bufs;
  std::vector<PrefixRead> batch;
  size_t parts = 0;
  for (const auto& r : store().records()) {
    bufs.emplace_back(r.size + 4096, 0xCC);
    parts += HttpRecordSource::prefix_parts(r.size, kPart).size();
  }
  for (size_t k = 0; k < bufs.size(); ++k) batch.push_back({static_cast<uint32_t>(k), store().records()[k].size, bufs[k].data(), {}});
  std::latch done(1);
  src.read_prefixes(batch, [&] { done.count_down(); });
  done.wait();
  for (size_t k = 0; k < bufs.size(); ++k) {
    ASSERT_TRUE(batch[k].status.ok()) << batch[k].status.error().message;
    const auto want = record_bytes(static_cast<uint32_t>(k));
    ASSERT_EQ(want.size(), store().records()[k].size);
    EXPECT_TRUE(std::equal(want.begin(), want.end(), bufs[k].begin())) << k;
    EXPECT_EQ(bufs[k][want.size()], 0xCC);  // nothing past the prefix
  }
  EXPECT_GT(parts, bufs.size());
  EXPECT_EQ(src.counters().requests.load(), parts);
  // The blocking form, a short prefix.
  std::vector<uint8_t> head(100);
  ASSERT_TRUE(src.read_prefix(0, head.size(), head.data()).ok());
  EXPECT_TRUE(std::equal(head.begin(), head.end(), record_bytes(0).begin()));
}

TEST_F(HttpSourceTest, AMissingRecordFailsOnlyItsRangesWithEio) {
  const auto& victim = jpeg_with(3);
  const std::string victim_path = store().records()[victim.record].path;
  std::filesystem::remove(path() / victim_path);
  HttpRecordSource src(store(), location(), quick_options());
  std::vector<std::vector<uint8_t>> got;
  std::vector<RangeRead> batch;
  for (const auto& f : store().files()) got.emplace_back(store().pieces(f)[0].size);
  size_t k = 0;
  for (const auto& f : store().files()) batch.push_back({f.record, store().pieces(f)[0].offset, got[k++], {}});
  src.read_ranges(batch);
  k = 0;
  for (const auto& f : store().files()) {
    const RangeRead& r = batch[k];
    if (f.record == victim.record) {
      ASSERT_FALSE(r.status.ok());
      EXPECT_EQ(r.status.error().code, EIO);
      EXPECT_EQ(r.status.error().message, server_->url() + "/" + victim_path + ": HTTP 404");
    } else {
      ASSERT_TRUE(r.status.ok()) << r.status.error().message;
      EXPECT_EQ(got[k], raw_piece(f, 0));
    }
    ++k;
  }
}

}  // namespace
