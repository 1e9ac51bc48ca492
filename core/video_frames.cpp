// FileReader, continued: the frames of videos kept as streams (docs/FORMAT.md "Video streams").
// A frame's read decodes its GOP once into a view of every frame of the GOP (the view cache shares
// it: a reader of a frame whose GOP is being decoded waits for that decode), each frame in the
// raw_format container at the mount's video_short_side.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "core/file_reader.h"

namespace fid::core {

struct FileReader::SpareBuffers {
  static constexpr size_t kMax = 16;
  std::mutex mu;
  std::vector<std::pair<size_t, std::unique_ptr<uint8_t[]>>> free;

  // A buffer of `size` bytes whose release keeps it here (up to kMax), while this lives.
  static std::shared_ptr<codec::HostBuffer> take(const std::shared_ptr<SpareBuffers>& self, size_t size) {
    std::unique_ptr<uint8_t[]> bytes;
    {
      std::lock_guard lock(self->mu);
      for (size_t i = self->free.size(); i-- > 0;)
        if (self->free[i].first == size) {
          bytes = std::move(self->free[i].second);
          self->free.erase(self->free.begin() + static_cast<ptrdiff_t>(i));
          break;
        }
    }
    if (!bytes) bytes.reset(new uint8_t[size]);
    std::weak_ptr<SpareBuffers> home = self;
    return std::make_shared<codec::HostBuffer>(bytes.release(), size, [home](uint8_t* p, size_t n) {
      std::unique_ptr<uint8_t[]> back(p);
      if (auto spare = home.lock()) {
        std::lock_guard lock(spare->mu);
        if (spare->free.size() == kMax) spare->free.erase(spare->free.begin());
        spare->free.emplace_back(n, std::move(back));
      }
    });
  }
};

std::shared_ptr<FileReader::SpareBuffers> FileReader::make_spare_buffers() { return std::make_shared<FileReader::SpareBuffers>(); }

namespace {
codec::L3Shape frame_shape(const index::File& f, uint32_t short_side) {
  const codec::FrameSize s = codec::scaled_frame_size(f.width, f.height, short_side);
  codec::L3Shape shape;
  shape.width = s.width, shape.height = s.height, shape.mode = codec::PilMode::RGB;
  return shape;
}
}  // namespace

uint64_t FileReader::frame_view_size(const index::File& f) const {
  return codec::l3_view_size(frame_shape(f, video_short_side_), view_format_);
}

uint32_t FileReader::gop_frames(const index::File& gop) const {
  const auto files = store_.files();
  uint32_t n = 1;
  while (gop.id + n < files.size() && files[gop.id + n].kind == index::FileKind::frame &&
         files[gop.id + n].dir == gop.dir && files[gop.id + n].script == n)
    ++n;
  return n;
}

ViewCache::View FileReader::cached_gop(const index::File& f) {
  return views_.peek(ViewCache::view_key(store_.gop_of(f).id));
}

Result<FileReader::Bytes> FileReader::read_frame(const index::File& f, uint64_t offset, uint64_t length) {
  const uint64_t size = frame_view_size(f);
  const uint64_t begin = std::min(offset, size);
  const uint64_t end = begin + std::min(length, size - begin);
  if (begin == end) return Bytes{};
  const index::File& gop = store_.gop_of(f);
  const uint32_t frames = gop_frames(gop);
  const uint64_t key = ViewCache::view_key(gop.id);
  Result<ViewCache::View> v = views_.get(key, size * frames, [&] { return render_gop(gop, frames); });
  if (!v.ok()) return failed(f, std::move(v).error());
  if (end == size && f.script + 1 == frames) views_.read_to_end(key);
  return Bytes{{(*v)->data() + size * f.script + begin, end - begin}, *v, {}};
}

Result<ViewCache::View> FileReader::render_gop(const index::File& gop, uint32_t frames) {
  if (!video_) return Error{EIO, "this mount has no video decoder"};
  const index::VideoSource* video = store_.video_of(gop.dir);
  if (!video || !video->is_stream()) return Error{EIO, "its folder has no video stream"};
  std::vector<uint8_t> piece;  // the GOP's packets, freed once its frames are rendered
  const int L = store_.levels();
  if (Status st = read_stored(gop, L, 0, store_.size_at_level(gop, L), piece); !st.ok()) return std::move(st).error();
  const codec::L3Shape shape = frame_shape(gop, video_short_side_);
  const uint64_t size = codec::l3_view_size(shape, view_format_);
  std::shared_ptr<codec::HostBuffer> view = SpareBuffers::take(spare_buffers_, size * frames);
  const codec::StreamParams params{video->stream.codec, video->stream.extradata, video->stream.width,
                                   video->stream.height};
  uint32_t given = 0;
  Status decoded = video_->decode(params, piece, video_short_side_, [&](uint32_t i, const codec::ImageView& rgb) -> Status {
    if (i >= frames || rgb.width != shape.width || rgb.height != shape.height || rgb.channels != 3)
      return Error{EIO, fmt::format("the decoder gave frame {} of {}x{}, the store says {} frames of {}x{}", i,
                                    rgb.width, rgb.height, frames, shape.width, shape.height)};
    // The container around the pixels, which are copied in row by row as the L3 path decodes them.
    codec::L3Payload frame;
    frame.shape = shape;
    const auto copy = [&](std::span<const uint8_t>, std::span<uint8_t> px) -> Status {
      const size_t row = size_t{rgb.width} * 3;
      for (uint32_t y = 0; y < rgb.height; ++y) std::memcpy(px.data() + row * y, rgb.pixels + rgb.stride * y, row);
      return {};
    };
    ++given;
    return codec::render_l3_view(frame, view_format_, view->span().subspan(size * i, size), copy);
  });
  if (!decoded.ok()) return Error{EIO, "its GOP does not decode: " + decoded.error().message};
  if (given != frames)
    return Error{EIO, fmt::format("its GOP decoded to {} frames, the store has {}", given, frames)};
  gops_decoded_.fetch_add(1, std::memory_order_relaxed);
  frames_decoded_.fetch_add(frames, std::memory_order_relaxed);
  return ViewCache::View(std::move(view));
}

}  // namespace fid::core
