// See video_frames.h.
#include "video/video_frames.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/numbers.h"
#include "video/libav_util.h"

namespace fid::video {
namespace {

using namespace detail;

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
    if (info_.frames >= max_frames_) return too_many_frames(max_frames_, opt_.max_frames == 0, "--video-frames");
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
    if (fid::Status s = frame_to_rgb(frame, w, h, sws_, rgb_); !s) return s;
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
  SwsPtr sws_;
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

}  // namespace

fid::Result<VideoInfo> decode_frames(const VideoInput& input, const FramesOptions& opt,
                                     const std::function<fid::Status(const codec::ImageView&)>& on_frame,
                                     const std::atomic<bool>& cancel) {
  MemoryReader memory{input.bytes};
  const WarningsKept warnings;
  fid::Result<Opened> opened = open_video(input, memory, opt.threads);
  if (!opened) return std::move(opened).error();
  AVFormatContext* f = opened->format.get();
  AVCodecContext* codec = opened->codec.get();
  const AVStream* st = f->streams[opened->stream];
  VideoInfo info = describe_stream(st);

  PacketPtr packet(av_packet_alloc());
  FramePtr frame(av_frame_alloc());
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

fid::Result<FramesOptions> parse_frames_options(std::string_view text) {
  FramesOptions opt;
  fid::Status parsed = each_option(text, [&](std::string_view key, std::string_view value, const std::string& bad) {
    if (std::optional<fid::Status> shared = parse_shared_option(key, value, bad, opt)) return *shared;
    if (key != "quality") return fid::Status{fid::Error{EINVAL, bad + "expected fps=N, short_side=S, quality=Q or max_frames=M"}};
    auto q = parse_u64(value);
    if (!q || *q < 1 || *q > 100) return fid::Status{fid::Error{EINVAL, bad + "quality takes 1 to 100"}};
    opt.quality = static_cast<int>(*q);
    return fid::Status{};
  });
  if (!parsed) return std::move(parsed).error();
  return opt;
}

}  // namespace fid::video
