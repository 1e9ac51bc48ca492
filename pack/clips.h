// Clips: folders of one video's frames (rawframes as 20BN-Jester and Something-Something v1 ship
// them, 00001.jpg ...; as mmaction2 and TSM extract videos, img_00001.jpg ...). A clip is one unit
// of the storage order, its frames next to each other in frame order (docs/FORMAT.md "Clips").
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "sources/pack_source.h"

namespace fid::pack {

// Which folders are clips (`pack --clips`): auto (below), none, or the folders a glob of their
// relative paths matches.
struct ClipRule {
  enum class Mode : uint8_t { auto_, off, glob };
  Mode mode = Mode::auto_;
  std::string glob;
};
// "auto", "off", or a glob; false for an empty text.
bool parse_clip_rule(std::string_view text, ClipRule& out);

// A clip: its folder and its files (indexes of the tree) in frame order.
struct Clip {
  uint32_t dir = 0;
  std::vector<uint32_t> frames;
  uint64_t bytes = 0;  // the frames' sizes when listed
};

// Frame order: bytewise, except that runs of digits compare by value (img_2 before img_10).
bool natural_less(std::string_view a, std::string_view b);

// A clip needs at least this many frames under `auto`.
inline constexpr size_t kMinClipFrames = 4;

// The clips of `tree` under `rule`, in walk order of their folders; the root is never one. Under
// auto, a folder is a clip when its files, at least kMinClipFrames, are all JPEGs by name (.jpg,
// .jpeg, any case) named PREFIX + NUMBER, the numbers of each PREFIX consecutive, and its first and
// last frames have the same pixel size (their frame headers, read from `source`): an
// image-classification folder (ImageNet's n01440764_10026.JPEG ...) has gaps in its numbers, or
// images of many sizes. Under a glob, every matching folder with files is a clip. An error only
// when the source fails.
fid::Result<std::vector<Clip>> find_clips(const sources::SourceTree& tree, const sources::PackSource& source, const ClipRule& rule,
                                          const std::atomic<bool>& cancel);

// The storage order with clips as units (docs/FORMAT.md "Storage order"): the units are the clips
// and the files in no clip, in walk order of their first file; storage_permutation over them;
// a clip's frames follow one another in frame order.
struct StorageOrder {
  static constexpr uint32_t kNoClip = UINT32_MAX;
  std::vector<uint32_t> files;    // file indexes of the tree, in storage order
  std::vector<uint32_t> clip_of;  // at each position: the clip (an index into clips) or kNoClip
};
StorageOrder clip_storage_order(uint32_t files, const std::vector<Clip>& clips, uint64_t seed);

}  // namespace fid::pack
