// Plans for the L3 block decoder and their CPU emulation. See codec/l3_block_plan.h.
#include "codec/l3_block_plan.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

namespace fid::codec {
namespace {

uint32_t get_u32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

// The emulated thread block: a barrier is the end of a phase, so running each phase to
// completion, thread after thread, is one legal GPU schedule; the reverse order is another.
struct EmuBlock {
  unsigned threads;
  bool reverse;

  template <class F>
  void single(F&& f) {
    f();
  }
  template <class F>
  void all(F&& f) {
    for (unsigned i = 0; i < threads; ++i) f(reverse ? threads - 1 - i : i, threads);
  }
};

}  // namespace

void L3BatchPlan::clear() {
  tasks.clear();
  tables.clear();
}

fid::Result<L3Info> l3_plan_image(std::span<const uint8_t> data, uint64_t in_base, uint64_t out_base,
                                  uint32_t out_pitch, uint32_t image, L3BatchPlan& plan) {
  fid::Result<L3Info> probed = l3_probe(data);
  if (!probed) return probed;
  const L3Info& in = *probed;
  if (in.flags & kL3FlagInterPatch) return fid::Error{EINVAL, "L3: INTER_PATCH images are not block-decodable"};
  const uint64_t row_bytes = uint64_t{in.width} * in.channels;  // <= 2^26
  if (out_pitch != 0 && out_pitch < row_bytes)
    return fid::Error{EINVAL, "L3: output pitch below the image's row size"};
  const uint32_t pitch = out_pitch ? out_pitch : static_cast<uint32_t>(row_bytes);
  const bool huff = (in.flags & kL3FlagHuffCodes) != 0;
  uint32_t huff_index = l3k::kNoHuff;
  if (huff) {
    huff_index = static_cast<uint32_t>(plan.tables.size());
    const uint8_t* nibbles = data.data() + kL3HeaderBytes;  // 16 contexts x 8 bytes
    for (unsigned c = 0; c < 16; ++c) {
      uint8_t lens[16];
      for (unsigned s = 0; s < 16; ++s) lens[s] = static_cast<uint8_t>(l3k::nibble(nibbles + 8 * c, s));
      l3k::HuffTable t;
      l3k::build_table(lens, &t);  // validated by l3_probe
      plan.tables.push_back(t);
    }
  }
  const uint8_t* offsets = data.data() + kL3HeaderBytes + (huff ? kL3CodeTableBytes : 0);
  const uint32_t N = in.patch_size;
  const size_t P = in.patches();
  plan.tasks.reserve(plan.tasks.size() + P);
  for (size_t i = 0; i < P; ++i) {
    const uint32_t px = static_cast<uint32_t>(i % in.patches_x), py = static_cast<uint32_t>(i / in.patches_x);
    const uint32_t x0 = px * N, y0 = py * N;
    const uint32_t begin = get_u32(offsets + 4 * i);
    const uint64_t end = i + 1 < P ? get_u32(offsets + 4 * (i + 1)) : in.data_bytes;
    l3k::PatchTask t{};
    t.in_offset = in_base + in.header_bytes + begin;
    t.out_offset = out_base + uint64_t{y0} * pitch + uint64_t{x0} * in.channels;
    t.in_size = static_cast<uint32_t>(end - begin);  // l3_probe: begin <= end <= D < 2^32
    t.image = image;
    t.pw = std::min(N, in.width - x0);
    t.ph = std::min(N, in.height - y0);
    t.out_pitch = pitch;
    t.huff = huff_index;
    t.channels = in.channels;
    t.seg_log2 = in.segment_log2;  // 0 in version 2
    t.version = in.version;
    plan.tasks.push_back(t);
  }
  return probed;
}

void l3_run_tasks_emulated(const l3k::PatchTask* tasks, size_t count, const uint8_t* in, const l3k::HuffTable* tables,
                           uint8_t* out, int* status, unsigned block_threads, bool reverse_threads) {
  EmuBlock b{std::max(block_threads, 1u), reverse_threads};
  auto sh = std::make_unique<l3k::PatchShared>();
  for (size_t i = 0; i < count; ++i) {
    // Shared memory is not initialised on a GPU: a different garbage pattern per task.
    std::memset(sh.get(), static_cast<int>((i * 37 + 0x5A) & 0xFF), sizeof(l3k::PatchShared));
    l3k::decode_patch_block(b, *sh, tasks[i], in, tables, out, status);
  }
}

void l3_run_plan_emulated(const L3BatchPlan& plan, const uint8_t* in, uint8_t* out, int* status,
                          unsigned block_threads, bool reverse_threads) {
  l3_run_tasks_emulated(plan.tasks.data(), plan.tasks.size(), in, plan.tables.data(), out, status, block_threads,
                        reverse_threads);
}

fid::Status l3_decode_emulated(std::span<const uint8_t> data, std::span<uint8_t> out, unsigned block_threads,
                               bool reverse_threads) {
  L3BatchPlan plan;
  fid::Result<L3Info> planned = l3_plan_image(data, 0, 0, 0, 0, plan);
  if (!planned) return std::move(planned).error();
  if (out.size() != planned->raw_bytes()) return fid::Error{EINVAL, "L3: output buffer has the wrong size"};
  int status = 0;
  l3_run_plan_emulated(plan, data.data(), out.data(), &status, block_threads, reverse_threads);
  if (status != 0) return fid::Error{EINVAL, "L3: block decoder found a format error"};
  return {};
}

}  // namespace fid::codec
