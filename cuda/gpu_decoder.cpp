// See gpu_decoder.h.
#include "cuda/gpu_decoder.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <vector>

namespace fid::gpu {
namespace {

constexpr size_t kPage = 4096;
constexpr size_t kStatusStart = 4096;        // status words for 1024 images; grown past that
constexpr size_t kSmallestArena = 16 << 20;  // below this, views are heap memory

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

struct Counters {
  std::atomic<uint64_t> pageable_views{0}, buffer_growths{0}, host_allocations{0}, device_allocations{0};
};

// The pinned view memory: one allocation made at start, carved first-fit into views and
// coalesced when they come back, so a view costs a map lookup under a mutex, not a driver call.
class ViewArena {
 public:
  ViewArena(std::shared_ptr<Device> device, uint8_t* base, size_t bytes)
      : device_(std::move(device)), base_(base) {
    if (bytes) free_[0] = bytes;
  }
  ~ViewArena() {
    if (base_) device_->free_host(base_);
  }
  ViewArena(const ViewArena&) = delete;
  ViewArena& operator=(const ViewArena&) = delete;

  uint8_t* take(size_t bytes) {
    const size_t n = round_up(std::max<size_t>(bytes, 1), kPage);
    std::lock_guard lock(mu_);
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < n) continue;
      const size_t at = it->first, left = it->second - n;
      free_.erase(it);
      if (left) free_[at + n] = left;
      return base_ + at;
    }
    return nullptr;
  }

  void give(uint8_t* p, size_t bytes) {
    size_t at = static_cast<size_t>(p - base_), n = round_up(std::max<size_t>(bytes, 1), kPage);
    std::lock_guard lock(mu_);
    auto next = free_.lower_bound(at);
    if (next != free_.end() && next->first == at + n) {
      n += next->second;
      next = free_.erase(next);
    }
    if (next != free_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == at) {
        prev->second += n;
        return;
      }
    }
    free_[at] = n;
  }

 private:
  const std::shared_ptr<Device> device_;
  uint8_t* const base_;
  std::mutex mu_;
  std::map<size_t, size_t> free_;  // offset -> bytes, no two adjacent
};

// A buffer of one kind (pinned or device), freed with the device.
struct Buffer {
  uint8_t* p = nullptr;
  size_t cap = 0;
  bool pinned = false;
};

// One batch in flight: its stream, its staged input (pinned and on the device), the device
// output and the status words.
struct Slot {
  unsigned stream = 0;
  Buffer host_in{.pinned = true}, dev_in, dev_out, host_status{.pinned = true}, dev_status;
  codec::L3BatchLayout layout;
};

class GpuDecoder final : public codec::L3BatchDecoder {
 public:
  GpuDecoder(std::shared_ptr<Device> device, const DecoderOptions& o)
      : device_(std::move(device)), split_(split_memory(o)) {}
  ~GpuDecoder() override {
    for (auto& s : slots_)
      for (Buffer* b : {&s->host_in, &s->dev_in, &s->dev_out, &s->host_status, &s->dev_status}) release(*b);
  }

  fid::Status start(unsigned streams) {
    // The input is at most the batch's bitstreams, the output its pixels: together within
    // batch_bytes; half each covers the usual L3 ratio, a larger share grows (counted).
    const size_t in = round_up(std::max<size_t>(split_.batch_bytes / 2, kPage), kPage);
    const size_t out = round_up(std::max<size_t>(split_.batch_bytes, kPage), kPage);
    for (unsigned i = 0; i < std::max(1u, streams); ++i) {
      auto s = std::make_unique<Slot>();
      fid::Result<unsigned> stream = device_->create_stream();
      if (!stream) return std::move(stream).error();
      s->stream = *stream;
      slots_.push_back(std::move(s));
      Slot& slot = *slots_.back();
      for (auto [b, n] : {std::pair{&slot.host_in, in}, {&slot.dev_in, in}, {&slot.dev_out, out},
                          {&slot.host_status, kStatusStart}, {&slot.dev_status, kStatusStart}})
        if (fid::Status st = allocate(*b, n); !st) return st;
      idle_.push_back(&slot);
    }
    arena_ = make_arena();
    return {};
  }

  std::string description() const override { return device_->name(); }
  unsigned concurrency() const override { return static_cast<unsigned>(slots_.size()); }
  size_t max_batch_bytes() const override { return split_.batch_bytes; }

  std::shared_ptr<codec::HostBuffer> allocate(size_t bytes) override {
    if (arena_) {
      if (uint8_t* p = arena_->take(bytes)) {
        std::shared_ptr<ViewArena> arena = arena_;  // the arena outlives every view it lent
        return std::make_shared<codec::HostBuffer>(p, bytes, [arena](uint8_t* q, size_t n) { arena->give(q, n); });
      }
    }
    counters_.pageable_views.fetch_add(1, std::memory_order_relaxed);
    return codec::HostBuffer::heap(bytes);
  }

  // A device error fails the whole batch (EIO); the caller decodes it elsewhere. Out of host
  // memory (the batch layout's vectors) is ENOMEM, the same way.
  fid::Status decode(std::span<codec::L3Job* const> jobs) override {
    Slot* s = acquire();
    fid::Status decoded;
    try {
      decoded = run(*s, jobs);
    } catch (const std::bad_alloc&) {
      decoded = fid::Error{ENOMEM, "GPU decoder: out of host memory for a batch"};
    }
    release_slot(s);
    return decoded;
  }

  codec::L3DecoderStats stats() const override {
    codec::L3DecoderStats st;
    st.pageable_views = counters_.pageable_views.load(std::memory_order_relaxed);
    st.buffer_growths = counters_.buffer_growths.load(std::memory_order_relaxed);
    st.host_allocations = counters_.host_allocations.load(std::memory_order_relaxed);
    st.device_allocations = counters_.device_allocations.load(std::memory_order_relaxed);
    std::lock_guard lock(mu_);
    st.peak_in_flight = peak_in_flight_;
    st.kernel_seconds = kernel_ms_ / 1000.0;
    return st;
  }

 private:
  // The largest arena that can be pinned, from view_bytes down by halves (a machine may limit
  // locked memory); null when not even kSmallestArena can be.
  std::shared_ptr<ViewArena> make_arena() {
    for (size_t n = round_up(split_.view_bytes, kPage); n >= kSmallestArena; n = round_up(n / 2, kPage)) {
      fid::Result<uint8_t*> p = device_->alloc_host(n);
      if (!p) continue;
      counters_.host_allocations.fetch_add(1, std::memory_order_relaxed);
      return std::make_shared<ViewArena>(device_, *p, n);
    }
    return nullptr;
  }

  fid::Status allocate(Buffer& b, size_t bytes) {
    fid::Result<uint8_t*> p = b.pinned ? device_->alloc_host(bytes) : device_->alloc_device(bytes);
    if (!p) return std::move(p).error();
    (b.pinned ? counters_.host_allocations : counters_.device_allocations).fetch_add(1, std::memory_order_relaxed);
    b.p = *p;
    b.cap = bytes;
    return {};
  }
  void release(Buffer& b) {
    if (!b.p) return;
    if (b.pinned) device_->free_host(b.p);
    else device_->free_device(b.p);
    b.p = nullptr;
    b.cap = 0;
  }
  // Grows a buffer for a batch past the size it started with (a job larger than the batch cap
  // goes alone); the slot's stream is idle here, so freeing the old one waits for nothing.
  fid::Status fit(Buffer& b, size_t need) {
    if (need <= b.cap) return {};
    counters_.buffer_growths.fetch_add(1, std::memory_order_relaxed);
    release(b);
    return allocate(b, round_up(need, size_t{1} << 20));
  }

  Slot* acquire() {
    std::unique_lock lock(mu_);
    idle_cv_.wait(lock, [&] { return !idle_.empty(); });
    Slot* s = idle_.back();
    idle_.pop_back();
    return s;
  }
  void release_slot(Slot* s) {
    {
      std::lock_guard lock(mu_);
      idle_.push_back(s);
    }
    idle_cv_.notify_one();
  }

  fid::Status run(Slot& s, std::span<codec::L3Job* const> jobs) {
    codec::L3BatchLayout& b = s.layout;
    codec::l3_layout_batch(jobs, b);  // what the block decoder cannot take is done here on the CPU
    if (b.blocked.empty()) return {};
    const size_t status_bytes = b.blocked.size() * sizeof(int);
    for (auto [buf, n] : {std::pair{&s.host_in, b.staged_bytes}, {&s.dev_in, b.staged_bytes},
                          {&s.dev_out, size_t{b.out_bytes}}, {&s.host_status, status_bytes}, {&s.dev_status, status_bytes}})
      if (fid::Status st = fit(*buf, n); !st) return st;
    b.stage(s.host_in.p);
    in_flight(+1);
    fid::Status enqueued = enqueue(s, b, status_bytes);
    fid::Result<double> ms = enqueued ? device_->finish(s.stream) : fid::Result<double>(std::move(enqueued).error());
    in_flight(-1);
    if (!ms) return std::move(ms).error();
    {
      std::lock_guard lock(mu_);
      kernel_ms_ += *ms;
    }
    codec::l3_finish_batch(b, reinterpret_cast<const int*>(s.host_status.p));
    return {};
  }

  void in_flight(int d) {
    std::lock_guard lock(mu_);
    in_flight_ += d;
    peak_in_flight_ = std::max(peak_in_flight_, in_flight_);
  }

  // Upload, kernel, downloads and status on the slot's stream; a failed call stops the rest.
  fid::Status enqueue(Slot& s, const codec::L3BatchLayout& b, size_t status_bytes) {
    Device& d = *device_;
    if (fid::Status st = d.upload(s.stream, s.dev_in.p, s.host_in.p, b.staged_bytes); !st) return st;
    if (fid::Status st = d.zero(s.stream, s.dev_status.p, status_bytes); !st) return st;
    const KernelArgs k{.tasks = s.dev_in.p, .blocks = b.plan.tasks.size(), .data = s.dev_in.p + b.data_at,
                       .tables = s.dev_in.p + b.tables_at, .out = s.dev_out.p,
                       .status = reinterpret_cast<int*>(s.dev_status.p)};
    if (fid::Status st = d.launch(s.stream, k); !st) return st;
    // Pixels go straight into the callers' buffers (pinned views: a DMA, no extra pass).
    for (size_t i = 0; i < b.blocked.size(); ++i) {
      const std::span<uint8_t> px = b.blocked[i]->pixels;
      if (fid::Status st = d.download(s.stream, px.data(), s.dev_out.p + b.out_base[i], px.size()); !st) return st;
    }
    return d.download(s.stream, s.host_status.p, s.dev_status.p, status_bytes);
  }

  const std::shared_ptr<Device> device_;
  const MemorySplit split_;
  std::shared_ptr<ViewArena> arena_;
  std::vector<std::unique_ptr<Slot>> slots_;
  Counters counters_;
  mutable std::mutex mu_;
  std::condition_variable idle_cv_;
  std::vector<Slot*> idle_;
  unsigned in_flight_ = 0, peak_in_flight_ = 0;
  double kernel_ms_ = 0;
};

}  // namespace

fid::Result<std::unique_ptr<codec::L3BatchDecoder>> start_decoder(std::shared_ptr<Device> device,
                                                                  const DecoderOptions& options) {
  auto decoder = std::make_unique<GpuDecoder>(std::move(device), options);
  if (fid::Status started = decoder->start(options.streams); !started) return std::move(started).error();
  return std::unique_ptr<codec::L3BatchDecoder>(std::move(decoder));
}

}  // namespace fid::gpu
