// Tiny videos made in process (libavformat's muxers, libavcodec's encoders), for unit tests that
// need video files and no ffmpeg CLI, 25 frames a second: MJPEG in AVI, and H.264 in MP4
// (libavcodec's libx264), whose GOPs, B-frames and rotation a test chooses.
#pragma once

#include <cmath>
#include <filesystem>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/display.h>
}

namespace fid::testutil {

// What one of the writers below makes.
struct TestVideoSpec {
  const char* muxer = nullptr;     // "avi", "mp4"
  const AVCodec* codec = nullptr;  // the encoder
  AVPixelFormat pix_fmt = AV_PIX_FMT_NONE;
  const char* preset = nullptr;  // libx264's, with its params
  std::string x264_params;
  int rotation = 0;            // degrees clockwise in the display matrix
  // The samples of frame i: luma at (x, y), and chroma plane 1 or 2 at (x, y) of the half size.
  std::function<uint8_t(int i, int x, int y)> luma;
  std::function<uint8_t(int i, int plane, int x, int y)> chroma;
};

inline void write_video(const std::filesystem::path& path, int frames, int w, int h, const TestVideoSpec& spec) {
  const auto check = [&](bool ok, const char* what) {
    if (!ok) throw std::runtime_error(path.string() + ": " + what);
  };
  AVFormatContext* out = nullptr;
  check(avformat_alloc_output_context2(&out, nullptr, spec.muxer, path.c_str()) >= 0, "no muxer");
  std::unique_ptr<AVFormatContext, void (*)(AVFormatContext*)> format(out, [](AVFormatContext* f) {
    if (f->pb) avio_closep(&f->pb);
    avformat_free_context(f);
  });
  check(spec.codec != nullptr, "no encoder");
  AVStream* stream = avformat_new_stream(out, nullptr);
  std::unique_ptr<AVCodecContext, void (*)(AVCodecContext*)> enc(avcodec_alloc_context3(spec.codec),
                                                                  [](AVCodecContext* c) { avcodec_free_context(&c); });
  enc->width = w;
  enc->height = h;
  enc->time_base = AVRational{1, 25};
  enc->framerate = AVRational{25, 1};
  enc->pix_fmt = spec.pix_fmt;
  enc->thread_count = 1;
  if (out->oformat->flags & AVFMT_GLOBALHEADER) enc->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;  // an MP4's avcC
  AVDictionary* options = nullptr;
  if (spec.preset) av_dict_set(&options, "preset", spec.preset, 0);
  if (!spec.x264_params.empty()) av_dict_set(&options, "x264-params", spec.x264_params.c_str(), 0);
  const int opened = avcodec_open2(enc.get(), spec.codec, &options);
  av_dict_free(&options);
  check(opened >= 0, "the encoder does not open");
  check(avcodec_parameters_from_context(stream->codecpar, enc.get()) >= 0, "no stream parameters");
  stream->time_base = enc->time_base;
  if (spec.rotation != 0) {
    uint8_t* matrix = av_stream_new_side_data(stream, AV_PKT_DATA_DISPLAYMATRIX, 9 * sizeof(int32_t));
    check(matrix != nullptr, "no display matrix");
    av_display_rotation_set(reinterpret_cast<int32_t*>(matrix), spec.rotation);
  }
  check(avio_open(&out->pb, path.c_str(), AVIO_FLAG_WRITE) >= 0, "cannot write");
  check(avformat_write_header(out, nullptr) >= 0, "no header");
  std::unique_ptr<AVFrame, void (*)(AVFrame*)> frame(av_frame_alloc(), [](AVFrame* f) { av_frame_free(&f); });
  std::unique_ptr<AVPacket, void (*)(AVPacket*)> packet(av_packet_alloc(), [](AVPacket* p) { av_packet_free(&p); });
  frame->format = enc->pix_fmt;
  frame->width = w;
  frame->height = h;
  check(av_frame_get_buffer(frame.get(), 0) >= 0, "no frame buffer");
  const auto drain = [&] {
    while (avcodec_receive_packet(enc.get(), packet.get()) >= 0) {
      packet->duration = 1;  // (else an MP4's edit list ends at the last frame's start, leaving it out)
      av_packet_rescale_ts(packet.get(), enc->time_base, stream->time_base);
      packet->stream_index = stream->index;
      check(av_interleaved_write_frame(out, packet.get()) >= 0, "a packet was not written");
    }
  };
  for (int i = 0; i <= frames; ++i) {
    if (i == frames) {
      check(avcodec_send_frame(enc.get(), nullptr) >= 0, "no flush");
    } else {
      check(av_frame_make_writable(frame.get()) >= 0, "frame not writable");
      for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x) frame->data[0][y * frame->linesize[0] + x] = spec.luma(i, x, y);
      for (int plane : {1, 2})
        for (int y = 0; y < h / 2; ++y)
          for (int x = 0; x < w / 2; ++x) frame->data[plane][y * frame->linesize[plane] + x] = spec.chroma(i, plane, x, y);
      frame->pts = i;
      check(avcodec_send_frame(enc.get(), frame.get()) >= 0, "a frame was not taken");
    }
    drain();
  }
  check(av_write_trailer(out) >= 0, "no trailer");
}

// An MJPEG AVI of `frames` frames of w x h (even sides), each a different shade.
inline void write_test_video(const std::filesystem::path& path, int frames, int w, int h) {
  TestVideoSpec spec;
  spec.muxer = "avi", spec.codec = avcodec_find_encoder(AV_CODEC_ID_MJPEG), spec.pix_fmt = AV_PIX_FMT_YUVJ420P;
  spec.luma = [](int i, int x, int y) { return static_cast<uint8_t>(16 + 20 * i + x + y); };
  spec.chroma = [](int i, int, int, int) { return static_cast<uint8_t>(128 + 8 * i); };
  write_video(path, frames, w, h, spec);
}

// An MP4 of `frames` frames of w x h (even sides), 25 a second, coded by libx264 with
// `x264_params` (as the x264 CLI's: "keyint=10:bframes=2:open-gop=1") at preset ultrafast unless
// they say otherwise; `rotation` degrees clockwise in its display matrix. The picture is waves
// that drift from frame to frame, so that frames are predicted from others as a camera's are.
inline void write_h264_test_video(const std::filesystem::path& path, int frames, int w, int h,
                                  const std::string& x264_params, int rotation = 0) {
  TestVideoSpec spec;
  spec.muxer = "mp4", spec.codec = avcodec_find_encoder_by_name("libx264"), spec.pix_fmt = AV_PIX_FMT_YUV420P;
  spec.preset = "ultrafast", spec.x264_params = x264_params, spec.rotation = rotation;
  spec.luma = [](int i, int x, int y) {
    return static_cast<uint8_t>(128 + 80 * std::sin((x + 3 * i) / 6.0) * std::cos((y - 2 * i) / 9.0));
  };
  spec.chroma = [](int i, int plane, int x, int y) { return static_cast<uint8_t>(128 + (plane == 1 ? x - i : y + i) % 40); };
  write_video(path, frames, w, h, spec);
}

}  // namespace fid::testutil
