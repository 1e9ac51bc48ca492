// The GPU decoder (cuda/gpu.h): how it divides gpu_memory (the figures docs/MOUNT.md quotes),
// its errors without a device, and its batches where there is one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <string>
#include <vector>

#include "codec/l3.h"
#include "cuda/gpu.h"
#include "l3_test_images.h"
#include "test_result.h"

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

// Without a usable GPU the decoder is an Error that says why: ENOTSUP from a build without
// CUDA, ENODEV from one with CUDA on a machine without a device.
TEST(GpuDecoder, WithoutADeviceFailsWithTheCause) {
  const gpu::Probe p = gpu::probe();
  if (p.devices > 0) GTEST_SKIP() << "a CUDA device is present: " << p.device;
  Result<std::unique_ptr<codec::L3BatchDecoder>> made = gpu::make_gpu_decoder({});
  ASSERT_FALSE(made.ok());
  if (!p.built) {
    EXPECT_EQ(made.error().code, ENOTSUP);
    EXPECT_NE(made.error().message.find("no CUDA decoder"), std::string::npos) << made.error().message;
  } else {
    EXPECT_EQ(made.error().code, ENODEV);
    EXPECT_EQ(made.error().message, "no CUDA device: " + p.why_none);
  }
}

// With a device: a batch (a good image, a corrupt one) decodes as the CPU decoder says, into
// the decoder's own view buffers.
TEST(GpuDecoder, DecodesABatchAsTheCpuDecoder) {
  Result<std::unique_ptr<codec::L3BatchDecoder>> made = gpu::make_gpu_decoder({});
  if (!made) GTEST_SKIP() << "no GPU decoder: " << made.error().message;
  codec::L3BatchDecoder& dec = **made;
  const codec::Image im = codec::testimg::smooth(300, 200, 3, 5);
  const std::vector<uint8_t> good = testutil::value_or_throw(codec::l3_encode(im));
  std::vector<uint8_t> bad = good;
  bad.resize(bad.size() - 1);
  std::shared_ptr<codec::HostBuffer> views[2] = {dec.allocate(im.pixels.size()), dec.allocate(im.pixels.size())};
  codec::L3Job jobs[2];
  jobs[0].l3 = good;
  jobs[1].l3 = bad;
  codec::L3Job* batch[2] = {&jobs[0], &jobs[1]};
  for (int i = 0; i < 2; ++i) jobs[i].pixels = views[i]->span();
  const Status decoded = dec.decode(batch);
  ASSERT_TRUE(decoded.ok()) << decoded.error().message;
  EXPECT_TRUE(jobs[0].ok) << jobs[0].error;
  EXPECT_TRUE(std::equal(im.pixels.begin(), im.pixels.end(), views[0]->data()));
  EXPECT_FALSE(jobs[1].ok);
  EXPECT_FALSE(jobs[1].error.empty());
  EXPECT_GT(dec.stats().kernel_seconds, 0.0);
}
