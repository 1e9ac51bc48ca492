// See verify_file.h.
#include "cli/verify_file.h"

#include <fmt/format.h>

#include "codec/jpeg.h"
#include "codec/l3_view.h"
#include "core/read_range.h"

namespace fid::cli {

// The pieces are read once (all of them: the file at its top level, less the trailer); each
// level's bytes are then read_range over them, as the mount serves them.
std::string verify_file(const index::Store& store, storage::RecordSource& source, const index::File& f,
                        std::vector<uint8_t>& buf) {
  const uint64_t all = store.size_at_level(f, store.levels()) - index::level_trailer(f.kind).size();
  core::StoredPieces stored(store, source);
  if (Status st = core::read_range(store, f, store.levels(), 0, all, stored, buf); !st.ok()) return st.error().message;
  if (f.kind == index::FileKind::l3) {  // a full decode of the L3 bitstream
    fid::Result<codec::L3Payload> parsed = codec::parse_l3_payload(buf);
    if (!parsed) return "L3 payload: " + parsed.error().message;
    const codec::L3Payload& p = *parsed;
    if (p.shape.width != f.width || p.shape.height != f.height || codec::shape_code(p.shape) != f.script)
      return fmt::format("L3 payload is {}x{} mode {}, the index disagrees", p.shape.width, p.shape.height,
                         codec::pil_mode_name(p.shape.mode));
    thread_local std::vector<uint8_t> pixels;
    pixels.resize(size_t{p.shape.width} * p.shape.height * p.shape.channels());
    if (fid::Status decoded = codec::l3_decode_into(p.l3, pixels); !decoded)
      return "L3 does not decode: " + decoded.error().message;
    return {};
  }
  if (f.kind != index::FileKind::jpeg) return {};
  std::vector<uint8_t> file;
  core::MemoryPieces pieces(store, buf);
  for (int k = 1; k <= store.levels(); ++k) {
    if (Status st = core::read_range(store, f, k, 0, store.size_at_level(f, k), pieces, file); !st.ok())
      return fmt::format("level {}: {}", k, st.error().message);
    fid::Result<codec::DecodedImage> decoded = codec::decode_jpeg_strict(file);
    if (!decoded) return fmt::format("level {} does not decode: {}", k, decoded.error().message);
    const codec::DecodedImage& img = *decoded;
    if (static_cast<uint32_t>(img.width) != f.width || static_cast<uint32_t>(img.height) != f.height)
      return fmt::format("level {} decodes to {}x{}, index says {}x{}", k, img.width, img.height, f.width, f.height);
  }
  return {};
}

}  // namespace fid::cli
