// Host side of the L3 block decoder (codec/l3_block.h): turns L3 images into a batch of patch
// tasks + Huffman tables for the GPU kernel, and runs such a plan on the CPU with an emulated
// thread block, so the kernel's thread logic is tested without a GPU.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "codec/l3.h"
#include "codec/l3_block.h"
#include "common/error.h"

namespace fid::codec {

struct L3BatchPlan {
  std::vector<l3k::PatchTask> tasks;
  std::vector<l3k::HuffTable> tables;
  void clear();
};

// Validates the header (l3_probe) and appends one image's patches to `plan`: its bitstream
// `data` will sit at byte in_base of the batch input buffer; its decoded pixels go to out_base
// with row pitch out_pitch (0 = width*channels). Builds the 16 Huffman tables when the image
// has HUFF_CODES. Returns the image's header. Fails with EINVAL (plan unchanged) if the header
// is invalid, the image has INTER_PATCH (not block-decodable: decode it with l3_decode_into), or
// out_pitch is non-zero and below width*channels.
fid::Result<L3Info> l3_plan_image(std::span<const uint8_t> data, uint64_t in_base, uint64_t out_base,
                                  uint32_t out_pitch, uint32_t image, L3BatchPlan& plan);

// Runs every task of a plan on the CPU with decode_patch_block and an emulated Block of
// `block_threads` threads (0 counts as 1): each single()/all() phase runs to completion for all
// threads before the next one starts (the barrier order). reverse_threads runs threads in
// descending order inside a phase, so a phase that depends on its own threads' order (a race
// on the GPU) gives a different result. status[task.image] is set non-zero on errors (never
// cleared). Shared memory starts each task filled with garbage, as on a GPU.
void l3_run_plan_emulated(const L3BatchPlan& plan, const uint8_t* in, uint8_t* out, int* status,
                          unsigned block_threads, bool reverse_threads);
// The same over a kernel's arguments as a device sees them: `count` tasks and the tables in
// memory (a staged batch, codec::L3BatchLayout).
void l3_run_tasks_emulated(const l3k::PatchTask* tasks, size_t count, const uint8_t* in, const l3k::HuffTable* tables,
                           uint8_t* out, int* status, unsigned block_threads, bool reverse_threads);

// Convenience: decode one image through plan + emulation (same contract as l3_decode_into;
// an INTER_PATCH image is an error here).
fid::Status l3_decode_emulated(std::span<const uint8_t> data, std::span<uint8_t> out, unsigned block_threads,
                               bool reverse_threads);

}  // namespace fid::codec
