// libFuzzer target: a video as pack --video-frames decodes it, from bytes in memory (the
// demuxers pack admits, libavcodec, libswscale, rotation and the fps resampling). Nothing may
// crash or hang; every frame handed out must be a whole RGB picture of the size the video says,
// and encode as a JPEG. The first byte picks the options (native rate or a resampled one, a
// scaled size).
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "codec/jpeg.h"
#include "video/video_frames.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  fid::video::FramesOptions opt;
  if (data[0] & 1) opt.fps_num = 1 + (data[0] >> 4), opt.fps_den = 1 + ((data[0] >> 1) & 3);
  if (data[0] & 8) opt.short_side = 16;
  fid::video::VideoInput input;
  input.bytes = std::span<const uint8_t>(data + 1, size - 1);
  std::atomic<bool> cancel{false};
  size_t frames = 0;
  auto on_frame = [&](const fid::codec::ImageView& rgb) -> fid::Status {
    if (rgb.channels != 3 || rgb.width == 0 || rgb.height == 0) std::abort();
    if (opt.short_side && std::min(rgb.width, rgb.height) != opt.short_side) std::abort();
    if (!fid::codec::encode_jpeg(rgb, 50)) std::abort();
    // Enough to cover resampling; a long stream would only repeat it.
    return ++frames < 64 ? fid::Status{} : fid::Status{fid::Error{ECANCELED, "enough frames"}};
  };
  (void)fid::video::decode_frames(input, opt, on_frame, cancel);
  return 0;
}
