// The parts of --video-frames that need no video file: its options, the rotation of a picture,
// the JPEG of a frame, and what decoding says of bytes that are no video (real videos:
// tests/integration/test_video.py).
#include <gtest/gtest.h>

#include <atomic>

#include "codec/jpeg.h"
#include "video/video_frames.h"

using fid::video::parse_frames_options;

TEST(VideoFramesOptions, ParsesEachKeyAndRefusesTheRest) {
  auto d = parse_frames_options("");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->fps_num, 0u);
  EXPECT_EQ(d->short_side, 0u);
  EXPECT_EQ(d->quality, 95);
  auto o = parse_frames_options("quality=90,fps=29.97,short_side=256");
  ASSERT_TRUE(o);
  EXPECT_EQ(o->quality, 90);
  EXPECT_EQ(o->fps_num, 2997u);
  EXPECT_EQ(o->fps_den, 100u);
  EXPECT_EQ(o->short_side, 256u);
  auto f = parse_frames_options("fps=30000/1001");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->fps_num, 30000u);
  EXPECT_EQ(f->fps_den, 1001u);
  for (const char* bad : {"fps=0", "fps=-1", "fps=1/0", "fps=1.2345", "fps=", "short_side=7", "short_side=x",
                          "quality=0", "quality=101", "speed=2", "fps", ","}) {
    auto r = parse_frames_options(bad);
    EXPECT_FALSE(r) << bad;
    if (!r) {
      EXPECT_NE(r.error().message.find('\''), std::string::npos) << r.error().message;
    }
  }
}

TEST(VideoFrames, RotateTurnsClockwise) {
  // 3x2 RGB: pixel value = 10 * y + x in every channel.
  fid::codec::Image im{3, 2, 3, {}};
  for (uint32_t y = 0; y < 2; ++y)
    for (uint32_t x = 0; x < 3; ++x)
      for (int c = 0; c < 3; ++c) im.pixels.push_back(static_cast<uint8_t>(10 * y + x));
  const auto at = [](const fid::codec::Image& i, uint32_t x, uint32_t y) { return i.pixels[(y * i.width + x) * 3]; };
  auto r90 = fid::video::rotate_clockwise(im, 90);
  ASSERT_EQ(r90.width, 2u);
  ASSERT_EQ(r90.height, 3u);
  EXPECT_EQ(at(r90, 1, 0), 0);   // the top-left corner goes top-right
  EXPECT_EQ(at(r90, 0, 0), 10);  // the bottom-left goes top-left
  auto r180 = fid::video::rotate_clockwise(im, 180);
  EXPECT_EQ(at(r180, 0, 0), 12);
  auto r270 = fid::video::rotate_clockwise(im, 270);
  ASSERT_EQ(r270.width, 2u);
  EXPECT_EQ(at(r270, 0, 2), 0);  // the top-left corner goes bottom-left
  EXPECT_EQ(fid::video::rotate_clockwise(r90, 270).pixels, im.pixels);
}

TEST(VideoFrames, AFrameEncodesAsAJpegOfItsSize) {
  fid::codec::Image im{33, 17, 3, std::vector<uint8_t>(33 * 17 * 3, 128)};
  auto jpeg = fid::codec::encode_jpeg(im, 95);
  ASSERT_TRUE(jpeg);
  auto decoded = fid::codec::decode_jpeg_strict(*jpeg);
  ASSERT_TRUE(decoded);
  EXPECT_EQ(decoded->width, 33);
  EXPECT_EQ(decoded->height, 17);
  for (uint8_t v : decoded->pixels) ASSERT_NEAR(v, 128, 1);
  EXPECT_FALSE(fid::codec::encode_jpeg(fid::codec::ImageView(0, 0, 3, nullptr), 95));
  EXPECT_FALSE(fid::codec::encode_jpeg(fid::codec::ImageView(2, 2, 2, im.pixels.data()), 95));
}

TEST(VideoFrames, BytesThatAreNoVideoSayWhy) {
  std::atomic<bool> cancel{false};
  const std::vector<uint8_t> text(4096, 'a');
  fid::video::VideoInput input;
  input.bytes = text;
  int frames = 0;
  auto r = fid::video::decode_frames(input, {}, [&](const fid::codec::ImageView&) { ++frames; return fid::Status{}; },
                                     cancel);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, EINVAL);
  EXPECT_NE(r.error().message.find("not a video"), std::string::npos) << r.error().message;
  EXPECT_EQ(frames, 0);
  fid::video::VideoInput missing;
  missing.path = "/nonexistent/video.mp4";
  EXPECT_FALSE(fid::video::decode_frames(missing, {}, [](const fid::codec::ImageView&) { return fid::Status{}; }, cancel));
}
