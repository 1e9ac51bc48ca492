// A video file's frames as RGB images, decoded in process with FFmpeg's libraries (libavformat
// demuxes, libavcodec decodes, libswscale converts and scales), one frame in memory at a time,
// so that an hour-long video costs what one frame costs. The container's rotation is applied
// (as the ffmpeg CLI applies it), any pixel format libswscale reads is taken (10-bit, 4:4:4,
// odd sizes), and the frame rate can be resampled as the ffmpeg CLI's fps filter does.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "codec/image.h"
#include "common/error.h"

namespace fid::video {

// What `pack --video-frames` asks of each video.
struct FramesOptions {
  uint32_t fps_num = 0, fps_den = 1;  // fps_num 0: every frame the video holds
  uint32_t short_side = 0;            // 0: the video's size; else the shorter side scaled to this
  int quality = 95;                   // of the frames' JPEGs (libjpeg's scale)
  int threads = 1;                    // libavcodec's threads for one video
  // A video that would give more frames is refused (EFBIG) when it reaches this many: a few bytes
  // of crafted timestamps can ask a frame-rate resampler for endless copies of one frame. 0:
  // kDefaultMaxSeconds at the output frame rate (fps, else the video's own, 1 to 1000).
  uint64_t max_frames = 0;
};

// max_frames 0: this long a video at the output frame rate (4 hours).
inline constexpr uint64_t kDefaultMaxSeconds = 4 * 3600;

// "fps=N,short_side=S,quality=Q,max_frames=M" in any order, each optional; "" is the defaults. N
// may be a fraction ("30000/1001") or a decimal ("29.97"). The error names the bad part.
fid::Result<FramesOptions> parse_frames_options(std::string_view text);

// What the container and the decoder say of a video, as stored with its frames.
struct VideoInfo {
  uint32_t fps_num = 0, fps_den = 1;  // the stream's average frame rate; 0 when unknown
  uint32_t width = 0, height = 0;     // of a frame as displayed (rotation applied), before scaling
  int rotation = 0;                   // degrees clockwise applied: 0, 90, 180 or 270
  std::string codec;                  // libavcodec's name ("h264", "vp9")
  uint64_t frames = 0;                // frames given to the callback
  std::string cut_short;              // empty, or why decoding stopped before the video's end
};

// Where a video's bytes are: a local file (read as libavformat reads files: a little at a time),
// or bytes in memory.
struct VideoInput {
  std::string path;
  std::span<const uint8_t> bytes;
};

// Calls `on_frame` with each output frame in order (RGB, rotated, scaled; the view is valid only
// during the call). An error from on_frame stops decoding and is returned. Errors: EINVAL with
// the reason when the input is not a video (no video stream, an unknown codec, nothing decodes);
// EFBIG when it would give more than max_frames frames; ECANCELED when `cancel` is set (checked
// before each frame given). A video that stops decoding part way (an error while reading, or a
// container that ends before the time it declares, as a truncated file does) keeps the frames
// before and says why in info.cut_short.
fid::Result<VideoInfo> decode_frames(const VideoInput& input, const FramesOptions& opt,
                                     const std::function<fid::Status(const codec::ImageView&)>& on_frame,
                                     const std::atomic<bool>& cancel);

// `image` turned clockwise by 0, 90, 180 or 270 degrees.
codec::Image rotate_clockwise(const codec::ImageView& image, int degrees);

}  // namespace fid::video
