#include "net/s3_listing.h"

#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <cerrno>
#include <nlohmann/json.hpp>

#include "common/numbers.h"

namespace fid::net {

namespace {

constexpr size_t kMaxDepth = 16;          // ListBucketResult > Contents > Owner > ID is 4
constexpr size_t kMaxPageObjects = 100000;  // S3 pages hold at most 1000

Error protocol_error(std::string what) { return Error{EPROTO, std::move(what)}; }

// `n` decimal digits at s[at], or -1.
int digits(std::string_view s, size_t at, size_t n) {
  if (at + n > s.size()) return -1;
  int v = 0;
  for (size_t i = at; i < at + n; ++i) {
    if (s[i] < '0' || s[i] > '9') return -1;
    v = v * 10 + (s[i] - '0');
  }
  return v;
}

// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
int64_t days_from_civil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

bool valid_date(int y, int m, int d) {
  static constexpr std::array<int, 12> kDays{31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (y < 0 || m < 1 || m > 12 || d < 1 || d > kDays[static_cast<size_t>(m - 1)]) return false;
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return !(m == 2 && d == 29 && !leap);
}

std::optional<int64_t> to_ns(int y, int mo, int d, int h, int mi, int s, int64_t frac_ns, int64_t offset_s) {
  if (!valid_date(y, mo, d) || h > 23 || mi > 59 || s > 60) return std::nullopt;  // 60: a leap second
  const int64_t secs = days_from_civil(y, static_cast<unsigned>(mo), static_cast<unsigned>(d)) * 86400 + h * 3600 +
                       mi * 60 + s - offset_s;
  // Nanoseconds in an int64 reach from 1677 to 2262.
  constexpr int64_t kMaxSecs = INT64_MAX / 1'000'000'000 - 1;
  if (secs > kMaxSecs || secs < -kMaxSecs) return std::nullopt;
  return secs * 1'000'000'000 + frac_ns;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// The code point of "#N" or "#xH", or nullopt.
std::optional<uint32_t> char_ref(std::string_view ref) {
  if (ref.size() < 2 || ref[0] != '#') return std::nullopt;
  const bool hex = ref[1] == 'x' || ref[1] == 'X';
  const std::string_view num = ref.substr(hex ? 2 : 1);
  if (num.empty() || num.size() > 8) return std::nullopt;
  uint32_t v = 0;
  for (char c : num) {
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (hex && c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (hex && c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else return std::nullopt;
    v = v * (hex ? 16 : 10) + static_cast<uint32_t>(d);
  }
  if (v == 0 || (v >= 0xD800 && v <= 0xDFFF) || v > 0x10FFFF) return std::nullopt;
  return v;
}

// The name of a tag without a namespace prefix ("s3:Key" -> "Key").
std::string_view local_name(std::string_view name) {
  const size_t colon = name.find(':');
  return colon == std::string_view::npos ? name : name.substr(colon + 1);
}

// The ListObjectsV2 elements as a small state machine over the scanner's events.
class ListingReader {
 public:
  Status open(std::string_view name) {
    if (stack_.size() >= kMaxDepth) return protocol_error("elements nested too deep");
    if (stack_.empty() && done_) return protocol_error("a second root element");
    if (stack_.empty() && name != "ListBucketResult")
      return protocol_error(fmt::format("not a ListObjectsV2 answer (its root element is <{}>)", name));
    stack_.push_back(name);
    text_.clear();
    if (stack_.size() == 2 && name == "Contents") {
      if (page_.objects.size() >= kMaxPageObjects) return protocol_error("too many keys in one page");
      page_.objects.emplace_back();
      have_key_ = have_size_ = false;
    }
    return {};
  }

  Status text(std::string_view raw) {
    if (text_.size() + raw.size() > kMaxListingBytes) return protocol_error("text too long");
    text_ += raw;
    return {};
  }

  Status close(std::string_view name) {
    if (stack_.empty() || stack_.back() != name)
      return protocol_error(fmt::format("</{}> does not close <{}>", name, stack_.empty() ? "" : stack_.back()));
    const size_t depth = stack_.size();
    Status s = depth == 3 && stack_[1] == "Contents" ? contents_field(name) : depth == 2 ? result_field(name) : Status{};
    if (s && depth == 2 && name == "Contents" && !(have_key_ && have_size_))
      s = protocol_error("a <Contents> without <Key> or <Size>");
    stack_.pop_back();
    text_.clear();
    return s;
  }

  Result<ListPage> finish() {
    if (!done_) return protocol_error("not a complete ListObjectsV2 answer (no </ListBucketResult>)");
    const uint64_t listed = page_.objects.size() + common_prefixes_;
    if (page_.key_count && *page_.key_count != listed)
      return protocol_error(fmt::format("KeyCount says {} but {} keys are listed", *page_.key_count, listed));
    if (page_.truncated && page_.next_token.empty())
      return protocol_error("IsTruncated without a NextContinuationToken");
    return std::move(page_);
  }

  void root_closed() { done_ = true; }
  size_t depth() const { return stack_.size(); }

 private:
  Result<std::string> decoded(std::string_view what) const {
    std::optional<std::string> v = decode_xml_text(text_);
    if (!v) return protocol_error(fmt::format("<{}>: a malformed or unknown entity", what));
    return std::move(*v);
  }

  Status contents_field(std::string_view name) {
    ListedObject& o = page_.objects.back();
    if (name == "Key") {
      Result<std::string> key = decoded(name);
      if (!key) return std::move(key).error();
      if (key->find('\0') != std::string::npos) return protocol_error("a <Key> with a NUL byte");
      o.key = std::move(*key);
      have_key_ = true;
    } else if (name == "Size") {
      std::optional<uint64_t> size = parse_u64(text_);
      if (!size) return protocol_error(fmt::format("<Size> '{}' is not a byte count", text_.substr(0, 40)));
      o.size = *size;
      have_size_ = true;
    } else if (name == "LastModified") {
      std::optional<int64_t> t = parse_iso8601_ns(text_);
      if (!t) return protocol_error(fmt::format("<LastModified> '{}' is not an ISO 8601 time", text_.substr(0, 40)));
      o.mtime_ns = *t;
    }
    return {};
  }

  Status result_field(std::string_view name) {
    if (name == "IsTruncated") {
      if (text_ != "true" && text_ != "false") return protocol_error("<IsTruncated> is neither true nor false");
      page_.truncated = text_ == "true";
    } else if (name == "NextContinuationToken") {
      Result<std::string> token = decoded(name);
      if (!token) return std::move(token).error();
      page_.next_token = std::move(*token);
    } else if (name == "KeyCount") {
      page_.key_count = parse_u64(text_);
      if (!page_.key_count) return protocol_error("<KeyCount> is not a number");
    } else if (name == "CommonPrefixes") {
      ++common_prefixes_;
    }
    return {};
  }

  ListPage page_;
  std::vector<std::string_view> stack_;
  std::string text_;  // raw character data of the innermost open element
  uint64_t common_prefixes_ = 0;
  bool have_key_ = false, have_size_ = false, done_ = false;
};

// Everything from `at` to the end of `close_with`, or npos.
size_t skip_past(std::string_view s, size_t at, std::string_view close_with) {
  const size_t end = s.find(close_with, at);
  return end == std::string_view::npos ? end : end + close_with.size();
}

// The '>' ending the tag that starts at `at` (quoted attribute values may hold '>'), or npos.
size_t tag_end(std::string_view s, size_t at) {
  char quote = 0;
  for (size_t i = at; i < s.size(); ++i) {
    if (quote) {
      if (s[i] == quote) quote = 0;
    } else if (s[i] == '"' || s[i] == '\'') {
      quote = s[i];
    } else if (s[i] == '>') {
      return i;
    }
  }
  return std::string_view::npos;
}

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

// One markup construct at body[at] == '<'; returns where scanning goes on, or an Error.
Result<size_t> scan_markup(std::string_view body, size_t at, ListingReader& reader) {
  const std::string_view rest = body.substr(at);
  size_t next = std::string_view::npos;
  if (rest.starts_with("<?")) {
    next = skip_past(body, at + 2, "?>");
  } else if (rest.starts_with("<!--")) {
    next = skip_past(body, at + 4, "-->");
  } else if (rest.starts_with("<![CDATA[")) {
    const size_t end = body.find("]]>", at + 9);
    if (end == std::string_view::npos) return protocol_error("an unterminated CDATA section");
    // Character data as it is: escape what decoding would otherwise read as a reference.
    std::string raw;
    for (char c : body.substr(at + 9, end - at - 9)) {
      if (c == '&') raw += "&amp;";
      else raw += c;
    }
    if (Status s = reader.text(raw); !s) return std::move(s).error();
    return end + 3;
  } else if (rest.starts_with("<!")) {
    return protocol_error("a document type declaration (not expected in an S3 answer)");
  } else {
    const size_t end = tag_end(body, at + 1);
    if (end == std::string_view::npos) return protocol_error("an unterminated tag");
    std::string_view tag = body.substr(at + 1, end - at - 1);
    const bool closing = !tag.empty() && tag.front() == '/';
    const bool self_closing = !closing && !tag.empty() && tag.back() == '/';
    if (closing) tag.remove_prefix(1);
    if (self_closing) tag.remove_suffix(1);
    size_t name_end = 0;
    while (name_end < tag.size() && !is_blank(tag[name_end])) ++name_end;
    const std::string_view name = local_name(tag.substr(0, name_end));
    if (name.empty()) return protocol_error("a tag without a name");
    if (closing && name_end != tag.size() && tag.find_first_not_of(" \t\r\n", name_end) != std::string_view::npos)
      return protocol_error("a closing tag with attributes");
    Status s = closing ? reader.close(name) : reader.open(name);
    if (s && self_closing) s = reader.close(name);
    if (!s) return std::move(s).error();
    if ((closing || self_closing) && reader.depth() == 0) reader.root_closed();
    return end + 1;
  }
  if (next == std::string_view::npos) return protocol_error("an unterminated comment or declaration");
  return next;
}

}  // namespace

std::optional<std::string> decode_xml_text(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    if (text[i] != '&') {
      out += text[i++];
      continue;
    }
    const size_t semi = text.find(';', i + 1);
    if (semi == std::string_view::npos || semi - i > 12) return std::nullopt;
    const std::string_view ref = text.substr(i + 1, semi - i - 1);
    if (ref == "amp") out += '&';
    else if (ref == "lt") out += '<';
    else if (ref == "gt") out += '>';
    else if (ref == "quot") out += '"';
    else if (ref == "apos") out += '\'';
    else if (std::optional<uint32_t> cp = char_ref(ref)) append_utf8(out, *cp);
    else return std::nullopt;
    i = semi + 1;
  }
  return out;
}

Result<ListPage> parse_list_objects_v2(std::string_view body) {
  if (body.size() > kMaxListingBytes) return protocol_error("listing larger than the limit");
  ListingReader reader;
  size_t at = 0;
  while (at < body.size()) {
    const size_t lt = body.find('<', at);
    const std::string_view chars = body.substr(at, lt == std::string_view::npos ? std::string_view::npos : lt - at);
    if (reader.depth() > 0) {
      if (Status s = reader.text(chars); !s) return std::move(s).error();
    } else if (chars.find_first_not_of(" \t\r\n") != std::string_view::npos) {
      return protocol_error("text outside the root element");
    }
    if (lt == std::string_view::npos) break;
    Result<size_t> next = scan_markup(body, lt, reader);
    if (!next) return std::move(next).error();
    at = *next;
  }
  return reader.finish();
}

std::optional<int64_t> parse_iso8601_ns(std::string_view t) {
  // YYYY-MM-DDTHH:MM:SS
  if (t.size() < 20 || t[4] != '-' || t[7] != '-' || (t[10] != 'T' && t[10] != 't') || t[13] != ':' || t[16] != ':')
    return std::nullopt;
  const int y = digits(t, 0, 4), mo = digits(t, 5, 2), d = digits(t, 8, 2);
  const int h = digits(t, 11, 2), mi = digits(t, 14, 2), s = digits(t, 17, 2);
  if (y < 0 || mo < 0 || d < 0 || h < 0 || mi < 0 || s < 0) return std::nullopt;
  size_t at = 19;
  int64_t frac = 0;
  if (t[at] == '.') {
    size_t n = 0;
    for (++at; at < t.size() && t[at] >= '0' && t[at] <= '9'; ++at, ++n)
      if (n < 9) frac = frac * 10 + (t[at] - '0');
    if (n == 0) return std::nullopt;
    for (; n < 9; ++n) frac *= 10;
  }
  int64_t offset_s = 0;
  const std::string_view zone = t.substr(at);
  if (zone == "Z" || zone == "z") {
    offset_s = 0;
  } else if (zone.size() == 6 && (zone[0] == '+' || zone[0] == '-') && zone[3] == ':') {
    const int oh = digits(zone, 1, 2), om = digits(zone, 4, 2);
    if (oh < 0 || om < 0 || oh > 23 || om > 59) return std::nullopt;
    offset_s = (zone[0] == '-' ? -1 : 1) * (oh * 3600 + om * 60);
  } else {
    return std::nullopt;
  }
  return to_ns(y, mo, d, h, mi, s, frac, offset_s);
}

std::optional<int64_t> parse_http_date_ns(std::string_view t) {
  // "Wed, 15 Nov 2023 10:20:30 GMT"
  if (t.size() != 29 || t[3] != ',' || t[4] != ' ' || t[7] != ' ' || t[11] != ' ' || t[16] != ' ' || t[19] != ':' ||
      t[22] != ':' || t.substr(25) != " GMT")
    return std::nullopt;
  static constexpr std::array<std::string_view, 12> kMonths{"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                            "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  int mo = 0;
  for (size_t k = 0; k < kMonths.size(); ++k)
    if (t.substr(8, 3) == kMonths[k]) mo = static_cast<int>(k) + 1;
  const int d = digits(t, 5, 2), y = digits(t, 12, 4), h = digits(t, 17, 2), mi = digits(t, 20, 2), s = digits(t, 23, 2);
  if (mo == 0 || d < 0 || y < 0 || h < 0 || mi < 0 || s < 0) return std::nullopt;
  return to_ns(y, mo, d, h, mi, s, 0, 0);
}

namespace {

using Json = nlohmann::json;

// Reads the listing as SAX events: no document tree is built, and nesting deeper than an
// entry's fields is refused as it is met.
class AutoindexReader final : public nlohmann::json_sax<Json> {
 public:
  std::vector<AutoindexEntry> entries;
  std::string error;

  bool null() override { return scalar(); }
  bool boolean(bool) override { return scalar(); }
  bool number_integer(number_integer_t) override {  // negative numbers only
    if (depth_ == 2 && key_ == "size") return fail("a negative size");
    return scalar();
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (depth_ == 2 && key_ == "size") {
      entries.back().size = v;
      have_size_ = true;
    }
    return scalar();
  }
  bool number_float(number_float_t, const string_t&) override {
    if (depth_ == 2 && key_ == "size") return fail("a size that is not a whole number");
    return scalar();
  }
  bool string(string_t& v) override {
    if (depth_ == 2 && key_ == "name") {
      entries.back().name = std::move(v);
      have_name_ = true;
    } else if (depth_ == 2 && key_ == "type") {
      entries.back().type = v == "file" ? AutoindexEntry::Type::file
                            : v == "directory" ? AutoindexEntry::Type::dir
                                               : AutoindexEntry::Type::other;
      have_type_ = true;
    } else if (depth_ == 2 && key_ == "mtime") {
      entries.back().mtime_ns = parse_http_date_ns(v).value_or(0);
    }
    return scalar();
  }
  bool binary(binary_t&) override { return fail("binary data"); }
  bool start_object(std::size_t) override {
    if (depth_ != 1) return fail("an object where an entry's field was expected");
    ++depth_;
    entries.emplace_back();
    have_name_ = have_type_ = have_size_ = false;
    return true;
  }
  bool key(string_t& k) override {
    key_ = std::move(k);
    return true;
  }
  bool end_object() override {
    --depth_;
    key_.clear();
    const AutoindexEntry& e = entries.back();
    if (!have_name_ || !have_type_) return fail("an entry without a name or a type");
    if (e.name.empty() || e.name.find('/') != std::string::npos || e.name.find('\0') != std::string::npos)
      return fail("an entry named '' or with '/' or NUL in its name");
    if (e.type == AutoindexEntry::Type::file && !have_size_) return fail(fmt::format("file '{}' without a size", e.name));
    return true;
  }
  bool start_array(std::size_t) override {
    if (depth_ != 0 || seen_array_) return fail("an array where an entry was expected");
    seen_array_ = true;
    ++depth_;
    return true;
  }
  bool end_array() override {
    --depth_;
    return true;
  }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception&) override {
    return fail(fmt::format("not JSON (at byte {})", position));
  }

 private:
  bool scalar() {
    if (depth_ != 2) return fail("not an array of objects");
    return true;
  }
  bool fail(std::string why) {
    if (error.empty()) error = std::move(why);
    return false;
  }
  int depth_ = 0;
  bool seen_array_ = false, have_name_ = false, have_type_ = false, have_size_ = false;
  std::string key_;
};

}  // namespace

Result<std::vector<AutoindexEntry>> parse_autoindex_json(std::string_view body) {
  if (body.size() > kMaxListingBytes) return protocol_error("listing larger than the limit");
  AutoindexReader reader;
  bool ok = false;
  try {
    ok = Json::sax_parse(body.begin(), body.end(), &reader);
  } catch (const std::exception& e) {  // the library's own limits (none expected from a SAX parse)
    return protocol_error(fmt::format("not a JSON folder listing: {}", e.what()));
  }
  if (!ok || !reader.error.empty())
    return protocol_error(fmt::format("not a JSON folder listing: {}", reader.error.empty() ? "malformed" : reader.error));
  return std::move(reader.entries);
}

}  // namespace fid::net
