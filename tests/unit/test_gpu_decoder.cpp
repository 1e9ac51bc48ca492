// The GPU decoder's host side (cuda/gpu_decoder.h) on a modelled device (cuda/gpu_model_device.h):
// the code a mount with gpu=on runs, with copies and kernels timed as on a GPU and the kernel's
// per-pixel code run on the CPU. No GPU needed.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "codec/l3.h"
#include "core/l3_batcher.h"
#include "cuda/gpu_decoder.h"
#include "cuda/gpu_model_device.h"
#include "l3_test_images.h"
#include "test_result.h"

using namespace fid;
using namespace std::chrono_literals;

namespace {

struct Encoded {
  std::vector<uint8_t> l3;
  std::vector<uint8_t> pixels;  // the CPU decoder's
};

std::vector<Encoded> images(size_t n) {
  std::vector<Encoded> out;
  for (size_t i = 0; i < n; ++i) {
    codec::Image im = codec::testimg::smooth(96 + 16 * static_cast<uint32_t>(i % 4), 64, 3, static_cast<uint32_t>(i + 1));
    Encoded e{testutil::value_or_throw(codec::l3_encode(im, {})), {}};
    e.pixels.resize(im.pixels.size());
    EXPECT_TRUE(codec::l3_decode_into(e.l3, e.pixels).ok());
    out.push_back(std::move(e));
  }
  return out;
}

// `readers` threads each render `per_reader` views as the mount does: a view buffer from the
// decoder, a decode through the batcher, the buffer dropped (as the view cache evicts it).
// Returns how many views came back with the CPU decoder's pixels (with `check_pixels` false: how
// many decodes succeeded, for a model that runs no kernel).
size_t render(codec::L3BatchDecoder& dec, core::L3Batcher& batcher, const std::vector<Encoded>& ims, unsigned readers,
              size_t per_reader, bool check_pixels = true) {
  std::atomic<size_t> right{0};
  std::vector<std::thread> threads;
  for (unsigned r = 0; r < readers; ++r)
    threads.emplace_back([&, r] {
      for (size_t k = 0; k < per_reader; ++k) {
        const Encoded& e = ims[(r * per_reader + k) % ims.size()];
        std::shared_ptr<codec::HostBuffer> view = dec.allocate(e.pixels.size());
        if (batcher.decode(e.l3, view->span()).ok() &&
            (!check_pixels || std::equal(e.pixels.begin(), e.pixels.end(), view->data())))
          right.fetch_add(1);
      }
    });
  for (auto& t : threads) t.join();
  return right.load();
}

}  // namespace

// Everything the decoder holds is allocated when it starts; 16 readers rendering 256 views
// allocate nothing more, pinned or on the device, and every view is pinned memory.
TEST(GpuDecoderModel, AllocatesAtStartAndNeverPerRender) {
  auto device = std::make_shared<gpu::ModelDevice>(gpu::DeviceModel{});
  gpu::DecoderOptions o;
  o.memory_bytes = 64 << 20;
  auto dec = testutil::value_or_throw(gpu::start_decoder(device, o));
  const gpu::DeviceModelCounts at_start = device->counts();
  // Per stream: pinned input and status; device input, output and status. Plus the view arena.
  EXPECT_EQ(at_start.host_allocations, 2u * o.streams + 1);
  EXPECT_EQ(at_start.device_allocations, 3u * o.streams);

  const auto ims = images(12);
  core::L3Batcher batcher(*dec, {8, 500us});
  EXPECT_EQ(render(*dec, batcher, ims, 16, 16), 256u);

  const gpu::DeviceModelCounts after = device->counts();
  EXPECT_EQ(after.host_allocations, at_start.host_allocations);
  EXPECT_EQ(after.device_allocations, at_start.device_allocations);
  const codec::L3DecoderStats st = dec->stats();
  EXPECT_EQ(st.pageable_views, 0u);
  EXPECT_EQ(st.buffer_growths, 0u);
  EXPECT_EQ(st.host_allocations, at_start.host_allocations);
}

// Views beyond the pinned arena still work, in heap memory, and are counted.
TEST(GpuDecoderModel, ViewsPastThePinnedArenaAreHeapMemoryAndCounted) {
  auto device = std::make_shared<gpu::ModelDevice>(gpu::DeviceModel{});
  gpu::DecoderOptions o;
  o.memory_bytes = 32 << 20;  // a 16 MiB arena
  auto dec = testutil::value_or_throw(gpu::start_decoder(device, o));
  std::vector<std::shared_ptr<codec::HostBuffer>> held;
  for (int i = 0; i < 5; ++i) held.push_back(dec->allocate(4 << 20));  // 4 fit, the fifth does not
  EXPECT_EQ(dec->stats().pageable_views, 1u);
  held.erase(held.begin() + 1, held.begin() + 3);  // two adjacent views back: 8 MiB in one piece
  held.push_back(dec->allocate(8 << 20));
  EXPECT_EQ(dec->stats().pageable_views, 1u);
  for (auto& v : held) std::fill(v->data(), v->data() + v->size(), uint8_t{7});  // all writable
}

// On an idle device a lone decode goes at once, without waiting for the batcher's 10 s deadline.
TEST(GpuDecoderModel, ALoneDecodeOnAnIdleDeviceGoesAtOnce) {
  gpu::DeviceModel model;
  model.copy_gb_per_s = 12;
  model.wave = 2ms;
  auto dec = testutil::value_or_throw(gpu::start_decoder(std::make_shared<gpu::ModelDevice>(model), {64 << 20, 2}));
  const auto ims = images(1);
  core::L3Batcher batcher(*dec, {64, 10s});
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<uint8_t> px(ims[0].pixels.size());
  ASSERT_TRUE(batcher.decode(ims[0].l3, px).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_EQ(px, ims[0].pixels);
}

// A GPU's timing (a kernel wave of 20 ms, copies at 12 GB/s; the kernel's CPU emulation off, so
// that its time on this host, long under a sanitizer, does not stand in for the device's): with
// 16 readers both streams carry a batch at once.
TEST(GpuDecoderModel, BatchesOverlapOnTheTwoStreams) {
  gpu::DeviceModel model;
  model.copy_gb_per_s = 12;
  model.wave = 20ms;
  model.run_kernel = false;
  auto device = std::make_shared<gpu::ModelDevice>(model);
  auto dec = testutil::value_or_throw(gpu::start_decoder(device, {64 << 20, 2}));
  const auto ims = images(12);
  core::L3Batcher batcher(*dec, {8, 1ms});
  EXPECT_EQ(render(*dec, batcher, ims, 16, 8, /*check_pixels=*/false), 128u);
  EXPECT_GE(dec->stats().peak_in_flight, 2u);
  EXPECT_GE(device->counts().peak_streams_busy, 2u);
  EXPECT_GT(dec->stats().kernel_seconds, 0.0);
}
