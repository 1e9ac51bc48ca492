// codec/video_stream.h: a GOP piece's bytes both ways, each way a piece is refused, and the size
// a stored frame is served at.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <string>
#include <vector>

#include "codec/video_stream.h"

using fid::codec::encode_gop_piece;
using fid::codec::FrameSize;
using fid::codec::kMaxGopFrames;
using fid::codec::parse_gop_piece;
using fid::codec::scaled_frame_size;

namespace {

void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

// A piece written by hand: frames, then the packet sizes given, then `payload` bytes.
std::vector<uint8_t> piece_of(uint32_t frames, const std::vector<uint32_t>& sizes, size_t payload) {
  std::vector<uint8_t> out;
  put_u32(out, frames);
  put_u32(out, static_cast<uint32_t>(sizes.size()));
  for (uint32_t s : sizes) put_u32(out, s);
  out.resize(out.size() + payload, 0xab);
  return out;
}

std::string refusal(const std::vector<uint8_t>& piece) {
  auto r = parse_gop_piece(piece);
  if (r) return "parsed";
  EXPECT_EQ(r.error().code, EINVAL);
  return r.error().message;
}

bool operator==(FrameSize a, FrameSize b) { return a.width == b.width && a.height == b.height; }

}  // namespace

TEST(GopPiece, EncodesAndParsesBack) {
  const std::vector<std::vector<uint8_t>> packets = {{1, 2, 3}, {4}, std::vector<uint8_t>(1000, 7)};
  const std::vector<uint8_t> piece = encode_gop_piece(5, packets);
  ASSERT_EQ(piece.size(), 8 + 3 * 4 + 1004u);
  EXPECT_EQ(piece[0], 5);  // little-endian frames, then packets
  EXPECT_EQ(piece[4], 3);
  EXPECT_EQ(piece[8], 3);  // the first packet's size
  auto parsed = parse_gop_piece(piece);
  ASSERT_TRUE(parsed) << parsed.error().message;
  EXPECT_EQ(parsed->frames, 5u);
  ASSERT_EQ(parsed->packets.size(), 3u);
  for (size_t i = 0; i < packets.size(); ++i)
    EXPECT_EQ(std::vector<uint8_t>(parsed->packets[i].begin(), parsed->packets[i].end()), packets[i]) << i;
  // The spans point into the piece.
  EXPECT_EQ(parsed->packets[0].data(), piece.data() + 20);
  EXPECT_EQ(parse_gop_piece(encode_gop_piece(kMaxGopFrames, packets))->frames, kMaxGopFrames);
}

TEST(GopPiece, RefusesEachMalformedPieceSayingWhy) {
  EXPECT_NE(refusal({}).find("8-byte head"), std::string::npos);
  EXPECT_NE(refusal({1, 0, 0, 0, 1, 0, 0}).find("8-byte head"), std::string::npos);
  EXPECT_NE(refusal(piece_of(0, {1}, 1)).find("0 frames"), std::string::npos);
  EXPECT_NE(refusal(piece_of(kMaxGopFrames + 1, {1}, 1)).find("1025 frames"), std::string::npos);
  EXPECT_NE(refusal(piece_of(1, {}, 0)).find("0 packets"), std::string::npos);
  std::vector<uint8_t> many;
  put_u32(many, 1);
  put_u32(many, 4 * kMaxGopFrames + 1);
  EXPECT_NE(refusal(many).find("4097 packets"), std::string::npos);
  std::vector<uint8_t> sizes_cut;
  put_u32(sizes_cut, 1);
  put_u32(sizes_cut, 3);
  put_u32(sizes_cut, 1);
  EXPECT_NE(refusal(sizes_cut).find("packet sizes run past its end"), std::string::npos);
  EXPECT_NE(refusal(piece_of(1, {2, 0}, 2)).find("packet 1 is empty"), std::string::npos);
  EXPECT_NE(refusal(piece_of(1, {2, 3}, 4)).find("packet 1 runs past its end"), std::string::npos);
  EXPECT_NE(refusal(piece_of(1, {0xffffffffu}, 4)).find("packet 0 runs past its end"), std::string::npos);
  EXPECT_NE(refusal(piece_of(1, {2, 3}, 6)).find("1 bytes after its last packet"), std::string::npos);
  EXPECT_EQ(refusal(piece_of(1, {2, 3}, 5)), "parsed");
}

TEST(GopPiece, ScaledFrameSizeScalesTheShortSideDownOnly) {
  EXPECT_TRUE(scaled_frame_size(340, 256, 128) == (FrameSize{170, 128}));
  EXPECT_TRUE(scaled_frame_size(256, 340, 128) == (FrameSize{128, 170}));  // portrait
  EXPECT_TRUE(scaled_frame_size(1920, 1080, 256) == (FrameSize{455, 256}));  // 455.1
  EXPECT_TRUE(scaled_frame_size(341, 255, 100) == (FrameSize{134, 100}));    // 133.7, odd sides
  EXPECT_TRUE(scaled_frame_size(3, 2, 1) == (FrameSize{2, 1}));              // 1.5 rounds up
  EXPECT_TRUE(scaled_frame_size(1000, 1, 1) == (FrameSize{1000, 1}));        // the short side already
  EXPECT_TRUE(scaled_frame_size(10000, 100, 1) == (FrameSize{100, 1}));
  EXPECT_TRUE(scaled_frame_size(340, 256, 0) == (FrameSize{340, 256}));    // 0: as stored
  EXPECT_TRUE(scaled_frame_size(340, 256, 256) == (FrameSize{340, 256}));  // equal: as stored
  EXPECT_TRUE(scaled_frame_size(340, 256, 512) == (FrameSize{340, 256}));  // never scaled up
  EXPECT_TRUE(scaled_frame_size(0, 0, 128) == (FrameSize{0, 0}));
  EXPECT_TRUE(scaled_frame_size(256, 256, 100) == (FrameSize{100, 100}));
  EXPECT_TRUE(scaled_frame_size(16384, 16384, 8) == (FrameSize{8, 8}));
  EXPECT_TRUE(scaled_frame_size(4000000000u, 3000000000u, 3) == (FrameSize{4, 3}));  // no overflow
}
