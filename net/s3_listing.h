// What a remote source's listings say, parsed without I/O: S3's ListObjectsV2 response (XML,
// read by a small scanner: no XML library, no DTDs, no entities but XML's five and character
// references) and nginx's JSON folder listing (`autoindex_format json`). Every parser is
// bounded, never throws and refuses what it does not understand rather than guess. Fuzzed by
// tests/fuzz/fuzz_s3_listing.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace fid::net {

// Listing bodies larger than this are refused (a ListObjectsV2 page of 1000 keys is a few
// hundred KiB; a folder of a million files in JSON about 100 MiB).
inline constexpr size_t kMaxListingBytes = 256u << 20;

struct ListedObject {
  std::string key;        // decoded: any bytes but NUL
  uint64_t size = 0;
  int64_t mtime_ns = 0;   // LastModified; 0 when absent
};

// One page of a ListObjectsV2 answer.
struct ListPage {
  std::vector<ListedObject> objects;
  bool truncated = false;          // IsTruncated: more pages follow
  std::string next_token;          // NextContinuationToken (decoded), when truncated
  std::optional<uint64_t> key_count;
};

// A <ListBucketResult>: every <Contents> needs a Key and a Size; a KeyCount that disagrees with
// the keys listed, a truncated page without a token, malformed markup, an unknown entity or a
// number that is not one is an EPROTO Error saying what is wrong.
Result<ListPage> parse_list_objects_v2(std::string_view body);

// "2009-10-12T17:50:30.000Z" (fraction optional, up to 9 digits; "Z" or "+HH:MM"/"-HH:MM"):
// nanoseconds since the Unix epoch.
std::optional<int64_t> parse_iso8601_ns(std::string_view text);

// XML character data with &amp; &lt; &gt; &quot; &apos; &#N; &#xH; decoded (code points as
// UTF-8); nullopt for an unknown or malformed reference, or one to NUL, a surrogate or beyond
// U+10FFFF.
std::optional<std::string> decode_xml_text(std::string_view text);

// One entry of nginx's JSON folder listing:
// [{"name":"a","type":"directory","mtime":"Wed, 15 Nov 2023 10:20:30 GMT"},
//  {"name":"b.jpg","type":"file","mtime":"...","size":1234}, ...]
struct AutoindexEntry {
  enum class Type { file, dir, other };
  std::string name;
  Type type = Type::other;
  uint64_t size = 0;      // files
  int64_t mtime_ns = 0;   // 0 when absent
};

// The entries of a JSON folder listing: an array of objects, each with a string name (not
// empty, no '/', no NUL) and a type; a file needs a size. Unknown keys are ignored; anything
// else is an EPROTO Error.
Result<std::vector<AutoindexEntry>> parse_autoindex_json(std::string_view body);

// "Wed, 15 Nov 2023 10:20:30 GMT" (RFC 1123, as nginx writes mtime): ns since the epoch.
std::optional<int64_t> parse_http_date_ns(std::string_view text);

}  // namespace fid::net
