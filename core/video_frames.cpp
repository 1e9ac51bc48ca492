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

// The GOP's frames rendered so far and the decode that renders the next ones.
struct FileReader::GopView {
  std::shared_ptr<codec::HostBuffer> buffer;
  uint64_t frame_bytes = 0;
  uint32_t frames = 0;
  codec::L3Shape shape;
  std::atomic<uint32_t> ready{0};  // frames rendered, 0 .. ready-1
  std::mutex mu;                   // held while decoding
  std::unique_ptr<codec::GopSession> session;  // null once every frame is rendered, or it failed
  std::string failure;                         // why the frames from `ready` on are not

  // Renders on through frame `last`; counts the frames in `decoded`.
  Status render_through(uint32_t last, codec::ViewFormat format, std::atomic<uint64_t>& decoded) {
    if (last < ready.load(std::memory_order_acquire)) return {};
    std::lock_guard lock(mu);
    if (last < ready.load(std::memory_order_relaxed)) return {};  // a reader before us rendered it
    if (!session) return Error{EIO, "its GOP does not decode: " + failure};
    Status st = session->decode_through(last, [&](uint32_t i, const codec::ImageView& rgb) -> Status {
      if (i != ready.load(std::memory_order_relaxed) || rgb.width != shape.width || rgb.height != shape.height ||
          rgb.channels != 3)
        return Error{EIO, fmt::format("the decoder gave frame {} of {}x{}, the store says {} frames of {}x{}", i,
                                      rgb.width, rgb.height, frames, shape.width, shape.height)};
      // The container around the pixels, copied in row by row as the L3 path decodes them.
      codec::L3Payload frame;
      frame.shape = shape;
      const auto copy = [&](std::span<const uint8_t>, std::span<uint8_t> px) -> Status {
        const size_t row = size_t{rgb.width} * 3;
        for (uint32_t y = 0; y < rgb.height; ++y) std::memcpy(px.data() + row * y, rgb.pixels + rgb.stride * y, row);
        return {};
      };
      if (Status r = codec::render_l3_view(frame, format, buffer->span().subspan(frame_bytes * i, frame_bytes), copy); !r)
        return r;
      decoded.fetch_add(1, std::memory_order_relaxed);
      ready.store(i + 1, std::memory_order_release);
      return {};
    });
    if (!st.ok()) {
      failure = st.error().message;
      session.reset();
      return Error{EIO, "its GOP does not decode: " + failure};
    }
    if (ready.load(std::memory_order_relaxed) <= last)
      return Error{EIO, fmt::format("its GOP decoded to {} frames, the store has {}", ready.load(), frames)};
    if (ready.load(std::memory_order_relaxed) == frames) session.reset();  // the decoder back to its pool
    return {};
  }
};

std::shared_ptr<FileReader::GopView> FileReader::gop_view(uint64_t key, const ViewCache::View& view) {
  std::lock_guard lock(gop_views_mu_);
  auto it = gop_views_.find(key);
  if (it == gop_views_.end()) return nullptr;
  std::shared_ptr<GopView> g = it->second.lock();
  return g && g->buffer.get() == view.get() ? g : nullptr;
}

Result<FileReader::Bytes> FileReader::read_frame(const index::File& f, uint64_t offset, uint64_t length) {
  const uint64_t size = frame_view_size(f);
  const uint64_t begin = std::min(offset, size);
  const uint64_t end = begin + std::min(length, size - begin);
  if (begin == end) return Bytes{};
  const index::File& gop = store_.gop_of(f);
  const uint32_t frames = gop_frames(gop);
  const uint64_t key = ViewCache::view_key(gop.id);
  Result<ViewCache::View> v = views_.get(key, size * frames, [&] { return open_gop(gop, frames, f.script); });
  if (!v.ok()) return failed(f, std::move(v).error());
  std::shared_ptr<GopView> g = gop_view(key, *v);
  if (!g) return failed(f, Error{EIO, "its GOP's view is gone"});
  if (Status st = g->render_through(f.script, view_format_, frames_decoded_); !st.ok()) return failed(f, std::move(st).error());
  if (end == size && f.script + 1 == frames) views_.read_to_end(key);
  return Bytes{{(*v)->data() + size * f.script + begin, end - begin}, *v, {}};
}

Result<ViewCache::View> FileReader::open_gop(const index::File& gop, uint32_t frames, uint32_t through) {
  if (!video_) return Error{EIO, "this mount has no video decoder"};
  const index::VideoSource* video = store_.video_of(gop.dir);
  if (!video || !video->is_stream()) return Error{EIO, "its folder has no video stream"};
  std::vector<uint8_t> piece;  // the GOP's packets, which the session copies
  const int L = store_.levels();
  if (Status st = read_stored(gop, L, 0, store_.size_at_level(gop, L), piece); !st.ok()) return std::move(st).error();
  const codec::StreamParams params{video->stream.codec, video->stream.extradata, video->stream.width,
                                   video->stream.height};
  Result<std::unique_ptr<codec::GopSession>> session = video_->open(params, piece, video_short_side_);
  if (!session) return Error{EIO, "its GOP does not decode: " + session.error().message};
  auto g = std::make_shared<GopView>();
  g->shape = frame_shape(gop, video_short_side_);
  g->frame_bytes = codec::l3_view_size(g->shape, view_format_);
  g->frames = frames;
  g->buffer = SpareBuffers::take(spare_buffers_, g->frame_bytes * frames);
  g->session = std::move(session).value();
  gops_decoded_.fetch_add(1, std::memory_order_relaxed);
  // Its first reader pays for the frames up to its own, no further.
  if (Status st = g->render_through(through, view_format_, frames_decoded_); !st.ok()) return std::move(st).error();
  {
    std::lock_guard lock(gop_views_mu_);
    if (gop_views_.size() > 4 * views_.entries() + 64)  // the views evicted since
      std::erase_if(gop_views_, [](const auto& e) { return e.second.expired(); });
    gop_views_[ViewCache::view_key(gop.id)] = g;
  }
  // The view is the buffer, and keeps the GopView (its decode) alive as long as it is kept.
  return ViewCache::View(g, g->buffer.get());
}

}  // namespace fid::core
