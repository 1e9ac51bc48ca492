// The mount's L3 batching (fs/l3_batcher.h) over a fake decoder and over the emulated block
// decoder (the GPU path's code run on the CPU).
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "codec/l3.h"
#include "codec/l3_batch.h"
#include "core/l3_batcher.h"
#include "cuda/gpu.h"
#include "l3_test_images.h"
#include "test_result.h"

using namespace fid;
using namespace std::chrono_literals;

namespace {

// "Decodes" by filling the pixels with the bitstream's first byte; 0xEE is a corrupt stream.
// Records batch sizes.
class FakeDecoder final : public codec::L3BatchDecoder {
 public:
  std::string description() const override { return "fake"; }
  unsigned concurrency() const override { return 2; }
  size_t max_batch_bytes() const override { return byte_limit; }
  std::shared_ptr<codec::HostBuffer> allocate(size_t n) override { return codec::HostBuffer::heap(n); }
  Status decode(std::span<codec::L3Job* const> jobs) override {
    {
      std::unique_lock lock(mu);
      sizes.push_back(jobs.size());
      if (hold_first && sizes.size() == 1) {  // the batch on the device while others queue
        first_in = true;
        cv.notify_all();
        cv.wait(lock, [&] { return released; });
      }
    }
    for (auto* j : jobs) {
      j->ok = j->l3[0] != 0xEE;
      if (!j->ok) j->error = "corrupt";
      std::fill(j->pixels.begin(), j->pixels.end(), j->l3[0]);
    }
    return {};
  }
  size_t byte_limit = 0;
  std::mutex mu;
  std::condition_variable cv;
  bool hold_first = false, first_in = false, released = false;
  std::vector<size_t> sizes;
};

// A first decode that stays on the decoder (FakeDecoder::hold_first) until this goes out of
// scope, so that the batches after it form while a batch is in flight.
class BatchInFlight {
 public:
  BatchInFlight(core::L3Batcher& b, FakeDecoder& dec) : dec_(dec) {
    dec.hold_first = true;
    thread_ = std::thread([&b] {
      std::vector<uint8_t> px(4);
      const std::vector<uint8_t> stream{1};
      (void)b.decode(stream, px);
    });
    std::unique_lock lock(dec.mu);
    dec.cv.wait(lock, [&] { return dec.first_in; });
  }
  ~BatchInFlight() {
    {
      std::lock_guard lock(dec_.mu);
      dec_.released = true;
    }
    dec_.cv.notify_all();
    thread_.join();
  }

 private:
  FakeDecoder& dec_;
  std::thread thread_;
};

struct Decoded {
  bool ok = false;
  std::string error;
  std::vector<uint8_t> pixels;
};

// Runs one decode per stream on its own thread, all at once.
std::vector<Decoded> decode_concurrently(core::L3Batcher& b, const std::vector<std::vector<uint8_t>>& streams,
                                        size_t pixels) {
  std::vector<Decoded> out(streams.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < streams.size(); ++i)
    threads.emplace_back([&, i] {
      out[i].pixels.assign(pixels, 0);
      Status st = b.decode(streams[i], out[i].pixels);
      out[i].ok = st.ok();
      if (!st.ok()) out[i].error = st.error().message;
    });
  for (auto& t : threads) t.join();
  return out;
}

}  // namespace

// While a batch is on the decoder, the next ones wait to be full: 8 jobs under max_batch 4 go
// as two full batches, at once (far within the 30 s deadline).
TEST(L3Batcher, FullBatchesGoWithoutWaitingForTheDeadline) {
  FakeDecoder dec;
  const auto t0 = std::chrono::steady_clock::now();
  {
    core::L3Batcher b(dec, {4, 30s});
    BatchInFlight busy(b, dec);
    std::vector<std::vector<uint8_t>> streams;
    for (uint8_t i = 0; i < 8; ++i) streams.push_back({i});
    auto r = decode_concurrently(b, streams, 16);
    for (uint8_t i = 0; i < 8; ++i) {
      EXPECT_TRUE(r[i].ok) << r[i].error;
      EXPECT_EQ(r[i].pixels, std::vector<uint8_t>(16, i));
    }
    auto s = b.stats();
    EXPECT_EQ(s.jobs, 8u);
    EXPECT_EQ(s.batches, 2u);
    EXPECT_EQ(s.full_batches, 2u);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 20s);
  EXPECT_EQ(dec.sizes, (std::vector<size_t>{1, 4, 4}));  // the batch in flight, then two full ones
}

// The decoder's byte limit caps a batch before max_batch does, and a byte-full batch leaves at
// once: 9 jobs of 1 + 16 bytes under a 51-byte limit are three full batches of three.
TEST(L3Batcher, BatchesStayWithinTheDecodersByteLimit) {
  FakeDecoder dec;
  dec.byte_limit = 3 * (1 + 16);
  const auto t0 = std::chrono::steady_clock::now();
  {
    core::L3Batcher b(dec, {64, 30s});
    BatchInFlight busy(b, dec);
    std::vector<std::vector<uint8_t>> streams;
    for (uint8_t i = 0; i < 9; ++i) streams.push_back({i});
    auto r = decode_concurrently(b, streams, 16);
    for (uint8_t i = 0; i < 9; ++i) {
      EXPECT_TRUE(r[i].ok) << r[i].error;
      EXPECT_EQ(r[i].pixels, std::vector<uint8_t>(16, i));
    }
    EXPECT_EQ(b.stats().full_batches, 3u);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 20s);
  EXPECT_EQ(dec.sizes, (std::vector<size_t>{1, 3, 3, 3}));
}

// A job larger than the byte limit still decodes, alone and without waiting for the deadline.
TEST(L3Batcher, AJobOverTheByteLimitGoesAlone) {
  FakeDecoder dec;
  dec.byte_limit = 10;
  const auto t0 = std::chrono::steady_clock::now();
  {
    core::L3Batcher b(dec, {64, 30s});
    auto r = decode_concurrently(b, {{5}, {6}}, 100);
    for (uint8_t i = 0; i < 2; ++i) {
      EXPECT_TRUE(r[i].ok) << r[i].error;
      EXPECT_EQ(r[i].pixels, std::vector<uint8_t>(100, 5 + i));
    }
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 20s);
  EXPECT_EQ(dec.sizes, (std::vector<size_t>{1, 1}));
}

// With no batch on the decoder a lone decode goes at once: waiting for the deadline would leave
// the device idle.
TEST(L3Batcher, ALoneDecodeGoesAtOnceWhenTheDecoderIsIdle) {
  FakeDecoder dec;
  core::L3Batcher b(dec, {64, 30s});
  std::vector<uint8_t> px(4);
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<uint8_t> stream{7};
  Status st = b.decode(stream, px);
  ASSERT_TRUE(st.ok()) << st.error().message;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 20s);
  EXPECT_EQ(px, std::vector<uint8_t>(4, 7));
  auto s = b.stats();
  EXPECT_EQ(s.batches, 1u);
  EXPECT_EQ(s.full_batches, 0u);
}

// While a batch is on the decoder, a lone decode waits for company until its deadline.
TEST(L3Batcher, WhileABatchIsInFlightALoneDecodeGoesAtTheDeadline) {
  FakeDecoder dec;
  core::L3Batcher b(dec, {64, 20ms});
  BatchInFlight busy(b, dec);
  std::vector<uint8_t> px(4);
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<uint8_t> stream{7};
  Status st = b.decode(stream, px);
  ASSERT_TRUE(st.ok()) << st.error().message;
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 20ms);
  EXPECT_EQ(px, std::vector<uint8_t>(4, 7));
  auto s = b.stats();
  EXPECT_EQ(s.batches, 1u);  // the batch in flight has not finished
  EXPECT_EQ(s.full_batches, 0u);
}

TEST(L3Batcher, ErrorsStayWithTheirJob) {
  FakeDecoder dec;
  core::L3Batcher b(dec, {3, 30s});
  auto r = decode_concurrently(b, {{1}, {0xEE}, {3}}, 2);
  EXPECT_TRUE(r[0].ok);
  EXPECT_FALSE(r[1].ok);
  EXPECT_EQ(r[1].error, "corrupt");
  EXPECT_TRUE(r[2].ok);
  EXPECT_EQ(b.stats().failed_jobs, 1u);
}

// A decoder that fails (a CUDA error) costs its batch a CPU decode, not the readers' data.
TEST(L3Batcher, ADecoderFailureFallsBackToTheCpu) {
  class Broken final : public codec::L3BatchDecoder {
   public:
    std::string description() const override { return "broken"; }
    unsigned concurrency() const override { return 1; }
    std::shared_ptr<codec::HostBuffer> allocate(size_t n) override { return codec::HostBuffer::heap(n); }
    Status decode(std::span<codec::L3Job* const>) override { return Error{EIO, "device lost"}; }
  } dec;
  std::vector<std::string> reasons;
  std::mutex mu;
  core::L3Batcher b(dec, {2, 1ms}, [&](const std::string& why) {
    std::lock_guard lock(mu);
    reasons.push_back(why);
  });
  codec::Image im = codec::testimg::smooth(40, 30, 3, 9);
  auto good = testutil::value_or_throw(codec::l3_encode(im));
  auto bad = good;
  bad.resize(bad.size() - 1);
  auto r = decode_concurrently(b, {good, bad}, im.pixels.size());
  EXPECT_TRUE(r[0].ok) << r[0].error;
  EXPECT_EQ(r[0].pixels, im.pixels);
  EXPECT_FALSE(r[1].ok);  // corrupt stays corrupt, with the CPU decoder's reason
  EXPECT_FALSE(r[1].error.empty());
  auto s = b.stats();
  EXPECT_GE(s.cpu_fallbacks, 1u);
  EXPECT_EQ(s.failed_jobs, 1u);
  std::lock_guard lock(mu);
  ASSERT_FALSE(reasons.empty());
  EXPECT_EQ(reasons[0], "device lost");
}

TEST(L3Batcher, StopsWithNothingQueued) {
  FakeDecoder dec;
  { core::L3Batcher b(dec, {8, 1s}); }
  EXPECT_TRUE(dec.sizes.empty());
}

// The GPU decoder's batch layout and status handling, with the block kernel emulated: every
// image comes back as the CPU decoder's pixels; INTER_PATCH images (not block-decodable) and
// corrupt ones take the CPU path, with the CPU decoder's verdict.
TEST(L3Batcher, EmulatedBlockDecoderMatchesTheCpuDecoder) {
  gpu::DecoderOptions options;
  options.memory_bytes = 64 << 20;
  auto dec = testutil::value_or_throw(gpu::make_emulated_decoder(options));
  core::L3Batcher b(*dec, {5, 2ms});
  struct Case {
    std::vector<uint8_t> l3;
    size_t raw;
  };
  std::vector<Case> cases;
  uint32_t seed = 1;
  for (uint8_t c = 1; c <= 4; ++c)
    for (auto [w, h] : {std::pair{1u, 1u}, {67u, 45u}, {300u, 33u}}) {
      codec::Image im = codec::testimg::smooth(w, h, c, seed++);
      codec::L3Options o;
      o.inter_patch_rows = (seed % 3 == 0);
      o.entropy_codes = static_cast<uint8_t>(seed % 3);
      cases.push_back({testutil::value_or_throw(codec::l3_encode(im, o)), im.pixels.size()});
    }
  std::vector<uint8_t> bad = cases[5].l3;
  bad.resize(bad.size() - 3);  // truncated: the size check fails
  cases.push_back({bad, cases[5].raw});

  std::vector<Decoded> got(cases.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < cases.size(); ++i)
    threads.emplace_back([&, i] {
      got[i].pixels.assign(cases[i].raw, 0);
      Status st = b.decode(cases[i].l3, got[i].pixels);
      got[i].ok = st.ok();
      if (!st.ok()) got[i].error = st.error().message;
    });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < cases.size(); ++i) {
    std::vector<uint8_t> want(cases[i].raw);
    const Status decoded = codec::l3_decode_into(cases[i].l3, want);
    ASSERT_EQ(got[i].ok, decoded.ok()) << "case " << i << ": " << got[i].error;
    if (decoded) EXPECT_EQ(got[i].pixels, want) << "case " << i;
    else EXPECT_EQ(got[i].error, decoded.error().message);
  }
  EXPECT_EQ(b.stats().jobs, cases.size());
}
