#include "pack/clips.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <optional>

#include "codec/jpeg_markers.h"
#include "common/ascii.h"
#include "common/glob.h"
#include "pack/packer.h"

namespace fid::pack {

bool parse_clip_rule(std::string_view text, ClipRule& out) {
  if (text.empty()) return false;
  if (ascii_iequals(text, "auto")) out = ClipRule{ClipRule::Mode::auto_, {}};
  else if (ascii_iequals(text, "off")) out = ClipRule{ClipRule::Mode::off, {}};
  else out = ClipRule{ClipRule::Mode::glob, std::string(text)};
  return true;
}

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// A frame's name: PREFIX + NUMBER + .jpg/.jpeg (any case); nullopt for any other name.
struct FrameName {
  std::string_view prefix;
  uint64_t number = 0;
};
std::optional<FrameName> frame_name(std::string_view name) {
  const size_t dot = name.rfind('.');
  if (dot == std::string_view::npos) return std::nullopt;
  const std::string_view ext = name.substr(dot + 1), stem = name.substr(0, dot);
  if (!ascii_iequals(ext, "jpg") && !ascii_iequals(ext, "jpeg")) return std::nullopt;
  size_t digits = stem.size();
  while (digits > 0 && is_digit(stem[digits - 1])) --digits;
  const std::string_view number = stem.substr(digits);
  if (number.empty() || number.size() > 9) return std::nullopt;
  FrameName f{stem.substr(0, digits), 0};
  std::from_chars(number.data(), number.data() + number.size(), f.number);
  return f;
}

// Whether the files are numbered frames: each prefix's numbers consecutive.
bool numbered_frames(const sources::SourceTree& tree, const std::vector<uint32_t>& files) {
  std::map<std::string_view, std::vector<uint64_t>> by_prefix;
  for (uint32_t i : files) {
    const std::optional<FrameName> f = frame_name(tree.files.name(i));
    if (!f) return false;
    by_prefix[f->prefix].push_back(f->number);
  }
  for (auto& [prefix, numbers] : by_prefix) {
    std::sort(numbers.begin(), numbers.end());
    for (size_t k = 1; k < numbers.size(); ++k)
      if (numbers[k] != numbers[k - 1] + 1) return false;
  }
  return true;
}

// The pixel size a JPEG's frame header gives, or nullopt.
std::optional<std::pair<uint32_t, uint32_t>> frame_size(const sources::SourceTree& tree, const sources::PackSource& source, uint32_t i) {
  fid::Result<sources::SourceBytes> read = source.read(tree, i);
  if (!read) return std::nullopt;
  fid::Result<codec::JpegMarkerLayout> frame = codec::read_frame_header(read->bytes);
  if (!frame) return std::nullopt;
  return std::pair{frame->width, frame->height};
}

}  // namespace

bool natural_less(std::string_view a, std::string_view b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (is_digit(a[i]) && is_digit(b[j])) {
      size_t ie = i, je = j;
      while (ie < a.size() && is_digit(a[ie])) ++ie;
      while (je < b.size() && is_digit(b[je])) ++je;
      // By value: leading zeros dropped, then the longer run is larger, then digit by digit.
      size_t is = i, js = j;
      while (is + 1 < ie && a[is] == '0') ++is;
      while (js + 1 < je && b[js] == '0') ++js;
      const std::string_view x = a.substr(is, ie - is), y = b.substr(js, je - js);
      if (x.size() != y.size()) return x.size() < y.size();
      if (x != y) return x < y;
      if (ie - i != je - j) return ie - i > je - j;  // equal values: more leading zeros first
      i = ie, j = je;
      continue;
    }
    if (a[i] != b[j]) return static_cast<unsigned char>(a[i]) < static_cast<unsigned char>(b[j]);
    ++i, ++j;
  }
  return a.size() - i < b.size() - j;
}

fid::Result<std::vector<Clip>> find_clips(const sources::SourceTree& tree, const sources::PackSource& source, const ClipRule& rule,
                                          const std::atomic<bool>& cancel) {
  std::vector<Clip> clips;
  // A video kept as a stream is always one unit: its GOPs' pieces lie in its first frames.
  std::vector<bool> stream(tree.dirs.size(), false);
  for (const index::VideoSource& v : tree.videos) stream[v.dir] = v.is_stream();
  const bool any_stream = std::find(stream.begin(), stream.end(), true) != stream.end();
  if (rule.mode == ClipRule::Mode::off && !any_stream) return clips;
  std::vector<std::vector<uint32_t>> by_dir(tree.dirs.size());
  for (uint32_t i = 0; i < tree.files.size(); ++i) by_dir[tree.files.dir(i)].push_back(i);
  for (uint32_t d = 0; d < by_dir.size(); ++d) {
    if (cancel) return fid::Error{ECANCELED, "interrupted"};
    std::vector<uint32_t>& files = by_dir[d];
    // The root is never a clip (a store's clips are folders of it): the frames of a source
    // that is one clip's folder stay plain files.
    if (files.empty() || d == 0) continue;
    if (stream[d]) {
      // frame order is the names' bytewise order (pack pads their numbers to one width)
    } else if (rule.mode == ClipRule::Mode::off) {
      continue;
    } else if (rule.mode == ClipRule::Mode::glob) {
      if (!glob_match(rule.glob, tree.dirs[d].rel)) continue;
    } else if (files.size() < kMinClipFrames || !numbered_frames(tree, files)) {
      continue;
    }
    std::sort(files.begin(), files.end(),
              [&](uint32_t a, uint32_t b) { return natural_less(tree.files.name(a), tree.files.name(b)); });
    if (rule.mode == ClipRule::Mode::auto_ && !stream[d]) {
      const auto first = frame_size(tree, source, files.front());
      if (!first || first != frame_size(tree, source, files.back())) continue;
    }
    Clip c{d, std::move(files), 0};
    for (uint32_t i : c.frames) c.bytes += tree.files.listed_size(i);
    clips.push_back(std::move(c));
  }
  return clips;
}

StorageOrder clip_storage_order(uint32_t files, const std::vector<Clip>& clips, uint64_t seed) {
  constexpr uint32_t kNoClip = StorageOrder::kNoClip;
  std::vector<uint32_t> clip_at(files, kNoClip);
  for (uint32_t c = 0; c < clips.size(); ++c)
    for (uint32_t f : clips[c].frames) clip_at[f] = c;
  // Unit u: a file in no clip (its index), or clip c (kClipUnit | c), in walk order of the first file.
  constexpr uint64_t kClipUnit = uint64_t{1} << 32;
  std::vector<uint64_t> units;
  std::vector<bool> placed(clips.size());
  for (uint32_t i = 0; i < files; ++i) {
    const uint32_t c = clip_at[i];
    if (c == kNoClip) units.push_back(i);
    else if (!placed[c]) placed[c] = true, units.push_back(kClipUnit | c);
  }
  StorageOrder order;
  order.files.reserve(files);
  order.clip_of.reserve(files);
  for (uint32_t u : storage_permutation(static_cast<uint32_t>(units.size()), seed)) {
    if (!(units[u] & kClipUnit)) {
      order.files.push_back(static_cast<uint32_t>(units[u]));
      order.clip_of.push_back(kNoClip);
      continue;
    }
    const auto c = static_cast<uint32_t>(units[u]);
    for (uint32_t f : clips[c].frames) {
      order.files.push_back(f);
      order.clip_of.push_back(c);
    }
  }
  return order;
}

}  // namespace fid::pack
