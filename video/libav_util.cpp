// See libav_util.h.
#include "video/libav_util.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <mutex>

extern "C" {
#include <libavutil/display.h>
}

#include <fmt/format.h>

#include "common/numbers.h"

namespace fid::video::detail {
namespace {

// Only these demuxers open a "video": a file named .mp4 that is an HLS playlist or an image
// sequence pattern must not make libavformat read other files or URLs.
constexpr const char* kDemuxers = "mov,mp4,m4a,3gp,3g2,mj2,matroska,webm,avi";

constexpr uint64_t kMaxFramePixels = 64ull << 20;
constexpr int kMaxFrameSide = 16384;

// The first warning (or worse) that the demuxer of the video this thread decodes logged (while
// probing its streams or reading them).
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

// The context that reads input.bytes, set on `f`; ENOMEM.
fid::Status read_memory(AVFormatContext* f, MemoryReader& memory, Opened& o) {
  constexpr int kBuffer = 64 << 10;
  auto* buffer = static_cast<unsigned char*>(av_malloc(kBuffer));
  o.io.reset(buffer ? avio_alloc_context(buffer, kBuffer, 0, &memory, &MemoryReader::read, nullptr, &MemoryReader::seek)
                    : nullptr);
  if (!o.io) {
    av_free(buffer);
    return fid::Error{ENOMEM, "out of memory"};
  }
  f->pb = o.io.get();
  f->flags |= AVFMT_FLAG_CUSTOM_IO;
  return {};
}

// The best video stream of the open `f` (a cover picture is no video), and its decoder.
fid::Result<int> video_stream(AVFormatContext* f, const AVCodec*& decoder) {
  for (unsigned i = 0; i < f->nb_streams; ++i)
    if (f->streams[i]->disposition & AV_DISPOSITION_ATTACHED_PIC) f->streams[i]->discard = AVDISCARD_ALL;
  const int rc = av_find_best_stream(f, AVMEDIA_TYPE_VIDEO, -1, -1, &decoder, 0);
  if (rc == AVERROR_STREAM_NOT_FOUND || (rc >= 0 && (f->streams[rc]->disposition & AV_DISPOSITION_ATTACHED_PIC)))
    return fid::Error{EINVAL, "no video stream"};
  if (rc < 0 || decoder == nullptr) {
    const AVCodecDescriptor* d = rc >= 0 ? avcodec_descriptor_get(f->streams[rc]->codecpar->codec_id) : nullptr;
    return fid::Error{EINVAL, std::string("no decoder for its video codec") + (d ? std::string(" ") + d->name : "")};
  }
  for (unsigned i = 0; i < f->nb_streams; ++i)
    if (static_cast<int>(i) != rc) f->streams[i]->discard = AVDISCARD_ALL;
  return rc;
}

}  // namespace

std::string av_error(int code) {
  char text[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(code, text, sizeof text);
  return text;
}

int MemoryReader::read(void* opaque, uint8_t* buf, int size) {
  auto* m = static_cast<MemoryReader*>(opaque);
  const size_t n = std::min(static_cast<size_t>(size), m->bytes.size() - m->pos);
  if (n == 0) return AVERROR_EOF;
  std::memcpy(buf, m->bytes.data() + m->pos, n);
  m->pos += n;
  return static_cast<int>(n);
}

int64_t MemoryReader::seek(void* opaque, int64_t offset, int whence) {
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

fid::Status check_frame_size(int width, int height) {
  if (width <= 0 || height <= 0 || width > kMaxFrameSide || height > kMaxFrameSide ||
      static_cast<uint64_t>(width) * static_cast<uint64_t>(height) > kMaxFramePixels)
    return fid::Error{EINVAL, "frames of " + std::to_string(width) + "x" + std::to_string(height) +
                                  " pixels are over the limit (16384 a side, 64 megapixels)"};
  return {};
}

void quiet_libav() {
  static std::once_flag once;
  std::call_once(once, [] { av_log_set_callback(keep_demuxer_warning); });
}

WarningsKept::WarningsKept() : previous_(t_demuxer_warning) { t_demuxer_warning = &warning_; }
WarningsKept::~WarningsKept() { t_demuxer_warning = previous_; }

fid::Result<Opened> open_video(const VideoInput& input, MemoryReader& memory, int threads) {
  quiet_libav();
  Opened o;
  AVFormatContext* f = avformat_alloc_context();
  if (f == nullptr) return fid::Error{ENOMEM, "out of memory"};
  f->format_whitelist = av_strdup(kDemuxers);
  std::string url = input.path.empty() ? std::string() : "file:" + input.path;
  if (input.path.empty())
    if (fid::Status s = read_memory(f, memory, o); !s) {
      avformat_free_context(f);
      return std::move(s).error();
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
  fid::Result<int> stream = video_stream(f, decoder);
  if (!stream) return std::move(stream).error();
  o.stream = *stream;
  AVStream* st = f->streams[o.stream];
  if (st->codecpar->width > 0 && st->codecpar->height > 0)  // else known from the first frame
    if (fid::Status fits = check_frame_size(st->codecpar->width, st->codecpar->height); !fits)
      return std::move(fits).error();
  o.codec.reset(avcodec_alloc_context3(decoder));
  if (!o.codec) return fid::Error{ENOMEM, "out of memory"};
  if ((rc = avcodec_parameters_to_context(o.codec.get(), st->codecpar)) < 0)
    return fid::Error{EINVAL, "its video stream's parameters are bad (" + av_error(rc) + ")"};
  o.codec->thread_count = std::max(1, threads);
  o.codec->pkt_timebase = st->time_base;
  if ((rc = avcodec_open2(o.codec.get(), decoder, nullptr)) < 0)
    return fid::Error{EINVAL, std::string("the ") + decoder->name + " decoder does not open (" + av_error(rc) + ")"};
  return o;
}

VideoInfo describe_stream(const AVStream* st) {
  VideoInfo info;
  info.codec = avcodec_get_name(st->codecpar->codec_id);
  info.rotation = display_rotation(st);
  const bool turned = info.rotation == 90 || info.rotation == 270;
  info.width = static_cast<uint32_t>(turned ? st->codecpar->height : st->codecpar->width);
  info.height = static_cast<uint32_t>(turned ? st->codecpar->width : st->codecpar->height);
  if (st->avg_frame_rate.num > 0 && st->avg_frame_rate.den > 0)
    info.fps_num = static_cast<uint32_t>(st->avg_frame_rate.num), info.fps_den = static_cast<uint32_t>(st->avg_frame_rate.den);
  return info;
}

uint64_t max_frames_of(const FramesOptions& opt, const AVStream* st) {
  if (opt.max_frames != 0) return opt.max_frames;
  double rate = opt.fps_num != 0 ? static_cast<double>(opt.fps_num) / opt.fps_den : 0;
  if (rate == 0) {
    const AVRational own = st->avg_frame_rate.num > 0 && st->avg_frame_rate.den > 0 ? st->avg_frame_rate : st->r_frame_rate;
    rate = own.num > 0 && own.den > 0 ? std::clamp(av_q2d(own), 1.0, 1000.0) : 60.0;
  }
  return static_cast<uint64_t>(std::ceil(static_cast<double>(kDefaultMaxSeconds) * rate));
}

fid::Error too_many_frames(uint64_t max_frames, bool defaulted, const char* flag) {
  return fid::Error{EFBIG, fmt::format("it gives more than {} frames{}: a longer video takes max_frames=N in {}",
                                       max_frames, defaulted ? " (4 hours at the output frame rate)" : "", flag)};
}

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

fid::Status frame_to_rgb(const AVFrame* frame, uint32_t width, uint32_t height, SwsPtr& sws, codec::Image& out,
                         int flags) {
  out.width = width, out.height = height, out.channels = 3;
  out.pixels.resize(out.byte_size() + kRgbSlack);
  fid::Status s = frame_to_rgb(frame, width, height, sws, out.pixels.data(), out.row_bytes(), flags);
  out.pixels.resize(out.byte_size());
  return s;
}

fid::Status frame_to_rgb(const AVFrame* frame, uint32_t width, uint32_t height, SwsPtr& sws, uint8_t* dst,
                         size_t stride, int flags) {
  sws.reset(sws_getCachedContext(sws.release(), frame->width, frame->height, static_cast<AVPixelFormat>(frame->format),
                                 static_cast<int>(width), static_cast<int>(height), AV_PIX_FMT_RGB24, flags, nullptr,
                                 nullptr, nullptr));
  if (!sws) return fid::Error{EINVAL, "libswscale cannot convert its frames"};
  // The deprecated YUVJ formats (MJPEG in an .avi) are full range whatever the frame says.
  const auto format = static_cast<AVPixelFormat>(frame->format);
  const bool full_range = frame->color_range == AVCOL_RANGE_JPEG || format == AV_PIX_FMT_YUVJ420P ||
                          format == AV_PIX_FMT_YUVJ422P || format == AV_PIX_FMT_YUVJ444P ||
                          format == AV_PIX_FMT_YUVJ440P || format == AV_PIX_FMT_YUVJ411P;
  sws_setColorspaceDetails(sws.get(), sws_getCoefficients(frame->colorspace), full_range,
                           sws_getCoefficients(SWS_CS_DEFAULT), 1, 0, 1 << 16, 1 << 16);
  uint8_t* planes[4] = {dst, nullptr, nullptr, nullptr};
  int strides[4] = {static_cast<int>(stride), 0, 0, 0};
  if (sws_scale(sws.get(), frame->data, frame->linesize, 0, frame->height, planes, strides) <= 0)
    return fid::Error{EINVAL, "libswscale failed on a frame"};
  return {};
}

fid::Status each_option(std::string_view text,
                        const std::function<fid::Status(std::string_view, std::string_view, const std::string&)>& on) {
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view part = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    const size_t eq = part.find('=');
    const std::string_view key = part.substr(0, eq), value = eq == std::string_view::npos ? "" : part.substr(eq + 1);
    if (fid::Status s = on(key, value, fmt::format("'{}': ", part)); !s) return s;  // (GCC 12 warns falsely on "'" + string)
  }
  return {};
}

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

}  // namespace fid::video::detail
