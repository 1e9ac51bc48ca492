// How the GPU decoder divides gpu_memory (cuda/gpu.h): the figures docs/MOUNT.md quotes.
#include <gtest/gtest.h>

#include "cuda/gpu.h"

using namespace fid;

TEST(GpuMemory, HalfForViewsAndAQuarterPerStreamCountForABatch) {
  gpu::DecoderOptions o;  // the mount's default: gpu_memory 1GiB, two streams
  auto s = gpu::split_memory(o);
  EXPECT_EQ(s.view_bytes, size_t{512} << 20);
  EXPECT_EQ(s.batch_bytes, size_t{128} << 20);
  // Every stream holds at most twice its batch (input twice, pixels once): with the views,
  // everything stays within gpu_memory.
  EXPECT_LE(s.view_bytes + o.streams * 2 * s.batch_bytes, o.memory_bytes);
  o.streams = 0;  // treated as one
  EXPECT_EQ(gpu::split_memory(o).batch_bytes, size_t{256} << 20);
  o.memory_bytes = 3;  // never a zero limit (which would mean "no limit")
  EXPECT_EQ(gpu::split_memory(o).batch_bytes, 1u);
}
