// The names the mount shows where they differ from the stored ones.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

#include "config/config.h"
#include "index/store.h"

namespace fid::core {

// Names that differ from the stored ones: with raw_names=ext an L3 file "a.png" shows as
// "a.png.ppm" (its view's extension); a video stream's frame "img_00001" (stored without one)
// shows with its view's extension, "img_00001.ppm", made as it is asked for (a store may hold
// millions of frames).
struct DisplayNames {
  std::unordered_map<uint32_t, std::string> renamed;  // L3 files under raw_names=ext
  std::string frame_extension;                         // ".ppm", ".png" or ".npy"
  bool empty() const { return renamed.empty() && frame_extension.empty(); }
  // f's name as shown: the stored one, a renamed one, or a frame's made in `scratch`.
  std::string_view of(const index::Store& store, const index::File& f, std::string& scratch) const;
};
DisplayNames make_display_names(const index::Store& store, const config::Settings& settings);

}  // namespace fid::core
