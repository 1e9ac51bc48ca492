// What every use of libjpeg in codec/ shares: the error manager that turns libjpeg's errors and
// warnings into a longjmp with the message, the scan-count guard, a destination that writes into
// a growing std::vector, markers kept, and optimal Huffman tables. Internal to codec/.
#pragma once

#include <csetjmp>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/error.h"

extern "C" {
#include <jerror.h>
#include <jpeglib.h>
}

namespace fid::codec::libjpeg {

// libjpeg may allocate at most this much for its virtual (whole-image) arrays: the DCT
// coefficients of the source. Larger images fail with a clear error instead of exhausting
// memory (about 350 megapixels at 4:2:0, 170 at 4:4:4).
inline constexpr long kMaxCoefficientMemory = 1L << 30;
// A source with more scans than this is refused (a known way to make decoders spin).
inline constexpr int kMaxSourceScans = 500;

// Errors and warnings both become a longjmp to `jump` with the formatted message.
struct ErrorMgr {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX + 96];
  int code;  // errno of the failure: ENOMEM when libjpeg ran out of memory, else EINVAL
};
void init_error_mgr(ErrorMgr& e);
// The failure an error manager recorded, as an Error.
fid::Error failure(const ErrorMgr& e);
// Progress monitor of every decompressor: refuses more than kMaxSourceScans scans.
void on_progress(j_common_ptr c);

// Destination manager writing into a std::vector that grows geometrically.
struct VectorDest {
  jpeg_destination_mgr pub;
  std::vector<uint8_t>* out;
  size_t initial;
};
// Points `c` at `dest`, which writes into `out`, starting with `initial` bytes.
void write_into(j_compress_ptr c, VectorDest& dest, std::vector<uint8_t>& out, size_t initial);
bool resize_nothrow(std::vector<uint8_t>& v, size_t n) noexcept;

// Saves every APPn and COM marker of a source, and writes them to a destination after
// jpeg_write_coefficients, without the JFIF/Adobe marker libjpeg already wrote itself.
void save_markers(j_decompress_ptr src);
void copy_markers(j_decompress_ptr src, j_compress_ptr dst);

// Gives `dst` (after jpeg_copy_critical_parameters) the Huffman tables that code `blocks`, the
// coefficients of `src`'s components, in the fewest bits: what optimize_coding gives, but counted
// in one quick pass (huffman_tables.cpp), so that the write is a single pass. `interleaved`: dst
// codes every component in one scan, else one scan per component; dst's restart_interval is
// counted.
void set_optimal_tables(j_decompress_ptr src, jvirt_barray_ptr* blocks, j_compress_ptr dst, bool interleaved);

// Whether every DC difference a sequential encode of `blocks` codes fits an 8-bit JPEG's 11 bits,
// the prediction starting again at every `restart_interval` MCUs (0: never).
bool dc_differences_fit(j_decompress_ptr src, jvirt_barray_ptr* blocks, bool interleaved, unsigned restart_interval);
// The longest restart interval (in MCUs) at which every DC difference fits, where they do not all
// fit without one: the MCUs whose first block's difference does not fit are all restarts, whose
// prediction starts at 0. 0 where they fit without one, or where no interval makes them fit.
unsigned restart_interval_for_dc(j_decompress_ptr src, jvirt_barray_ptr* blocks, bool interleaved);
inline constexpr unsigned kMaxRestartInterval = 65535;  // DRI's 16 bits

}  // namespace fid::codec::libjpeg
