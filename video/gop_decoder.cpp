// The mount's GOP decoder (video_streams.h), and the decode of a GOP alone that pack's gop=source
// checks with (stream_parts.h): one function, so that what pack checks is what the mount does.
#include <cerrno>
#include <climits>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

extern "C" {
#include <libavutil/imgutils.h>
#include <libavutil/pixdesc.h>
}

#include <fmt/format.h>
#include <xxhash.h>

#include "video/stream_parts.h"

namespace fid::video {
namespace detail {
namespace {

// A stored stream's extradata is a few hundred bytes; this bounds a stranger's.
constexpr size_t kMaxExtradata = 1 << 20;

fid::Error gop_error(const std::string& why) { return fid::Error{EIO, why}; }

// A decoder context for `stream`, single-threaded (the mount decodes several GOPs at once).
fid::Result<CodecPtr> open_decoder(const codec::StreamParams& stream) {
  const AVCodec* decoder = avcodec_find_decoder_by_name(stream.codec.c_str());
  if (decoder == nullptr) return gop_error("libavcodec has no decoder named '" + stream.codec + "'");
  if (stream.width > codec::kMaxFrameSide || stream.height > codec::kMaxFrameSide)
    return gop_error(fmt::format("the stream's frames of {}x{} are over the limit", stream.width, stream.height));
  if (fid::Status fits = check_frame_size(static_cast<int>(stream.width), static_cast<int>(stream.height)); !fits)
    return gop_error("the stream's " + fits.error().message);
  if (stream.extradata.size() > kMaxExtradata)
    return gop_error(fmt::format("{} bytes of extradata", stream.extradata.size()));
  CodecPtr ctx(avcodec_alloc_context3(decoder));
  if (!ctx) return fid::Error{ENOMEM, "out of memory"};
  ctx->thread_count = 1;
  ctx->width = static_cast<int>(stream.width);
  ctx->height = static_cast<int>(stream.height);
  if (!stream.extradata.empty()) {
    // libavcodec reads past the end of its buffers: they carry zeroed padding.
    ctx->extradata = static_cast<uint8_t*>(av_mallocz(stream.extradata.size() + AV_INPUT_BUFFER_PADDING_SIZE));
    if (ctx->extradata == nullptr) return fid::Error{ENOMEM, "out of memory"};
    std::memcpy(ctx->extradata, stream.extradata.data(), stream.extradata.size());
    ctx->extradata_size = static_cast<int>(stream.extradata.size());
  }
  if (const int rc = avcodec_open2(ctx.get(), decoder, nullptr); rc < 0)
    return gop_error(fmt::format("the {} decoder does not open ({})", stream.codec, av_error(rc)));
  return ctx;
}

// Hands on_frame the frames `ctx` has ready (all of them when it is flushed).
fid::Status drain(AVCodecContext* ctx, AVFrame* frame, const codec::StreamParams& stream,
                  const std::function<fid::Status(const AVFrame*)>& on_frame) {
  for (;;) {
    const int rc = avcodec_receive_frame(ctx, frame);
    if (rc == AVERROR(EAGAIN) || rc == AVERROR_EOF) return {};
    if (rc < 0) return gop_error("the " + stream.codec + " decoder failed on a GOP (" + av_error(rc) + ")");
    if (frame->width != static_cast<int>(stream.width) || frame->height != static_cast<int>(stream.height)) {
      const std::string why = fmt::format("a frame of {}x{} in a stream of {}x{}", frame->width, frame->height,
                                          stream.width, stream.height);
      av_frame_unref(frame);
      return gop_error(why);
    }
    fid::Status taken = on_frame(frame);
    av_frame_unref(frame);
    if (!taken) return taken;
  }
}

// Sends `packet` to `ctx`, taking the frames it has ready first when it has no room.
fid::Status send(AVCodecContext* ctx, AVPacket* packet, AVFrame* frame, const codec::StreamParams& stream,
                 const std::function<fid::Status(const AVFrame*)>& on_frame, size_t index) {
  int rc = avcodec_send_packet(ctx, packet);
  if (rc == AVERROR(EAGAIN)) {  // (never both full and without a frame to give: the API's promise)
    if (fid::Status s = drain(ctx, frame, stream, on_frame); !s) return s;
    rc = avcodec_send_packet(ctx, packet);
  }
  if (rc < 0) return gop_error(fmt::format("the GOP's packet {} does not decode ({})", index, av_error(rc)));
  return drain(ctx, frame, stream, on_frame);
}

fid::Status decode_with(AVCodecContext* ctx, const codec::StreamParams& stream,
                        std::span<const std::span<const uint8_t>> packets,
                        const std::function<fid::Status(const AVFrame*)>& on_frame) {
  PacketPtr packet(av_packet_alloc());
  FramePtr frame(av_frame_alloc());
  if (!packet || !frame) return fid::Error{ENOMEM, "out of memory"};
  for (size_t i = 0; i < packets.size(); ++i) {
    const std::span<const uint8_t> bytes = packets[i];
    if (bytes.size() > INT_MAX - AV_INPUT_BUFFER_PADDING_SIZE)
      return gop_error(fmt::format("the GOP's packet {} is too large", i));
    av_packet_unref(packet.get());
    if (av_new_packet(packet.get(), static_cast<int>(bytes.size())) < 0) return fid::Error{ENOMEM, "out of memory"};
    std::memcpy(packet->data, bytes.data(), bytes.size());  // (av_new_packet zeroes the padding)
    if (fid::Status s = send(ctx, packet.get(), frame.get(), stream, on_frame, i); !s) return s;
  }
  av_packet_unref(packet.get());
  if (const int rc = avcodec_send_packet(ctx, nullptr); rc < 0)
    return gop_error("the decoder does not flush (" + av_error(rc) + ")");
  return drain(ctx, frame.get(), stream, on_frame);
}

}  // namespace

namespace {
bool same_stream(const codec::StreamParams& a, const codec::StreamParams& b) {
  return a.codec == b.codec && a.width == b.width && a.height == b.height && a.extradata == b.extradata;
}
}  // namespace

CodecPtr DecoderPool::take(const codec::StreamParams& stream) {
  std::lock_guard lock(mu_);
  for (size_t i = idle_.size(); i-- > 0;)
    if (same_stream(idle_[i].stream, stream)) {
      CodecPtr ctx = std::move(idle_[i].ctx);
      idle_.erase(idle_.begin() + static_cast<ptrdiff_t>(i));
      return ctx;
    }
  return nullptr;
}

void DecoderPool::give(const codec::StreamParams& stream, CodecPtr ctx) {
  avcodec_flush_buffers(ctx.get());
  std::lock_guard lock(mu_);
  if (idle_.size() == kMax) idle_.erase(idle_.begin());  // the least recently used
  idle_.push_back(Idle{stream, std::move(ctx)});
}

fid::Status decode_gop_packets(const codec::StreamParams& stream, std::span<const std::span<const uint8_t>> packets,
                               const std::function<fid::Status(const AVFrame*)>& on_frame) {
  quiet_libav();
  fid::Result<CodecPtr> ctx = open_decoder(stream);
  if (!ctx) return std::move(ctx).error();
  return decode_with(ctx->get(), stream, packets, on_frame);
}


std::optional<FrameDigest> frame_digest(const AVFrame* frame) {
  const auto format = static_cast<AVPixelFormat>(frame->format);
  const AVPixFmtDescriptor* desc = av_pix_fmt_desc_get(format);
  if (desc == nullptr || (desc->flags & AV_PIX_FMT_FLAG_HWACCEL)) return std::nullopt;
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(), &XXH3_freeState);
  if (!state || XXH3_128bits_reset(state.get()) != XXH_OK) return std::nullopt;
  const int head[] = {frame->width, frame->height, frame->format, frame->colorspace, frame->color_range};
  XXH3_128bits_update(state.get(), head, sizeof head);
  const int planes = av_pix_fmt_count_planes(format);
  for (int p = 0; p < planes && p < AV_NUM_DATA_POINTERS; ++p) {
    const int row = av_image_get_linesize(format, frame->width, p);
    const int rows = p == 1 || p == 2 ? AV_CEIL_RSHIFT(frame->height, desc->log2_chroma_h) : frame->height;
    if (row <= 0 || frame->data[p] == nullptr) return std::nullopt;
    for (int y = 0; y < rows; ++y)
      XXH3_128bits_update(state.get(), frame->data[p] + static_cast<ptrdiff_t>(y) * frame->linesize[p],
                          static_cast<size_t>(row));
  }
  if ((desc->flags & AV_PIX_FMT_FLAG_PAL) && frame->data[1] != nullptr) XXH3_128bits_update(state.get(), frame->data[1], 1024);
  const XXH128_hash_t h = XXH3_128bits_digest(state.get());
  return FrameDigest{h.low64, h.high64};
}

}  // namespace detail

namespace {

// One GOP decoded as far as its readers have asked: packets sent one at a time, each picture
// converted and handed out as the decoder gives it; the decoder goes back to the pool, flushed,
// once the GOP is done (or the session ends).
class LibavGopSession final : public codec::GopSession {
 public:
  LibavGopSession(const codec::StreamParams& stream, std::vector<uint8_t> piece, uint32_t short_side,
                  std::shared_ptr<detail::DecoderPool> pool)
      : stream_(stream), bytes_(std::move(piece)), pool_(std::move(pool)),
        size_(codec::scaled_frame_size(stream.width, stream.height, short_side)),
        // Rows 64-byte aligned with room for 16 pixels more: libswscale's vector path converts
        // whole vectors of pixels and, where a row has no room for the last one past its end,
        // leaves the row's last width % 8 pixels unwritten (340 wide: the last 4 black); an
        // unaligned stride (540 for 180 pixels) smeared whole pictures.
        stride_(((size_t{size_.width} + 16) * 3 + 63) & ~size_t{63}) {}
  ~LibavGopSession() override { release(); }

  // Parses the piece and takes a decoder; EINVAL or EIO as GopDecoder::open.
  fid::Status start() {
    fid::Result<codec::GopPiece> piece = codec::parse_gop_piece(bytes_);
    if (!piece) return std::move(piece).error();
    piece_ = std::move(piece).value();
    ctx_ = pool_->take(stream_);
    if (!ctx_) {
      fid::Result<detail::CodecPtr> opened = detail::open_decoder(stream_);
      if (!opened) return std::move(opened).error();
      ctx_ = std::move(opened).value();
    }
    packet_.reset(av_packet_alloc());
    frame_.reset(av_frame_alloc());
    if (!packet_ || !frame_) return fid::Error{ENOMEM, "out of memory"};
    rgb_.resize(stride_ * size_.height + detail::kRgbSlack);
    return {};
  }

  fid::Status decode_through(uint32_t last, const codec::GopFrameFn& on_frame) override {
    if (!failure_.empty()) return detail::gop_error(failure_);
    last = std::min(last, piece_.frames - 1);
    while (given_ <= last) {
      fid::Status step = next(on_frame);
      if (!step) return fail(std::move(step));
    }
    if (given_ == piece_.frames && ctx_) {
      if (fid::Status rest = finish(); !rest) return fail(std::move(rest));
    }
    return {};
  }
  uint32_t given() const override { return given_; }

 private:
  // One picture out, sending packets (then the flush) until the decoder has one.
  fid::Status next(const codec::GopFrameFn& on_frame) {
    for (;;) {
      const int rc = avcodec_receive_frame(ctx_.get(), frame_.get());
      if (rc >= 0) return take(on_frame);
      if (rc == AVERROR_EOF)
        return detail::gop_error(fmt::format("GOP gave {} frames, its piece says {}", given_, piece_.frames));
      if (rc != AVERROR(EAGAIN)) return detail::gop_error("the " + stream_.codec + " decoder failed on a GOP (" + detail::av_error(rc) + ")");
      if (fid::Status sent = send_next(); !sent) return sent;
    }
  }

  fid::Status send_next() {
    if (sent_ == piece_.packets.size()) {
      if (flushed_) return detail::gop_error("the decoder holds no more frames");
      flushed_ = true;
      const int rc = avcodec_send_packet(ctx_.get(), nullptr);
      return rc < 0 ? detail::gop_error("the decoder does not flush (" + detail::av_error(rc) + ")") : fid::Status{};
    }
    const std::span<const uint8_t> bytes = piece_.packets[sent_];
    if (bytes.size() > INT_MAX - AV_INPUT_BUFFER_PADDING_SIZE)
      return detail::gop_error(fmt::format("the GOP's packet {} is too large", sent_));
    av_packet_unref(packet_.get());
    if (av_new_packet(packet_.get(), static_cast<int>(bytes.size())) < 0) return fid::Error{ENOMEM, "out of memory"};
    std::memcpy(packet_->data, bytes.data(), bytes.size());  // (av_new_packet zeroes the padding)
    // EAGAIN cannot come here: a picture was asked for first, and the decoder had none to give.
    const int rc = avcodec_send_packet(ctx_.get(), packet_.get());
    if (rc < 0) return detail::gop_error(fmt::format("the GOP's packet {} does not decode ({})", sent_, detail::av_error(rc)));
    ++sent_;
    return {};
  }

  fid::Status take(const codec::GopFrameFn& on_frame) {
    const bool sized = frame_->width == static_cast<int>(stream_.width) && frame_->height == static_cast<int>(stream_.height);
    const std::string wrong = sized ? "" : fmt::format("a frame of {}x{} in a stream of {}x{}", frame_->width,
                                                       frame_->height, stream_.width, stream_.height);
    fid::Status converted = sized ? detail::frame_to_rgb(frame_.get(), size_.width, size_.height, sws_, rgb_.data(),
                                                         stride_, detail::kFastRgb)
                                  : fid::Status{};
    av_frame_unref(frame_.get());
    if (!sized) return detail::gop_error(wrong);
    if (!converted) return detail::gop_error(converted.error().message);
    return on_frame(given_++, codec::ImageView(size_.width, size_.height, 3, rgb_.data(), stride_));
  }

  // The GOP's last picture given: the decoder must have no other.
  fid::Status finish() {
    while (sent_ < piece_.packets.size() || !flushed_)
      if (fid::Status sent = send_next(); !sent) return sent;
    const int rc = avcodec_receive_frame(ctx_.get(), frame_.get());
    av_frame_unref(frame_.get());
    if (rc >= 0) return detail::gop_error(fmt::format("GOP gave over {} frames, its piece says {}", given_, given_));
    release();
    return {};
  }

  fid::Status fail(fid::Status s) {
    failure_ = s.error().message;
    ctx_.reset();  // a decoder an error left in some state goes to no other GOP
    return s;
  }

  void release() {
    if (ctx_) pool_->give(stream_, std::move(ctx_));
  }

  const codec::StreamParams stream_;
  const std::vector<uint8_t> bytes_;
  const std::shared_ptr<detail::DecoderPool> pool_;
  const codec::FrameSize size_;
  const size_t stride_;
  codec::GopPiece piece_;  // into bytes_
  detail::CodecPtr ctx_;
  detail::PacketPtr packet_;
  detail::FramePtr frame_;
  detail::SwsPtr sws_;
  std::vector<uint8_t> rgb_;
  size_t sent_ = 0;
  bool flushed_ = false;
  uint32_t given_ = 0;
  std::string failure_;
};

class LibavGopDecoder final : public codec::GopDecoder {
 public:
  fid::Result<std::unique_ptr<codec::GopSession>> open(const codec::StreamParams& stream, std::span<const uint8_t> gop,
                                                       uint32_t short_side) override {
    if (stream.width == 0 || stream.height == 0 || stream.width > codec::kMaxFrameSide ||
        stream.height > codec::kMaxFrameSide)
      return detail::gop_error(fmt::format("the stream's frames of {}x{} are over the limit", stream.width, stream.height));
    detail::quiet_libav();
    auto session = std::make_unique<LibavGopSession>(stream, std::vector<uint8_t>(gop.begin(), gop.end()), short_side, pool_);
    if (fid::Status started = session->start(); !started) return std::move(started).error();
    return std::unique_ptr<codec::GopSession>(std::move(session));
  }

  std::string name() const override { return "libavcodec"; }

 private:
  const std::shared_ptr<detail::DecoderPool> pool_ = std::make_shared<detail::DecoderPool>();
};

}  // namespace

std::unique_ptr<codec::GopDecoder> make_libav_gop_decoder() { return std::make_unique<LibavGopDecoder>(); }

}  // namespace fid::video
