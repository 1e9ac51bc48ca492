// libFuzzer target: the S3 multipart and copy answers' parsers (UploadId, an error in a 200 answer) accept
// or reject any input without crashing; an UploadId they accept is one a URL query can carry
// (1 to 1024 printable characters, no blanks or markup), and the part plan of any size covers it
// in parts S3 takes.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "storage/s3_upload.h"

using fid::storage::S3Upload;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto id = fid::storage::parse_upload_id(text)) {
    if (id->empty() || id->size() > 1024) std::abort();
    for (char c : *id)
      if (c <= 0x20 || c >= 0x7F || c == '<' || c == '>' || c == '&' || c == '"') std::abort();
  }
  if (auto e = fid::storage::complete_multipart_error(text); e && e->code.empty()) std::abort();
  if (auto e = fid::storage::copy_object_error(text); e && e->code.empty()) std::abort();
  (void)fid::storage::complete_multipart_body({std::string(text)});

  if (size >= 16) {
    uint64_t object = 0, part = 0;
    std::memcpy(&object, data, 8);
    std::memcpy(&part, data + 8, 8);
    object >>= 20;  // up to 16 TiB: the plan stays a few thousand parts
    const auto parts = fid::storage::upload_parts(object, part);
    if (parts.empty() || parts.size() > S3Upload::kMaxParts) std::abort();
    uint64_t at = 0;
    for (size_t k = 0; k < parts.size(); ++k) {
      if (parts[k].first != at || (k + 1 < parts.size() && parts[k].second < S3Upload::kMinPartSize)) std::abort();
      at += parts[k].second;
    }
    if (at != object) std::abort();
  }
  return 0;
}
