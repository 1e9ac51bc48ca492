#include "core/display_names.h"

#include <algorithm>

#include "codec/l3_view.h"
#include "core/file_reader.h"

namespace fid::core {

namespace {
// Whether folder d holds a stored file or sub-folder named `name` (children are sorted by name).
bool folder_holds(const index::Store& store, const index::Dir& d, std::string_view name) {
  auto holds = [&](auto ids, auto entries) {
    auto it = std::lower_bound(ids.begin(), ids.end(), name,
                               [&](uint32_t c, std::string_view v) { return store.name(entries[c]) < v; });
    return it != ids.end() && store.name(entries[*it]) == name;
  };
  return holds(store.child_dirs().subspan(d.subdir_begin, d.subdir_count), store.dirs()) ||
         holds(store.child_files().subspan(d.file_begin, d.file_count), store.files());
}
}  // namespace

std::string_view DisplayNames::of(const index::Store& store, const index::File& f, std::string& scratch) const {
  if (f.kind == index::FileKind::frame && !frame_extension.empty()) {
    scratch.assign(store.name(f));
    scratch += frame_extension;
    return scratch;
  }
  if (f.kind == index::FileKind::l3 && !renamed.empty())
    if (auto it = renamed.find(f.id); it != renamed.end()) return it->second;
  return store.name(f);
}

DisplayNames make_display_names(const index::Store& store, const config::Settings& settings) {
  DisplayNames names;
  const codec::ViewFormat format = settings.raw_format;
  const bool frames = std::any_of(store.videos().begin(), store.videos().end(),
                                  [](const index::VideoSource& v) { return v.is_stream(); });
  if (frames) {  // an RGB view's extension (frame folders hold nothing else: no name can clash)
    codec::L3Shape rgb;
    rgb.mode = codec::PilMode::RGB;
    names.frame_extension = codec::view_extension(rgb, format);
  }
  if (settings.raw_names != config::RawNames::ext) return names;
  for (const index::File& f : store.files()) {
    if (f.kind != index::FileKind::l3) continue;
    std::string name = std::string(store.name(f)) + std::string(codec::view_extension(FileReader::shape_of(f), format));
    // A name the folder already holds stays the stored entry's: this file keeps its own name.
    if (!folder_holds(store, store.dirs()[f.dir], name)) names.renamed.emplace(f.id, std::move(name));
  }
  return names;
}

}  // namespace fid::core
