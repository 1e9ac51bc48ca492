// Sequential levels: what re-encoding a progressive level as one sequential scan costs, what it
// weighs, and how fast each form decodes, on the same JPEGs in one run.
//
//   sequential_bench [--max N] [--level K] [--levels pcr|fast] [--runs R] [--threads T] DIR...
//
// Every *.jpg / *.jpeg under DIR (sorted, the first N, default 1000) is transcoded as `pack`
// does (codec::transcode_progressive, not timed) and cut at level K (default 5). Then, on one
// thread, thread CPU time per image, the median of R runs (default 3) for each image, a full
// decode (libjpeg-turbo, default settings, as codec::decode_jpeg_strict does) of the source, the
// progressive level and the level re-encoded sequential (codec::sequential_from_progressive) with
// the standard Huffman tables and with optimized ones: images/s and the ratio to the source; the
// bytes of each form (sums, and the ratio to the sources). Last, the re-encoding of every image
// with each kind of tables, wall time, by one thread and by T threads (default: the cores):
// images/s, ms per image and the ratio.
//
// Built with the project: build/scripts/bench/sequential_bench.
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "codec/jpeg.h"
#include "scripts/bench/bench_util.h"

using namespace fid::codec;
namespace fs = std::filesystem;

namespace {

using fid::bench::read_file;
using fid::bench::thread_seconds;

template <class F>
double median_seconds(int runs, F&& f) {
  std::vector<double> t;
  for (int r = 0; r < runs; ++r) {
    const double s = thread_seconds();
    f();
    t.push_back(thread_seconds() - s);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}


struct Options {
  size_t max = 1000;
  int level = 5;
  LevelScripts scripts = LevelScripts::pcr;
  int runs = 3;
  unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<fs::path> dirs;
};

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--max" && has_value) o.max = std::stoul(argv[++i]);
    else if (a == "--level" && has_value) o.level = std::stoi(argv[++i]);
    else if (a == "--levels" && has_value) o.scripts = std::string(argv[++i]) == "fast" ? LevelScripts::fast : LevelScripts::pcr;
    else if (a == "--runs" && has_value) o.runs = std::max(1, std::stoi(argv[++i]));
    else if (a == "--threads" && has_value) o.threads = std::max(1, std::stoi(argv[++i]));
    else if (!a.starts_with("--")) o.dirs.emplace_back(a);
    else return false;
  }
  return !o.dirs.empty() && o.level >= 1 && o.level <= kJpegLevels;
}

std::vector<fs::path> jpegs_under(const std::vector<fs::path>& dirs, size_t max) {
  std::vector<fs::path> out;
  for (const fs::path& d : dirs) {
    for (const auto& e : fs::recursive_directory_iterator(d)) {
      std::string ext = e.path().extension().string();
      std::transform(ext.begin(), ext.end(), ext.begin(), ::tolower);
      if (e.is_regular_file() && (ext == ".jpg" || ext == ".jpeg")) out.push_back(e.path());
    }
  }
  std::sort(out.begin(), out.end());
  if (out.size() > max) out.resize(max);
  return out;
}

struct Image {
  std::vector<uint8_t> source, level, standard, optimized;
};

double decode_rate(const std::vector<Image>& images, std::vector<uint8_t> Image::*form, int runs) {
  double total = 0;
  for (const Image& im : images) total += median_seconds(runs, [&] { (void)decode_jpeg_strict(im.*form); });
  return double(images.size()) / total;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) {
    std::fprintf(stderr, "usage: sequential_bench [--max N] [--level K] [--levels pcr|fast] [--runs R] [--threads T] DIR...\n");
    return 2;
  }
  std::vector<Image> images;
  for (const fs::path& p : jpegs_under(o.dirs, o.max)) {
    Image im;
    im.source = read_file(p);
    fid::Result<ProgressiveJpeg> pj = transcode_progressive(im.source, o.scripts);
    if (!pj) continue;  // pack stores such a file as it is: not a level
    im.level.assign(pj->bytes.begin(), pj->bytes.begin() + pj->piece_end[o.level]);
    im.level.insert(im.level.end(), kEoi.begin(), kEoi.end());
    images.push_back(std::move(im));
  }
  if (images.empty()) {
    std::fprintf(stderr, "sequential_bench: no JPEG that transcodes\n");
    return 1;
  }
  for (Image& im : images) {
    im.standard = *sequential_from_progressive(im.level, HuffmanTables::standard);
    im.optimized = *sequential_from_progressive(im.level, HuffmanTables::optimized);
  }
  auto bytes = [&](std::vector<uint8_t> Image::*form) {
    double s = 0;
    for (const Image& im : images) s += double((im.*form).size());
    return s;
  };
  std::printf("%zu JPEGs, level %d of `--levels %s`, decodes: medians of %d runs, one thread\n\n", images.size(),
              o.level, o.scripts == LevelScripts::fast ? "fast" : "pcr", o.runs);
  const double src_bytes = bytes(&Image::source);
  const double src_rate = decode_rate(images, &Image::source, o.runs);
  std::printf("| form | KB/image | bytes vs source | libjpeg-turbo decode images/s | vs source |\n");
  std::printf("| --- | ---: | ---: | ---: | ---: |\n");
  const std::pair<const char*, std::vector<uint8_t> Image::*> forms[] = {
      {"source", &Image::source},
      {"progressive level", &Image::level},
      {"sequential, standard tables", &Image::standard},
      {"sequential, optimized tables", &Image::optimized}};
  for (const auto& [name, form] : forms) {
    const double rate = form == &Image::source ? src_rate : decode_rate(images, form, o.runs);
    std::printf("| %s | %.1f | %.3f | %.0f | %.2fx |\n", name, bytes(form) / 1e3 / double(images.size()),
                bytes(form) / src_bytes, rate, rate / src_rate);
  }

  // Wall time of every re-encoding on `threads` threads.
  auto pool_rate = [&](unsigned threads, HuffmanTables tables) {
    std::atomic<size_t> next{0};
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t)
      pool.emplace_back([&] {
        for (size_t i; (i = next.fetch_add(1)) < images.size();) (void)sequential_from_progressive(images[i].level, tables);
      });
    for (auto& t : pool) t.join();
    return double(images.size()) / std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  std::printf("\n| re-encoding, wall time | 1 thread images/s | %u threads images/s | ratio |\n| --- | ---: | ---: | ---: |\n",
              o.threads);
  for (HuffmanTables tables : {HuffmanTables::standard, HuffmanTables::optimized}) {
    const double one = pool_rate(1, tables), many = pool_rate(o.threads, tables);
    std::printf("| %s tables | %.0f (%.3f ms/image) | %.0f | %.2fx |\n",
                tables == HuffmanTables::standard ? "standard" : "optimized", one, 1e3 / one, many, many / one);
  }
  return 0;
}
