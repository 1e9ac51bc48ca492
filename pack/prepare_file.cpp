#include "pack/prepare_file.h"

#include <algorithm>
#include <exception>
#include <span>

#include "codec/image_io.h"
#include "codec/l3_view.h"

namespace fid::pack {

namespace {

// Makes `out` an l3 file holding the L3 payload of a lossless source; `out` is unchanged on failure.
fid::Status prepare_l3(std::span<const uint8_t> bytes, PreparedFile& out) {
  fid::Result<codec::SourceImage> img = codec::decode_image(bytes);
  if (!img) return std::move(img).error();
  fid::Result<std::vector<uint8_t>> payload = codec::encode_l3_payload(*img);
  if (!payload) return std::move(payload).error();
  fid::Result<codec::L3Payload> parsed = codec::parse_l3_payload(*payload);  // as a reader will see it
  if (!parsed) return std::move(parsed).error();
  out.kind = index::FileKind::l3;
  out.script = codec::shape_code(parsed->shape);
  out.width = img->image.width;
  out.height = img->image.height;
  out.payload = std::move(payload).value();
  return {};
}

void prepare_bytes(std::vector<uint8_t>&& bytes, codec::LevelScripts levels, PreparedFile& out) {
  out.source_size = bytes.size();
  if (codec::looks_like_jpeg(bytes)) {
    fid::Result<codec::ProgressiveJpeg> transcoded = codec::transcode_progressive(bytes, levels);
    if (transcoded) {
      out.kind = index::FileKind::jpeg;
      out.script = static_cast<uint8_t>(transcoded->script);
      out.width = static_cast<uint32_t>(transcoded->width);
      out.height = static_cast<uint32_t>(transcoded->height);
      out.jpeg = std::move(transcoded).value();
      return;
    }
    out.note = "JPEG not transcodable, stored byte-identical: " + transcoded.error().message;
  } else if (codec::sniff_image(bytes) != codec::SourceFormat::unknown) {
    fid::Status stored = prepare_l3(bytes, out);
    if (stored) return;
    out.note = "lossless image not storable as L3, stored byte-identical: " + stored.error().message;
  } else {
    out.note = bytes.empty() ? "empty file" : "not a JPEG or a lossless image: stored byte-identical";
  }
  out.kind = index::FileKind::blob;
  out.payload = std::move(bytes);
}

// A frame of a video kept as a stream: its bytes as the source gives them (its GOP's piece, or
// nothing), its place in its GOP and the stream's frame size.
void prepare_frame(std::vector<uint8_t>&& bytes, const sources::SourceTree& tree, uint32_t index, PreparedFile& out) {
  const uint32_t dir = tree.files.dir(index);
  auto video = std::lower_bound(tree.videos.begin(), tree.videos.end(), dir,
                                [](const index::VideoSource& v, uint32_t d) { return v.dir < d; });
  out.kind = index::FileKind::frame;
  out.script = tree.frame_place[index];
  if (video != tree.videos.end() && video->dir == dir) out.width = video->stream.width, out.height = video->stream.height;
  out.source_size = bytes.size();
  out.payload = std::move(bytes);
}

bool is_frame(const sources::SourceTree& tree, uint32_t index) {
  return !tree.frame_place.empty() && tree.frame_place[index] != sources::kNotAFrame;
}

}  // namespace

PreparedFile prepare_file(const sources::PackSource& source, const sources::SourceTree& tree, uint32_t index,
                          codec::LevelScripts levels) {
  PreparedFile out;
  out.source_index = index;
  try {
    fid::Result<sources::SourceBytes> read = source.read(tree, index);
    if (!read) {
      out.skipped = out.unread = true;
      out.note = read.error().message;
      return out;
    }
    out.mtime_ns = read->mtime_ns;
    if (is_frame(tree, index))
      prepare_frame(std::move(read->bytes), tree, index, out);
    else
      prepare_bytes(std::move(read->bytes), levels, out);
  } catch (const std::exception& e) {  // e.g. bad_alloc on a huge file: skip it, keep the rest
    out = PreparedFile{};
    out.source_index = index;
    out.skipped = true;
    out.note = std::string("cannot be packed: ") + e.what();
  }
  return out;
}

}  // namespace fid::pack
