// libFuzzer target: the S3 multipart and copy answers' parsers (UploadId, an error in a 200 answer) accept
// or reject any input without crashing; an UploadId they accept is one a URL query can carry
// (1 to 1024 printable characters, no blanks or markup), and the part plan of any size covers it
// in parts S3 takes. Lines read as part ETags: their multipart ETag is empty or "MD5-N" for N
// lines, and the HEAD of an object of that ETag and size settles a lost CompleteMultipartUpload.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "net/s3_requests.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto id = fid::net::parse_upload_id(text)) {
    if (id->empty() || id->size() > 1024) std::abort();
    for (char c : *id)
      if (c <= 0x20 || c >= 0x7F || c == '<' || c == '>' || c == '&' || c == '"') std::abort();
  }
  if (auto e = fid::net::complete_multipart_error(text); e && e->code.empty()) std::abort();
  if (auto e = fid::net::copy_object_error(text); e && e->code.empty()) std::abort();
  (void)fid::net::complete_multipart_body({std::string(text)});

  std::vector<std::string> etags;
  for (size_t at = 0; at <= text.size();) {
    const size_t end = std::min(text.find('\n', at), text.size());
    etags.emplace_back(text.substr(at, end - at));
    at = end + 1;
  }
  const std::string object_etag = fid::net::multipart_etag(etags);
  if (!object_etag.empty()) {
    const std::string tail = "-" + std::to_string(etags.size()) + "\"";
    if (object_etag.size() != 33 + tail.size() || object_etag.front() != '"' ||
        object_etag.compare(33, std::string::npos, tail) != 0)
      std::abort();
    if (fid::net::completed_object_mismatch(200, object_etag, size, size, etags)) std::abort();
  }
  if (!fid::net::completed_object_mismatch(200, text, size, size + 1, etags)) std::abort();

  if (size >= 16) {
    uint64_t object = 0, part = 0;
    std::memcpy(&object, data, 8);
    std::memcpy(&part, data + 8, 8);
    object >>= 20;  // up to 16 TiB: the plan stays a few thousand parts
    const auto parts = fid::net::upload_parts(object, part);
    if (parts.empty() || parts.size() > fid::net::kMaxParts) std::abort();
    uint64_t at = 0;
    for (size_t k = 0; k < parts.size(); ++k) {
      if (parts[k].first != at || (k + 1 < parts.size() && parts[k].second < fid::net::kMinPartSize)) std::abort();
      at += parts[k].second;
    }
    if (at != object) std::abort();
  }
  return 0;
}
