// gop=N (stream_parts.h): the frames decode_frames gives (rotated, resampled in time, scaled),
// converted to YUV 4:2:0 and encoded with libavcodec's libx264 so that every GOP is exactly N
// frames, closed, opening on an IDR, with no B-frames: each packet is one frame, in order. Stored
// as an MP4 stores H.264: an avcC record for extradata, packets of length-prefixed NAL units.
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "video/stream_parts.h"

namespace fid::video::detail {
namespace {

// x264's speed for bytes. Measured on 340x256 30 fps videos at crf 18, gop 16, one thread:
// "veryfast" packs 10 s in 0.65 to 0.85 s (0.3 s of it decode_frames); "medium" takes twice the
// time for the same bytes (within 4%) and 0.6 to 1.5 dB more; "faster" 35% more time for 0.5 dB;
// "superfast" and "ultrafast" gain little time here and give 1.3 to 3 times the bytes.
constexpr const char* kPreset = "veryfast";
// x264's fastdecode tune (CAVLC, no deblocking, no weighted prediction): every frame is decoded again
// on each epoch's read, and these take 0.14 against 0.19 ms a 340x256 frame to decode, for 7% more
// bytes at the same PSNR (crf 23, gop 16; scripts/bench/video_streams.sh).
constexpr const char* kX264Params = "scenecut=0:open-gop=0:cabac=0:deblock=0:weightp=0";

// The NAL units of Annex B bytes (each after a 00 00 01 start code), without the zeros before
// the next start code (a NAL unit never ends in a zero byte).
std::vector<std::span<const uint8_t>> annexb_units(std::span<const uint8_t> bytes) {
  std::vector<std::span<const uint8_t>> out;
  size_t start = SIZE_MAX;
  const auto close = [&](size_t end) {
    if (start == SIZE_MAX) return;
    while (end > start && bytes[end - 1] == 0) --end;
    if (end > start) out.push_back(bytes.subspan(start, end - start));
  };
  for (size_t i = 0; i + 3 <= bytes.size();)
    if (bytes[i] == 0 && bytes[i + 1] == 0 && bytes[i + 2] == 1) {
      close(i);
      start = i += 3;
    } else {
      ++i;
    }
  close(bytes.size());
  return out;
}

void put_be(std::vector<uint8_t>& out, uint32_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

// libx264's SPS and PPS (Annex B) as an avcC record (ISO/IEC 14496-15): what an MP4 holds, so
// that a re-encoded stream is stored as a source's from an MP4 is (docs/FORMAT.md, extradata).
fid::Result<std::vector<uint8_t>> avcc_of(std::span<const uint8_t> annexb) {
  std::vector<std::span<const uint8_t>> sps, pps;
  for (const auto& unit : annexb_units(annexb)) {
    if ((unit[0] & 0x1f) == 7) sps.push_back(unit);
    if ((unit[0] & 0x1f) == 8) pps.push_back(unit);
  }
  if (sps.empty() || pps.empty() || sps[0].size() < 4 || sps.size() > 31 || pps.size() > 255)
    return fid::Error{EIO, "libx264's header holds no SPS and PPS"};
  std::vector<uint8_t> out = {1, sps[0][1], sps[0][2], sps[0][3], 0xff /* 4-byte lengths */,
                              static_cast<uint8_t>(0xe0 | sps.size())};
  for (const auto& u : sps) put_be(out, static_cast<uint32_t>(u.size()), 2), out.insert(out.end(), u.begin(), u.end());
  out.push_back(static_cast<uint8_t>(pps.size()));
  for (const auto& u : pps) put_be(out, static_cast<uint32_t>(u.size()), 2), out.insert(out.end(), u.begin(), u.end());
  // High profiles add the chroma format and bit depths: 4:2:0, 8 bits (to_yuv's), no SPS extension.
  if (const uint8_t profile = sps[0][1]; profile != 66 && profile != 77 && profile != 88)
    out.insert(out.end(), {0xfd, 0xf8, 0xf8, 0x00});
  return out;
}

// A packet's NAL units, each after its 4-byte big-endian length (as avcC says) instead of a start code.
std::vector<uint8_t> length_prefixed(std::span<const uint8_t> annexb) {
  std::vector<uint8_t> out;
  out.reserve(annexb.size() + 16);
  for (const auto& unit : annexb_units(annexb)) {
    put_be(out, static_cast<uint32_t>(unit.size()), 4);
    out.insert(out.end(), unit.begin(), unit.end());
  }
  return out;
}

// Encodes RGB frames into GOP pieces, handed to on_gop as each GOP's N packets are out.
class GopEncoder {
 public:
  GopEncoder(const StreamOptions& opt, AVRational rate, const std::function<fid::Status(StoredGop&&)>& on_gop)
      : opt_(opt), rate_(rate), on_gop_(on_gop) {}

  fid::Status take(const codec::ImageView& rgb) {
    if (!enc_)
      if (fid::Status opened = open(rgb.width, rgb.height); !opened) return opened;
    if (fid::Status converted = to_yuv(rgb); !converted) return converted;
    yuv_->pts = static_cast<int64_t>(sent_++);
    if (const int rc = avcodec_send_frame(enc_.get(), yuv_.get()); rc < 0)
      return fid::Error{EIO, "libx264 refused a frame (" + av_error(rc) + ")"};
    return receive();
  }

  // After the last frame: the encoder's delayed packets, and the last GOP (maybe shorter).
  fid::Status finish() {
    if (!enc_) return {};
    if (const int rc = avcodec_send_frame(enc_.get(), nullptr); rc < 0)
      return fid::Error{EIO, "libx264 does not flush (" + av_error(rc) + ")"};
    if (fid::Status s = receive(); !s) return s;
    if (received_ != sent_) return fid::Error{EIO, fmt::format("libx264 gave {} packets for {} frames", received_, sent_)};
    return packets_.empty() ? fid::Status{} : emit();
  }

  // The stream: avcC extradata and length-prefixed packets (not libx264's Annex B).
  const codec::StreamParams& params() const { return params_; }
  uint64_t stored_bytes() const { return stored_bytes_; }

 private:
  // The encoder for frames of width x height: 4:2:0 takes even sides, so a video with an odd one
  // is encoded 4:4:4 (High 4:4:4), at its own size (video_streams.h).
  fid::Status open(uint32_t width, uint32_t height) {
    const AVCodec* x264 = avcodec_find_encoder_by_name("libx264");
    if (x264 == nullptr) return fid::Error{ENOTSUP, "this libavcodec has no libx264 encoder (gop=N re-encodes with it)"};
    enc_.reset(avcodec_alloc_context3(x264));
    yuv_.reset(av_frame_alloc());
    pkt_.reset(av_packet_alloc());
    if (!enc_ || !yuv_ || !pkt_) return fid::Error{ENOMEM, "out of memory"};
    enc_->width = static_cast<int>(width);
    enc_->height = static_cast<int>(height);
    enc_->pix_fmt = (width | height) & 1 ? AV_PIX_FMT_YUV444P : AV_PIX_FMT_YUV420P;
    enc_->time_base = av_inv_q(rate_);
    enc_->framerate = rate_;
    // Every GOP exactly N frames, closed, no B-frames: x264's scene cuts and open GOPs are off.
    enc_->gop_size = static_cast<int>(opt_.gop);
    enc_->keyint_min = static_cast<int>(opt_.gop);
    enc_->max_b_frames = 0;
    enc_->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;  // SPS/PPS once, in extradata, not in each GOP
    enc_->thread_count = std::max(1, opt_.threads);
    // to_yuv's matrix and range, said in the stream so that any decoder converts back alike.
    enc_->colorspace = AVCOL_SPC_SMPTE170M;
    enc_->color_range = AVCOL_RANGE_MPEG;
    AVDictionary* options = nullptr;
    av_dict_set(&options, "preset", kPreset, 0);
    av_dict_set(&options, "crf", std::to_string(opt_.crf).c_str(), 0);
    av_dict_set(&options, "x264-params", kX264Params, 0);
    const int rc = avcodec_open2(enc_.get(), x264, &options);
    av_dict_free(&options);
    if (rc < 0) return fid::Error{EIO, "libx264 does not open (" + av_error(rc) + ")"};
    yuv_->format = enc_->pix_fmt;
    yuv_->width = enc_->width;
    yuv_->height = enc_->height;
    if (av_frame_get_buffer(yuv_.get(), 0) < 0) return fid::Error{ENOMEM, "out of memory"};
    fid::Result<std::vector<uint8_t>> avcc = avcc_of({enc_->extradata, static_cast<size_t>(std::max(0, enc_->extradata_size))});
    if (!avcc) return std::move(avcc).error();
    params_.codec = "h264";
    params_.extradata = std::move(avcc).value();
    params_.width = static_cast<uint32_t>(enc_->width), params_.height = static_cast<uint32_t>(enc_->height);
    return {};
  }

  // yuv_ = `rgb` in BT.601's limited range (what the stream says), at the encoder's size (a frame
  // of another size, from a video whose size changes, is scaled to it).
  fid::Status to_yuv(const codec::ImageView& rgb) {
    sws_.reset(sws_getCachedContext(sws_.release(), static_cast<int>(rgb.width), static_cast<int>(rgb.height),
                                    AV_PIX_FMT_RGB24, enc_->width, enc_->height, enc_->pix_fmt,
                                    SWS_BICUBIC | SWS_ACCURATE_RND, nullptr, nullptr, nullptr));
    if (!sws_) return fid::Error{EIO, "libswscale cannot convert frames for libx264"};
    const int* bt601 = sws_getCoefficients(SWS_CS_ITU601);
    sws_setColorspaceDetails(sws_.get(), bt601, 1, bt601, 0, 0, 1 << 16, 1 << 16);
    // The encoder may still hold the last frame's buffer.
    if (av_frame_make_writable(yuv_.get()) < 0) return fid::Error{ENOMEM, "out of memory"};
    const uint8_t* src[4] = {rgb.pixels, nullptr, nullptr, nullptr};
    const int src_stride[4] = {static_cast<int>(rgb.stride), 0, 0, 0};
    if (sws_scale(sws_.get(), src, src_stride, 0, static_cast<int>(rgb.height), yuv_->data, yuv_->linesize) <= 0)
      return fid::Error{EIO, "libswscale failed on a frame for libx264"};
    return {};
  }

  // Takes the packets libx264 has ready, handing out each GOP as its N packets are in.
  fid::Status receive() {
    for (;;) {
      const int rc = avcodec_receive_packet(enc_.get(), pkt_.get());
      if (rc == AVERROR(EAGAIN) || rc == AVERROR_EOF) return {};
      if (rc < 0) return fid::Error{EIO, "libx264 failed (" + av_error(rc) + ")"};
      // Without B-frames a packet is a frame, in presentation order; a GOP opens on a keyframe.
      const bool opens = received_ % opt_.gop == 0;
      if (pkt_->pts != static_cast<int64_t>(received_) || (opens && !(pkt_->flags & AV_PKT_FLAG_KEY))) {
        av_packet_unref(pkt_.get());
        return fid::Error{EIO, fmt::format("libx264 did not code frame {} as a GOP of {} asks", received_, opt_.gop)};
      }
      packets_.push_back(length_prefixed({pkt_->data, static_cast<size_t>(pkt_->size)}));
      av_packet_unref(pkt_.get());
      ++received_;
      if (packets_.size() == opt_.gop)
        if (fid::Status s = emit(); !s) return s;
    }
  }

  fid::Status emit() {
    StoredGop gop;
    gop.frames = static_cast<uint32_t>(packets_.size());
    gop.piece = codec::encode_gop_piece(gop.frames, packets_);
    packets_.clear();
    stored_bytes_ += gop.piece.size();
    return on_gop_(std::move(gop));
  }

  const StreamOptions& opt_;
  const AVRational rate_;
  const std::function<fid::Status(StoredGop&&)>& on_gop_;
  CodecPtr enc_;
  FramePtr yuv_;
  PacketPtr pkt_;
  SwsPtr sws_;
  codec::StreamParams params_;
  std::vector<std::vector<uint8_t>> packets_;  // of the GOP being coded
  uint64_t sent_ = 0, received_ = 0, stored_bytes_ = 0;
};

// What the video is before decoding (its displayed size, its rate), when it opens.
fid::Result<VideoInfo> probe(const VideoInput& input) {
  MemoryReader memory{input.bytes};
  const WarningsKept warnings;  // (this thread's decode_frames keeps its own)
  fid::Result<Opened> opened = open_video(input, memory, 1);
  if (!opened) return std::move(opened).error();
  return describe_stream(opened->format->streams[opened->stream]);
}

}  // namespace

fid::Result<StreamInfo> reencode_stream(const VideoInput& input, const StreamOptions& opt,
                                        const std::function<fid::Status(StoredGop&&)>& on_gop,
                                        const std::atomic<bool>& cancel) {
  fid::Result<VideoInfo> source = probe(input);
  if (!source) return std::move(source).error();
  FramesOptions frames;
  frames.fps_num = opt.fps_num, frames.fps_den = opt.fps_den;
  frames.threads = opt.threads;
  frames.max_frames = opt.max_frames;
  // decode_frames scales up too; a stream's frames never are (codec::scaled_frame_size).
  const codec::FrameSize scaled = codec::scaled_frame_size(source->width, source->height, opt.short_side);
  if (scaled.width != source->width || scaled.height != source->height) frames.short_side = opt.short_side;
  AVRational rate{25, 1};  // (a video that says no rate: any rate codes its frames alike)
  if (opt.fps_num != 0) rate = AVRational{static_cast<int>(opt.fps_num), static_cast<int>(opt.fps_den)};
  else if (source->fps_num != 0) rate = AVRational{static_cast<int>(source->fps_num), static_cast<int>(source->fps_den)};

  GopEncoder encoder(opt, rate, on_gop);
  fid::Result<VideoInfo> decoded =
      decode_frames(input, frames, [&](const codec::ImageView& rgb) { return encoder.take(rgb); }, cancel);
  if (!decoded) {
    fid::Error e = std::move(decoded).error();
    // decode_frames names its own option for a longer video.
    if (const size_t at = e.message.find("--video-frames"); e.code == EFBIG && at != std::string::npos)
      e.message.replace(at, 14, "--video-streams");
    return e;
  }
  if (fid::Status s = encoder.finish(); !s) return std::move(s).error();
  StreamInfo info;
  info.source = std::move(decoded).value();
  info.params = encoder.params();
  info.gop = opt.gop;
  info.stored_bytes = encoder.stored_bytes();
  return info;
}

}  // namespace fid::video::detail
