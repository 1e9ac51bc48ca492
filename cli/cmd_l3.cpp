// fidelityfs l3 encode IN OUT / fidelityfs l3 decode IN OUT: the L3 codec on single files.
// encode writes an L3 payload (docs/FORMAT.md, "L3 payload": PIL mode + palette + L3 bitstream);
// decode reads a payload or a bare L3 bitstream and writes a view chosen by OUT's extension.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <iterator>

#include "cli/commands.h"
#include "common/error.h"
#include "common/posix_io.h"
#include "codec/image_io.h"
#include "codec/l3.h"
#include "codec/l3_view.h"

namespace fid::cli {

namespace {

Result<std::vector<uint8_t>> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{errno, fmt::format("{}: cannot open: {}", path, std::strerror(errno))};
  std::vector<uint8_t> bytes(std::istreambuf_iterator<char>(in), {});
  if (in.bad()) return Error{EIO, fmt::format("{}: read failed", path)};
  return bytes;
}

std::string extension(const std::string& path) {
  std::string e = std::filesystem::path(path).extension().string();
  for (char& c : e) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return e;
}

int run_encode(const std::string& in, const std::string& out) {
  Result<std::vector<uint8_t>> read = read_file(in);
  if (!read) {
    fmt::print(stderr, "fidelityfs l3 encode: {}\n", read.error().message);
    return kExitRuntime;
  }
  const std::vector<uint8_t>& bytes = *read;
  fid::Result<codec::SourceImage> decoded = codec::decode_image(bytes);
  if (!decoded) {
    fmt::print(stderr, "fidelityfs l3 encode: {}: not an image L3 can store: {}\n", in, decoded.error().message);
    return kExitRuntime;
  }
  const codec::SourceImage& img = *decoded;
  fid::Result<std::vector<uint8_t>> encoded = codec::encode_l3_payload(img);
  if (!encoded) {
    fmt::print(stderr, "fidelityfs l3 encode: {}: {}\n", in, encoded.error().message);
    return kExitRuntime;
  }
  const std::vector<uint8_t>& payload = *encoded;
  if (Status written = write_file_atomically(out, payload, 0644); !written) {
    fmt::print(stderr, "fidelityfs l3 encode: {}\n", written.error().message);
    return kExitRuntime;
  }
  fmt::print("{}: {}x{} {} -> {} bytes ({:.3f} of the source, {:.3f} of raw)\n", out, img.image.width,
             img.image.height, img.pil_mode, payload.size(),
             bytes.empty() ? 0.0 : static_cast<double>(payload.size()) / static_cast<double>(bytes.size()),
             static_cast<double>(payload.size()) / static_cast<double>(std::max<size_t>(1, img.image.byte_size())));
  return kExitOk;
}

int run_decode(const std::string& in, const std::string& out) {
  const std::string ext = extension(out);
  if (ext != ".png" && ext != ".ppm" && ext != ".pgm" && ext != ".pam" && ext != ".npy") {
    fmt::print(stderr, "fidelityfs l3 decode: {}: unknown output extension '{}' (expected .png, .ppm, .pgm, .pam or .npy)\n",
               out, ext);
    return kExitUsage;
  }
  Result<std::vector<uint8_t>> read = read_file(in);
  if (!read) {
    fmt::print(stderr, "fidelityfs l3 decode: {}\n", read.error().message);
    return kExitRuntime;
  }
  const std::vector<uint8_t>& bytes = *read;
  codec::L3Payload p;
  if (codec::looks_like_l3(bytes)) {  // a bare bitstream: the mode follows from the channels
    fid::Result<codec::L3Info> info = codec::l3_probe(bytes);
    if (!info) {
      fmt::print(stderr, "fidelityfs l3 decode: {}: {}\n", in, info.error().message);
      return kExitRuntime;
    }
    static const codec::PilMode modes[5] = {codec::PilMode::L, codec::PilMode::L, codec::PilMode::LA,
                                            codec::PilMode::RGB, codec::PilMode::RGBA};
    p.shape = codec::L3Shape{info->width, info->height, modes[info->channels % 5], 0, 0};
    p.l3 = bytes;
  } else if (fid::Result<codec::L3Payload> parsed = codec::parse_l3_payload(bytes); parsed) {
    p = *parsed;
  } else {
    fmt::print(stderr, "fidelityfs l3 decode: {}: {}\n", in, parsed.error().message);
    return kExitRuntime;
  }
  const uint8_t ch = p.shape.channels();
  std::vector<uint8_t> view;
  if (ext == ".pam" || (ext == ".ppm" && ch != 3) || (ext == ".pgm" && ch != 1)) {
    if (ext != ".pam") {
      fmt::print(stderr, "fidelityfs l3 decode: {}: a {} image has {} channel(s); use {} (or .pam, .npy, .png)\n", out,
                 codec::pil_mode_name(p.shape.mode), ch, ch == 1 ? ".pgm" : ch == 3 ? ".ppm" : ".pam");
      return kExitUsage;
    }
    static const char* tuple[5] = {"", "GRAYSCALE", "GRAYSCALE_ALPHA", "RGB", "RGB_ALPHA"};
    std::string h = fmt::format("P7\nWIDTH {}\nHEIGHT {}\nDEPTH {}\nMAXVAL 255\nTUPLTYPE {}\nENDHDR\n", p.shape.width,
                                p.shape.height, ch, tuple[ch]);
    view.assign(h.begin(), h.end());
    view.resize(h.size() + size_t{p.shape.width} * p.shape.height * ch);
    if (fid::Status decoded = codec::l3_decode_into(p.l3, std::span<uint8_t>(view).subspan(h.size())); !decoded) {
      fmt::print(stderr, "fidelityfs l3 decode: {}: {}\n", in, decoded.error().message);
      return kExitRuntime;
    }
  } else {
    codec::ViewFormat f = ext == ".png" ? codec::ViewFormat::png : ext == ".npy" ? codec::ViewFormat::npy
                                                                                 : codec::ViewFormat::ppm;
    view.resize(codec::l3_view_size(p.shape, f));
    if (fid::Status rendered = codec::render_l3_view(p, f, view); !rendered) {
      fmt::print(stderr, "fidelityfs l3 decode: {}: {}\n", in, rendered.error().message);
      return kExitRuntime;
    }
  }
  if (Status written = write_file_atomically(out, view, 0644); !written) {
    fmt::print(stderr, "fidelityfs l3 decode: {}\n", written.error().message);
    return kExitRuntime;
  }
  return kExitOk;
}

}  // namespace

void register_l3(CLI::App& app, int& exit_code) {
  auto* l3 = app.add_subcommand("l3", "Encode or decode single files with the L3 lossless codec");
  l3->require_subcommand(1);
  auto in = std::make_shared<std::string>(), out = std::make_shared<std::string>();
  auto* enc = l3->add_subcommand("encode", "IN (PNG/PPM/PGM/BMP) -> OUT: an L3 payload (PIL mode, palette, L3 bitstream)");
  enc->add_option("IN", *in, "source image")->required();
  enc->add_option("OUT", *out, "output file (.l3)")->required();
  enc->callback([in, out, &exit_code] { exit_code = run_encode(*in, *out); });
  auto* dec = l3->add_subcommand("decode", "IN (L3 payload or bitstream) -> OUT: .png/.ppm/.pgm/.pam/.npy by extension");
  auto in2 = std::make_shared<std::string>(), out2 = std::make_shared<std::string>();
  dec->add_option("IN", *in2, "L3 file")->required();
  dec->add_option("OUT", *out2, "output file")->required();
  dec->callback([in2, out2, &exit_code] { exit_code = run_decode(*in2, *out2); });
}

}  // namespace fid::cli
