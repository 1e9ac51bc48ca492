// libFuzzer target: a GOP piece as the mount reads it from a store (codec::parse_gop_piece, then
// the libavcodec decoder of video/video_streams.h) for a fixed H.264 stream of 32x24. Nothing may
// crash or hang; a parsed piece's packets must lie inside it, and a decode that succeeds must give
// exactly the frames its piece says, each a whole RGB picture of the asked size. The first byte
// picks the stream's parameters: bit 0, no extradata (Annex B, SPS and PPS in the packets);
// bit 1, served at short_side 16. Seeds (tests/fuzz/seeds/fuzz_gop): pieces pack made of a tiny
// video with gop=4.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "codec/video_stream.h"
#include "video/video_streams.h"

namespace {

// The avcC of the seeds' 32x24 stream (pack --video-streams=gop=4,crf=30 of a tiny video).
constexpr uint8_t kExtradata[] = {0x01, 0x64, 0x00, 0x0a, 0xff, 0xe1, 0x00, 0x1a, 0x67, 0x64, 0x00, 0x0a, 0xac, 0xb4,
                                  0x4b, 0xf2, 0xcd, 0x40, 0x80, 0x81, 0x90, 0x00, 0x00, 0x03, 0x00, 0x10, 0x00, 0x00,
                                  0x03, 0x03, 0x20, 0xf1, 0x22, 0x6a, 0x01, 0x00, 0x05, 0x68, 0xef, 0x04, 0x72, 0xc0,
                                  0xfd, 0xf8, 0xf8, 0x00};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::span<const uint8_t> piece(data + 1, size - 1);
  auto parsed = fid::codec::parse_gop_piece(piece);
  if (parsed) {
    if (parsed->frames == 0 || parsed->frames > fid::codec::kMaxGopFrames || parsed->packets.empty()) std::abort();
    for (const auto& p : parsed->packets)
      if (p.empty() || p.data() < piece.data() || p.data() + p.size() > piece.data() + piece.size()) std::abort();
  }
  fid::codec::StreamParams stream;
  stream.codec = "h264";
  if (!(data[0] & 1)) stream.extradata.assign(std::begin(kExtradata), std::end(kExtradata));
  stream.width = 32, stream.height = 24;
  const uint32_t short_side = (data[0] & 2) ? 16 : 0;
  const fid::codec::FrameSize want = fid::codec::scaled_frame_size(32, 24, short_side);
  static const auto decoder = fid::video::make_libav_gop_decoder();
  uint32_t frames = 0;
  fid::Status s = decoder->decode(stream, piece, short_side, [&](uint32_t i, const fid::codec::ImageView& rgb) {
    if (i != frames++ || rgb.channels != 3 || rgb.width != want.width || rgb.height != want.height) std::abort();
    volatile uint8_t last = rgb.pixels[(rgb.height - 1) * rgb.stride + rgb.width * 3 - 1];  // the whole picture is there
    (void)last;
    return fid::Status{};
  });
  if (s && (!parsed || frames != parsed->frames)) std::abort();
  return 0;
}
