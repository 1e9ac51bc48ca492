#include "codec/video_stream.h"

#include <algorithm>
#include <cerrno>
#include <string>

namespace fid::codec {

namespace {
void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
uint32_t get_u32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}
fid::Error bad_piece(const std::string& why) { return fid::Error{EINVAL, "GOP piece: " + why}; }
}  // namespace

std::vector<uint8_t> encode_gop_piece(uint32_t frames, std::span<const std::vector<uint8_t>> packets) {
  std::vector<uint8_t> out;
  size_t bytes = 8 + 4 * packets.size();
  for (const auto& p : packets) bytes += p.size();
  out.reserve(bytes);
  put_u32(out, frames);
  put_u32(out, static_cast<uint32_t>(packets.size()));
  for (const auto& p : packets) put_u32(out, static_cast<uint32_t>(p.size()));
  for (const auto& p : packets) out.insert(out.end(), p.begin(), p.end());
  return out;
}

fid::Result<GopPiece> parse_gop_piece(std::span<const uint8_t> piece) {
  if (piece.size() < 8) return bad_piece("shorter than its 8-byte head");
  GopPiece out;
  out.frames = get_u32(piece.data());
  const uint32_t packets = get_u32(piece.data() + 4);
  if (out.frames == 0 || out.frames > kMaxGopFrames)
    return bad_piece(std::to_string(out.frames) + " frames (1 to " + std::to_string(kMaxGopFrames) + ")");
  // A GOP codes each frame in at least one packet, and no frame in more than a few.
  if (packets == 0 || packets > 4 * kMaxGopFrames) return bad_piece(std::to_string(packets) + " packets");
  const uint64_t head = 8 + 4ull * packets;
  if (head > piece.size()) return bad_piece("its packet sizes run past its end");
  uint64_t pos = head;
  out.packets.reserve(packets);
  for (uint32_t i = 0; i < packets; ++i) {
    const uint32_t size = get_u32(piece.data() + 8 + 4 * i);
    if (size == 0) return bad_piece("packet " + std::to_string(i) + " is empty");
    if (size > piece.size() - pos) return bad_piece("packet " + std::to_string(i) + " runs past its end");
    out.packets.push_back(piece.subspan(pos, size));
    pos += size;
  }
  if (pos != piece.size()) return bad_piece(std::to_string(piece.size() - pos) + " bytes after its last packet");
  return out;
}

FrameSize scaled_frame_size(uint32_t width, uint32_t height, uint32_t short_side) {
  const uint32_t shorter = std::min(width, height), longer = std::max(width, height);
  if (short_side == 0 || short_side >= shorter || shorter == 0) return {width, height};
  const uint64_t scaled_long = std::max<uint64_t>(1, (uint64_t{longer} * short_side + shorter / 2) / shorter);
  const auto l = static_cast<uint32_t>(scaled_long);
  return width <= height ? FrameSize{short_side, l} : FrameSize{l, short_side};
}

fid::Status GopDecoder::decode(const StreamParams& stream, std::span<const uint8_t> gop, uint32_t short_side,
                               const GopFrameFn& on_frame) {
  fid::Result<GopPiece> piece = parse_gop_piece(gop);
  if (!piece) return std::move(piece).error();
  fid::Result<std::unique_ptr<GopSession>> session = open(stream, gop, short_side);
  if (!session) return std::move(session).error();
  return (*session)->decode_through(piece->frames - 1, on_frame);
}

}  // namespace fid::codec
