#include "net/http_response.h"

#include <curl/curl.h>
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <limits>

#include "common/ascii.h"

namespace fid::net::http {

namespace {

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_blank(s.back())) s.remove_suffix(1);
  return s;
}


// Leading decimal digits of `s` (at least one) as a number; consumes them. nullopt on overflow.
std::optional<uint64_t> take_number(std::string_view& s) {
  size_t n = 0;
  uint64_t v = 0;
  while (n < s.size() && s[n] >= '0' && s[n] <= '9') {
    const auto d = static_cast<uint64_t>(s[n] - '0');
    if (v > (std::numeric_limits<uint64_t>::max() - d) / 10) return std::nullopt;
    v = v * 10 + d;
    ++n;
  }
  if (n == 0) return std::nullopt;
  s.remove_prefix(n);
  return v;
}

bool take(std::string_view& s, char c) {
  if (s.empty() || s.front() != c) return false;
  s.remove_prefix(1);
  return true;
}

// The text of the first <tag>...</tag> in `body`, printable ASCII only, at most kMaxField.
std::string element(std::string_view body, std::string_view tag) {
  constexpr size_t kMaxField = 256;
  const std::string open = fmt::format("<{}>", tag), close = fmt::format("</{}>", tag);
  const size_t a = body.find(open);
  if (a == std::string_view::npos) return {};
  const size_t from = a + open.size();
  const size_t b = body.find(close, from);
  std::string_view v = body.substr(from, b == std::string_view::npos ? std::string_view::npos : b - from);
  std::string out;
  for (char c : trim(v)) {
    if (out.size() == kMaxField) break;
    out.push_back(c >= 0x20 && c < 0x7F ? c : '?');
  }
  return out;
}

}  // namespace

std::optional<ContentRange> parse_content_range(std::string_view value) {
  std::string_view s = trim(value);
  constexpr std::string_view kUnit = "bytes";
  if (s.size() < kUnit.size() || !ascii_iequals(s.substr(0, kUnit.size()), kUnit)) return std::nullopt;
  s.remove_prefix(kUnit.size());
  if (s.empty() || !is_blank(s.front())) return std::nullopt;
  s = trim(s);
  ContentRange r;
  auto first = take_number(s);
  if (!first || !take(s, '-')) return std::nullopt;
  auto last = take_number(s);
  if (!last || !take(s, '/') || *last < *first) return std::nullopt;
  r.first = *first;
  r.last = *last;
  if (s == "*") return r;
  auto total = take_number(s);
  if (!total || !s.empty() || *total <= r.last) return std::nullopt;
  r.total = total;
  return r;
}

std::optional<uint64_t> parse_content_length(std::string_view value) {
  std::string_view s = trim(value);
  auto v = take_number(s);
  if (!v || !s.empty()) return std::nullopt;
  return v;
}

std::optional<std::string> parse_etag(std::string_view value) {
  constexpr size_t kMaxEtag = 1024;
  std::string_view s = trim(value);
  if (s.empty() || s.size() > kMaxEtag) return std::nullopt;
  for (char c : s)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) return std::nullopt;
  return std::string(s);
}

std::optional<int> parse_status_line(std::string_view line) {
  std::string_view s = trim(line);
  if (s.size() < 5 || s.substr(0, 5) != "HTTP/") return std::nullopt;
  const size_t sp = s.find(' ');
  if (sp == std::string_view::npos) return std::nullopt;
  s.remove_prefix(sp + 1);
  if (s.size() < 3) return std::nullopt;
  std::string_view digits = s.substr(0, 3);
  auto code = take_number(digits);
  if (!code || !digits.empty() || *code < 100 || (s.size() > 3 && s[3] != ' ')) return std::nullopt;
  return static_cast<int>(*code);
}

std::optional<std::pair<std::string_view, std::string_view>> split_header(std::string_view line) {
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos || colon == 0) return std::nullopt;
  std::string_view name = line.substr(0, colon);
  for (char c : name)
    if (is_blank(c) || static_cast<unsigned char>(c) < 0x20) return std::nullopt;
  return std::pair{name, trim(line.substr(colon + 1))};
}

StatusClass classify_status(long code) {
  if ((code >= 200 && code < 300) || code == 304) return StatusClass::success;
  switch (code) {
    case 408:  // request timeout
    case 429:  // too many requests
    case 500:
    case 502:
    case 503:  // S3: SlowDown
    case 504:
      return StatusClass::retryable;
    default:
      return StatusClass::final;
  }
}

S3Error parse_s3_error(std::string_view body) {
  constexpr size_t kScan = 64 * 1024;
  body = body.substr(0, kScan);
  return {element(body, "Code"), element(body, "Message"), element(body, "BucketName")};
}

std::string range_header(uint64_t first, uint64_t len) { return fmt::format("bytes={}-{}", first, first + len - 1); }

Judgement judge(const Attempt& a) {
  // Bytes of a ranged answer that are the start of what was asked: kept across a retry.
  const bool matching_partial = a.ranged && a.status == 206 && a.content_range && a.content_range->first == a.want_first;
  const uint64_t intact = matching_partial ? std::min(a.body_bytes, a.want_len) : 0;
  const auto retry = [&](std::string cause) { return Judgement{Verdict::retry, intact, std::move(cause)}; };
  const auto fail = [](std::string cause) { return Judgement{Verdict::fail, 0, std::move(cause)}; };
  const auto with_detail = [&](std::string_view what) {
    return a.transport_detail.empty() ? std::string(what) : fmt::format("{} ({})", what, a.transport_detail);
  };

  switch (a.transport) {
    case Transport::ok:
      break;
    case Transport::timeout:
      return retry(with_detail("timed out"));
    case Transport::connect:
      return retry(with_detail("cannot connect"));
    case Transport::broken:
      return retry(with_detail(a.body_bytes > 0 ? fmt::format("connection broken after {} bytes of the body", a.body_bytes)
                                                 : std::string("connection broken")));
    case Transport::body_too_big:
      return fail(fmt::format("the body is larger than the {} bytes asked for", a.want_len));
    case Transport::failed:
      return fail(with_detail("transfer failed"));
  }

  switch (classify_status(a.status)) {
    case StatusClass::retryable:
      return retry(fmt::format("HTTP {}", a.status));
    case StatusClass::final:
      return fail(fmt::format("HTTP {}", a.status));
    case StatusClass::success:
      break;
  }
  if (a.head || a.status == 304) return {Verdict::done, 0, {}};

  if (!a.ranged) {
    if (a.content_length && a.body_bytes < *a.content_length)
      return retry(fmt::format("short body: {} of {} bytes", a.body_bytes, *a.content_length));
    return {Verdict::done, 0, {}};
  }

  if (a.status == 206) {
    if (!a.content_range) return fail("HTTP 206 without a valid Content-Range");
    const ContentRange& cr = *a.content_range;
    const uint64_t want_last = a.want_first + a.want_len - 1;
    if (cr.first != a.want_first || cr.last > want_last)
      return fail(fmt::format("asked for bytes {}-{}, the server sent bytes {}-{}", a.want_first, want_last, cr.first, cr.last));
    if (cr.last < want_last)
      return fail(fmt::format("the object ends at byte {}, before the end of bytes {}-{}", cr.last, a.want_first, want_last));
    if (a.body_bytes < a.want_len) return retry(fmt::format("short body: {} of {} bytes", a.body_bytes, a.want_len));
    return {Verdict::done, 0, {}};
  }
  // A 2xx other than 206 to a ranged request: the whole object. Acceptable only when the range
  // was the whole object.
  const bool whole = a.want_first == 0 && a.content_length && *a.content_length == a.want_len;
  if (!whole) return fail(fmt::format("HTTP {} to a range request: the server ignores Range", a.status));
  if (a.body_bytes < a.want_len) return Judgement{Verdict::retry, 0, fmt::format("short body: {} of {} bytes", a.body_bytes, a.want_len)};
  return {Verdict::done, 0, {}};
}

Transport transport_of(int curl_code) {
  const auto c = static_cast<CURLcode>(curl_code);
  switch (c) {
    case CURLE_OK:
      return Transport::ok;
    case CURLE_OPERATION_TIMEDOUT:
      return Transport::timeout;
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
      return Transport::connect;
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR:  // a handshake cut by a reset; certificate problems have their own codes
      return Transport::broken;
    default:
      return Transport::failed;
  }
}

int errno_for_status(long status) {
  if (status == 404) return ENOENT;
  if (status == 401 || status == 403) return EACCES;
  return EIO;
}

}  // namespace fid::net::http
