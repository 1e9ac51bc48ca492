// The pure parts of the HTTP read path: header parsing, status classes, S3 error bodies, the
// verdict on an attempt (short bodies keep what arrived and retry the rest), backoff bounds
// and how a prefix is split into parts.
#include <gtest/gtest.h>

#include <numeric>

#include "net/http_client.h"
#include "net/http_response.h"
#include "storage/http_record_source.h"

namespace http = fid::net::http;
using fid::storage::HttpRecordSource;
using fid::net::RetryPolicy;
using std::chrono::milliseconds;

TEST(HttpResponse, ContentRange) {
  auto r = http::parse_content_range("bytes 100-199/1000");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->first, 100u);
  EXPECT_EQ(r->last, 199u);
  EXPECT_EQ(r->total, 1000u);
  r = http::parse_content_range(" Bytes 0-0/* ");
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->total);
  for (const char* bad : {"", "bytes", "bytes 5-4/10", "bytes 0-9/9", "bytes */100", "items 0-1/2", "bytes 0-1/2x",
                          "bytes 0-99999999999999999999/1", "bytes0-1/2", "bytes -1/2"})
    EXPECT_FALSE(http::parse_content_range(bad)) << bad;
}

TEST(HttpResponse, ContentLengthEtagStatusLineHeaders) {
  EXPECT_EQ(http::parse_content_length(" 4096\r\n"), 4096u);
  EXPECT_FALSE(http::parse_content_length("12a"));
  EXPECT_FALSE(http::parse_content_length("-1"));
  EXPECT_FALSE(http::parse_content_length("18446744073709551616"));
  EXPECT_EQ(http::parse_etag(" \"abc-123\"\r\n"), "\"abc-123\"");
  EXPECT_EQ(http::parse_etag("W/\"x\""), "W/\"x\"");
  EXPECT_FALSE(http::parse_etag("  "));
  EXPECT_FALSE(http::parse_etag(std::string("\"a\x01\"")));
  EXPECT_EQ(http::parse_status_line("HTTP/1.1 206 Partial Content\r\n"), 206);
  EXPECT_EQ(http::parse_status_line("HTTP/2 404\r\n"), 404);
  EXPECT_FALSE(http::parse_status_line("Content-Length: 5"));
  EXPECT_FALSE(http::parse_status_line("HTTP/1.1 20 OK"));
  auto h = http::split_header("ETag:  \"v1\"\r\n");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->first, "ETag");
  EXPECT_EQ(h->second, "\"v1\"");
  EXPECT_FALSE(http::split_header("\r\n"));
}

TEST(HttpResponse, StatusClasses) {
  using C = http::StatusClass;
  for (long s : {200L, 206L, 304L}) EXPECT_EQ(http::classify_status(s), C::success) << s;
  for (long s : {408L, 429L, 500L, 502L, 503L, 504L}) EXPECT_EQ(http::classify_status(s), C::retryable) << s;
  for (long s : {301L, 400L, 401L, 403L, 404L, 416L, 501L}) EXPECT_EQ(http::classify_status(s), C::final) << s;
}

TEST(HttpResponse, S3ErrorBody) {
  auto e = http::parse_s3_error(
      "<?xml version=\"1.0\"?>\n<Error><Code>NoSuchBucket</Code><Message>The specified bucket does not exist</Message>"
      "<BucketName>data-1</BucketName><RequestId>x</RequestId></Error>");
  EXPECT_EQ(e.code, "NoSuchBucket");
  EXPECT_EQ(e.message, "The specified bucket does not exist");
  EXPECT_EQ(e.bucket, "data-1");
  e = http::parse_s3_error("<Error><Code>SlowDown</Code><Message>" + std::string(1000, 'm'));  // cut off
  EXPECT_EQ(e.code, "SlowDown");
  EXPECT_EQ(e.message.size(), 256u);
  EXPECT_TRUE(http::parse_s3_error("<html>503</html>").code.empty());
  EXPECT_EQ(http::parse_s3_error("<Code>a\x01\x7f</Code>").code, "a??");
}

namespace {

http::Attempt partial(uint64_t first, uint64_t len, uint64_t got) {
  http::Attempt a;
  a.ranged = true;
  a.status = 206;
  a.want_first = first;
  a.want_len = len;
  a.content_range = http::ContentRange{first, first + len - 1, 1u << 20};
  a.body_bytes = got;
  return a;
}

}  // namespace

TEST(HttpResponse, JudgeCompleteAndShortBodies) {
  EXPECT_EQ(http::judge(partial(1000, 500, 500)).verdict, http::Verdict::done);
  // The connection broke after 200 of 500 bytes: keep them, retry the other 300.
  http::Attempt a = partial(1000, 500, 200);
  a.transport = http::Transport::broken;
  http::Judgement j = http::judge(a);
  EXPECT_EQ(j.verdict, http::Verdict::retry);
  EXPECT_EQ(j.kept, 200u);
  EXPECT_NE(j.cause.find("after 200 bytes"), std::string::npos) << j.cause;
  // A clean end of a short body (no transport error) is retried for the rest too.
  j = http::judge(partial(1000, 500, 120));
  EXPECT_EQ(j.verdict, http::Verdict::retry);
  EXPECT_EQ(j.kept, 120u);
  // A stall mid-body keeps what arrived.
  a = partial(0, 100, 99);
  a.transport = http::Transport::timeout;
  j = http::judge(a);
  EXPECT_EQ(j.verdict, http::Verdict::retry);
  EXPECT_EQ(j.kept, 99u);
  // The next attempt is asked for the remainder only.
  EXPECT_EQ(http::range_header(1000 + 200, 300), "bytes=1200-1499");
}

TEST(HttpResponse, JudgeFailures) {
  // The object ends inside the range: no retry can help.
  http::Attempt a = partial(1000, 500, 100);
  a.content_range->last = 1099;
  EXPECT_EQ(http::judge(a).verdict, http::Verdict::fail);
  // A range the server moved.
  a = partial(1000, 500, 500);
  a.content_range->first = 0;
  EXPECT_EQ(http::judge(a).verdict, http::Verdict::fail);
  // A 200 (whole object) to a range not at 0: the server ignores Range.
  a = partial(1000, 500, 500);
  a.status = 200;
  a.content_range.reset();
  a.content_length = 1u << 20;
  EXPECT_EQ(http::judge(a).verdict, http::Verdict::fail);
  // ... but at offset 0 over the whole object it is the answer.
  a.want_first = 0;
  a.content_length = 500;
  EXPECT_EQ(http::judge(a).verdict, http::Verdict::done);
  a = partial(0, 10, 10);
  a.transport = http::Transport::body_too_big;
  EXPECT_EQ(http::judge(a).verdict, http::Verdict::fail);
  for (long s : {403L, 404L, 416L}) {
    http::Attempt b;
    b.status = s;
    EXPECT_EQ(http::judge(b).verdict, http::Verdict::fail) << s;
  }
  for (long s : {429L, 500L, 503L}) {
    http::Attempt b;
    b.status = s;
    EXPECT_EQ(http::judge(b).verdict, http::Verdict::retry) << s;
    EXPECT_EQ(http::judge(b).kept, 0u);
  }
  http::Attempt refused;
  refused.transport = http::Transport::connect;
  refused.transport_detail = "Connection refused";
  EXPECT_EQ(http::judge(refused).cause, "cannot connect (Connection refused)");
  http::Attempt head;
  head.head = true;
  head.status = 200;
  head.content_length = 77;
  EXPECT_EQ(http::judge(head).verdict, http::Verdict::done);
}

TEST(HttpRetry, BackoffIsFullJitterBetweenZeroAndTheCappedExponential) {
  RetryPolicy p;  // 50 ms base, 2 s cap
  EXPECT_EQ(p.backoff(1, 0.0), milliseconds(0));
  EXPECT_EQ(p.backoff(1, 0.999), milliseconds(49));
  EXPECT_EQ(p.backoff(3, 0.5), milliseconds(100));   // half of 200
  EXPECT_EQ(p.backoff(6, 0.999), milliseconds(1598));  // 1600 cap not reached
  EXPECT_EQ(p.backoff(7, 0.999), milliseconds(1998));  // 3200 capped to 2000
  EXPECT_EQ(p.backoff(200, 0.999), milliseconds(1998));  // no shift overflow
  // The worst case of all retries of one request stays well inside the budget.
  milliseconds worst{0};
  for (unsigned r = 1; r < p.max_attempts; ++r) worst += p.backoff(r, 1.0);
  EXPECT_LE(worst, milliseconds(10000));
  EXPECT_LT(worst, p.budget);
}

TEST(HttpRecordSourceParts, PrefixPartsCoverTheRangeInPartsOfAtLeastThePartSize) {
  const uint64_t MiB = 1 << 20;
  EXPECT_EQ(HttpRecordSource::prefix_parts(100).size(), 1u);
  EXPECT_EQ(HttpRecordSource::prefix_parts(15 * MiB).size(), 1u);
  for (uint64_t len : {16 * MiB, 16 * MiB + 1, 100 * MiB + 12345, 1000 * MiB - 1}) {
    auto parts = HttpRecordSource::prefix_parts(len);
    EXPECT_EQ(parts.size(), len / HttpRecordSource::kPartSize);
    uint64_t at = 0;
    for (const auto& [off, n] : parts) {
      EXPECT_EQ(off, at);
      EXPECT_GE(n, HttpRecordSource::kPartSize);
      EXPECT_LT(n, 2 * HttpRecordSource::kPartSize);
      at += n;
    }
    EXPECT_EQ(at, len);
  }
}
