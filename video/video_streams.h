// `pack --video-streams`: a video kept as its compressed stream, GOP by GOP (codec/video_stream.h
// holds the GOP piece and the decoder's interface). Either the source's own packets, cut at its
// keyframes, where every GOP decodes alone to exactly the frames the whole video's decode gives
// (gop=source), or a re-encode with libavcodec's libx264: a keyframe every N frames, no B-frames
// (gop=N). And the mount's decoder: libavcodec behind codec::GopDecoder.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "codec/video_stream.h"
#include "common/error.h"
#include "video/video_frames.h"

namespace fid::video {

// What `pack --video-streams[=...]` asks of each video.
struct StreamOptions {
  uint32_t gop = 16;       // frames a GOP when re-encoding; 0: gop=source (keep the source's packets)
  int crf = 23;            // libx264's constant rate factor when re-encoding (scripts/bench/video_streams.sh)
  uint32_t short_side = 0; // 0: the video's size; else re-encoded with its shorter side scaled to this
  uint32_t fps_num = 0, fps_den = 1;  // 0: every frame the video holds; else re-encoded at this rate
  uint64_t max_frames = 0;            // as FramesOptions::max_frames (0: 4 hours at the output rate)
  int threads = 1;                    // libavcodec's threads for one video
};

// "gop=N|source,crf=C,short_side=S,fps=F,max_frames=M" in any order, each optional; "" is the
// defaults. The error names the bad part.
fid::Result<StreamOptions> parse_stream_options(std::string_view text);

// A GOP whose frames decode to more than this many RGB bytes is not kept as the source has it
// (gop=source re-encodes the video): the mount holds a GOP's decoded frames at once.
inline constexpr uint64_t kMaxGopDecodedBytes = uint64_t{96} << 20;

// One GOP as pack stores it: the piece (codec::encode_gop_piece) and its frame count.
struct StoredGop {
  std::vector<uint8_t> piece;
  uint32_t frames = 0;
};

// What became of a video.
struct StreamInfo {
  VideoInfo source;              // what the source video is (its codec, rate, size; frames = frames kept)
  codec::StreamParams params;    // what the stored stream needs to decode
  uint32_t gop = 0;              // the stored GOP length: N, or 0 for the source's own GOPs
  uint64_t stored_bytes = 0;     // the GOP pieces' bytes
  std::string reencoded_why;     // gop=source asked but re-encoded: why (rotated, open GOPs, ...)
};

// Calls `on_gop` with each GOP in frame order. Errors: as decode_frames (EINVAL not a video,
// EFBIG over max_frames, ECANCELED on `cancel`), or on_gop's. A video cut short keeps the GOPs of
// the frames before and says why in info.source.cut_short.
// gop=N: the frames decode_frames gives (rotated, resampled, scaled; never scaled up) in libx264's
// 4:2:0, or 4:4:4 for a video with an odd side (4:2:0 takes even sides only), at their own size;
// stored as an MP4 stores H.264 (avcC, length-prefixed NAL units).
// gop=source: a first pass checks every GOP without calling on_gop (a video that fails is
// re-encoded with gop=16, saying why in info.reencoded_why), a second hands the GOPs out.
fid::Result<StreamInfo> store_stream(const VideoInput& input, const StreamOptions& opt,
                                     const std::function<fid::Status(StoredGop&&)>& on_gop,
                                     const std::atomic<bool>& cancel);

// The mount's decoder: libavcodec (and libswscale to RGB at the asked size), one decoder context
// a call, single-threaded (the mount decodes several GOPs at once on its own threads). Its RGB is
// libswscale's fast conversion (detail::kFastRgb): within a level or two of decode_frames' exact one,
// at a fraction of its cost on every read.
std::unique_ptr<codec::GopDecoder> make_libav_gop_decoder();

}  // namespace fid::video
