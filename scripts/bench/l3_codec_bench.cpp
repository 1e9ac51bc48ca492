// L3 codec benchmark: compressed size of each encoder choice relative to the source PNG, and
// single-thread decode throughput of L3 vs libspng on the same images.
//
//   l3_codec_bench [--max N] [--reps R] [--variants all|v2|default] [--seg K] [--no-speed] [--per-file]
//                  DIR_OR_PNG...
// (all: version 1's ablation; v2: version 2's tools added one by one; --per-file: each file's
// ratios, one line per file.)
//
// Built with the project (scripts/bench/CMakeLists.txt: build/scripts/bench/l3_codec_bench);
// with libpng found it also times libpng (simplified API, native format) on the same images.
// Every *.png found (recursively) is decoded with libspng; its own file size is the PNG
// reference (make the sources with zlib level 6, e.g. PIL's default compress_level=6).
// Prints one markdown table of total L3 bytes / total PNG bytes per variant (and the median
// per-image ratio), then decode MB/s (decoded pixel bytes per second of thread CPU time, best
// of R runs per image).
#include <spng.h>
#ifdef HAVE_LIBPNG
#include <png.h>
#endif

#include <algorithm>
#include <ctime>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "codec/image_io.h"
#include "scripts/bench/bench_util.h"
#include "codec/l3.h"

using namespace fid::codec;
namespace fs = std::filesystem;

namespace {

using fid::bench::read_file;
// Both decoders are timed in this thread's CPU time.
double now_s() { return fid::bench::thread_seconds(); }

struct Variant {
  std::string name;
  L3Options opt;
};

// Version 2's tools, one added per row on top of version 1's default (S=16).
std::vector<Variant> v2_ablation() {
  std::vector<Variant> v;
  L3Options o;
  o.version = 1;
  o.segment_log2 = 4;
  v.push_back({"v1 default (S=16)", o});
  o.version = 2;
  o.constant_patches = false;
  o.copy_runs = false;
  v.push_back({"v2, S=16, no tools (v1 + a patch header byte)", o});
  o.constant_patches = true;
  v.push_back({"+ constant patches", o});
  o.copy_runs = true;
  v.push_back({"+ copy runs", o});
  o.segment_log2 = 0;
  o.segment_mask = (1u << 3) | (1u << 4);
  v.push_back({"+ S per patch among 8/16", o});
  o.segment_mask = (1u << 3) | (1u << 4) | (1u << 5);
  v.push_back({"+ S per patch among 8/16/32 (v2 default)", o});
  return v;
}

std::vector<Variant> variants(bool all) {
  std::vector<Variant> v;
  L3Options d;  // the default
  if (all) {
    d.version = 1;  // the v1 ablation (rows 1-17 of docs/L3_FORMAT.md section 7)
    d.segment_log2 = 4;
    L3Options paper;  // closest to the published L3: Paeth over TL/T/TR, one (width, base) per row
    paper.predictor_mask = 1u << 4;
    paper.first_row_mask = 1u << 1;  // first row predicted by a constant (no DPCM)
    paper.segment_log2 = 6;
    paper.patch_size = 64;
    paper.cross_channel = false;
    paper.copy_rows = false;
    paper.entropy_codes = false;
    v.push_back({"1 paper-like: Paeth(TL,T,TR), 1 (width,base) per row (S=N=64), no 1st-row prediction", paper});
    L3Options t = paper;
    t.predictor_mask = 1u;
    v.push_back({"2 top predictor instead of Paeth", t});
    t.first_row_mask = 3;
    v.push_back({"3 + left-DPCM first row", t});
    t.predictor_mask = 0x3f;
    v.push_back({"4 + per-row choice of 6 predictors", t});
    t.cross_channel = true;
    v.push_back({"5 + cross-channel (first plane's residual added)", t});
    t.copy_rows = true;
    v.push_back({"6 + one-byte copy rows", t});
    t.segment_log2 = 5;
    v.push_back({"7 segments S=32", t});
    t.segment_log2 = 3;
    v.push_back({"8 segments S=8", t});
    t.segment_log2 = 4;
    v.push_back({"9 segments S=16", t});
    L3Options nb = t;
    nb.explicit_bases = false;
    v.push_back({"9b S=16 without explicit (circular) bases: implicit only", nb});
    t.entropy_codes = true;
    v.push_back({"10 + Huffman segment codes (N=64)", t});
    t.patch_size = 128;
    v.push_back({"11 N=128 (= default at >720p)", t});
    t.patch_size = 256;
    v.push_back({"12 N=256", t});
    t.patch_size = 32;
    v.push_back({"13 N=32", t});
    L3Options a = d;
    a.inter_patch_rows = true;
    v.push_back({"14 default + 1st row from the patch above (inter-patch dependency)", a});
    a = d;
    a.segment_log2 = 3;
    v.push_back({"15a default with S=8", a});
    a.segment_log2 = 0;
    v.push_back({"15b default + S chosen per image (8/16/32)", a});
    static const char* names[] = {"top", "diag", "smooth", "median", "paeth", "grad"};
    for (unsigned k = 0; k < 6; ++k) {
      L3Options p = d;
      p.predictor_mask = 0x3fu & ~(1u << k);
      v.push_back({std::string("16 default without ") + names[k], p});
    }
    L3Options tm = d;
    tm.predictor_mask = 1u | (1u << 3);
    v.push_back({"17 default with top+median only", tm});
    d = L3Options{};
  }
  v.push_back({"default (N by resolution, all tools on)", d});
  return v;
}

#ifdef HAVE_LIBPNG
bool libpng_decode(const std::vector<uint8_t>& png, std::vector<uint8_t>& out) {
  png_image im{};
  im.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&im, png.data(), png.size())) return false;
  // The file's own layout (gray/GA/RGB/RGBA; palette expanded like libspng's SPNG_FMT_PNG is not,
  // but the inflate + unfilter work, which dominates, is the same).
  im.format &= ~static_cast<png_uint_32>(PNG_FORMAT_FLAG_COLORMAP);
  out.resize(PNG_IMAGE_SIZE(im));
  bool ok = png_image_finish_read(&im, nullptr, out.data(), 0, nullptr) != 0;
  png_image_free(&im);
  return ok;
}
#endif

bool spng_decode(const std::vector<uint8_t>& png, std::vector<uint8_t>& out) {
  spng_ctx* ctx = spng_ctx_new(0);
  spng_set_png_buffer(ctx, png.data(), png.size());
  size_t n = 0;
  int rc = spng_decoded_image_size(ctx, SPNG_FMT_PNG, &n);
  if (rc == 0) {
    out.resize(n);
    rc = spng_decode_image(ctx, out.data(), n, SPNG_FMT_PNG, 0);
  }
  spng_ctx_free(ctx);
  return rc == 0;
}

struct Options {
  size_t max_files = 1000;
  int reps = 3;
  bool all = true, v2 = false, speed = true, per_file = false;
  int seg_override = -1;  // --seg K: segment_log2 of the "default" variant (0 = per image)
  std::vector<fs::path> files;
};

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--max" && i + 1 < argc) o.max_files = std::stoul(argv[++i]);
    else if (a == "--reps" && i + 1 < argc) o.reps = std::stoi(argv[++i]);
    else if (a == "--variants" && i + 1 < argc) {
      const std::string which = argv[++i];
      o.all = which == "all";
      o.v2 = which == "v2";
    }
    else if (a == "--per-file") o.per_file = true;
    else if (a == "--no-speed") o.speed = false;
    else if (a == "--seg" && i + 1 < argc) o.seg_override = std::stoi(argv[++i]);
    else if (fs::is_directory(a)) {
      std::vector<fs::path> found;
      for (auto& e : fs::recursive_directory_iterator(a))
        if (e.path().extension() == ".png") found.push_back(e.path());
      std::sort(found.begin(), found.end());
      o.files.insert(o.files.end(), found.begin(), found.end());
    } else {
      o.files.emplace_back(a);
    }
  }
  if (o.files.size() > o.max_files) o.files.resize(o.max_files);
  return o;
}

// The figures summed over the images.
struct Totals {
  std::vector<double> total;                 // L3 bytes, per variant
  std::vector<std::vector<double>> ratios;   // L3 bytes / PNG bytes, per variant, per image
  double png_total = 0, raw_total = 0;
  double spng_time = 0, l3_time = 0, libpng_time = 0, bytes_decoded = 0;
  size_t used = 0, lossless = 0;
};

// Encodes one image with every variant; def gets the last (default) variant's bytes.
bool encode_variants(const fs::path& f, const SourceImage& src, size_t png_size, const std::vector<Variant>& vs,
                     Totals& t, std::vector<uint8_t>& def) {
  for (size_t k = 0; k < vs.size(); ++k) {
    fid::Result<std::vector<uint8_t>> encoded = l3_encode(src.image, vs[k].opt);
    if (!encoded) {
      std::fprintf(stderr, "L3 encode failed on %s: %s\n", f.c_str(), encoded.error().message.c_str());
      return false;
    }
    std::vector<uint8_t> enc = std::move(encoded).value();
    t.total[k] += static_cast<double>(enc.size());
    t.ratios[k].push_back(static_cast<double>(enc.size()) / static_cast<double>(png_size));
    if (k + 1 == vs.size()) def = std::move(enc);
  }
  return true;
}

// Times L3 (the default variant's bytes), libspng and libpng on one image, and checks that L3
// gives back the source's pixels.
bool time_decoders(const fs::path& f, const std::vector<uint8_t>& png, const std::vector<uint8_t>& def,
                   const SourceImage& src, int reps, Totals& t) {
  std::vector<uint8_t> out(src.image.byte_size()), sp;
  double best_l3 = 1e9, best_sp = 1e9;
  // Each decoder runs its repetitions back to back; the best time is kept (the machine
  // may be shared, the minimum is the least disturbed run).
  for (int r = 0; r < reps; ++r) {
    double t0 = now_s();
    if (fid::Status decoded_l3 = l3_decode_into(def, out); !decoded_l3) {
      std::fprintf(stderr, "L3 decode failed on %s: %s\n", f.c_str(), decoded_l3.error().message.c_str());
      return false;
    }
    best_l3 = std::min(best_l3, now_s() - t0);
  }
  for (int r = 0; r < reps; ++r) {
    double t0 = now_s();
    if (!spng_decode(png, sp)) return false;
    best_sp = std::min(best_sp, now_s() - t0);
  }
#ifdef HAVE_LIBPNG
  double best_lp = 1e9;
  for (int r = 0; r < reps; ++r) {
    double t0 = now_s();
    if (!libpng_decode(png, sp)) return false;
    best_lp = std::min(best_lp, now_s() - t0);
  }
  t.libpng_time += best_lp;
#endif
  if (out != src.image.pixels) {
    std::fprintf(stderr, "L3 mismatch on %s\n", f.c_str());
    return false;
  }
  ++t.lossless;
  t.l3_time += best_l3;
  t.spng_time += best_sp;
  t.bytes_decoded += static_cast<double>(out.size());
  return true;
}

// One image: its sizes under every variant, its decode times, the progress line; false on a
// failure (a PNG that does not decode is skipped, not a failure).
bool measure(const fs::path& f, const Options& o, const std::vector<Variant>& vs, Totals& t) {
  auto png = read_file(f);
  fid::Result<SourceImage> decoded = decode_png(png);
  if (!decoded) {
    std::fprintf(stderr, "skip %s: %s\n", f.c_str(), decoded.error().message.c_str());
    return true;
  }
  const SourceImage& src = *decoded;
  ++t.used;
  t.png_total += static_cast<double>(png.size());
  t.raw_total += static_cast<double>(src.image.byte_size());
  std::vector<uint8_t> def;
  if (!encode_variants(f, src, png.size(), vs, t, def)) return false;
  if (o.speed && !time_decoders(f, png, def, src, o.reps, t)) return false;
  if (o.per_file) {
    std::printf("%s %ux%ux%u PNG %zu", f.filename().c_str(), src.image.width, src.image.height,
                unsigned{src.image.channels}, png.size());
    for (size_t k = 0; k < vs.size(); ++k) std::printf(" %.3f", t.ratios[k].back());
    std::printf("\n");
    std::fflush(stdout);
  }
  std::fprintf(stderr, "\r%zu/%zu", t.used, o.files.size());
  return true;
}

void report(const Options& o, const std::vector<Variant>& vs, const Totals& t) {
  std::printf("%zu images, %.1f MB raw, PNG total %.1f MB (PNG/raw %.3f)\n\n", t.used, t.raw_total / 1e6,
              t.png_total / 1e6, t.png_total / t.raw_total);
  std::printf("| variant | L3 bytes / PNG bytes (total) | median per image | L3 / raw |\n");
  std::printf("| --- | --- | --- | --- |\n");
  for (size_t k = 0; k < vs.size(); ++k) {
    auto r = t.ratios[k];
    std::sort(r.begin(), r.end());
    std::printf("| %s | %.3f | %.3f | %.3f |\n", vs[k].name.c_str(), t.total[k] / t.png_total,
                r.empty() ? 0.0 : r[r.size() / 2], t.total[k] / t.raw_total);
  }
  const double bytes = t.bytes_decoded;
  if (o.speed && t.l3_time > 0) {
    std::printf("\nsingle-thread decode, best of %d: L3 %.0f MB/s, libspng %.0f MB/s, ratio %.2fx\n",
                o.reps, bytes / t.l3_time / 1e6, bytes / t.spng_time / 1e6, t.spng_time / t.l3_time);
    if (t.libpng_time > 0)
      std::printf("single-thread decode, best of %d: libpng %.0f MB/s (L3 %.2fx libpng)\n", o.reps,
                  bytes / t.libpng_time / 1e6, t.libpng_time / t.l3_time);
  }
  // One line for scripts (scripts/bench/l3.sh): the last variant (the default) and the speeds.
  auto last = t.ratios.back();
  std::sort(last.begin(), last.end());
  std::printf("\nsummary files=%zu png_bytes=%.0f l3_bytes=%.0f median=%.4f l3_mbs=%.1f spng_mbs=%.1f "
              "libpng_mbs=%.1f lossless=%zu\n",
              t.used, t.png_total, t.total.back(), last.empty() ? 0.0 : last[last.size() / 2],
              t.l3_time > 0 ? bytes / t.l3_time / 1e6 : 0.0, t.spng_time > 0 ? bytes / t.spng_time / 1e6 : 0.0,
              t.libpng_time > 0 ? bytes / t.libpng_time / 1e6 : 0.0, t.lossless);
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse_options(argc, argv);
  if (o.files.empty()) {
    std::fprintf(stderr, "usage: l3_codec_bench [--max N] [--reps R] [--variants all|default] DIR...\n");
    return 2;
  }
  auto vs = o.v2 ? v2_ablation() : variants(o.all);
  if (o.seg_override >= 0) {
    vs.back().opt.segment_log2 = static_cast<uint8_t>(o.seg_override);
    vs.back().name = "default with segment_log2=" + std::to_string(o.seg_override);
  }
  Totals t;
  t.total.assign(vs.size(), 0);
  t.ratios.resize(vs.size());
  for (auto& f : o.files) {
    if (!measure(f, o, vs, t)) return 1;
  }
  std::fprintf(stderr, "\n");
  report(o, vs, t);
  return 0;
}
