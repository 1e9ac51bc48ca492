// libFuzzer target: the remote listing parsers (S3 ListObjectsV2 XML, nginx JSON autoindex,
// ISO 8601 and HTTP dates, XML character data) accept or refuse any input without crashing, and
// what they accept is consistent: keys without NUL, a truncated page with a token, a KeyCount
// equal to the keys listed, entry names that are one path segment. The keys of an accepted page
// then go through the tree building every pack source shares: parents before children.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "net/s3_listing.h"
#include "sources/pack_source.h"


namespace {

void build_tree(const std::vector<fid::net::ListedObject>& objects) {
  std::vector<std::pair<std::string, bool>> paths;  // normalized path, folder
  for (const fid::net::ListedObject& o : objects) {
    std::string_view key = o.key;
    const bool dir = !key.empty() && key.back() == '/';
    if (dir) key.remove_suffix(1);
    auto p = fid::sources::normalize_source_path(key);
    if (p) paths.emplace_back(std::move(*p), dir);
  }
  std::stable_sort(paths.begin(), paths.end(),
                   [](const auto& a, const auto& b) { return fid::sources::walk_less(a.first, b.first); });
  fid::sources::SourceTreeBuilder builder(0);
  for (const auto& [path, dir] : paths) {
    if (dir) {
      if (!builder.add_dir(path, 0, 0)) return;
    } else if (!builder.add_file(path, 1, 0)) {
      return;
    }
  }
  const fid::sources::SourceTree tree = builder.take();
  for (size_t d = 1; d < tree.dirs.size(); ++d)
    if (tree.dirs[d].parent >= d) std::abort();
  for (uint32_t i = 0; i < tree.files.size(); ++i)
    if (tree.files.dir(i) >= tree.dirs.size() || tree.files.name(i).empty()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto page = fid::net::parse_list_objects_v2(text)) {
    if (page->truncated && page->next_token.empty()) std::abort();
    if (page->key_count && *page->key_count < page->objects.size()) std::abort();
    for (const fid::net::ListedObject& o : page->objects)
      if (o.key.find('\0') != std::string::npos) std::abort();
    build_tree(page->objects);
  }
  if (auto decoded = fid::net::decode_xml_text(text); decoded && decoded->size() > text.size()) std::abort();
  if (auto entries = fid::net::parse_autoindex_json(text)) {
    for (const fid::net::AutoindexEntry& e : *entries)
      if (e.name.empty() || e.name.find('/') != std::string::npos) std::abort();
  }
  (void)fid::net::parse_iso8601_ns(text);
  (void)fid::net::parse_http_date_ns(text);
  return 0;
}
