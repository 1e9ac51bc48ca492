// `pack --video-frames`: the videos of a source (.mp4 .webm .mkv .avi .mov) become clip folders
// of JPEG frames. VIDEO.mp4 becomes the folder VIDEO holding img_00001.jpg ... (mmaction2's
// names), each frame a JPEG of the options' quality that pack then transcodes and levels like
// any other. The videos are decoded while the source is listed, several at once, each frame
// written to a scratch file next to the store as soon as it is encoded (unlinked at once: a
// crash leaves nothing), so that memory holds one frame per video being decoded.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "sources/pack_source.h"
#include "video/video_frames.h"
#include "video/video_streams.h"

namespace fid::sources {

// What became of each video: its frames' folder or why it is not in the store.
struct VideoSummary {
  uint64_t videos = 0, video_bytes = 0, frames = 0, frame_bytes = 0;  // the videos packed as frames
  std::vector<std::pair<std::string, std::string>> cut_short;           // folder, what was kept and why
  std::vector<std::pair<std::string, std::string>> reencoded;  // --video-streams=gop=source: folder, why re-encoded
};

// True for the names --video-frames decodes (the extension, in any case).
bool is_video_name(std::string_view name);

// `inner` with its videos turned into frames. `scratch_dir` holds the frames until pack has read
// them; `jobs` videos decode at once. The summary is filled by list().
std::unique_ptr<PackSource> video_frames_source(std::unique_ptr<PackSource> inner, const video::FramesOptions& opt,
                                                std::filesystem::path scratch_dir, unsigned jobs,
                                                VideoSummary& summary);

// `pack --video-streams`: the videos of a source become folders of frames kept as their compressed
// streams: VIDEO.mp4 becomes the folder VIDEO holding img_00001 ... (no extension: the mount adds
// its raw_format's), each GOP's piece the bytes of its first frame and the frames after it empty,
// their places in tree.frame_place and the streams in tree.videos. Scratch files as above.
std::unique_ptr<PackSource> video_streams_source(std::unique_ptr<PackSource> inner, const video::StreamOptions& opt,
                                                 std::filesystem::path scratch_dir, unsigned jobs,
                                                 VideoSummary& summary);

}  // namespace fid::sources
