#include "codec/jpeg.h"
namespace fid::codec {
bool looks_like_jpeg(std::span<const uint8_t> d) { return d.size() >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF; }
TranscodeResult transcode_progressive(std::span<const uint8_t>) { return {false, "stub", {}}; }
bool decode_jpeg_strict(std::span<const uint8_t>, DecodedImage&, std::string&) { return true; }
}
