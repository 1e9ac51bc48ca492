// GPU L3 decode benchmark, same images, same run:
//   * libspng decoding the source PNGs, one core;
//   * the CPU L3 decoder, one core;
//   * the CUDA block decoder: kernel only (CUDA events) and end to end (compressed bytes in,
//     decoded pixels in pinned host memory, through L3BatchDecoder with every stream busy).
// Without a CUDA device (or a build without CUDA) the GPU rows say "no GPU" and the rest runs.
//
//   gpu_bench [--batch B] [--seconds S] DIR_OR_PNG...
//
// Prints one line per decoder: images/s, GB/s of decoded output, and the ratio to libspng.
#include <spng.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "codec/image_io.h"
#include "codec/l3.h"
#include "codec/l3_batch.h"
#include "cuda/gpu.h"
#include "scripts/bench/bench_util.h"

using namespace fid;
namespace fsys = std::filesystem;

namespace {

using bench::read_file;

double wall() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct Image {
  std::vector<uint8_t> png, l3;
  size_t raw = 0;
};

struct Rate {
  double images_per_s = 0, gb_per_s = 0;
};

// Runs `once` (which decodes every image once) until `seconds` pass; the median of the rounds.
template <class F>
Rate measure(const std::vector<Image>& ims, double seconds, F once) {
  size_t raw = 0;
  for (const auto& im : ims) raw += im.raw;
  std::vector<double> rounds;
  const double until = wall() + seconds;
  do {
    double t0 = wall();
    once();
    rounds.push_back(wall() - t0);
  } while (wall() < until || rounds.size() < 3);
  std::sort(rounds.begin(), rounds.end());
  double t = rounds[rounds.size() / 2];
  return {static_cast<double>(ims.size()) / t, static_cast<double>(raw) / t / 1e9};
}

bool spng_decode(const std::vector<uint8_t>& png, std::vector<uint8_t>& out) {
  spng_ctx* ctx = spng_ctx_new(0);
  if (!ctx) return false;
  spng_set_png_buffer(ctx, png.data(), png.size());
  spng_ihdr ihdr{};
  size_t n = 0;
  bool ok = spng_get_ihdr(ctx, &ihdr) == 0;
  int fmt = SPNG_FMT_PNG;  // native layout, like the L3 output
  ok = ok && spng_decoded_image_size(ctx, fmt, &n) == 0;
  if (ok) {
    out.resize(n);
    ok = spng_decode_image(ctx, out.data(), n, fmt, 0) == 0;
  }
  spng_ctx_free(ctx);
  return ok;
}

void print(const char* name, const Rate& r, double spng_ips) {
  std::printf("%-44s %9.1f images/s %8.3f GB/s %8.2fx libspng\n", name, r.images_per_s, r.gb_per_s,
              spng_ips > 0 ? r.images_per_s / spng_ips : 0.0);
}

struct Args {
  unsigned batch = 64;
  double seconds = 3;
  std::vector<fsys::path> pngs;  // the files named, and the *.png under the directories named, sorted
};

Args parse_args(int argc, char** argv) {
  Args a;
  std::vector<fsys::path> inputs;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--batch" && i + 1 < argc) a.batch = static_cast<unsigned>(std::stoul(argv[++i]));
    else if (arg == "--seconds" && i + 1 < argc) a.seconds = std::stod(argv[++i]);
    else inputs.emplace_back(arg);
  }
  for (const auto& in : inputs) {
    if (fsys::is_directory(in)) {
      for (const auto& e : fsys::recursive_directory_iterator(in))
        if (e.path().extension() == ".png") a.pngs.push_back(e.path());
    } else {
      a.pngs.push_back(in);
    }
  }
  std::sort(a.pngs.begin(), a.pngs.end());
  return a;
}

// Each PNG and its L3 encoding; false (after a message) when one does not decode or encode.
bool load_images(const std::vector<fsys::path>& pngs, std::vector<Image>& ims) {
  for (const auto& p : pngs) {
    Image im;
    im.png = read_file(p);
    fid::Result<codec::SourceImage> src = codec::decode_image(im.png);
    if (!src) {
      std::fprintf(stderr, "%s: %s\n", p.c_str(), src.error().message.c_str());
      return false;
    }
    fid::Result<std::vector<uint8_t>> encoded = codec::l3_encode(src->image);
    if (!encoded) {
      std::fprintf(stderr, "%s: %s\n", p.c_str(), encoded.error().message.c_str());
      return false;
    }
    im.l3 = std::move(encoded).value();
    im.raw = src->image.pixels.size();
    ims.push_back(std::move(im));
  }
  return true;
}

// Decodes every job once, in batches, one feeder thread per stream of dec; bad is set on a failure.
void decode_all(codec::L3BatchDecoder& dec, std::vector<codec::L3Job>& jobs, unsigned batch, std::atomic<bool>& bad) {
  std::atomic<size_t> next{0};
  std::vector<std::thread> feeders;
  for (unsigned t = 0; t < dec.concurrency(); ++t)
    feeders.emplace_back([&] {
      std::vector<codec::L3Job*> b;
      for (;;) {
        size_t i0 = next.fetch_add(batch);
        if (i0 >= jobs.size()) return;
        b.clear();
        for (size_t i = i0; i < std::min(jobs.size(), i0 + batch); ++i) b.push_back(&jobs[i]);
        const Status decoded = dec.decode(b);
        for (auto* j : b) bad = bad || !decoded || !j->ok;
      }
    });
  for (auto& f : feeders) f.join();
}

// Whether the GPU's pixels are the CPU decoder's, bit for bit (the first that is not is printed).
bool matches_cpu(const std::vector<Image>& ims, const std::vector<codec::L3Job>& jobs,
                 const std::vector<fsys::path>& pngs, std::vector<uint8_t>& buf) {
  for (size_t i = 0; i < ims.size(); ++i) {
    buf.resize(ims[i].raw);
    if (!jobs[i].ok || !codec::l3_decode_into(ims[i].l3, buf) ||
        std::memcmp(buf.data(), jobs[i].pixels.data(), buf.size()) != 0) {
      std::printf("MISMATCH: the GPU decoder differs from the CPU decoder on %s\n", pngs[i].c_str());
      return false;
    }
  }
  return true;
}

// The GPU rows (or "no GPU"); the exit status.
int gpu_rows(const Args& a, const std::vector<Image>& ims, double spng_ips, std::vector<uint8_t>& buf) {
  gpu::DecoderOptions opt;
  size_t raw_total = 0;
  for (const auto& im : ims) raw_total += im.raw;
  opt.memory_bytes = 2 * (raw_total + (size_t{64} << 20));  // half of it: every view pinned
  auto made = gpu::make_gpu_decoder(opt);
  if (!made) {
    const std::string& why = made.error().message;
    std::printf("%-44s no GPU: %s\n", "L3 GPU, kernel only", why.c_str());
    std::printf("%-44s no GPU: %s\n", "L3 GPU, end to end (pinned host output)", why.c_str());
    return 0;
  }
  std::unique_ptr<codec::L3BatchDecoder> dec = std::move(made).value();
  std::printf("device: %s\n", dec->description().c_str());
  // Views in pinned memory, as the mount has them; jobs in batches, one feeder thread per stream.
  std::vector<std::shared_ptr<codec::HostBuffer>> views;
  std::vector<codec::L3Job> jobs(ims.size());
  for (size_t i = 0; i < ims.size(); ++i) {
    views.push_back(dec->allocate(ims[i].raw));
    jobs[i].l3 = ims[i].l3;
    jobs[i].pixels = views.back()->span();
  }
  std::atomic<bool> bad{false};
  decode_all(*dec, jobs, a.batch, bad);  // warm up: device buffers, module load
  if (!matches_cpu(ims, jobs, a.pngs, buf)) return 1;
  const double k0 = dec->stats().kernel_seconds;
  size_t passes = 0;
  Rate e2e = measure(ims, a.seconds, [&] {
    decode_all(*dec, jobs, a.batch, bad);
    ++passes;
  });
  const double kernel_s = (dec->stats().kernel_seconds - k0) / static_cast<double>(passes);
  Rate kernel{static_cast<double>(ims.size()) / kernel_s, static_cast<double>(raw_total) / kernel_s / 1e9};
  print("L3 GPU, kernel only", kernel, spng_ips);
  print("L3 GPU, end to end (pinned host output)", e2e, spng_ips);
  if (bad) std::printf("ERRORS: some GPU decodes failed\n");
  std::printf("bit-exact vs the CPU decoder: %zu/%zu images\n", ims.size(), ims.size());
  return bad ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse_args(argc, argv);
  if (a.pngs.empty()) {
    std::fprintf(stderr, "usage: gpu_bench [--batch B] [--seconds S] DIR_OR_PNG...\n");
    return 2;
  }
  std::vector<Image> ims;
  if (!load_images(a.pngs, ims)) return 1;
  std::printf("GPU L3 benchmark: %zu PNGs (%s ...), batches of %u, %.0f s per decoder, median round\n", ims.size(),
              a.pngs[0].filename().c_str(), a.batch, a.seconds);

  std::vector<uint8_t> buf;
  Rate spng = measure(ims, a.seconds, [&] {
    for (const auto& im : ims)
      if (!spng_decode(im.png, buf)) std::abort();
  });
  print("libspng, 1 core", spng, spng.images_per_s);

  Rate cpu = measure(ims, a.seconds, [&] {
    for (const auto& im : ims) {
      buf.resize(im.raw);
      if (!codec::l3_decode_into(im.l3, buf)) std::abort();
    }
  });
  print("L3 CPU decoder, 1 core", cpu, spng.images_per_s);
  return gpu_rows(a, ims, spng.images_per_s, buf);
}
