// libFuzzer target: the HTTP response parsers (header values, status lines, S3 error bodies)
// and the verdict on an attempt must accept or reject any input without crashing, and what
// they accept must be consistent (a range's last byte not before its first, a verdict that
// keeps no more bytes than were asked for).
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "net/http_response.h"

namespace http = fid::net::http;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto range = http::parse_content_range(text);
  if (range && (range->last < range->first || (range->total && *range->total <= range->last))) std::abort();
  const auto length = http::parse_content_length(text);
  (void)http::parse_etag(text);
  if (auto code = http::parse_status_line(text); code && (*code < 100 || *code > 999)) std::abort();
  (void)http::split_header(text);
  const http::S3Error e = http::parse_s3_error(text);
  if (e.code.size() > 256 || e.message.size() > 256 || e.bucket.size() > 256) std::abort();

  // The verdict on an attempt built from the input's parses and its first bytes.
  if (size >= 4) {
    http::Attempt a;
    a.transport = static_cast<http::Transport>(data[0] % 6);
    a.status = 100 + data[1] * 2;
    a.ranged = data[2] & 1;
    a.head = data[2] & 2;
    a.want_first = range ? range->first : 0;
    a.want_len = 1 + data[3] * 97u;
    a.content_range = range;
    a.content_length = length;
    a.body_bytes = static_cast<uint64_t>(data[2]) * 13u;
    const http::Judgement j = http::judge(a);
    if (j.kept > a.want_len || (j.verdict == http::Verdict::done) != j.cause.empty()) std::abort();
  }
  return 0;
}
