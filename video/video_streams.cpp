// See video_streams.h. gop=source reads a video twice: a first pass checks, without handing out
// anything, that each GOP decoded alone (as the mount will: gop_decoder.cpp) gives exactly the
// frames of the whole video's decode (as decode_frames decodes it), compared by digest; a second
// pass hands out the GOPs' packets. Memory stays one GOP's packets and the digests of the frames
// one decode is ahead of the other; time is two decodes and a demux. A video that fails the
// check is re-encoded (gop=16), and on_gop never sees a GOP of the failed attempt.
#include "video/video_streams.h"

#include <algorithm>
#include <cerrno>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <xxhash.h>

#include "common/numbers.h"
#include "video/stream_parts.h"

namespace fid::video {
namespace {

using namespace detail;

// What the first pass of gop=source found.
struct SourceScan {
  StreamInfo info;                   // source (frames, cut_short) and params
  std::vector<uint32_t> gop_frames;  // each GOP's frames
  std::vector<uint64_t> gop_digest;  // XXH3-64 of each GOP's packets: the second pass reads the same
  std::string why;                   // not empty: the video is re-encoded, for this reason
};

// The reason a video is not kept as its packets before any is decoded, or "".
std::string refused_before(const VideoInfo& source, const AVCodecParameters* par, const StreamOptions& opt) {
  if (source.rotation != 0) return fmt::format("rotated {} degrees", source.rotation);
  if (opt.fps_num != 0) return fmt::format("fps={}/{} asked", opt.fps_num, opt.fps_den);
  const codec::FrameSize scaled = codec::scaled_frame_size(source.width, source.height, opt.short_side);
  if (scaled.width != source.width || scaled.height != source.height) return fmt::format("short_side={} asked", opt.short_side);
  if (par->width <= 0 || par->height <= 0) return "its frame size is unknown";
  return {};
}

// XXH3-64 of a GOP's packets, each with its size.
uint64_t packets_digest(std::span<const std::span<const uint8_t>> packets) {
  uint64_t h = packets.size();
  for (const auto& p : packets) h = XXH3_64bits_withSeed(p.data(), p.size(), h ^ p.size());
  return h;
}

// The packets of the video stream of `o`, cut at keyframes: calls on_packet with each, and
// on_gop_end before a keyframe that follows packets and at the end, until `stop` says so. Returns
// av_read_frame's last code (AVERROR_EOF at a whole read; 0 when stopped) or the callbacks' error.
template <typename OnPacket, typename OnGopEnd, typename Stop>
fid::Result<int> read_gops(Opened& o, const std::atomic<bool>& cancel, OnPacket&& on_packet, OnGopEnd&& on_gop_end,
                           Stop&& stop) {
  PacketPtr packet(av_packet_alloc());
  if (!packet) return fid::Error{ENOMEM, "out of memory"};
  bool open_gop = false;
  int rc = 0;
  while ((rc = av_read_frame(o.format.get(), packet.get())) >= 0) {
    if (cancel) return fid::Error{ECANCELED, "interrupted"};
    fid::Status s;
    if (packet->stream_index == o.stream) {
      if ((packet->flags & AV_PKT_FLAG_KEY) && open_gop) s = on_gop_end();
      if (s) s = on_packet(packet.get());
      open_gop = true;
    }
    av_packet_unref(packet.get());
    if (!s) return std::move(s).error();
    if (stop()) return 0;
  }
  if (open_gop)
    if (fid::Status s = on_gop_end(); !s) return std::move(s).error();
  return rc;
}

// The first pass of gop=source (see the top of the file). A reason to re-encode goes to
// scan.why and ends the pass; errors are decode_frames' (EFBIG, ECANCELED, ENOMEM).
class SourceScanner {
 public:
  SourceScanner(Opened& o, const StreamOptions& opt, SourceScan& scan, const std::atomic<bool>& cancel)
      : o_(o), st_(o.format->streams[o.stream]), scan_(scan), cancel_(cancel) {
    FramesOptions frames;
    frames.max_frames = opt.max_frames;
    max_frames_ = max_frames_of(frames, st_);
    defaulted_max_ = opt.max_frames == 0;
  }

  fid::Status run(const std::string& warning) {
    frame_.reset(av_frame_alloc());
    if (!frame_) return fid::Error{ENOMEM, "out of memory"};
    fid::Result<int> rc = read_gops(
        o_, cancel_, [&](const AVPacket* p) { return take(p); }, [&] { return end_gop(); },
        [&] { return !scan_.why.empty(); });
    if (!rc) return std::move(rc).error();
    if (!scan_.why.empty()) return {};
    if (*rc != AVERROR_EOF) scan_.info.source.cut_short = "reading stopped part way (" + av_error(*rc) + ")";
    avcodec_send_packet(o_.codec.get(), nullptr);  // the whole decode's delayed frames
    if (fid::Status s = drain(); !s || !scan_.why.empty()) return s;
    if (whole_frames_ != alone_frames_ || !whole_.empty() || !alone_.empty())
      return reencode(fmt::format("the whole video decodes to {} frames, its GOPs alone to {}", whole_frames_, alone_frames_));
    if (decode_errors_ > 0) return reencode(fmt::format("{} of its packets do not decode", decode_errors_));
    const std::string& cut = scan_.info.source.cut_short;
    if (whole_frames_ == 0) return fid::Error{EINVAL, "no frame decodes" + (cut.empty() ? std::string() : ": " + cut)};
    finish_info(warning);
    return {};
  }

 private:
  // The first reason found is kept.
  void set_why(std::string why) {
    if (scan_.why.empty()) scan_.why = std::move(why);
  }
  fid::Status reencode(std::string why) {
    set_why(std::move(why));
    return {};
  }

  // A packet: kept for its GOP's decode alone, and decoded in the whole video's decode.
  fid::Status take(const AVPacket* p) {
    if (!scan_.why.empty()) return {};
    if (gop_.empty() && scan_.gop_frames.empty() && !(p->flags & AV_PKT_FLAG_KEY))
      return reencode("its first packet is no keyframe");
    // The decode drops the frame of such a packet (an MP4's edit list leaves it out); a piece
    // keeps no flags.
    if (p->flags & AV_PKT_FLAG_DISCARD) return reencode("its container's edit list leaves out some of its frames");
    gop_.emplace_back(p->data, p->data + p->size);
    gop_bytes_ += static_cast<uint64_t>(p->size);
    if (gop_.size() > 4 * codec::kMaxGopFrames)
      return reencode(fmt::format("the GOP at frame {} holds over {} packets", alone_frames_, 4 * codec::kMaxGopFrames));
    if (gop_bytes_ > kMaxGopDecodedBytes)
      return reencode(fmt::format("the GOP at frame {} holds over {} MB", alone_frames_, kMaxGopDecodedBytes >> 20));
    // As decode_frames: a packet refused is counted, and the decode goes on.
    if (avcodec_send_packet(o_.codec.get(), p) < 0) ++decode_errors_;
    return drain();
  }

  // The whole decode's frames ready, as digests to compare.
  fid::Status drain() {
    for (;;) {
      const int rc = avcodec_receive_frame(o_.codec.get(), frame_.get());
      if (rc == AVERROR(EAGAIN) || rc == AVERROR_EOF) return {};
      if (rc < 0) {
        ++decode_errors_;
        return {};
      }
      std::optional<FrameDigest> digest = frame_digest(frame_.get());
      keep_end(frame_.get());
      av_frame_unref(frame_.get());
      if (cancel_) return fid::Error{ECANCELED, "interrupted"};
      if (whole_frames_ >= max_frames_) return too_many_frames(max_frames_, defaulted_max_, "--video-streams");
      if (!digest) return reencode("its frames are in a format that cannot be compared");
      ++whole_frames_;
      whole_.push_back(*digest);
      compare();
    }
  }

  // Where the frames end, as decode_frames reckons it (for ends_early).
  void keep_end(const AVFrame* f) {
    int64_t ts = f->best_effort_timestamp;
    if (ts == AV_NOPTS_VALUE) ts = last_ts_ == AV_NOPTS_VALUE ? 0 : last_ts_ + std::max<int64_t>(1, last_duration_);
    last_ts_ = ts;
    last_duration_ = f->pkt_duration;
  }

  // The GOP's packets are all in: decoded alone, as the mount will.
  fid::Status end_gop() {
    if (!scan_.why.empty()) return {};
    std::vector<std::span<const uint8_t>> packets(gop_.begin(), gop_.end());
    const uint64_t first = alone_frames_;
    uint32_t frames = 0;
    const uint64_t frame_bytes = 3ull * scan_.info.params.width * scan_.info.params.height;
    fid::Status decoded = decode_gop_packets(scan_.info.params, packets, [&](const AVFrame* f) -> fid::Status {
      std::optional<FrameDigest> digest = frame_digest(f);
      if (!digest) return fid::Error{EIO, "a frame in a format that cannot be compared"};
      if (++frames > codec::kMaxGopFrames) return fid::Error{EFBIG, ""};
      alone_.push_back({*digest, first});
      ++alone_frames_;
      return {};
    });
    if (!decoded && decoded.error().code == EFBIG)
      return reencode(fmt::format("the GOP at frame {} has over {} frames", first, codec::kMaxGopFrames));
    if (!decoded) return reencode(fmt::format("the GOP at frame {} does not decode alone ({})", first, decoded.error().message));
    if (frames == 0) return reencode(fmt::format("the GOP at frame {} decodes alone to no frame", first));
    if (frames * frame_bytes > kMaxGopDecodedBytes)
      return reencode(fmt::format("GOPs of {} frames decode to {} MB, over {} MB", frames, frames * frame_bytes >> 20,
                                  kMaxGopDecodedBytes >> 20));
    scan_.gop_frames.push_back(frames);
    scan_.gop_digest.push_back(packets_digest(packets));
    gop_.clear();
    gop_bytes_ = 0;
    compare();
    return {};
  }

  // The frames both decodes have given so far must be the same.
  void compare() {
    for (; !whole_.empty() && !alone_.empty(); whole_.pop_front(), alone_.pop_front())
      if (!(whole_.front() == alone_.front().first)) {
        set_why(fmt::format("the GOP at frame {} does not decode alone as in the whole video (an open GOP)",
                            alone_.front().second));
        return;
      }
  }

  void finish_info(const std::string& warning) {
    VideoInfo& source = scan_.info.source;
    source.frames = whole_frames_;
    const int64_t end = last_ts_ == AV_NOPTS_VALUE ? last_ts_ : last_ts_ + std::max<int64_t>(last_duration_, 0);
    if (source.cut_short.empty()) source.cut_short = ends_early(o_.format.get(), st_, end, warning);
    if (source.cut_short.empty() && st_->nb_frames > 0 && whole_frames_ < static_cast<uint64_t>(st_->nb_frames))
      source.cut_short = "its container lists " + std::to_string(st_->nb_frames) + " frames";
  }

 private:
  Opened& o_;
  const AVStream* st_;
  SourceScan& scan_;
  const std::atomic<bool>& cancel_;
  uint64_t max_frames_ = 0;
  bool defaulted_max_ = true;
  FramePtr frame_;
  std::vector<std::vector<uint8_t>> gop_;  // the packets of the GOP being read
  uint64_t gop_bytes_ = 0;
  std::deque<FrameDigest> whole_;                             // the whole decode's, not yet compared
  std::deque<std::pair<FrameDigest, uint64_t>> alone_;        // the GOPs' alone (and the GOP's first frame)
  uint64_t whole_frames_ = 0, alone_frames_ = 0;
  int decode_errors_ = 0;
  int64_t last_ts_ = AV_NOPTS_VALUE, last_duration_ = 0;
};

fid::Result<SourceScan> scan_source(const VideoInput& input, const StreamOptions& opt, const std::atomic<bool>& cancel) {
  MemoryReader memory{input.bytes};
  const WarningsKept warnings;
  fid::Result<Opened> opened = open_video(input, memory, opt.threads);
  if (!opened) return std::move(opened).error();
  const AVStream* st = opened->format->streams[opened->stream];
  SourceScan scan;
  scan.info.source = describe_stream(st);
  scan.info.gop = 0;
  codec::StreamParams& params = scan.info.params;
  params.codec = opened->codec->codec->name;  // the decoder that decodes it here decodes it in the mount
  if (st->codecpar->extradata_size > 0)
    params.extradata.assign(st->codecpar->extradata, st->codecpar->extradata + st->codecpar->extradata_size);
  params.width = static_cast<uint32_t>(std::max(0, st->codecpar->width));
  params.height = static_cast<uint32_t>(std::max(0, st->codecpar->height));
  scan.why = refused_before(scan.info.source, st->codecpar, opt);
  if (!scan.why.empty()) return scan;
  SourceScanner scanner(*opened, opt, scan, cancel);
  if (fid::Status s = scanner.run(warnings.first()); !s) return std::move(s).error();
  return scan;
}

// The second pass of gop=source: the GOPs the first pass checked, handed out.
fid::Status emit_source(const VideoInput& input, SourceScan& scan, const std::function<fid::Status(StoredGop&&)>& on_gop,
                        const std::atomic<bool>& cancel) {
  MemoryReader memory{input.bytes};
  const WarningsKept warnings;
  fid::Result<Opened> opened = open_video(input, memory, 1);
  if (!opened) return std::move(opened).error();
  const fid::Error changed{EIO, "the video changed while it was read"};
  std::vector<std::vector<uint8_t>> gop;
  size_t k = 0;
  auto on_packet = [&](const AVPacket* p) -> fid::Status {
    gop.emplace_back(p->data, p->data + p->size);
    return {};
  };
  auto on_gop_end = [&]() -> fid::Status {
    const std::vector<std::span<const uint8_t>> packets(gop.begin(), gop.end());
    if (k >= scan.gop_frames.size() || packets_digest(packets) != scan.gop_digest[k]) return changed;
    StoredGop stored;
    stored.frames = scan.gop_frames[k++];
    stored.piece = codec::encode_gop_piece(stored.frames, gop);
    gop.clear();
    scan.info.stored_bytes += stored.piece.size();
    return on_gop(std::move(stored));
  };
  fid::Result<int> rc = read_gops(*opened, cancel, on_packet, on_gop_end, [] { return false; });
  if (!rc) return std::move(rc).error();
  if (k != scan.gop_frames.size()) return changed;
  return {};
}

}  // namespace

fid::Result<StreamOptions> parse_stream_options(std::string_view text) {
  StreamOptions opt;
  fid::Status parsed = each_option(text, [&](std::string_view key, std::string_view value, const std::string& bad) {
    if (std::optional<fid::Status> shared = parse_shared_option(key, value, bad, opt)) return *shared;
    if (key == "gop") {
      auto n = value == "source" ? std::optional<uint64_t>(0) : parse_u64(value);
      if (!n || (value != "source" && (*n < 1 || *n > codec::kMaxGopFrames)))
        return fid::Status{fid::Error{EINVAL, bad + fmt::format("gop takes 1 to {} frames, or source", codec::kMaxGopFrames)}};
      opt.gop = static_cast<uint32_t>(*n);
    } else if (key == "crf") {
      auto c = parse_u64(value);
      if (!c || *c > 51) return fid::Status{fid::Error{EINVAL, bad + "crf takes 0 to 51"}};
      opt.crf = static_cast<int>(*c);
    } else {
      return fid::Status{fid::Error{EINVAL, bad + "expected gop=N|source, crf=C, short_side=S, fps=F or max_frames=M"}};
    }
    return fid::Status{};
  });
  if (!parsed) return std::move(parsed).error();
  return opt;
}

fid::Result<StreamInfo> store_stream(const VideoInput& input, const StreamOptions& opt,
                                     const std::function<fid::Status(StoredGop&&)>& on_gop,
                                     const std::atomic<bool>& cancel) {
  if (opt.gop != 0) return reencode_stream(input, opt, on_gop, cancel);
  fid::Result<SourceScan> scan = scan_source(input, opt, cancel);
  if (!scan) return std::move(scan).error();
  if (scan->why.empty()) {
    if (fid::Status s = emit_source(input, *scan, on_gop, cancel); !s) return std::move(s).error();
    return std::move(scan->info);
  }
  StreamOptions again = opt;
  again.gop = StreamOptions{}.gop;
  fid::Result<StreamInfo> info = reencode_stream(input, again, on_gop, cancel);
  if (info) info->reencoded_why = std::move(scan->why);
  return info;
}

}  // namespace fid::video
