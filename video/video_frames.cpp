// See video_frames.h.
#include "video/video_frames.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/display.h>
#include <libavutil/imgutils.h>
#include <libswscale/swscale.h>
}

#include <fmt/format.h>

#include "common/numbers.h"

namespace fid::video {
namespace {

// Only these demuxers open a "video": a file named .mp4 that is an HLS playlist or an image
// sequence pattern must not make libavformat read other files or URLs.
constexpr const char* kDemuxers = "mov,mp4,m4a,3gp,3g2,mj2,matroska,webm,avi";

std::string av_error(int code) {
  char text[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(code, text, sizeof text);
  return text;
}

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

// Bytes in memory read through libavformat's I/O callbacks.
struct MemoryReader {
  std::span<const uint8_t> bytes;
  size_t pos = 0;

  static int read(void* opaque, uint8_t* buf, int size) {
    auto* m = static_cast<MemoryReader*>(opaque);
    const size_t n = std::min(static_cast<size_t>(size), m->bytes.size() - m->pos);
    if (n == 0) return AVERROR_EOF;
    std::memcpy(buf, m->bytes.data() + m->pos, n);
    m->pos += n;
    return static_cast<int>(n);
  }
  static int64_t seek(void* opaque, int64_t offset, int whence) {
    auto* m = static_cast<MemoryReader*>(opaque);
    const auto size = static_cast<int64_t>(m->bytes.size());
    if (whence & AVSEEK_SIZE) return size;
    int64_t to = (whence & ~AVSEEK_FORCE) == SEEK_CUR ? static_cast<int64_t>(m->pos) + offset
                 : (whence & ~AVSEEK_FORCE) == SEEK_END ? size + offset
                                                        : offset;
    if (to < 0 || to > size) return AVERROR(EINVAL);
    m->pos = static_cast<size_t>(to);
    return to;
  }
};

// A stranger's video may claim any size: frames larger than this are refused before they are
// converted (an 8K frame is 33 megapixels).
constexpr uint64_t kMaxFramePixels = 64ull << 20;
constexpr int kMaxFrameSide = 16384;

fid::Status check_frame_size(int width, int height) {
  if (width <= 0 || height <= 0 || width > kMaxFrameSide || height > kMaxFrameSide ||
      static_cast<uint64_t>(width) * static_cast<uint64_t>(height) > kMaxFramePixels)
    return fid::Error{EINVAL, "frames of " + std::to_string(width) + "x" + std::to_string(height) +
                                  " pixels are over the limit (16384 a side, 64 megapixels)"};
  return {};
}

// The first warning (or worse) that the demuxer of the video this thread decodes logged (while
// probing its streams or reading them): the one sign libavformat gives of a container that ends
// early ("File ended prematurely") while its reads still end in a plain end of file.
thread_local std::string* t_demuxer_warning = nullptr;

void keep_demuxer_warning(void* avcl, int level, const char* format, va_list args) {
  std::string* w = t_demuxer_warning;
  if (w == nullptr || avcl == nullptr || *static_cast<const AVClass* const*>(avcl) != avformat_get_class() ||
      level > AV_LOG_WARNING || !w->empty())
    return;
  char line[256];
  std::vsnprintf(line, sizeof line, format, args);
  *w = line;
  while (!w->empty() && (w->back() == '\n' || w->back() == ' ')) w->pop_back();
}

// libav's own log stays quiet (reasons come back as errors); a demuxer's warnings are kept.
void quiet_libav() {
  static std::once_flag once;
  std::call_once(once, [] { av_log_set_callback(keep_demuxer_warning); });
}

// Keeps the warnings of the demuxers this thread runs while it lives (one video's).
class WarningsKept {
 public:
  WarningsKept() : previous_(t_demuxer_warning) { t_demuxer_warning = &warning_; }
  ~WarningsKept() { t_demuxer_warning = previous_; }
  WarningsKept(const WarningsKept&) = delete;
  WarningsKept& operator=(const WarningsKept&) = delete;
  const std::string& first() const { return warning_; }

 private:
  std::string warning_;
  std::string* previous_;
};

// Degrees clockwise that the container asks a player to turn the picture, as the ffmpeg CLI
// reads its display matrix (a multiple of 90, else 0).
int display_rotation(const AVStream* st) {
  const uint8_t* matrix = av_stream_get_side_data(st, AV_PKT_DATA_DISPLAYMATRIX, nullptr);
  if (matrix == nullptr) return 0;
  double theta = -av_display_rotation_get(reinterpret_cast<const int32_t*>(matrix));
  if (std::isnan(theta)) return 0;
  theta -= 360 * std::floor(theta / 360 + 0.9 / 360);
  for (int d : {90, 180, 270})
    if (std::fabs(theta - d) < 1.0) return d;
  return 0;
}

struct Opened {
  std::unique_ptr<AVIOContext, AvioCloser> io;
  std::unique_ptr<AVFormatContext, FormatCloser> format;
  std::unique_ptr<AVCodecContext, CodecCloser> codec;
  int stream = -1;
};

fid::Result<Opened> open_video(const VideoInput& input, MemoryReader& memory, const FramesOptions& opt) {
  quiet_libav();
  Opened o;
  AVFormatContext* f = avformat_alloc_context();
  if (f == nullptr) return fid::Error{ENOMEM, "out of memory"};
  f->format_whitelist = av_strdup(kDemuxers);
  std::string url = input.path.empty() ? std::string() : "file:" + input.path;
  if (input.path.empty()) {
    constexpr int kBuffer = 64 << 10;
    auto* buffer = static_cast<unsigned char*>(av_malloc(kBuffer));
    o.io.reset(buffer ? avio_alloc_context(buffer, kBuffer, 0, &memory, &MemoryReader::read, nullptr, &MemoryReader::seek)
                      : nullptr);
    if (!o.io) {
      av_free(buffer);
      avformat_free_context(f);
      return fid::Error{ENOMEM, "out of memory"};
    }
    f->pb = o.io.get();
    f->flags |= AVFMT_FLAG_CUSTOM_IO;
  }
  AVDictionary* options = nullptr;
  av_dict_set(&options, "protocol_whitelist", "file", 0);
  int rc = avformat_open_input(&f, url.c_str(), nullptr, &options);  // frees f on failure
  av_dict_free(&options);
  if (rc < 0) return fid::Error{EINVAL, "not a video libavformat opens (" + av_error(rc) + ")"};
  o.format.reset(f);
  if ((rc = avformat_find_stream_info(f, nullptr)) < 0)
    return fid::Error{EINVAL, "its streams cannot be read (" + av_error(rc) + ")"};
  const AVCodec* decoder = nullptr;
  for (unsigned i = 0; i < f->nb_streams; ++i)  // a cover picture is no video
    if (f->streams[i]->disposition & AV_DISPOSITION_ATTACHED_PIC) f->streams[i]->discard = AVDISCARD_ALL;
  rc = av_find_best_stream(f, AVMEDIA_TYPE_VIDEO, -1, -1, &decoder, 0);
  if (rc == AVERROR_STREAM_NOT_FOUND || (rc >= 0 && (f->streams[rc]->disposition & AV_DISPOSITION_ATTACHED_PIC)))
    return fid::Error{EINVAL, "no video stream"};
  if (rc < 0 || decoder == nullptr) {
    const AVCodecDescriptor* d = rc >= 0 ? avcodec_descriptor_get(f->streams[rc]->codecpar->codec_id) : nullptr;
    return fid::Error{EINVAL, std::string("no decoder for its video codec") + (d ? std::string(" ") + d->name : "")};
  }
  o.stream = rc;
  AVStream* st = f->streams[rc];
  if (st->codecpar->width > 0 && st->codecpar->height > 0)  // else known from the first frame
    if (fid::Status fits = check_frame_size(st->codecpar->width, st->codecpar->height); !fits)
      return std::move(fits).error();
  for (unsigned i = 0; i < f->nb_streams; ++i)
    if (static_cast<int>(i) != rc) f->streams[i]->discard = AVDISCARD_ALL;
  o.codec.reset(avcodec_alloc_context3(decoder));
  if (!o.codec) return fid::Error{ENOMEM, "out of memory"};
  if ((rc = avcodec_parameters_to_context(o.codec.get(), st->codecpar)) < 0)
    return fid::Error{EINVAL, "its video stream's parameters are bad (" + av_error(rc) + ")"};
  o.codec->thread_count = std::max(1, opt.threads);
  o.codec->pkt_timebase = st->time_base;
  if ((rc = avcodec_open2(o.codec.get(), decoder, nullptr)) < 0)
    return fid::Error{EINVAL, std::string("the ") + decoder->name + " decoder does not open (" + av_error(rc) + ")"};
  return o;
}

// The frames a decoder returns, converted, scaled, rotated and resampled in time, to on_frame.
class FrameSink {
 public:
  FrameSink(const FramesOptions& opt, const AVStream* st, uint64_t max_frames, VideoInfo& info,
            const std::function<fid::Status(const codec::ImageView&)>& on_frame, const std::atomic<bool>& cancel)
      : opt_(opt), st_(st), max_frames_(max_frames), info_(info), on_frame_(on_frame), cancel_(cancel) {}

  fid::Status take(const AVFrame* frame) {
    if (fid::Status converted = convert(frame); !converted) return converted;
    int64_t ts = frame->best_effort_timestamp;
    if (ts == AV_NOPTS_VALUE) ts = last_ts_ == AV_NOPTS_VALUE ? 0 : last_ts_ + std::max<int64_t>(1, last_duration_);
    if (start_ == AV_NOPTS_VALUE) start_ = ts;
    last_ts_ = ts;
    last_duration_ = frame->pkt_duration;
    if (opt_.fps_num == 0) return emit(picture_);
    // As the fps filter: output slot k shows the latest frame whose time rounds to k or less.
    const int64_t slot = slot_of(ts);
    while (pending_ && next_slot_ < slot) {
      if (fid::Status s = emit(*pending_); !s) return s;
      ++next_slot_;
    }
    if (!pending_) next_slot_ = std::max(next_slot_, slot);
    pending_ = picture_;
    return {};
  }

  // At the end of the stream: the last frame fills the slots up to the video's end.
  fid::Status finish() {
    if (opt_.fps_num == 0 || !pending_) return {};
    int64_t duration = last_duration_;
    if (duration <= 0 && st_->avg_frame_rate.num > 0)
      duration = av_rescale_q(1, av_inv_q(st_->avg_frame_rate), st_->time_base);
    // A frame whose slot is the end's is dropped, as the fps filter drops it; a video shorter
    // than one slot still gives its one frame.
    const int64_t end = std::max(slot_of(last_ts_ + std::max<int64_t>(duration, 0)), info_.frames == 0 ? next_slot_ + 1 : 0);
    for (; next_slot_ < end; ++next_slot_)
      if (fid::Status s = emit(*pending_); !s) return s;
    return {};
  }

  // Where the frames taken end (the last one's time plus its duration), in the stream's time
  // base; AV_NOPTS_VALUE before the first.
  int64_t end_ts() const { return last_ts_ == AV_NOPTS_VALUE ? last_ts_ : last_ts_ + std::max<int64_t>(last_duration_, 0); }

 private:
  int64_t slot_of(int64_t ts) const {
    return av_rescale_q_rnd(ts - start_, st_->time_base, AVRational{static_cast<int>(opt_.fps_den), static_cast<int>(opt_.fps_num)},
                            static_cast<AVRounding>(AV_ROUND_NEAR_INF | AV_ROUND_PASS_MINMAX));
  }

  fid::Status emit(const codec::Image& image) {
    if (cancel_) return fid::Error{ECANCELED, "interrupted"};
    if (info_.frames >= max_frames_)
      return fid::Error{EFBIG, fmt::format("it gives more than {} frames{}: a longer video takes max_frames=N in "
                                           "--video-frames", max_frames_,
                                           opt_.max_frames == 0 ? " (4 hours at the output frame rate)" : "")};
    ++info_.frames;
    return on_frame_(image);
  }

  // picture_ = the frame as RGB, scaled and turned.
  fid::Status convert(const AVFrame* frame) {
    if (fid::Status fits = check_frame_size(frame->width, frame->height); !fits) return fits;
    uint32_t w = static_cast<uint32_t>(frame->width), h = static_cast<uint32_t>(frame->height);
    if (opt_.short_side != 0) {
      const double scale = static_cast<double>(opt_.short_side) / std::min(w, h);
      w = static_cast<uint32_t>(std::max(1L, std::lround(w * scale)));
      h = static_cast<uint32_t>(std::max(1L, std::lround(h * scale)));
      if (fid::Status fits = check_frame_size(static_cast<int>(std::min(w, 1u << 20)), static_cast<int>(std::min(h, 1u << 20)));
          !fits)
        return fits;
    }
    sws_.reset(sws_getCachedContext(sws_.release(), frame->width, frame->height, static_cast<AVPixelFormat>(frame->format),
                                    static_cast<int>(w), static_cast<int>(h), AV_PIX_FMT_RGB24,
                                    SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT, nullptr, nullptr, nullptr));
    if (!sws_) return fid::Error{EINVAL, "libswscale cannot convert its frames"};
    // The deprecated YUVJ formats (MJPEG in an .avi) are full range whatever the frame says.
    const auto format = static_cast<AVPixelFormat>(frame->format);
    const bool full_range = frame->color_range == AVCOL_RANGE_JPEG || format == AV_PIX_FMT_YUVJ420P ||
                            format == AV_PIX_FMT_YUVJ422P || format == AV_PIX_FMT_YUVJ444P ||
                            format == AV_PIX_FMT_YUVJ440P || format == AV_PIX_FMT_YUVJ411P;
    sws_setColorspaceDetails(sws_.get(), sws_getCoefficients(frame->colorspace), full_range,
                             sws_getCoefficients(SWS_CS_DEFAULT), 1, 0, 1 << 16, 1 << 16);
    rgb_.width = w, rgb_.height = h, rgb_.channels = 3;
    rgb_.pixels.resize(rgb_.byte_size());
    uint8_t* dst[4] = {rgb_.pixels.data(), nullptr, nullptr, nullptr};
    int dst_stride[4] = {static_cast<int>(rgb_.row_bytes()), 0, 0, 0};
    if (sws_scale(sws_.get(), frame->data, frame->linesize, 0, frame->height, dst, dst_stride) <= 0)
      return fid::Error{EINVAL, "libswscale failed on a frame"};
    if (info_.rotation == 0) {
      std::swap(picture_, rgb_);
    } else {
      picture_ = rotate_clockwise(rgb_, info_.rotation);
    }
    return {};
  }

  const FramesOptions& opt_;
  const AVStream* st_;
  const uint64_t max_frames_;
  VideoInfo& info_;
  const std::function<fid::Status(const codec::ImageView&)>& on_frame_;
  const std::atomic<bool>& cancel_;
  std::unique_ptr<SwsContext, SwsCloser> sws_;
  codec::Image rgb_, picture_;
  std::optional<codec::Image> pending_;
  int64_t start_ = AV_NOPTS_VALUE, last_ts_ = AV_NOPTS_VALUE, last_duration_ = 0, next_slot_ = 0;
};

// Sends the frames the decoder has ready to the sink; counts undecodable data.
fid::Status drain(AVCodecContext* codec, AVFrame* frame, FrameSink& sink, int& decode_errors) {
  for (;;) {
    const int rc = avcodec_receive_frame(codec, frame);
    if (rc == AVERROR(EAGAIN) || rc == AVERROR_EOF) return {};
    if (rc < 0) {
      ++decode_errors;
      return {};
    }
    fid::Status taken = sink.take(frame);
    av_frame_unref(frame);
    if (!taken) return taken;
  }
}

// The frame cap of `opt` for stream `st` (FramesOptions::max_frames).
uint64_t max_frames_of(const FramesOptions& opt, const AVStream* st) {
  if (opt.max_frames != 0) return opt.max_frames;
  double rate = opt.fps_num != 0 ? static_cast<double>(opt.fps_num) / opt.fps_den : 0;
  if (rate == 0) {
    const AVRational own = st->avg_frame_rate.num > 0 && st->avg_frame_rate.den > 0 ? st->avg_frame_rate : st->r_frame_rate;
    rate = own.num > 0 && own.den > 0 ? std::clamp(av_q2d(own), 1.0, 1000.0) : 60.0;
  }
  return static_cast<uint64_t>(std::ceil(static_cast<double>(kDefaultMaxSeconds) * rate));
}

// Why a video whose reads ended at its end of file is short of what its container declares, or
// "": the demuxer warned (a truncated Matroska file: "File ended prematurely"), and its frames end
// more than a frame and a half before the video's declared duration (or it declares none).
std::string ends_early(const AVFormatContext* f, const AVStream* st, int64_t frames_end, const std::string& warning) {
  if (warning.empty()) return {};
  const double start = st->start_time != AV_NOPTS_VALUE ? static_cast<double>(st->start_time) * av_q2d(st->time_base) : 0;
  double declared = -1;
  if (st->duration != AV_NOPTS_VALUE && st->duration > 0) declared = static_cast<double>(st->duration) * av_q2d(st->time_base);
  else if (f->duration != AV_NOPTS_VALUE && f->duration > 0) declared = static_cast<double>(f->duration) / AV_TIME_BASE;
  const double frame = st->avg_frame_rate.num > 0 && st->avg_frame_rate.den > 0 ? 1 / av_q2d(st->avg_frame_rate) : 0.04;
  const double ended = frames_end == AV_NOPTS_VALUE ? 0 : static_cast<double>(frames_end) * av_q2d(st->time_base) - start;
  if (declared < 0) return "its container ends early (" + warning + ")";
  if (ended + 1.5 * frame >= declared) return {};
  return fmt::format("its container ends early ({}): its frames end at {:.2f} s of the {:.2f} s it declares", warning,
                     ended, declared);
}

}  // namespace

fid::Result<VideoInfo> decode_frames(const VideoInput& input, const FramesOptions& opt,
                                     const std::function<fid::Status(const codec::ImageView&)>& on_frame,
                                     const std::atomic<bool>& cancel) {
  MemoryReader memory{input.bytes};
  const WarningsKept warnings;
  fid::Result<Opened> opened = open_video(input, memory, opt);
  if (!opened) return std::move(opened).error();
  AVFormatContext* f = opened->format.get();
  AVCodecContext* codec = opened->codec.get();
  const AVStream* st = f->streams[opened->stream];
  VideoInfo info;
  info.codec = avcodec_get_name(st->codecpar->codec_id);
  info.rotation = display_rotation(st);
  const bool turned = info.rotation == 90 || info.rotation == 270;
  info.width = static_cast<uint32_t>(turned ? st->codecpar->height : st->codecpar->width);
  info.height = static_cast<uint32_t>(turned ? st->codecpar->width : st->codecpar->height);
  if (st->avg_frame_rate.num > 0 && st->avg_frame_rate.den > 0)
    info.fps_num = static_cast<uint32_t>(st->avg_frame_rate.num), info.fps_den = static_cast<uint32_t>(st->avg_frame_rate.den);

  std::unique_ptr<AVPacket, PacketCloser> packet(av_packet_alloc());
  std::unique_ptr<AVFrame, FrameCloser> frame(av_frame_alloc());
  if (!packet || !frame) return fid::Error{ENOMEM, "out of memory"};
  FrameSink sink(opt, st, max_frames_of(opt, st), info, on_frame, cancel);
  int decode_errors = 0, rc = 0;
  while ((rc = av_read_frame(f, packet.get())) >= 0) {
    if (cancel) return fid::Error{ECANCELED, "interrupted"};
    if (packet->stream_index == opened->stream && avcodec_send_packet(codec, packet.get()) < 0) ++decode_errors;
    av_packet_unref(packet.get());
    if (fid::Status s = drain(codec, frame.get(), sink, decode_errors); !s) return std::move(s).error();
  }
  if (rc != AVERROR_EOF) info.cut_short = "reading stopped part way (" + av_error(rc) + ")";
  avcodec_send_packet(codec, nullptr);  // flush the decoder's delayed frames
  if (fid::Status s = drain(codec, frame.get(), sink, decode_errors); !s) return std::move(s).error();
  if (fid::Status s = sink.finish(); !s) return std::move(s).error();
  if (info.frames == 0)
    return fid::Error{EINVAL, "no frame decodes" + (info.cut_short.empty() ? std::string() : ": " + info.cut_short)};
  if (info.cut_short.empty()) info.cut_short = ends_early(f, st, sink.end_ts(), warnings.first());
  if (info.cut_short.empty() && decode_errors > 0)
    info.cut_short = std::to_string(decode_errors) + " packets of its video did not decode";
  if (info.cut_short.empty() && opt.fps_num == 0 && st->nb_frames > 0 && info.frames < static_cast<uint64_t>(st->nb_frames))
    info.cut_short = "its container lists " + std::to_string(st->nb_frames) + " frames";
  return info;
}

codec::Image rotate_clockwise(const codec::ImageView& image, int degrees) {
  codec::Image out;
  const bool turned = degrees == 90 || degrees == 270;
  out.width = turned ? image.height : image.width;
  out.height = turned ? image.width : image.height;
  out.channels = image.channels;
  out.pixels.resize(out.byte_size());
  const size_t c = image.channels;
  for (uint32_t y = 0; y < image.height; ++y) {
    const uint8_t* row = image.pixels + y * image.stride;
    for (uint32_t x = 0; x < image.width; ++x) {
      uint32_t ox = x, oy = y;
      if (degrees == 90) ox = image.height - 1 - y, oy = x;
      else if (degrees == 180) ox = image.width - 1 - x, oy = image.height - 1 - y;
      else if (degrees == 270) ox = y, oy = image.width - 1 - x;
      std::memcpy(&out.pixels[(size_t{oy} * out.width + ox) * c], row + x * c, c);
    }
  }
  return out;
}

namespace {

// "N", "N/D" or a decimal with up to 3 places, as a fraction; nullopt when not a positive rate.
std::optional<std::pair<uint32_t, uint32_t>> parse_rate(std::string_view text) {
  if (size_t slash = text.find('/'); slash != std::string_view::npos) {
    auto num = parse_u64(text.substr(0, slash)), den = parse_u64(text.substr(slash + 1));
    if (!num || !den || *num == 0 || *den == 0 || *num > 1000000 || *den > 1000000) return std::nullopt;
    return std::pair{static_cast<uint32_t>(*num), static_cast<uint32_t>(*den)};
  }
  const size_t dot = text.find('.');
  std::string digits(text.substr(0, dot));
  uint32_t den = 1;
  if (dot != std::string_view::npos) {
    std::string_view frac = text.substr(dot + 1);
    if (frac.empty() || frac.size() > 3) return std::nullopt;
    digits += frac;
    for (size_t i = 0; i < frac.size(); ++i) den *= 10;
  }
  auto num = parse_u64(digits);
  if (!num || *num == 0 || *num > 1000000ull * den) return std::nullopt;
  return std::pair{static_cast<uint32_t>(*num), den};
}

}  // namespace

fid::Result<FramesOptions> parse_frames_options(std::string_view text) {
  FramesOptions opt;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view part = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    const size_t eq = part.find('=');
    const std::string_view key = part.substr(0, eq), value = eq == std::string_view::npos ? "" : part.substr(eq + 1);
    const std::string bad = fmt::format("'{}': ", part);  // (GCC 12 warns falsely on "'" + string)
    if (key == "fps") {
      auto rate = parse_rate(value);
      if (!rate) return fid::Error{EINVAL, bad + "fps takes a positive rate (30, 29.97 or 30000/1001)"};
      std::tie(opt.fps_num, opt.fps_den) = *rate;
    } else if (key == "short_side") {
      auto s = parse_u64(value);
      if (!s || *s < 8 || *s > 16384) return fid::Error{EINVAL, bad + "short_side takes pixels from 8 to 16384"};
      opt.short_side = static_cast<uint32_t>(*s);
    } else if (key == "max_frames") {
      auto m = parse_u64(value);
      if (!m || *m == 0) return fid::Error{EINVAL, bad + "max_frames takes a count of frames from 1"};
      opt.max_frames = *m;
    } else if (key == "quality") {
      auto q = parse_u64(value);
      if (!q || *q < 1 || *q > 100) return fid::Error{EINVAL, bad + "quality takes 1 to 100"};
      opt.quality = static_cast<int>(*q);
    } else {
      return fid::Error{EINVAL, bad + "expected fps=N, short_side=S, quality=Q or max_frames=M"};
    }
  }
  return opt;
}

}  // namespace fid::video
