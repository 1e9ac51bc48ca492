// --video-streams (video/video_streams.h): the options, a re-encode cut into GOPs of N frames, a
// source's own GOPs kept where each decodes alone, the fallbacks and their reasons, and the
// mount's decoder on good and on damaged pieces. Videos are made in process (test_videos.h).
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern "C" {
#include <libavformat/avformat.h>
}

#include "codec/video_stream.h"
#include "test_files.h"
#include "test_videos.h"
#include "video/video_streams.h"

namespace {

using fid::Status;
using fid::codec::Image;
using fid::codec::ImageView;
using fid::video::StoredGop;
using fid::video::StreamInfo;
using fid::video::StreamOptions;

Image copy_of(const ImageView& v) {
  Image im{v.width, v.height, v.channels, {}};
  for (uint32_t y = 0; y < v.height; ++y)
    im.pixels.insert(im.pixels.end(), v.pixels + y * v.stride, v.pixels + y * v.stride + im.row_bytes());
  return im;
}

fid::video::VideoInput file_input(const std::filesystem::path& p) {
  fid::video::VideoInput in;
  in.path = p.string();
  return in;
}

// A video kept as a stream, its GOPs in memory.
struct Stored {
  StreamInfo info;
  std::vector<StoredGop> gops;
};

Stored store(const std::filesystem::path& video, const StreamOptions& opt) {
  std::atomic<bool> cancel{false};
  Stored s;
  const auto keep = [&](StoredGop&& g) {
    s.gops.push_back(std::move(g));
    return Status{};
  };
  auto r = fid::video::store_stream(file_input(video), opt, keep, cancel);
  if (!r) throw std::runtime_error(r.error().message);
  s.info = std::move(r).value();
  return s;
}

StreamOptions options(const char* text) {
  auto o = fid::video::parse_stream_options(text);
  if (!o) throw std::runtime_error(o.error().message);
  return *o;
}

// The frames decode_frames gives (full size unless short_side).
std::vector<Image> frames_of(const std::filesystem::path& video, uint32_t short_side = 0) {
  std::atomic<bool> cancel{false};
  fid::video::FramesOptions opt;
  opt.short_side = short_side;
  std::vector<Image> out;
  const auto keep = [&](const ImageView& v) {
    out.push_back(copy_of(v));
    return Status{};
  };
  auto r = fid::video::decode_frames(file_input(video), opt, keep, cancel);
  if (!r) throw std::runtime_error(r.error().message);
  return out;
}

// Every GOP through the mount's decoder, in order.
std::vector<Image> decode_all(const Stored& s, uint32_t short_side = 0) {
  auto decoder = fid::video::make_libav_gop_decoder();
  std::vector<Image> out;
  for (const StoredGop& g : s.gops) {
    uint32_t next = 0;
    Status d = decoder->decode(s.info.params, g.piece, short_side, [&](uint32_t i, const ImageView& v) {
      EXPECT_EQ(i, next++);  // (from 0 in each GOP)
      out.push_back(copy_of(v));
      return Status{};
    });
    if (!d) throw std::runtime_error(d.error().message);
  }
  return out;
}

double psnr(const std::vector<Image>& a, const std::vector<Image>& b) {
  double se = 0, n = 0;
  for (size_t k = 0; k < a.size(); ++k)
    for (size_t i = 0; i < a[k].pixels.size(); ++i) {
      const double e = double(a[k].pixels[i]) - double(b[k].pixels[i]);
      se += e * e, n += 1;
    }
  return se == 0 ? 99.0 : 10 * std::log10(255.0 * 255.0 * n / se);
}

// The video stream's packets as the container holds them: their bytes, count and keyframes.
struct StreamBytes {
  uint64_t bytes = 0, packets = 0, keys = 0;
};
StreamBytes stream_bytes(const std::filesystem::path& video) {
  AVFormatContext* f = nullptr;
  if (avformat_open_input(&f, video.c_str(), nullptr, nullptr) < 0) throw std::runtime_error("cannot open");
  StreamBytes out;
  const int stream = av_find_best_stream(f, AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
  AVPacket* p = av_packet_alloc();
  while (av_read_frame(f, p) >= 0) {
    if (p->stream_index == stream)
      out.bytes += static_cast<uint64_t>(p->size), ++out.packets, out.keys += (p->flags & AV_PKT_FLAG_KEY) ? 1 : 0;
    av_packet_unref(p);
  }
  av_packet_free(&p);
  avformat_close_input(&f);
  return out;
}

std::vector<uint32_t> gop_frames(const Stored& s) {
  std::vector<uint32_t> out;
  for (const auto& g : s.gops) out.push_back(g.frames);
  return out;
}

}  // namespace

TEST(VideoStreamOptions, ParsesEachKeyAndRefusesTheRest) {
  auto d = fid::video::parse_stream_options("");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->gop, 16u);
  EXPECT_EQ(d->crf, 23);
  EXPECT_EQ(d->short_side, 0u);
  EXPECT_EQ(d->fps_num, 0u);
  EXPECT_EQ(d->max_frames, 0u);
  auto o = fid::video::parse_stream_options("max_frames=9,crf=0,short_side=128,gop=1024,fps=29.97");
  ASSERT_TRUE(o);
  EXPECT_EQ(o->gop, 1024u);
  EXPECT_EQ(o->crf, 0);
  EXPECT_EQ(o->short_side, 128u);
  EXPECT_EQ(o->fps_num, 2997u);
  EXPECT_EQ(o->fps_den, 100u);
  EXPECT_EQ(o->max_frames, 9u);
  auto s = fid::video::parse_stream_options("gop=source,fps=30000/1001,crf=51");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->gop, 0u);
  EXPECT_EQ(s->crf, 51);
  EXPECT_EQ(s->fps_num, 30000u);
  EXPECT_EQ(s->fps_den, 1001u);
  for (const char* bad : {"gop=0", "gop=1025", "gop=", "gop=src", "gop", "crf=52", "crf=-1", "crf=x", "fps=0",
                          "fps=1.2345", "short_side=7", "max_frames=0", "quality=90", ",", "gop=8,,crf=1"}) {
    auto r = fid::video::parse_stream_options(bad);
    EXPECT_FALSE(r) << bad;
    if (!r) {
      EXPECT_EQ(r.error().code, EINVAL);
      EXPECT_NE(r.error().message.find('\''), std::string::npos) << r.error().message;  // names the bad part
    }
  }
}

TEST(VideoStreams, ReencodeCutsGopsOfNFramesThatDecodeCloseToTheSource) {
  fid::testutil::TempDir dir;
  const auto video = dir.path() / "v.avi";
  fid::testutil::write_test_video(video, 40, 64, 48);
  const Stored s = store(video, options("gop=16"));
  EXPECT_EQ(gop_frames(s), (std::vector<uint32_t>{16, 16, 8}));
  EXPECT_EQ(s.info.gop, 16u);
  EXPECT_EQ(s.info.params.codec, "h264");
  EXPECT_EQ(s.info.params.width, 64u);
  EXPECT_EQ(s.info.params.height, 48u);
  EXPECT_FALSE(s.info.params.extradata.empty());
  EXPECT_EQ(s.info.source.frames, 40u);
  EXPECT_EQ(s.info.source.codec, "mjpeg");
  EXPECT_EQ(s.info.source.fps_num / s.info.source.fps_den, 25u);
  EXPECT_TRUE(s.info.source.cut_short.empty());
  EXPECT_TRUE(s.info.reencoded_why.empty());
  uint64_t bytes = 0;
  for (const auto& g : s.gops) {
    bytes += g.piece.size();
    auto piece = fid::codec::parse_gop_piece(g.piece);
    ASSERT_TRUE(piece) << piece.error().message;
    EXPECT_EQ(piece->frames, g.frames);
    EXPECT_EQ(piece->packets.size(), g.frames);  // no B-frames: a packet a frame
    for (const auto& packet : piece->packets) {  // NAL units, each after its 4-byte length
      size_t at = 0;
      while (at + 4 <= packet.size())
        at += 4 + (size_t{packet[at]} << 24 | size_t{packet[at + 1]} << 16 | size_t{packet[at + 2]} << 8 | packet[at + 3]);
      EXPECT_EQ(at, packet.size());
    }
  }
  ASSERT_GE(s.info.params.extradata.size(), 7u);
  EXPECT_EQ(s.info.params.extradata[0], 1);  // avcC, as an MP4 holds it
  EXPECT_EQ(s.info.params.extradata[4], 0xff);  // 4-byte lengths
  EXPECT_EQ(s.info.stored_bytes, bytes);
  const std::vector<Image> got = decode_all(s), want = frames_of(video);
  ASSERT_EQ(got.size(), 40u);
  ASSERT_EQ(want.size(), 40u);
  for (const auto& im : got) ASSERT_EQ(im.width * im.height, 64u * 48u);
  EXPECT_GE(psnr(got, want), 38.0);
}

TEST(VideoStreams, AGopDecodesAloneAsAfterTheOthers) {
  fid::testutil::TempDir dir;
  const auto video = dir.path() / "v.avi";
  fid::testutil::write_test_video(video, 40, 64, 48);
  const Stored s = store(video, options("gop=16,crf=30"));
  ASSERT_EQ(s.gops.size(), 3u);
  auto decoder = fid::video::make_libav_gop_decoder();
  const auto decode = [&](size_t k) {
    std::vector<Image> out;
    Status d = decoder->decode(s.info.params, s.gops[k].piece, 0, [&](uint32_t, const ImageView& v) {
      out.push_back(copy_of(v));
      return Status{};
    });
    EXPECT_TRUE(d) << d.error().message;
    return out;
  };
  const std::vector<Image> alone = decode(2);
  decode(0);
  decode(1);
  const std::vector<Image> after = decode(2);
  ASSERT_EQ(alone.size(), 8u);
  ASSERT_EQ(after.size(), 8u);
  for (size_t i = 0; i < alone.size(); ++i) EXPECT_EQ(alone[i].pixels, after[i].pixels) << i;
}

TEST(VideoStreams, ShortSideStoresAndServesScaledFrameSizes) {
  fid::testutil::TempDir dir;
  const auto video = dir.path() / "v.avi";
  fid::testutil::write_test_video(video, 20, 340, 256);
  const Stored s = store(video, options("short_side=128"));
  EXPECT_EQ(s.info.params.width, 170u);
  EXPECT_EQ(s.info.params.height, 128u);
  EXPECT_EQ(s.info.source.width, 340u);  // the source as it is
  std::vector<Image> frames = decode_all(s);
  ASSERT_EQ(frames.size(), 20u);
  EXPECT_EQ(frames[0].width, 170u);
  // The mount's smaller size, as codec::scaled_frame_size says.
  frames = decode_all(s, 64);
  ASSERT_EQ(frames.size(), 20u);
  EXPECT_EQ(frames[0].width, 85u);
  EXPECT_EQ(frames[0].height, 64u);
  // A short side at least the stored one serves the stored size (never scaled up).
  EXPECT_EQ(decode_all(s, 128)[0].width, 170u);
  EXPECT_EQ(decode_all(s, 999)[0].width, 170u);
  // 340x256 at 99 is 131x99: odd sides, kept (encoded 4:4:4, as 4:2:0 takes even sides only).
  const Stored odd = store(video, options("short_side=99,gop=8"));
  EXPECT_EQ(odd.info.params.width, 131u);
  EXPECT_EQ(odd.info.params.height, 99u);
  EXPECT_EQ(decode_all(odd)[0].width, 131u);
  EXPECT_EQ(decode_all(odd).size(), 20u);
  // A short side over the video's keeps its size, as the mount never scales up.
  const Stored big = store(video, options("short_side=512,gop=8"));
  EXPECT_EQ(big.info.params.width, 340u);
  EXPECT_EQ(big.info.params.height, 256u);
}

TEST(VideoStreams, SourceKeepsClosedGopsAsTheirPackets) {
  fid::testutil::TempDir dir;
  const auto video = dir.path() / "v.mp4";
  fid::testutil::write_h264_test_video(video, 40, 64, 48, "keyint=10:min-keyint=10:scenecut=0:bframes=2:open-gop=0");
  const Stored s = store(video, options("gop=source"));
  EXPECT_EQ(s.info.reencoded_why, "");
  EXPECT_EQ(s.info.gop, 0u);
  EXPECT_EQ(s.info.params.codec, "h264");
  EXPECT_EQ(s.info.params.width, 64u);
  ASSERT_FALSE(s.info.params.extradata.empty());
  EXPECT_EQ(s.info.params.extradata[0], 1);  // the MP4's avcC, as it is
  EXPECT_EQ(gop_frames(s), (std::vector<uint32_t>{10, 10, 10, 10}));
  EXPECT_EQ(s.info.source.frames, 40u);
  // The packets as the container holds them, plus each piece's head.
  const StreamBytes source = stream_bytes(video);
  EXPECT_EQ(source.keys, 4u);
  EXPECT_EQ(s.info.stored_bytes, source.bytes + 8 * s.gops.size() + 4 * source.packets);
  // The pixels --video-frames gives, the same decode: the mount's fast RGB conversion within a few
  // levels of pack's exact one (chroma taken at its own resolution), the frames in the same order.
  const std::vector<Image> got = decode_all(s), want = frames_of(video);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_GE(psnr({got[i]}, {want[i]}), 40.0) << "frame " << i;
  // And at a smaller size, what --video-frames gives at that short side.
  const std::vector<Image> small = decode_all(s, 24), small_want = frames_of(video, 24);
  ASSERT_EQ(small.size(), small_want.size());
  EXPECT_EQ(small[0].width, 32u);
  for (size_t i = 0; i < small.size(); ++i) ASSERT_GE(psnr({small[i]}, {small_want[i]}), 30.0) << "frame " << i;
}

// libswscale's fast conversion leaves a row's last width % 8 pixels unwritten where the row has
// no room for a whole vector past its end, and smears rows whose stride is not aligned: widths
// that are no multiple of 8 (100, 180, 340) decode to decode_frames' pixels all the same.
TEST(VideoStreams, EveryColumnOfWidthsNoMultipleOfEight) {
  for (const uint32_t width : {100u, 180u, 340u}) {
    fid::testutil::TempDir dir;
    const auto video = dir.path() / "v.mp4";
    fid::testutil::write_h264_test_video(video, 12, static_cast<int>(width), 48, "keyint=6:min-keyint=6:scenecut=0:bframes=0");
    const Stored s = store(video, options("gop=source"));
    ASSERT_EQ(s.info.reencoded_why, "") << width;
    const std::vector<Image> got = decode_all(s), want = frames_of(video);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].width, width);
      // The last 4 columns, never left black: as near decode_frames' as the frame's other pixels
      // (the fast path takes chroma at its own resolution: sharp colour edges differ a little; a
      // column left unwritten is 100 levels off).
      double all = 0;
      for (size_t at = 0; at < got[i].pixels.size(); ++at)
        all += std::abs(double(got[i].pixels[at]) - double(want[i].pixels[at]));
      all /= double(got[i].pixels.size());
      double diff = 0;
      for (uint32_t y = 0; y < got[i].height; ++y)
        for (uint32_t x = width - 4; x < width; ++x)
          for (size_t c = 0; c < 3; ++c) {
            const size_t at = (size_t{y} * width + x) * 3 + c;
            diff += std::abs(double(got[i].pixels[at]) - double(want[i].pixels[at]));
          }
      EXPECT_LE(diff / (got[i].height * 4 * 3), 3 * all + 4) << width << " frame " << i;
      ASSERT_GE(psnr({got[i]}, {want[i]}), 40.0) << width << " frame " << i;
    }
  }
}

TEST(VideoStreams, SourceReencodesOpenGopsAndSaysWhy) {
  fid::testutil::TempDir dir;
  const auto video = dir.path() / "v.mp4";
  fid::testutil::write_h264_test_video(video, 40, 64, 48, "keyint=10:min-keyint=10:scenecut=0:bframes=3:open-gop=1");
  const Stored s = store(video, options("gop=source"));
  EXPECT_NE(s.info.reencoded_why.find("GOP at frame"), std::string::npos) << s.info.reencoded_why;
  EXPECT_EQ(s.info.gop, 16u);
  EXPECT_EQ(gop_frames(s), (std::vector<uint32_t>{16, 16, 8}));
  EXPECT_EQ(decode_all(s).size(), 40u);
}

TEST(VideoStreams, SourceReencodesARotatedVideo) {
  fid::testutil::TempDir dir;
  const auto video = dir.path() / "v.mp4";
  fid::testutil::write_h264_test_video(video, 12, 64, 48, "keyint=4:scenecut=0", 90);
  const Stored s = store(video, options("gop=source,crf=10"));
  EXPECT_EQ(s.info.reencoded_why, "rotated 90 degrees");
  EXPECT_EQ(s.info.source.rotation, 90);
  EXPECT_EQ(s.info.params.width, 48u);  // stored upright
  EXPECT_EQ(s.info.params.height, 64u);
  const std::vector<Image> got = decode_all(s), want = frames_of(video);
  ASSERT_EQ(got.size(), 12u);
  EXPECT_GE(psnr(got, want), 38.0);
  // fps or a smaller size asked: re-encoded too.
  const auto upright = dir.path() / "upright.mp4";
  fid::testutil::write_h264_test_video(upright, 12, 64, 48, "keyint=4:scenecut=0");
  EXPECT_EQ(store(upright, options("gop=source")).info.reencoded_why, "");
  EXPECT_EQ(store(upright, options("gop=source,short_side=64")).info.reencoded_why, "");  // no smaller
  EXPECT_EQ(store(upright, options("gop=source,short_side=32")).info.reencoded_why, "short_side=32 asked");
  const Stored slower = store(upright, options("gop=source,fps=5"));
  EXPECT_EQ(slower.info.reencoded_why, "fps=5/1 asked");
  EXPECT_EQ(slower.info.source.frames, 2u);  // 0.48 s resampled to 5 a second, as decode_frames does
}

TEST(VideoStreams, SourceReencodesGopsOverTheLimits) {
  fid::testutil::TempDir dir;
  const auto longer = dir.path() / "long.mp4";  // one GOP of 1030 frames
  fid::testutil::write_h264_test_video(longer, 1030, 16, 16, "keyint=2000:min-keyint=2000:scenecut=0:bframes=0");
  const Stored l = store(longer, options("gop=source"));
  EXPECT_EQ(l.info.reencoded_why, "the GOP at frame 0 has over 1024 frames");
  EXPECT_EQ(l.gops.size(), (1030u + 15) / 16);
  const auto large = dir.path() / "large.mp4";  // 37 frames of 1280x720: 97 MB as RGB
  fid::testutil::write_h264_test_video(large, 37, 1280, 720, "keyint=100:scenecut=0:bframes=0");
  const Stored g = store(large, options("gop=source,crf=40"));
  EXPECT_EQ(g.info.reencoded_why, "GOPs of 37 frames decode to 97 MB, over 96 MB");
  EXPECT_EQ(gop_frames(g), (std::vector<uint32_t>{16, 16, 5}));
}

TEST(VideoStreams, ErrorsAreDecodeFramesOnes) {
  fid::testutil::TempDir dir;
  const auto video = dir.path() / "v.mp4";
  fid::testutil::write_h264_test_video(video, 40, 64, 48, "keyint=10:scenecut=0");
  std::atomic<bool> cancel{false};
  int gops = 0;
  const auto count = [&](StoredGop&&) {
    ++gops;
    return Status{};
  };
  for (const char* opt : {"gop=16,max_frames=30", "gop=source,max_frames=30"}) {
    auto r = fid::video::store_stream(file_input(video), options(opt), count, cancel);
    ASSERT_FALSE(r) << opt;
    EXPECT_EQ(r.error().code, EFBIG) << opt;
    EXPECT_NE(r.error().message.find("max_frames=N in --video-streams"), std::string::npos) << r.error().message;
  }
  gops = 0;  // (a re-encode hands out the GOPs before the error; the caller drops them)
  const std::vector<uint8_t> text(4096, 'a');
  fid::video::VideoInput bytes;
  bytes.bytes = text;
  for (const char* opt : {"gop=16", "gop=source"}) {
    auto r = fid::video::store_stream(bytes, options(opt), count, cancel);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, EINVAL);
    EXPECT_NE(r.error().message.find("not a video"), std::string::npos) << r.error().message;
  }
  // on_gop's error stops the video.
  for (const char* opt : {"gop=16", "gop=source"}) {
    int calls = 0;
    auto r = fid::video::store_stream(file_input(video), options(opt), [&](StoredGop&&) {
      ++calls;
      return Status{fid::Error{ENOSPC, "full"}};
    }, cancel);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ENOSPC);
    EXPECT_EQ(calls, 1);
  }
  cancel = true;
  for (const char* opt : {"gop=16", "gop=source"}) {
    auto r = fid::video::store_stream(file_input(video), options(opt), count, cancel);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ECANCELED);
  }
  EXPECT_EQ(gops, 0);
  // The same video from memory, as from its file.
  cancel = false;
  std::ifstream in(video, std::ios::binary);
  const std::vector<uint8_t> mp4((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  bytes.bytes = mp4;
  auto r = fid::video::store_stream(bytes, options("gop=source"), count, cancel);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->source.frames, 40u);
  EXPECT_EQ(gops, 4);
}

TEST(VideoStreamDecoder, DamagedPiecesFailWithoutACrash) {
  fid::testutil::TempDir dir;
  const auto video = dir.path() / "v.avi";
  fid::testutil::write_test_video(video, 8, 32, 24);
  const Stored s = store(video, options("gop=8"));
  ASSERT_EQ(s.gops.size(), 1u);
  auto decoder = fid::video::make_libav_gop_decoder();
  const std::vector<uint8_t>& good = s.gops[0].piece;
  const auto decode = [&](const std::vector<uint8_t>& piece, const fid::codec::StreamParams& params) {
    uint32_t frames = 0;
    Status d = decoder->decode(params, piece, 0, [&](uint32_t i, const ImageView& v) {
      EXPECT_EQ(i, frames);
      EXPECT_EQ(v.width, 32u);
      ++frames;
      return Status{};
    });
    return std::pair{std::move(d), frames};
  };
  ASSERT_TRUE(decode(good, s.info.params).first);
  // Cut short: the piece does not parse.
  auto truncated = good;
  truncated.resize(good.size() - 5);
  auto [t, t_frames] = decode(truncated, s.info.params);
  ASSERT_FALSE(t);
  EXPECT_EQ(t.error().code, EINVAL);
  EXPECT_EQ(t_frames, 0u);
  // Its frames field lies: EIO, saying both counts.
  for (uint32_t lie : {7u, 9u}) {
    auto liar = good;
    liar[0] = static_cast<uint8_t>(lie);
    auto [l, l_frames] = decode(liar, s.info.params);
    ASSERT_FALSE(l) << lie;
    EXPECT_EQ(l.error().code, EIO);
    EXPECT_NE(l.error().message.find("its piece says " + std::to_string(lie)), std::string::npos) << l.error().message;
  }
  // Flipped bytes anywhere in the packets: an error, or frames of the right size and count.
  const auto head = 8 + 4 * fid::codec::parse_gop_piece(good)->packets.size();
  for (size_t at = head; at < good.size(); at += 7) {
    auto flipped = good;
    flipped[at] ^= 0x5a;
    auto [f, f_frames] = decode(flipped, s.info.params);
    if (f) EXPECT_EQ(f_frames, 8u) << at;
    else EXPECT_TRUE(f.error().code == EIO || f.error().code == EINVAL) << at << f.error().message;
  }
  // Parameters that do not fit the piece.
  auto params = s.info.params;
  params.width = 64;
  auto [w, w_frames] = decode(good, params);
  ASSERT_FALSE(w);
  EXPECT_EQ(w.error().code, EIO);
  EXPECT_EQ(w_frames, 0u);
  params = s.info.params;
  params.codec = "no-such-codec";
  EXPECT_EQ(decode(good, params).first.error().code, EIO);
  params = s.info.params;
  params.extradata.assign(params.extradata.size(), 0xff);
  EXPECT_FALSE(decode(good, params).first);
  params = s.info.params;
  params.width = 1u << 31;
  EXPECT_FALSE(decode(good, params).first);
  // on_frame's error is the call's.
  Status stopped =
      decoder->decode(s.info.params, good, 0, [](uint32_t, const ImageView&) { return Status{fid::Error{EPIPE, "stop"}}; });
  ASSERT_FALSE(stopped);
  EXPECT_EQ(stopped.error().code, EPIPE);
  EXPECT_EQ(decoder->name(), "libavcodec");
}

TEST(VideoStreamDecoder, DecodesOnManyThreadsAtOnce) {
  fid::testutil::TempDir dir;
  const auto video = dir.path() / "v.mp4";
  fid::testutil::write_h264_test_video(video, 40, 64, 48, "keyint=10:min-keyint=10:scenecut=0:bframes=2:open-gop=0");
  const Stored s = store(video, options("gop=source"));
  ASSERT_EQ(s.gops.size(), 4u);
  const std::vector<Image> want = decode_all(s, 24);
  auto decoder = fid::video::make_libav_gop_decoder();  // one decoder, as the mount has
  std::vector<std::vector<Image>> got(8);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < got.size(); ++t)
    threads.emplace_back([&, t] {
      for (size_t k = 0; k < s.gops.size(); ++k) {
        const StoredGop& g = s.gops[(k + t) % s.gops.size()];  // each thread its own order
        std::vector<Image> frames;
        Status d = decoder->decode(s.info.params, g.piece, 24, [&](uint32_t, const ImageView& v) {
          frames.push_back(copy_of(v));
          return Status{};
        });
        if (!d) return;
        got[t].resize(want.size());
        for (size_t i = 0; i < frames.size(); ++i) got[t][10 * ((k + t) % s.gops.size()) + i] = std::move(frames[i]);
      }
    });
  for (auto& th : threads) th.join();
  for (size_t t = 0; t < got.size(); ++t) {
    ASSERT_EQ(got[t].size(), want.size()) << t;
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[t][i].pixels, want[i].pixels) << t << " " << i;
  }
}
