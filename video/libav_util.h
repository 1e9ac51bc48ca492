// What video/'s files share of FFmpeg's libraries (internal to video/): opening a stranger's
// video safely, the frame size limits, libav's log kept quiet, a frame's conversion to RGB (one
// conversion, so that a stored stream's frames are the very pixels --video-frames gives), and the
// option parsing common to --video-frames and --video-streams.
#pragma once

#include <cstdarg>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libswscale/swscale.h>
}

#include "codec/image.h"
#include "common/error.h"
#include "common/numbers.h"
#include "video/video_frames.h"

namespace fid::video::detail {

std::string av_error(int code);

struct FormatCloser {
  void operator()(AVFormatContext* f) const { avformat_close_input(&f); }
};
struct CodecCloser {
  void operator()(AVCodecContext* c) const { avcodec_free_context(&c); }
};
struct FrameCloser {
  void operator()(AVFrame* f) const { av_frame_free(&f); }
};
struct PacketCloser {
  void operator()(AVPacket* p) const { av_packet_free(&p); }
};
struct SwsCloser {
  void operator()(SwsContext* s) const { sws_freeContext(s); }
};
struct AvioCloser {
  void operator()(AVIOContext* io) const {
    if (io) av_freep(&io->buffer);
    avio_context_free(&io);
  }
};
using CodecPtr = std::unique_ptr<AVCodecContext, CodecCloser>;
using FramePtr = std::unique_ptr<AVFrame, FrameCloser>;
using PacketPtr = std::unique_ptr<AVPacket, PacketCloser>;
using SwsPtr = std::unique_ptr<SwsContext, SwsCloser>;

// Bytes in memory read through libavformat's I/O callbacks.
struct MemoryReader {
  std::span<const uint8_t> bytes;
  size_t pos = 0;

  static int read(void* opaque, uint8_t* buf, int size);
  static int64_t seek(void* opaque, int64_t offset, int whence);
};

// A stranger's video may claim any size: frames over 16384 a side or 64 megapixels are refused
// (EINVAL) before they are converted (an 8K frame is 33 megapixels).
fid::Status check_frame_size(int width, int height);

// libav's own log stays quiet (reasons come back as errors); a demuxer's warnings are kept for
// the WarningsKept of the thread. Called before any use of libav here.
void quiet_libav();

// Keeps the first warning of the demuxers this thread runs while it lives (one video's): the one
// sign libavformat gives of a container that ends early while its reads end in a plain EOF.
class WarningsKept {
 public:
  WarningsKept();
  ~WarningsKept();
  WarningsKept(const WarningsKept&) = delete;
  WarningsKept& operator=(const WarningsKept&) = delete;
  const std::string& first() const { return warning_; }

 private:
  std::string warning_;
  std::string* previous_;
};

// A video opened for its best video stream, whose decoder is open (`threads` of them).
struct Opened {
  std::unique_ptr<AVIOContext, AvioCloser> io;
  std::unique_ptr<AVFormatContext, FormatCloser> format;
  CodecPtr codec;
  int stream = -1;
};
// `memory` reads input.bytes when input.path is empty; it must outlive the result. Errors:
// EINVAL with the reason (not a video, no video stream, no decoder, frames over the limits).
fid::Result<Opened> open_video(const VideoInput& input, MemoryReader& memory, int threads);

// What the container says of stream `st`: codec, rate, rotation and the displayed size (frames 0).
VideoInfo describe_stream(const AVStream* st);

// The frame cap of `opt` for stream `st` (FramesOptions::max_frames), and the error for a video
// over it; `flag` names the option that takes max_frames ("--video-frames").
uint64_t max_frames_of(const FramesOptions& opt, const AVStream* st);
fid::Error too_many_frames(uint64_t max_frames, bool defaulted, const char* flag);

// Why a video whose reads ended at its end of file is short of what its container declares, or
// "" (see decode_frames); `frames_end` is where its frames end in the stream's time base.
std::string ends_early(const AVFormatContext* f, const AVStream* st, int64_t frames_end, const std::string& warning);

// `frame` as RGB of width x height in `out`, through `sws` (kept between frames). EINVAL when
// libswscale cannot convert it. The only YUV-to-RGB conversion of video/: the frame's own colour
// matrix and range, with `flags`.
// The conversions' libswscale flags: pack's frames (--video-frames) exact, at any cost; the mount's
// (a GOP's frames on every read) the fast paths, which differ from the exact one by a level or two.
inline constexpr int kExactRgb = SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT;
inline constexpr int kFastRgb = SWS_BILINEAR;
fid::Status frame_to_rgb(const AVFrame* frame, uint32_t width, uint32_t height, SwsPtr& sws, codec::Image& out,
                         int flags = kExactRgb);
// The same into `dst`, rows `stride` bytes apart. libswscale's fast paths store whole vectors, past
// a row's last pixel: `dst` must hold kRgbSlack bytes more than stride * height.
inline constexpr size_t kRgbSlack = 256;
fid::Status frame_to_rgb(const AVFrame* frame, uint32_t width, uint32_t height, SwsPtr& sws, uint8_t* dst,
                         size_t stride, int flags);

// "N", "N/D" or a decimal with up to 3 places, as a fraction; nullopt when not a positive rate.
std::optional<std::pair<uint32_t, uint32_t>> parse_rate(std::string_view text);

// Calls on(key, value, bad) for each "key=value" of a comma-separated list, `bad` the start of an
// error message naming the part ("'key=value': "), until one returns an error.
fid::Status each_option(std::string_view text,
                        const std::function<fid::Status(std::string_view, std::string_view, const std::string&)>& on);

// fps=, short_side= and max_frames=, which --video-frames and --video-streams share, into `opt`;
// nullopt for any other key.
template <class Options>
std::optional<fid::Status> parse_shared_option(std::string_view key, std::string_view value, const std::string& bad,
                                               Options& opt) {
  if (key == "fps") {
    auto rate = parse_rate(value);
    if (!rate) return fid::Status{fid::Error{EINVAL, bad + "fps takes a positive rate (30, 29.97 or 30000/1001)"}};
    std::tie(opt.fps_num, opt.fps_den) = *rate;
  } else if (key == "short_side") {
    auto s = parse_u64(value);
    if (!s || *s < 8 || *s > 16384) return fid::Status{fid::Error{EINVAL, bad + "short_side takes pixels from 8 to 16384"}};
    opt.short_side = static_cast<uint32_t>(*s);
  } else if (key == "max_frames") {
    auto m = parse_u64(value);
    if (!m || *m == 0) return fid::Status{fid::Error{EINVAL, bad + "max_frames takes a count of frames from 1"}};
    opt.max_frames = *m;
  } else {
    return std::nullopt;
  }
  return fid::Status{};
}

}  // namespace fid::video::detail
